"""Sequential Shapes: a long-range classification task the suite generates (for the S4D Table 3a claim).

Why this task: S4D's initialization ablations (Section 5.2, Table 3a) separate most on sCIFAR, whose
images are read one pixel at a time, so that pixels one row apart are ``size`` steps apart. The papers'
image data cannot be had here; this task keeps that structure with images the suite draws itself.

Each example is a ``size x size`` grayscale image holding one shape on a noisy background, read
row-major as a sequence of length ``size**2`` with one channel. Six classes:

    0 horizontal line   1 vertical line   2 diagonal "\\"   3 diagonal "/"   4 plus "+"   5 cross "x"

with a random arm length in [``min_len``, ``max_len``] and a random position, plus ``distractors``
random bright pixels (``gap`` > 1 draws dotted strokes, dots ``gap`` pixels apart). In the flattened sequence a vertical line is a comb of pulses ``size`` steps apart,
and the two diagonals are combs with periods ``size + 1`` and ``size - 1``: telling them apart needs
kernels that resolve those periods over hundreds of steps (S4D Section 4: the imaginary parts of A set
the frequencies of the basis and "should be spread out").

On-disk layout written by :func:`generate_seq_shapes` (and read by :func:`load_seq_shapes`)::

    <root>/seq_shapes/{train,val,test}.npz   images uint8 (n, size, size), labels int64 (n,)
    <root>/seq_shapes/meta.json              the generator's arguments
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ..core.atomic import write_bytes_atomic, write_text_atomic
from .base import DataMissing, DatasetError, TaskData

DIRNAME = "seq_shapes"
CLASSES = ("horizontal", "vertical", "diagonal_down", "diagonal_up", "plus", "cross")
SPLITS = ("train", "val", "test")


def _segments(cls: int, arm: int) -> list[tuple[int, int, int]]:
    """(d_row, d_col, length) strokes from the anchor of shape ``cls`` with arm length ``arm``."""
    half = arm // 2
    return {
        0: [(0, 1, arm)],
        1: [(1, 0, arm)],
        2: [(1, 1, arm)],
        3: [(1, -1, arm)],
        4: [(0, 1, 2 * half + 1), (1, 0, 2 * half + 1)],
        5: [(1, 1, 2 * half + 1), (1, -1, 2 * half + 1)],
    }[cls]


def draw_shape(cls: int, arm: int, size: int, rng: np.random.Generator, gap: int = 1) -> np.ndarray:
    """Boolean (size, size) mask of one shape of class ``cls`` at a random position that fits.

    ``arm`` dots per stroke (plus / cross: 2 * (arm // 2) + 1 per stroke, crossing at the middle one), consecutive
    dots ``gap`` rows and / or columns apart (gap 1: solid strokes).
    """
    mask = np.zeros((size, size), dtype=bool)
    reach = (arm // 2) * gap  # plus / cross: from the centre to the end of a stroke
    span = (arm - 1) * gap  # lines: from the first dot to the last
    if cls in (0, 1, 2):
        span_r = 0 if cls == 0 else span
        span_c = 0 if cls == 1 else span
        r0 = int(rng.integers(0, size - span_r))
        c0 = int(rng.integers(0, size - span_c))
        starts = [(r0, c0)]
    elif cls == 3:
        r0 = int(rng.integers(0, size - span))
        c0 = int(rng.integers(span, size))
        starts = [(r0, c0)]
    else:  # plus / cross: centred at (rc, cc), strokes start half an arm before the centre
        rc = int(rng.integers(reach, size - reach))
        cc = int(rng.integers(reach, size - reach))
        starts = ([(rc, cc - reach), (rc - reach, cc)] if cls == 4 else
                  [(rc - reach, cc - reach), (rc - reach, cc + reach)])
    for (r, c), (dr, dc, length) in zip(starts, _segments(cls, arm), strict=True):
        k = np.arange(length) * gap
        mask[r + dr * k, c + dc * k] = True
    return mask


def make_split(n: int, size: int, min_len: int, max_len: int, noise: float, distractors: int,
               rng: np.random.Generator, gap: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (n, size, size), labels int64 (n,)), classes balanced up to one example."""
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int64)
    images = np.empty((n, size, size), dtype=np.uint8)
    for i, cls in enumerate(labels):
        arm = int(rng.integers(min_len, max_len + 1))
        img = np.clip(rng.normal(0.0, noise, (size, size)), 0.0, 1.0)
        if distractors:
            img.flat[rng.choice(size * size, distractors, replace=False)] = 1.0
        img[draw_shape(int(cls), arm, size, rng, gap)] = 1.0
        images[i] = np.round(img * 255).astype(np.uint8)
    return images, labels


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def generate_seq_shapes(root: Path, n_train: int = 12000, n_val: int = 1000, n_test: int = 1000, size: int = 32,
                        min_len: int | None = None, max_len: int | None = None, noise: float = 0.25,
                        distractors: int = 8, gap: int = 1, seed: int = 0) -> Path:
    """Write <root>/seq_shapes/ (see the module docstring); strokes of ``min_len`` to ``max_len`` dots (default:
    spanning a quarter to a half of the image), consecutive dots ``gap`` pixels apart."""
    min_len = max(2, size // (4 * gap)) if min_len is None else min_len
    max_len = max(min_len, size // (2 * gap)) if max_len is None else max_len
    for name, v in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test), ("size", size),
                    ("min_len", min_len), ("max_len", max_len), ("distractors", distractors), ("gap", gap),
                    ("seed", seed)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"generate_seq_shapes: {name} = {v!r} is not allowed; expected an integer >= 0")
    if size < 4 or gap < 1 or not 2 <= min_len <= max_len or 2 * (max_len // 2) * gap >= size:
        raise ValueError(f"generate_seq_shapes: need size >= 4, gap >= 1, 2 <= min_len <= max_len and a longest "
                         f"stroke that fits (2 * (max_len // 2) * gap < size), got size={size}, gap={gap}, "
                         f"min_len={min_len}, max_len={max_len}")
    if not 0 <= noise <= 1 or distractors > size * size:
        raise ValueError(f"generate_seq_shapes: noise must be in [0, 1] and distractors <= size**2, got "
                         f"noise={noise}, distractors={distractors}")
    folder = Path(root) / DIRNAME
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in zip(SPLITS, (n_train, n_val, n_test)):
        images, labels = make_split(n, size, min_len, max_len, noise, distractors, rng, gap)
        _save_npz(folder / f"{split}.npz", images=images, labels=labels)
    meta = {"size": size, "min_len": min_len, "max_len": max_len, "gap": gap, "noise": noise, "distractors": distractors,
            "seed": seed, "classes": list(CLASSES), "n": {"train": n_train, "val": n_val, "test": n_test}}
    write_text_atomic(folder / "meta.json", json.dumps(meta, indent=1))
    return folder


def load_seq_shapes(root: Path) -> TaskData:
    """x (size**2, 1) float (pixels scaled to [-1, 1], row-major), y in 0..5."""
    folder = Path(root) / DIRNAME
    how = ("Generate it with runners.data.seq_shapes.generate_seq_shapes(root) (a spec does this through "
           "'prepare: {preparer: seq_shapes, ...}').")
    missing = [f"{s}.npz" for s in SPLITS if not (folder / f"{s}.npz").is_file()]
    if missing:
        raise DataMissing(f"Sequential Shapes: {folder} lacks {', '.join(missing)}. {how}")
    parts, size = {}, None
    for split in SPLITS:
        try:
            with np.load(folder / f"{split}.npz") as z:
                images, labels = z["images"], z["labels"]
        except (OSError, ValueError, KeyError) as exc:
            raise DatasetError(f"Sequential Shapes: cannot read {folder / f'{split}.npz'} (expected arrays "
                               f"'images' uint8 (n, S, S) and 'labels' (n,)): {exc}. {how}") from exc
        if (images.dtype != np.uint8 or images.ndim != 3 or images.shape[1] != images.shape[2]
                or labels.shape != (images.shape[0],) or (size is not None and images.shape[1] != size)
                or (labels.size and not (0 <= labels.min() and labels.max() < len(CLASSES)))):
            raise DatasetError(f"Sequential Shapes: {folder / f'{split}.npz'} holds images {images.dtype} "
                               f"{images.shape} and labels {labels.shape}; expected uint8 (n, S, S) with one "
                               f"S for all splits and n labels in 0..{len(CLASSES) - 1}. {how}")
        size = images.shape[1]
        x = torch.from_numpy(images).float().div_(127.5).sub_(1.0).reshape(len(images), -1, 1)  # (n, S*S, 1)
        parts[split] = TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))
    return TaskData(name="seq_shapes", train=parts["train"], val=parts["val"], test=parts["test"],
                    seq_len=size * size, d_output=len(CLASSES), d_input=1,
                    info={"source": str(folder), "classes": list(CLASSES),
                          "note": "generated by the suite (runners.data.seq_shapes); not a paper's dataset"})
