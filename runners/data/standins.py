"""Stand-in datasets written in the official on-disk layouts, for where the real data cannot be had.

They exercise the real loaders end to end (smoke tier, CI) and give a learnable signal, but they are not
the papers' data: a number measured on a stand-in is never shown in a paper column (its rows say
"stand-in"). ListOps and Pathfinder / Path-X need none of this: the suite generates them with LRA's
procedure (runners.data.lra.generate).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from runners.core.atomic import write_bytes_atomic

POSITIVE = ("great", "lovely", "superb", "moving", "brilliant")
NEGATIVE = ("awful", "boring", "dull", "clumsy", "terrible")
FILLER = ("the", "film", "plot", "actor", "scene", "music", "story", "camera", "and", "with", "a", "was")


def _words(rng: np.random.Generator, n: int, extra: tuple[str, ...], p_extra: float) -> str:
    out = [rng.choice(extra) if rng.random() < p_extra else rng.choice(FILLER) for _ in range(n)]
    return " ".join(out)


def write_imdb_standin(root: Path, n_per_class: int = 40, length_words: int = 60, seed: int = 0) -> Path:
    """aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt: sentiment carried by a few marker words."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "aclImdb"
    for split in ("train", "test"):
        for cls, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            folder = base / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n_per_class):
                rating = rng.integers(7, 11) if cls == "pos" else rng.integers(1, 5)
                (folder / f"{i}_{rating}.txt").write_text(_words(rng, length_words, words, 0.1))
    return base


