"""Speech Commands v0.02 (S4 Table 5: SC10 MFCC / Raw / 0.5x; S4D Tables 4 and 11: SC35).

Reads the official tarball layout under ``<data>/speech_commands/``: one folder per word holding
16 kHz mono 16-bit WAV files, ``validation_list.txt`` and ``testing_list.txt`` (paths
``word/file.wav``); ``_background_noise_`` is ignored. Splits follow the official lists: a file
named in validation_list.txt is validation, in testing_list.txt test, in neither train.

- ``subset="sc35"``: all 35 words; ``subset="sc10"``: yes, no, up, down, left, right, on, off,
  stop, go (S4 Table 5). Label order: the S4 code's (``runners.data.download.SPEECH_COMMANDS_WORDS``
  / ``SC10_WORDS``).
- ``features="raw"``: the waveform, zero-padded at the end to 16000 samples, x (16000, 1).
  Normalised with one mean and std over all training samples (d_input = 1).
- ``features="mfcc"``: x (161, 20), the features of the S4 code (torchaudio
  ``MFCC(log_mels=True, n_mfcc=20, melkwargs=dict(n_fft=200, n_mels=64))`` at 16 kHz), computed
  in torch by :mod:`runners.data.mfcc`, each coefficient normalised with its training mean
  and std (as the S4 code).
- ``test_decimation=2`` (raw only): the 0.5x column / S4D Table 11's 0-shot 8 kHz test. Test audio
  is decimated naively (every other sample, no anti-aliasing filter; S4D Table 11 caption) to length
  8000; train and validation stay at 16 kHz. The model must run the test set with its step size
  multiplied by ``info["test_rate"]`` = 2.0 (no retraining).

Differences from the S4 code, on purpose: its SC10 loader drops clips shorter than 1 s and splits
at random 70/15/15; here SC10 uses the official lists and zero-pads, like its SC35 loader. Its raw
loaders normalise each time step separately; here one mean/std for the single channel.
"""
from __future__ import annotations

import struct
import wave
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from runners.data.base import DataMissing, DatasetError, InsideFolder, TaskData, data_root, one_line, read_error
from runners.data.cache import cached, content_fingerprint
from runners.data.download import SC10_WORDS, SPEECH_COMMANDS_DIR, SPEECH_COMMANDS_WORDS, how_to_get
from runners.data.mfcc import S4_MFCC, mfcc
from runners.data.progress_bar import progress_bar

SAMPLE_RATE = 16000
CLIP_LEN = 16000  # 1 s at 16 kHz
LIST_FILES = ("validation_list.txt", "testing_list.txt")

MFCC_PARAMS = S4_MFCC.as_dict()  # the S4 code's torchaudio MFCC parameters (runners/data/mfcc.py)
MFCC_FRAMES = 1 + CLIP_LEN // S4_MFCC.hop_length  # 161


def mfcc_features(waves: np.ndarray) -> np.ndarray:
    """MFCC of S4 Table 5's MFCC column: waves (..., 16000) float -> (..., 161, 20) float32."""
    return mfcc(torch.from_numpy(np.asarray(waves))).numpy().astype(np.float32)  # (..., 161, 20)


def read_wav(path: Path) -> np.ndarray:
    """16-bit mono 16 kHz PCM WAV -> int16 samples (n,), n <= 16000. DatasetError naming the file otherwise: a
    wrong format, a header announcing more than a 1-second clip (checked before reading the frames) or more frames
    than the file holds (truncated)."""
    hint = how_to_get("speech_commands")
    try:
        with wave.open(str(path), "rb") as w:
            fmt = (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getcomptype())
            if fmt != (1, 2, SAMPLE_RATE, "NONE"):
                raise DatasetError(f"Speech Commands: {path} is (channels, bytes/sample, rate, compression) = {fmt}, "
                                   f"expected (1, 2, {SAMPLE_RATE}, 'NONE'). {hint}")
            n = w.getnframes()
            if n > CLIP_LEN:
                raise DatasetError(f"Speech Commands: {path} has {n} samples, more than the {CLIP_LEN} of a "
                                   f"1-second clip. {hint}")
            frames = w.readframes(n)
    except DatasetError:
        raise
    except (wave.Error, EOFError, OSError, struct.error, ValueError) as exc:
        raise read_error(exc)(f"Speech Commands: cannot read WAV file {path}: {type(exc).__name__}: "
                              f"{one_line(exc)}. {hint}") from exc
    if len(frames) != 2 * n:
        raise DatasetError(f"Speech Commands: WAV file {path} is truncated: its header says {n} samples "
                           f"({2 * n} bytes), the file holds {len(frames)} bytes of them. {hint}")
    return np.frombuffer(frames, dtype="<i2")


