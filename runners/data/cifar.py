"""CIFAR-10 from the official python batches (``cifar-10-python.tar.gz``).

Layout read: ``<root>/cifar-10-batches-py/{data_batch_1..data_batch_5, test_batch}``, each a pickle
(protocol 2, written by Python 2, hence ``encoding="bytes"``) of a dict with ``b"data"``: uint8
(10000, 3072) rows in channel-major order (1024 red, 1024 green, 1024 blue values, each row-major
32x32) and ``b"labels"``: 10000 ints in 0..9. ``root`` may also be the ``cifar-10-batches-py``
folder itself.

The batches are pickles, as published: they are read with a restricted unpickler that admits only what the
format holds (runners/data/safe_pickle.py), so a crafted file is refused instead of running code.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from runners.data.base import DatasetError
from runners.data.safe_pickle import load_pickle

CIFAR10_DIRNAME = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCHES = ("test_batch",)
HOW_TO_GET = ("Get cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and extract it "
              "into the data directory (`python -m runners.data.download cifar10 --data DIR` does this).")


def cifar10_dir(root: Path) -> Path:
    """The ``cifar-10-batches-py`` folder under ``root`` (or ``root`` itself if it is that folder)."""
    root = Path(root)
    if root.name == CIFAR10_DIRNAME or (root / "test_batch").exists():
        return root
    return root / CIFAR10_DIRNAME


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        obj = load_pickle(path, encoding="bytes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError) as exc:
        raise DatasetError(f"CIFAR-10: cannot read the python batch {path}: {type(exc).__name__}: "
                           f"{' '.join(str(exc).split())}. {HOW_TO_GET}") from exc
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise DatasetError(f"CIFAR-10: {path} is not a CIFAR-10 python batch (expected a dict with keys "
                           f"b'data' and b'labels'; found {keys}). {HOW_TO_GET}")
    data = np.asarray(obj[b"data"])
    labels = np.asarray(obj[b"labels"])
    n = data.shape[0] if data.ndim >= 1 else 0
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DatasetError(f"CIFAR-10: {path}: b'data' must be uint8 of shape (n, 3072); found "
                           f"{data.dtype} {data.shape}. {HOW_TO_GET}")
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer) \
            or (n and (labels.min() < 0 or labels.max() > 9)):
        raise DatasetError(f"CIFAR-10: {path}: b'labels' must be {n} integers in 0..9; found "
                           f"{labels.dtype} {labels.shape}. {HOW_TO_GET}")
    images = data.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)  # (n, 32, 32, 3)
    return np.ascontiguousarray(images), labels.astype(np.int64)


def load_cifar10(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (n, 32, 32, 3) in HWC order and labels int64 (n,) of the official split.

    split: "train" (data_batch_1..5, 50000 images, in file order) or "test" (test_batch, 10000).
    Raises DatasetError naming the missing/malformed file.
    """
    if split not in ("train", "test"):
        raise ValueError(f"load_cifar10: split must be 'train' or 'test', got {split!r}")
    folder = cifar10_dir(Path(root))
    names = TRAIN_BATCHES if split == "train" else TEST_BATCHES
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DatasetError(f"CIFAR-10: {folder} does not hold the python batches; missing: "
                           f"{', '.join(missing)} (expected {folder}/{{data_batch_1..5,test_batch}}). {HOW_TO_GET}")
    parts = [_read_batch(folder / n) for n in names]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return images, labels