def write_aan_standin(root: Path, n_pairs: int = 80, length_words: int = 50, seed: int = 0) -> Path:
    """tsv_data/new_aan_pairs.{train,eval,test}.tsv: label 1 when both documents share a topic vocabulary."""
    rng = np.random.default_rng(seed)
    topics = [tuple(f"{stem}{k}" for k in range(4)) for stem in ("graph", "parse", "speech", "vision", "tagger")]
    folder = Path(root) / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "eval", "test"):
        lines = []
        for i in range(n_pairs):
            t1 = int(rng.integers(len(topics)))
            same = i % 2 == 0
            t2 = t1 if same else int((t1 + rng.integers(1, len(topics))) % len(topics))
            d1, d2 = _words(rng, length_words, topics[t1], 0.3), _words(rng, length_words, topics[t2], 0.3)
            lines.append(f"{int(same)}\tdoc{i}a\tdoc{i}b\t{d1}\t{d2}")
        (folder / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def write_cifar_standin(root: Path, n_per_batch: int = 40, seed: int = 0) -> Path:
    """cifar-10-batches-py/{data_batch_1..5,test_batch}: class-dependent stripes plus noise, 32x32x3 uint8."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rows = np.arange(32)[:, None, None]
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, size=n_per_batch)
        images = np.empty((n_per_batch, 32, 32, 3), dtype=np.uint8)
        for j, lab in enumerate(labels):
            pattern = 128 + 100 * np.sin(2 * np.pi * (lab + 1) * rows / 32) * np.ones((1, 32, 3))
            images[j] = np.clip(pattern + rng.normal(0, 30, (32, 32, 3)), 0, 255).astype(np.uint8)
        data = images.transpose(0, 3, 1, 2).reshape(n_per_batch, 3072)  # CIFAR stores R, G, B planes
        write_bytes_atomic(folder / name, pickle.dumps(
            {b"batch_label": name.encode(), b"labels": labels.tolist(), b"data": data,
             b"filenames": [f"{name}_{j}.png".encode() for j in range(n_per_batch)]}, protocol=2))
    return folder


# ----------------------------------------------------------------------------------------------
# Speech Commands, MNIST and BIDMC stand-ins (S4 Tables 5 and 6; S4D Tables 4 and 11).


def _wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    """16-bit mono PCM WAV file contents for int16 ``samples`` (n,)."""
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return buf.getvalue()


def speech_tone_frequencies(f_min: float = 200.0, f_max: float = 3000.0) -> dict[str, float]:
    """Tone frequency (Hz) of each Speech Commands word in the stand-in: log-spaced in [f_min, f_max], with the
    ten SC10 words spread evenly over the range (so SC10 classes are far apart too). f_max < 4000 Hz keeps every
    tone below the Nyquist frequency of the 8 kHz (0.5x) test."""
    from .download import SC10_WORDS, SPEECH_COMMANDS_WORDS
    from .tones import class_frequencies

    n = len(SPEECH_COMMANDS_WORDS)
    sc10_ranks = [round(j * (n - 1) / (len(SC10_WORDS) - 1)) for j in range(len(SC10_WORDS))]
    rank = dict(zip(SC10_WORDS, sc10_ranks))
    free = iter(r for r in range(n) if r not in sc10_ranks)
    for word in SPEECH_COMMANDS_WORDS:
        if word not in rank:
            rank[word] = next(free)
    freqs = class_frequencies(n, f_min, f_max)
    return {w: float(freqs[rank[w]]) for w in SPEECH_COMMANDS_WORDS}


def write_speech_commands_standin(root: Path, n_train: int = 2, n_val: int = 1, n_test: int = 1,
                                  f_min: float = 200.0, f_max: float = 3000.0, noise: float = 0.05,
                                  seed: int = 0) -> Path:
    """speech_commands/<word>/<speaker>_nohash_<k>.wav for all 35 words of v0.02, validation_list.txt,
    testing_list.txt and a _background_noise_ folder: the tarball's layout (runners.data.speech_commands).

    Each clip is 16 kHz mono 16-bit PCM: a tone at its word's frequency (:func:`speech_tone_frequencies`) with
    random amplitude and phase plus white noise; every fourth clip is shorter than 1 s (as in the real data,
    where the loader zero-pads). Per word: the first ``n_val`` clips are listed for validation, the next
    ``n_test`` for testing, the rest are training clips.
    """
    from .download import SPEECH_COMMANDS_DIR

    rng = np.random.default_rng(seed)
    folder = Path(root) / SPEECH_COMMANDS_DIR
    val_list, test_list = [], []
    for w_i, (word, freq) in enumerate(speech_tone_frequencies(f_min, f_max).items()):
        for k in range(n_val + n_test + n_train):
            n = 16000 if k % 4 != 3 else int(rng.integers(12000, 16000))
            t = np.arange(n) / 16000.0
            x = rng.uniform(0.3, 0.6) * np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi))
            x = x + noise * rng.standard_normal(n)
            rel = f"{word}/{int(rng.integers(0, 2**32)):08x}_nohash_{k}.wav"
            write_bytes_atomic(folder / rel, _wav_bytes(np.clip(x * 32767, -32768, 32767).astype(np.int16)))
            (val_list if k < n_val else test_list if k < n_val + n_test else []).append(rel)
    write_bytes_atomic(folder / "_background_noise_" / "white_noise.wav",
                  _wav_bytes((rng.standard_normal(32000) * 1000).astype(np.int16)))
    write_bytes_atomic(folder / "validation_list.txt", ("\n".join(val_list) + "\n").encode())
    write_bytes_atomic(folder / "testing_list.txt", ("\n".join(test_list) + "\n").encode())
    return folder


def _idx_bytes(array: np.ndarray) -> bytes:
    """LeCun's IDX format for a uint8 array: 0, 0, dtype code 0x08, ndim, big-endian uint32 dims, data."""
    import struct

    array = np.ascontiguousarray(array, dtype=np.uint8)
    return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def mnist_standin_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n,) digits -> (n, 28, 28) uint8: horizontal stripes with (label + 1) cycles over the image plus noise, so
    the raster sequence (sMNIST) is a staircase wave whose period identifies the class."""
    rows = np.arange(28)[None, :, None]
    pattern = 128 + 100 * np.sin(2 * np.pi * (labels[:, None, None] + 1) * rows / 28) * np.ones((1, 1, 28))
    return np.clip(pattern + rng.normal(0, 30, pattern.shape), 0, 255).astype(np.uint8)


def write_mnist_standin(root: Path, n_train: int = 200, n_test: int = 50, seed: int = 0) -> Path:
    """mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz: the four gzipped IDX files of the official
    download (runners.data.mnist), holding :func:`mnist_standin_images`."""
    import gzip

    from .download import MNIST_DIR

    rng = np.random.default_rng(seed)
    folder = Path(root) / MNIST_DIR
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        write_bytes_atomic(folder / f"{prefix}-images-idx3-ubyte.gz",
                      gzip.compress(_idx_bytes(mnist_standin_images(labels, rng))))
        write_bytes_atomic(folder / f"{prefix}-labels-idx1-ubyte.gz", gzip.compress(_idx_bytes(labels)))
    return folder


BIDMC_RATE_HZ = 125  # BIDMC recordings: 125 Hz, 32 s per series -> 4000 samples


def bidmc_standin_series(hr: float, rr: float, spo2: float, rng: np.random.Generator,
                         length: int = 4000) -> np.ndarray:
    """One stand-in series x (length, 2): channel 0 a PPG-like pulse at the heart rate ``hr`` (beats/min) whose
    amplitude grows with ``spo2`` (%), on a baseline that wanders at the respiratory rate ``rr`` (breaths/min);
    channel 1 ECG-like narrow peaks at the heart rate. Plus white noise."""
    t = np.arange(length) / BIDMC_RATE_HZ
    phase = 2 * np.pi * hr / 60 * t + rng.uniform(0, 2 * np.pi)
    breath = 0.3 * np.sin(2 * np.pi * rr / 60 * t + rng.uniform(0, 2 * np.pi))
    ppg = (0.2 + (spo2 - 85) / 15) * np.sin(phase) + breath
    ecg = np.cos(phase / 2) ** 40  # one narrow peak per beat
    return np.stack([ppg, ecg], axis=-1) + 0.05 * rng.standard_normal((length, 2))


def write_bidmc_standin(root: Path, n_train: int = 40, n_test: int = 16, length: int = 4000,
                        seed: int = 0) -> Path:
    """bidmc/BIDMC32{HR,RR,SpO2}/BIDMC32{..}_{TRAIN,TEST}.ts: the Monash TSER archive's .ts files
    (runners.data.bidmc) with :func:`bidmc_standin_series`; the three problems share the series and differ in
    the target (HR 60-100 beats/min, RR 10-25 breaths/min, SpO2 90-100 %), as in the archive."""
    from .download import BIDMC_DIR, BIDMC_TARGETS

    rng = np.random.default_rng(seed)
    parts = {}
    for part, n in (("TRAIN", n_train), ("TEST", n_test)):
        targets = {"HR": rng.uniform(60, 100, n), "RR": rng.uniform(10, 25, n), "SpO2": rng.uniform(90, 100, n)}
        series = [bidmc_standin_series(targets["HR"][i], targets["RR"][i], targets["SpO2"][i], rng, length)
                  for i in range(n)]
        lines = [":".join(",".join(f"{v:.4f}" for v in s[:, d]) for d in range(2)) for s in series]
        parts[part] = (lines, targets)
    for target in BIDMC_TARGETS:
        problem = f"BIDMC32{target}"
        header = (f"@problemName {problem}\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
                  f"@equalLength true\n@seriesLength {length}\n@targetLabel true\n@data\n")
        for part, (lines, targets) in parts.items():
            body = "".join(f"{line}:{y:.4f}\n" for line, y in zip(lines, targets[target]))
            write_bytes_atomic(Path(root) / BIDMC_DIR / problem / f"{problem}_{part}.ts", (header + body).encode())
    return Path(root) / BIDMC_DIR