def read_list(path: Path, folder: Path) -> set[str]:
    """The entries of validation_list.txt / testing_list.txt: 'word/name.wav' with a known word, each a path that
    stays inside ``folder``. DatasetError naming the file (and line) for non-UTF-8 text, an unknown word, another
    suffix, or a path that is absolute or leaves the folder."""
    hint = how_to_get("speech_commands")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise DatasetError(f"Speech Commands: {path} line {line} is not UTF-8 text (byte {exc.object[exc.start]:#04x} "
                           f"at offset {exc.start}); allowed: UTF-8 lines 'word/name.wav'. {hint}") from None
    except OSError as exc:
        raise read_error(exc)(f"Speech Commands: cannot read {path}: {one_line(exc)}. {hint}") from exc
    guard = InsideFolder(folder, "Speech Commands", hint)
    known = set(SPEECH_COMMANDS_WORDS)
    out = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        entry = raw.strip()
        if not entry:
            continue
        guard(entry, path, n)
        word, _, name = entry.partition("/")
        if word not in known or not name or "/" in name or not name.lower().endswith(".wav"):
            raise DatasetError(f"Speech Commands: {path} line {n} names {one_line(repr(entry), 120)}; allowed: "
                               f"'word/name.wav' with word one of the 35 words of v0.02 ({', '.join(sorted(known))}). "
                               f"{hint}")
        out.add(entry)
    return out


