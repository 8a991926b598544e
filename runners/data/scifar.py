"""Sequential CIFAR-10, sCIFAR (S4 Table 6 / Table 12; S4D Tables 2-4, 9): each 32x32 RGB image is a
sequence of its 1024 pixels in raster order with the 3 colour values per step, x (1024, 3).

Images come from :func:`runners.data.cifar.load_cifar10` (official python batches). Each channel is
normalised with the S4 code's constants, mean (0.4914, 0.4822, 0.4465) and std (0.247, 0.243,
0.261) on pixels scaled to [0, 1]. Validation: a held-out 10 % of the 50 000 training images
(5 000), torch.randperm with seed 42 (the S4 code's random_split). Test: the official test batch.

``augment=True``: the paper's optional augmentation (S4 Appendix D.3.4, "horizontal flips and
random crops (with symmetric padding)"), as the S4 code's RandomCrop(32, padding=4,
padding_mode="symmetric") then RandomHorizontalFlip(p=0.5); applied to training items only,
drawn from torch's global generator (seed it, and DataLoader workers get their own streams).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
from torch.utils.data import Dataset

from runners.data.base import TaskData, data_root
from runners.data.cifar import TEST_BATCHES, TRAIN_BATCHES, cifar10_dir, load_cifar10
from runners.data.cache import cached, content_fingerprint
from runners.data.mnist import train_val_indices

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.247, 0.243, 0.261)
CROP_PADDING = 4


def symmetric_pad_index(size: int, pad: int) -> torch.Tensor:
    """Gather index that pads a length-`size` axis by `pad` on both sides in numpy's 'symmetric'
    mode (edge value repeated: ... 1 0 | 0 1 ... n-1 | n-1 n-2 ...), as torchvision's padding_mode."""
    if not 0 <= pad <= size:
        raise ValueError(f"pad must be in [0, {size}], got {pad}")
    return torch.cat([torch.arange(pad - 1, -1, -1), torch.arange(size), torch.arange(size - 1, size - 1 - pad, -1)])


def random_crop_flip(img: torch.Tensor, pad: int = CROP_PADDING,
                     generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """img (H, W, C) -> same shape: symmetric-pad by `pad`, crop a random HxW window, flip
    left-right with probability 1/2 (S4 Appendix D.3.4)."""
    h, w = img.shape[0], img.shape[1]
    ih, iw = symmetric_pad_index(h, pad), symmetric_pad_index(w, pad)
    top = int(torch.randint(0, 2 * pad + 1, (), generator=generator))
    left = int(torch.randint(0, 2 * pad + 1, (), generator=generator))
    rows, cols = ih[top: top + h], iw[left: left + w]
    if bool(torch.rand((), generator=generator) < 0.5):
        cols = cols.flip(0)
    return img[rows][:, cols]


class SequentialImageDataset(Dataset):
    """uint8 images (n, 32, 32, 3) -> (x (1024, 3) float normalised per channel, y long)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool = False) -> None:
        self.images, self.labels, self.augment = images, labels, augment  # (n, H, W, 3) uint8, (n,)
        self.mean = torch.tensor(CIFAR_MEAN)
        self.std = torch.tensor(CIFAR_STD)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i]  # (H, W, 3)
        if self.augment:
            img = random_crop_flip(img)
        x = (img.float() / 255.0 - self.mean) / self.std  # (H, W, 3)
        return x.reshape(-1, 3), self.labels[i]  # (H*W, 3), ()


def load_scifar(data_dir: Optional[Path] = None, *, augment: bool = False, val_fraction: float = 0.1,
                split_seed: int = 42, cache: bool = True) -> TaskData:
    """sCIFAR: x (1024, 3), 10 classes. data_dir is the data root (holding cifar-10-batches-py/)."""
    root = data_root(data_dir)
    folder = cifar10_dir(root)

    def build() -> dict:
        out = {}
        for split in ("train", "test"):
            images, labels = load_cifar10(root, split)  # (n, 32, 32, 3) uint8, (n,) int64
            out[f"{split}_x"], out[f"{split}_y"] = torch.from_numpy(images), torch.from_numpy(labels)
        return out

    if cache:  # the fingerprint needs the files; load_cifar10 raises the DatasetError when they are missing
        names = TRAIN_BATCHES + TEST_BATCHES
        present = all((folder / n).is_file() for n in names)
        key = {"v": 1, "sources": list(names),
               "content": content_fingerprint([folder / n for n in names], folder) if present else None}
        t = cached(root, "cifar10", key, build, enabled=present)
    else:
        t = build()
    tr_idx, va_idx = train_val_indices(len(t["train_y"]), val_fraction, split_seed)
    return TaskData(
        name="scifar" + ("-aug" if augment else ""),
        train=SequentialImageDataset(t["train_x"][tr_idx], t["train_y"][tr_idx], augment=augment),
        val=SequentialImageDataset(t["train_x"][va_idx], t["train_y"][va_idx]),
        test=SequentialImageDataset(t["test_x"], t["test_y"]),
        seq_len=1024, d_output=10, d_input=3,
        info={"source": str(folder), "normalisation": {"mean": CIFAR_MEAN, "std": CIFAR_STD},
              "augment": ("random crop (symmetric padding 4) + horizontal flip, train only" if augment else False),
              "val": f"{len(va_idx)} training images held out with torch.randperm(seed={split_seed})",
              "split_seed": split_seed, "val_fraction": val_fraction})
