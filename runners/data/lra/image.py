"""LRA Image: grayscale CIFAR-10 as a sequence of 1024 pixels (d_input = 1).

Grayscale: ITU-R 601-2 luma, L = R 299/1000 + G 587/1000 + B 114/1000, computed exactly as PIL's
``convert("L")`` does (the S4 code uses torchvision's Grayscale, which calls it):
``(19595 R + 38470 G + 7471 B + 32768) >> 16``. LRA's own pipeline (tf.image.rgb_to_grayscale) uses
the same weights. Values: (L - 122.6) / 61.0 (S4 code: Normalize(mean=122.6/255, std=61.0/255) after
ToTensor), or L / 255 with normalize=False.

Validation split: as the S4 code (SequenceDataset.split_train_val with val_split = 0.1, seed 42):
torch.randperm(50000) under torch.Generator().manual_seed(seed); the first 45000 indices are train,
the rest val (this is what torch.utils.data.random_split does). LRA's own pipeline held out the
last 10% of the training set (train[90%:]) instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from runners.data.base import TaskData, data_root
from runners.data.cifar import cifar10_dir, load_cifar10
from runners.data.lra.common import ImageSequenceDataset, stack_collate

GRAY_MEAN, GRAY_STD = 122.6, 61.0  # S4 code, in 0..255 units


def rgb_to_gray(images: np.ndarray) -> np.ndarray:
    """uint8 (n, H, W, 3) -> uint8 (n, H, W) by ITU-R 601-2 luma with PIL's integer rounding."""
    x = images.astype(np.uint32)
    return ((x[..., 0] * 19595 + x[..., 1] * 38470 + x[..., 2] * 7471 + 0x8000) >> 16).astype(np.uint8)


def split_indices(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices: torch.randperm(n) under manual_seed(seed), train = first int(n(1-f))."""
    n_train = int(n * (1.0 - val_fraction))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[:n_train], perm[n_train:]


def load_lra_image(root: Optional[Path] = None, *, val_fraction: float = 0.1, seed: int = 42,
                   normalize: bool = True) -> TaskData:
    """LRA Image as TaskData: x (1024, 1) float, 10 classes; val = 10% of train held out (seed 42).

    root: data directory holding ``cifar-10-batches-py/``; default $DATA_PATH or ./data.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"load_lra_image: val_fraction must be in (0, 1), got {val_fraction}")
    root = data_root(root)
    tr_img, tr_lab = load_cifar10(root, "train")
    te_img, te_lab = load_cifar10(root, "test")
    tr_gray = torch.from_numpy(rgb_to_gray(tr_img))  # (50000, 32, 32)
    te_gray = torch.from_numpy(rgb_to_gray(te_img))  # (10000, 32, 32)
    tr_idx, va_idx = split_indices(tr_gray.shape[0], val_fraction, seed)
    shift, scale = (GRAY_MEAN, GRAY_STD) if normalize else (0.0, 255.0)
    tr_lab_t, te_lab_t = torch.from_numpy(tr_lab), torch.from_numpy(te_lab)
    train = ImageSequenceDataset(tr_gray, tr_lab_t, tr_idx, shift, scale)
    val = ImageSequenceDataset(tr_gray, tr_lab_t, va_idx, shift, scale)
    test = ImageSequenceDataset(te_gray, te_lab_t, None, shift, scale)
    return TaskData(
        name="image", train=train, val=val, test=test, seq_len=1024, d_output=10, d_input=1,
        collate_fn=stack_collate,
        info={"path": str(cifar10_dir(root)),
              "grayscale": "ITU-R 601-2 luma (0.299, 0.587, 0.114), PIL integer rounding",
              "values": f"(L - {GRAY_MEAN}) / {GRAY_STD} (S4 code)" if normalize else "L / 255 in [0, 1]",
              "val": f"{val_fraction:.0%} of train held out by torch.randperm with seed {seed} (S4 code)",
              "sizes": {"train": len(train), "val": len(val), "test": len(test)}})