def scan_splits(folder: Path, words: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
    """Files of `words` per split by the official lists: {'train'|'val'|'test': [(rel_path, label)]}.

    Raises DataMissing naming the folder/list file when the layout is incomplete (a folder, list file or listed
    clip absent), DatasetError when a file is malformed.
    """
    if not folder.is_dir():
        raise DataMissing(f"Speech Commands: no directory {folder} (expected the contents of "
                          f"speech_commands_v0.02.tar.gz in it). {how_to_get('speech_commands')}")
    missing = [str(folder / n) for n in LIST_FILES if not (folder / n).is_file()]
    missing += [str(folder / w) for w in words if not (folder / w).is_dir()]
    if missing:
        raise DataMissing(f"Speech Commands: the directory {folder} does not hold the v0.02 layout; "
                          f"missing: {', '.join(missing)}. {how_to_get('speech_commands')}")
    val_list, test_list = (read_list(folder / n, folder) for n in LIST_FILES)
    guard = InsideFolder(folder, "Speech Commands", how_to_get("speech_commands"))
    splits: dict[str, list[tuple[str, int]]] = {"train": [], "val": [], "test": []}
    seen = set()
    for label, word in enumerate(words):
        names = sorted(p.name for p in (folder / word).iterdir() if p.suffix.lower() == ".wav")
        if not names:
            raise DataMissing(f"Speech Commands: {folder / word} holds no .wav files. "
                              f"{how_to_get('speech_commands')}")
        for name in names:
            rel = f"{word}/{name}"
            guard(rel, folder / word)  # a linked .wav must not lead outside the folder
            seen.add(rel)
            split = "val" if rel in val_list else "test" if rel in test_list else "train"
            splits[split].append((rel, label))
    wanted = set(words)
    for list_name, entries in zip(LIST_FILES, (val_list, test_list)):
        dangling = sorted(e for e in entries if e.split("/", 1)[0] in wanted and e not in seen)
        if dangling:
            raise DataMissing(f"Speech Commands: {folder / list_name} names {len(dangling)} files that are not "
                              f"in {folder}, e.g. {', '.join(dangling[:3])} (incomplete extraction?). "
                              f"{how_to_get('speech_commands')}")
    return splits


class WaveformDataset(Dataset):
    """int16 clips (n, 16000) -> (x (16000 // decimation, 1) float, y long), normalised."""

    def __init__(self, waves: torch.Tensor, labels: torch.Tensor, mean: float, std: float,
                 decimation: int = 1) -> None:
        self.waves, self.labels = waves, labels  # (n, 16000) int16, (n,) int64
        self.mean, self.std, self.decimation = mean, std, decimation

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.waves[i, :: self.decimation].float() / 32768.0  # naive decimation (S4D Table 11)
        return ((x - self.mean) / self.std).unsqueeze(-1), self.labels[i]  # (L, 1), ()


def load_speech_commands(data_dir: Optional[Path] = None, *, subset: str = "sc10", features: str = "raw",
                         test_decimation: int = 1, cache: bool = True) -> TaskData:
    """Speech Commands v0.02 classification (S4 Table 5, S4D Tables 4 and 11).

    data_dir is the data root; the tarball contents are read from ``<data_dir>/speech_commands/``.
    subset: 'sc10' | 'sc35'; features: 'raw' (16000, 1) | 'mfcc' (161, 20);
    test_decimation: 1, or 2 for the 8 kHz test (raw only; info['test_rate'] = 2.0).
    """
    if subset not in ("sc10", "sc35"):
        raise ValueError(f"subset must be 'sc10' or 'sc35', got {subset!r}")
    if features not in ("raw", "mfcc"):
        raise ValueError(f"features must be 'raw' or 'mfcc', got {features!r}")
    if not isinstance(test_decimation, int) or test_decimation < 1:
        raise ValueError(f"test_decimation must be a positive int, got {test_decimation!r}")
    if test_decimation != 1 and features != "raw":
        raise ValueError("test_decimation applies to raw waveforms only (features='raw')")
    root = data_root(data_dir)
    folder = root / SPEECH_COMMANDS_DIR
    words = SC10_WORDS if subset == "sc10" else SPEECH_COMMANDS_WORDS
    splits = scan_splits(folder, words)
    read = [folder / n for n in LIST_FILES] + [folder / rel for items in splits.values() for rel, _ in items]
    key = {"v": 2 if features == "mfcc" else 1, "subset": subset, "features": features,
           "files": {k: len(v) for k, v in splits.items()},
           "content": content_fingerprint(read, folder)}  # the list files and every clip read, by their bytes

    def build() -> dict:
        out: dict = {}
        for split, items in splits.items():
            waves = np.zeros((len(items), CLIP_LEN), dtype=np.int16)  # zero-padded at the end
            with progress_bar(len(items), f"Speech Commands {split}", "file", leave=False) as bar:
                for i, (rel, _) in enumerate(items):
                    x = read_wav(folder / rel)
                    waves[i, : len(x)] = x
                    bar.update(1)
            out[f"{split}_y"] = torch.tensor([lab for _, lab in items], dtype=torch.int64)
            if features == "raw":
                out[f"{split}_x"] = torch.from_numpy(waves)  # (n, 16000) int16
            else:
                feats = [mfcc_features(waves[s: s + 1024].astype(np.float32) / 32768.0)
                         for s in range(0, len(waves), 1024)]
                out[f"{split}_x"] = torch.from_numpy(np.concatenate(feats) if feats else
                                                     np.zeros((0, MFCC_FRAMES, 20), np.float32))
        tr = out["train_x"]
        if features == "raw":  # one mean/std over every training sample (float64 accumulation)
            s = torch.zeros((), dtype=torch.float64)
            s2 = torch.zeros((), dtype=torch.float64)
            for c in range(0, len(tr), 4096):
                chunk = tr[c: c + 4096].double() / 32768.0
                s, s2 = s + chunk.sum(), s2 + (chunk * chunk).sum()
            n = tr.numel()
            mean = s / n
            out["mean"], out["std"] = mean, ((s2 - n * mean * mean) / (n - 1)).clamp_min(0).sqrt()
        else:  # per-coefficient mean/std over training items and frames (the S4 code's normalisation)
            flat = tr.reshape(-1, tr.shape[-1]).double()
            out["mean"], out["std"] = flat.mean(0), flat.std(0)
        return out

    t = cached(root, f"speech_commands-{subset}-{features}", key, build, enabled=cache)
    eps = 1e-5  # as the S4 code: (x - mean) / (std + 1e-5)
    info = {"source": str(folder), "subset": subset, "features": features, "classes": list(words),
            "split": "official validation_list.txt / testing_list.txt; train = files in neither",
            "sizes": {k: len(v) for k, v in splits.items()}}
    if features == "raw":
        mean, std = float(t["mean"]), float(t["std"]) + eps
        ds = {k: WaveformDataset(t[f"{k}_x"], t[f"{k}_y"], mean, std,
                                 decimation=test_decimation if k == "test" else 1)
              for k in ("train", "val", "test")}
        info.update(normalisation=f"(x - {mean:.6g}) / {std:.6g}: one train mean/std, x = int16 / 32768",
                    sample_rate=SAMPLE_RATE, padding="zeros at the end to 16000 samples")
        if test_decimation != 1:
            info.update(test_decimation=test_decimation, test_sample_rate=SAMPLE_RATE // test_decimation,
                        test_seq_len=len(range(0, CLIP_LEN, test_decimation)),
                        test_rate=float(test_decimation),
                        test_note=("test audio naively decimated (every k-th sample, no filter); run the "
                                   "model on the test set with its step size multiplied by test_rate"))
        seq_len, d_input = CLIP_LEN, 1
    else:
        mean, std = t["mean"].float(), t["std"].float() + eps
        ds = {k: TensorDataset((t[f"{k}_x"] - mean) / std, t[f"{k}_y"]) for k in ("train", "val", "test")}
        info.update(mfcc_params={k: v for k, v in MFCC_PARAMS.items()},
                    normalisation="per-coefficient train mean/std (as the S4 code)")
        seq_len, d_input = MFCC_FRAMES, MFCC_PARAMS["n_mfcc"]
    name = f"{subset}-{features}" + (f"-test{SAMPLE_RATE // test_decimation // 1000}khz" if test_decimation != 1 else "")
    return TaskData(name=name, train=ds["train"], val=ds["val"], test=ds["test"], seq_len=seq_len,
                    d_output=len(words), d_input=d_input, info=info)
