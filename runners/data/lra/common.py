"""Pieces shared by the LRA loaders: token ids, datasets over packed tensors, padding collate,
where the release's folders may sit under the data directory, and the processed-tensor cache."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from runners.data.base import DataMissing

# Token ids shared by every token task: 0 pads, 1 is unknown, 2 ends a sequence (the S4 code
# appends <eos>); the task's own symbols start at 3.
PAD_ID, UNK_ID, EOS_ID = 0, 1, 2
N_SPECIAL = 3
BYTE_VOCAB_SIZE = N_SPECIAL + 256  # byte b -> id 3 + b


# The LRA archive nests its folders (lra_release/listops-1000 and lra_release/lra_release/{listops-1000,
# tsv_data,pathfinder*}); a task folder is looked for directly under the data directory (where our
# generators write) and under these prefixes, in this order.
RELEASE_PREFIXES = ("", "lra_release", "lra_release/lra_release", "lra_release/lra_release/lra_release")


def find_task_dir(root: Path, rel: str, marker: str, dataset: str, how_to_get: str) -> Path:
    """The first ``root/<prefix>/rel`` holding ``marker`` (a file or folder inside it).

    Raises DataMissing listing every place looked at, the expected layout and how to get it.
    """
    root = Path(root)
    tried = []
    for prefix in RELEASE_PREFIXES:
        cand = root / prefix / rel if prefix else root / rel
        if (cand / marker).exists():
            return cand
        tried.append(str(cand / marker))
    raise DataMissing(f"{dataset}: no {rel}/{marker} under the data directory {root} (looked for "
                      + ", ".join(tried) + f"). {how_to_get}")


def truncate_bytes(data: bytes, max_len: int, append_eos: bool) -> np.ndarray:
    """Raw bytes uint8 (L,), truncated so that with the <eos> the dataset appends, L + 1 <= max_len.

    Byte b becomes token id 3 + b when read through ``TokenDataset(..., add=N_SPECIAL, append_eos=True)``.
    """
    return np.frombuffer(data[:max_len - int(append_eos)], dtype=np.uint8)


def pack(seqs: Sequence[np.ndarray], dtype=np.int16) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate variable-length arrays into (flat (N_total,) of ``dtype``, offsets int64 (n+1,))."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(seqs).astype(dtype, copy=False) if len(seqs) else np.zeros(0, dtype)
    return torch.from_numpy(flat), torch.from_numpy(offsets)


class TokenDataset(Dataset):
    """Items (x LongTensor (L_i,), y LongTensor ()) read from a packed tensor.

    x = flat[offsets[i]:offsets[i+1]] + add, followed by EOS_ID if append_eos (byte tasks store raw
    uint8 bytes with add=N_SPECIAL, append_eos=True; ListOps stores final int16 ids).
    """

    def __init__(self, flat: torch.Tensor, offsets: torch.Tensor, labels: torch.Tensor, *, add: int = 0,
                 append_eos: bool = False):
        if offsets.numel() != labels.numel() + 1:
            raise ValueError("TokenDataset: offsets must have one more entry than labels")
        self.flat, self.offsets, self.labels = flat, offsets, labels.long()
        self.add, self.append_eos = int(add), bool(append_eos)

    def __len__(self) -> int:
        return self.labels.numel()

    def tokens(self, i: int) -> torch.Tensor:
        x = self.flat[self.offsets[i]:self.offsets[i + 1]].long() + self.add  # (L_i,)
        if self.append_eos:
            x = torch.cat([x, x.new_tensor([EOS_ID])])
        return x

    def __getitem__(self, i: int):
        return self.tokens(i), self.labels[i]


class PairTokenDataset(Dataset):
    """Items ((x1, x2), y) for the dual-input Retrieval task."""

    def __init__(self, first: TokenDataset, second: TokenDataset):
        if len(first) != len(second) or not torch.equal(first.labels, second.labels):
            raise ValueError("PairTokenDataset: the two towers must have the same items and labels")
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, i: int):
        return (self.first.tokens(i), self.second.tokens(i)), self.first.labels[i]


class ImageSequenceDataset(Dataset):
    """Items (x FloatTensor (H*W, 1), y LongTensor ()) from uint8 images, rows flattened in raster order.

    x = (pixel - shift) / scale, with pixel in 0..255.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, indices: Optional[torch.Tensor] = None,
                 shift: float = 0.0, scale: float = 255.0):
        if images.dtype != torch.uint8 or images.dim() != 3:
            raise ValueError("ImageSequenceDataset: images must be uint8 (N, H, W)")
        self.images, self.labels = images, labels.long()
        self.indices = indices if indices is not None else torch.arange(images.shape[0])
        self.shift, self.scale = float(shift), float(scale)

    def __len__(self) -> int:
        return self.indices.numel()

    def __getitem__(self, i: int):
        j = int(self.indices[i])
        x = (self.images[j].reshape(-1, 1).float() - self.shift) / self.scale  # (H*W, 1)
        return x, self.labels[j]

    def gather(self, positions: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of items ``positions`` (B,), as ``stack_collate`` of __getitem__ gives it: (x (B, H*W, 1), y (B,)),
        gathered on ``device`` from a copy of the images kept there (made on the first call: N H W bytes)."""
        key = str(device)  # the device as asked for ("cuda" and "cuda:0" are kept apart: each is copied once)
        if getattr(self, "_on_device", None) is None or self._on_device[0] != key:
            self._on_device = (key, self.images.to(device), self.labels.to(device), self.indices.to(device))
        _, images, labels, indices = self._on_device
        j = indices[positions.to(device)]  # (B,)
        x = (images[j].reshape(j.numel(), -1, 1).float() - self.shift) / self.scale  # (B, H*W, 1)
        return x, labels[j]


class PadCollate:
    """Batch token items, right-padding with PAD_ID to the batch maximum (as the S4 code does) or
    to a fixed length ``pad_to``. Returns (x (B, L), y (B,)), or ((x1 (B, L), x2 (B, L)), y) for
    dual items, both towers padded to the same L. Sequence lengths are ``(x != PAD_ID).sum(-1)``.
    """

    def __init__(self, pad_to: Optional[int] = None, dual: bool = False, pad_id: int = PAD_ID):
        self.pad_to, self.dual, self.pad_id = pad_to, dual, pad_id

    def _pad(self, seqs: Sequence[torch.Tensor], length: int) -> torch.Tensor:
        out = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)  # (B, L)
        for b, s in enumerate(seqs):
            if s.numel() > length:
                raise ValueError(f"PadCollate: a sequence of length {s.numel()} exceeds pad_to={length}")
            out[b, :s.numel()] = s
        return out

    def __call__(self, batch):
        xs, ys = zip(*batch)
        y = torch.stack([torch.as_tensor(v) for v in ys])  # (B,)
        if self.dual:
            a, b = zip(*xs)
            length = self.pad_to or max(max(s.numel() for s in a), max(s.numel() for s in b))
            return (self._pad(a, length), self._pad(b, length)), y
        length = self.pad_to or max(s.numel() for s in xs)
        return self._pad(xs, length), y


def stack_collate(batch):
    """Fixed-length real-valued items: (x (B, L, d), y (B,))."""
    xs, ys = zip(*batch)
    return torch.stack(xs), torch.stack([torch.as_tensor(v) for v in ys])
