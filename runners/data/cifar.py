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
import struct
from pathlib import Path

import numpy as np

from runners.data.base import DataMissing, DatasetError, one_line
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
            KeyError, MemoryError, RecursionError, struct.error, UnicodeDecodeError) as exc:
        raise DatasetError(f"CIFAR-10: cannot read the python batch {path}: {type(exc).__name__}: "
                           f"{one_line(exc)}. {HOW_TO_GET}") from exc
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise DatasetError(f"CIFAR-10: {path} is not a CIFAR-10 python batch (expected a dict with keys "
                           f"b'data' and b'labels'; found {keys}). {HOW_TO_GET}")
    data = obj[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        found = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DatasetError(f"CIFAR-10: {path}: b'data' must be a uint8 array of shape (n, 3072); found "
                           f"{found}. {HOW_TO_GET}")
    labels = check_labels(obj[b"labels"], data.shape[0], path)
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # (n, 32, 32, 3)
    return np.ascontiguousarray(images), labels


def check_labels(labels: object, n: int, path: Path) -> np.ndarray:
    """The one check of CIFAR-10 labels: a list (as published) or integer array of ``n`` ints in 0..9 -> int64 (n,).
    Floats (3.7), booleans, negative or out-of-range values raise DatasetError naming the file."""
    if isinstance(labels, (list, tuple)):
        bad = next((v for v in labels if type(v) is not int or not 0 <= v <= 9), None)  # noqa: E721 -- not bool
        if bad is not None or len(labels) != n:
            what = f"the value {one_line(repr(bad), 40)}" if bad is not None else f"{len(labels)} labels"
            raise DatasetError(f"CIFAR-10: {path}: b'labels' must be {n} integers in 0..9; found {what}. {HOW_TO_GET}")
        return np.asarray(labels, dtype=np.int64)
    if isinstance(labels, np.ndarray) and np.issubdtype(labels.dtype, np.integer) and labels.shape == (n,) \
            and (n == 0 or (labels.min() >= 0 and labels.max() <= 9)):
        return labels.astype(np.int64)
    found = f"{labels.dtype} {labels.shape}" if isinstance(labels, np.ndarray) else type(labels).__name__
    raise DatasetError(f"CIFAR-10: {path}: b'labels' must be {n} integers in 0..9; found {found}. {HOW_TO_GET}")


def load_cifar10(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (n, 32, 32, 3) in HWC order and labels int64 (n,) of the official split.

    split: "train" (data_batch_1..5, 50000 images, in file order) or "test" (test_batch, 10000).
    Raises DataMissing naming the missing files, DatasetError naming a malformed one.
    """
    if split not in ("train", "test"):
        raise ValueError(f"load_cifar10: split must be 'train' or 'test', got {split!r}")
    folder = cifar10_dir(Path(root))
    names = TRAIN_BATCHES if split == "train" else TEST_BATCHES
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DataMissing(f"CIFAR-10: {folder} does not hold the python batches; missing: "
                          f"{', '.join(missing)} (expected {folder}/{{data_batch_1..5,test_batch}}). {HOW_TO_GET}")
    parts = [_read_batch(folder / n) for n in names]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return images, labels
