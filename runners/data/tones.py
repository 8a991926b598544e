"""Tone classification made by the suite, for the resolution-change claim (S4 Section 4.3 and Table 5, column
0.5x; S4D Table 11, column 8000 Hz): a model trained on signals sampled at one rate keeps its accuracy on the
same kind of signals sampled at half the rate when its step size Delta is doubled, with no retraining.

Each example samples one continuous signal s(t) = a sin(2 pi f t + phi) + white noise at ``sample_rate`` for
``length`` samples. Class c has the frequency band around f_c = f_min (f_max / f_min)^(c / (n_classes - 1))
(log-spaced; f jittered by +-``jitter`` relative), so a model that counts samples per cycle instead of time
confuses a half-rate signal of class c with one of a class about an octave higher. Keep f_max well below
sample_rate / 4 so the half-rate test stays below its Nyquist frequency.

``write_tones`` (preparer) stores float32 arrays in ``<root>/tones/tones.npz`` with the generator's parameters;
``load_tones`` (loader) reads it. ``test_decimation=2``: the test set decimated naively (every other sample,
as Speech Commands' 8 kHz test, S4D Table 11 caption); run the model with its step size multiplied by
``info["test_rate"]`` = 2.0.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ..core.atomic import write_bytes_atomic
from .base import DataMissing, DatasetError, TaskData, data_root

TONES_DIR = "tones"
TONES_FILE = "tones.npz"


def class_frequencies(n_classes: int, f_min: float, f_max: float) -> np.ndarray:
    """Centre frequency (Hz) of each class: log-spaced from f_min to f_max."""
    return f_min * (f_max / f_min) ** (np.arange(n_classes) / max(n_classes - 1, 1))


def make_tones(n: int, n_classes: int, sample_rate: float, length: int, f_min: float, f_max: float,
               noise: float, jitter: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x (n, length) float32, y (n,) int64: balanced classes (y = i mod n_classes), random amplitude and phase."""
    y = np.arange(n) % n_classes
    f = class_frequencies(n_classes, f_min, f_max)[y] * rng.uniform(1 - jitter, 1 + jitter, n)  # (n,)
    t = np.arange(length) / sample_rate  # (L,)
    amp, phase = rng.uniform(0.5, 1.0, n), rng.uniform(0, 2 * np.pi, n)
    x = amp[:, None] * np.sin(2 * np.pi * f[:, None] * t[None, :] + phase[:, None])  # (n, L)
    x += noise * rng.standard_normal(x.shape)
    return x.astype(np.float32), y.astype(np.int64)


def write_tones(root: Path, n_train: int = 2000, n_val: int = 200, n_test: int = 200, n_classes: int = 10,
                sample_rate: float = 16000.0, length: int = 2048, f_min: float = 125.0, f_max: float = 1000.0,
                noise: float = 0.1, jitter: float = 0.03, seed: int = 0) -> Path:
    """Generate the three splits into ``<root>/tones/tones.npz`` (written atomically)."""
    if not 0 < f_min < f_max < sample_rate / 4:
        raise ValueError(f"tones: need 0 < f_min < f_max < sample_rate / 4 (= {sample_rate / 4}) so the half-rate "
                         f"test stays below Nyquist; got f_min={f_min}, f_max={f_max}")
    if n_classes < 2 or min(n_train, n_val, n_test) < n_classes:
        raise ValueError(f"tones: need n_classes >= 2 and at least n_classes examples per split; got "
                         f"n_classes={n_classes}, n_train/n_val/n_test={n_train}/{n_val}/{n_test}")
    rng = np.random.default_rng(seed)
    params = dict(n_classes=n_classes, sample_rate=sample_rate, length=length, f_min=f_min, f_max=f_max,
                  noise=noise, jitter=jitter, seed=seed)
    arrays = {}
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        arrays[f"{split}_x"], arrays[f"{split}_y"] = make_tones(
            n, n_classes, sample_rate, length, f_min, f_max, noise, jitter, rng)
    buf = io.BytesIO()
    np.savez(buf, params=np.array(json.dumps(params)), **arrays)
    folder = Path(root) / TONES_DIR
    write_bytes_atomic(folder / TONES_FILE, buf.getvalue())
    return folder


def load_tones(data_dir: Optional[Path] = None, *, test_decimation: int = 1) -> TaskData:
    """The tone task written by :func:`write_tones`: x (L, 1) float, n_classes classes."""
    if not isinstance(test_decimation, int) or test_decimation < 1:
        raise ValueError(f"test_decimation must be a positive int, got {test_decimation!r}")
    path = data_root(data_dir) / TONES_DIR / TONES_FILE
    if not path.is_file():
        raise DataMissing(f"tones: no file {path}. This task is made by the suite: give the task "
                          f"`prepare: {{preparer: tones, ...}}` (runners.data.tones.write_tones).")
    try:
        with np.load(path) as z:
            params = json.loads(str(z["params"]))
            arr = {k: torch.from_numpy(z[k]) for k in z.files if k != "params"}
    except (OSError, ValueError, KeyError) as exc:
        raise DatasetError(f"tones: cannot read {path} ({exc}); delete it and prepare it again") from exc
    ds = {s: TensorDataset(arr[f"{s}_x"].unsqueeze(-1), arr[f"{s}_y"]) for s in ("train", "val")}
    ds["test"] = TensorDataset(arr["test_x"][:, ::test_decimation].unsqueeze(-1).contiguous(), arr["test_y"])
    info = {"source": str(path), "generator": params, "made_by": "the suite (not a paper dataset)",
            "class_frequencies_hz": class_frequencies(params["n_classes"], params["f_min"], params["f_max"]).tolist()}
    if test_decimation != 1:
        info.update(test_decimation=test_decimation, test_sample_rate=params["sample_rate"] / test_decimation,
                    test_seq_len=ds["test"].tensors[0].shape[1], test_rate=float(test_decimation),
                    test_note="test signals naively decimated (every k-th sample); run the model with its step "
                              "size multiplied by test_rate")
    name = "tones" + (f"-test-decimated{test_decimation}" if test_decimation != 1 else "")
    return TaskData(name=name, train=ds["train"], val=ds["val"], test=ds["test"], seq_len=params["length"],
                    d_output=params["n_classes"], d_input=1, info=info)
