"""Sequential and permuted MNIST (S4 Table 6 / Table 12, "sMNIST" and "pMNIST").

Reads the four official IDX files (raw or .gz) from ``<data>/mnist/``. Each image becomes a
sequence of its 784 pixels in raster order, one pixel per step (d_input = 1), scaled to [0, 1]
and otherwise unnormalised, as in the S4 code. pMNIST applies one fixed permutation of the 784
positions, drawn from a seeded generator (``perm_seed``, default 0).

The validation set is a held-out 10 % of the 60 000 training images (6 000 images), chosen
with ``torch.randperm`` from a generator seeded with ``split_seed`` (default 42); this gives the
same indices as the S4 code's ``torch.utils.data.random_split(train, (54000, 6000),
generator=torch.Generator().manual_seed(42))``. The official 10 000 test images are the test set.
"""
from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from runners.data.base import DataMissing, DatasetError, TaskData, data_root, one_line
from runners.data.cache import cached, content_fingerprint
from runners.data.download import MNIST_DIR, MNIST_FILES, how_to_get

MNIST_LEN = 784
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


#: the largest IDX payload read (MNIST's train-images: 47 040 000 bytes); a header asking for more is refused
MAX_IDX_BYTES = 1 << 27
MAX_IDX_DIMS = 4


def read_idx(path: Path, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Parse one IDX file (LeCun's format: 2 zero bytes, dtype code, ndim, big-endian uint32
    dims, then the data); ``.gz`` files are decompressed as they are read, never beyond what the header
    announces (at most ``max_bytes``). Raises DatasetError naming the file on a malformed, truncated, oversized
    or over-long file."""
    path = Path(path)
    hint = how_to_get("mnist")

    def bad(msg: str) -> DatasetError:
        return DatasetError(f"MNIST: IDX file {path} {msg}. {hint}")

    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            magic = f.read(4)
            if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] not in _IDX_DTYPES:
                raise bad(f"is not an IDX file (bad magic number {magic.hex() or 'empty'}; allowed: 00 00, a type code "
                          f"in {sorted(hex(k) for k in _IDX_DTYPES)}, ndim)")
            dtype, ndim = np.dtype(_IDX_DTYPES[magic[2]]), magic[3]
            if not 1 <= ndim <= MAX_IDX_DIMS:
                raise bad(f"has {ndim} dimensions in its header; allowed: 1 to {MAX_IDX_DIMS}")
            head = f.read(4 * ndim)
            if len(head) < 4 * ndim:
                raise bad("is truncated inside its header")
            dims = struct.unpack(f">{ndim}I", head)
            n_bytes = math.prod(dims) * dtype.itemsize  # Python ints: no overflow
            if n_bytes > max_bytes:
                raise bad(f"has header dims {tuple(dims)} of {dtype}, {n_bytes} bytes; allowed: at most {max_bytes}")
            raw = f.read(n_bytes)
            if len(raw) != n_bytes:
                raise bad(f"holds {len(raw)} data bytes but its header {tuple(dims)} says {n_bytes} (truncated)")
            if f.read(1):
                raise bad(f"holds more data than its header {tuple(dims)} says ({n_bytes} bytes)")
    except DatasetError:
        raise
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise bad(f"cannot be read ({type(exc).__name__}: {one_line(exc)})") from exc
    return np.frombuffer(raw, dtype=dtype).reshape(dims).copy()  # writable


def _find(folder: Path, name: str) -> Optional[Path]:
    for cand in (folder / name, folder / (name + ".gz")):
        if cand.exists():
            return cand
    return None


def _read_split(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    image_file = _find(folder, f"{prefix}-images-idx3-ubyte")
    label_file = _find(folder, f"{prefix}-labels-idx1-ubyte")
    images, labels = read_idx(image_file), read_idx(label_file)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise DatasetError(f"MNIST: {image_file} holds {images.dtype} of shape "
                           f"{images.shape}, expected uint8 (n, 28, 28). {how_to_get('mnist')}")
    check_labels(labels, len(images), str(label_file))
    return images, labels


def check_labels(labels: np.ndarray, n: int, where: str) -> None:
    """The one check of MNIST labels: integers (IDX type code 0x08, uint8) 0..9, one per image."""
    if labels.ndim != 1 or len(labels) != n or not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(f"MNIST: {where} holds {labels.dtype} labels of shape {labels.shape} for {n} images; "
                           f"allowed: one integer digit 0-9 per image. {how_to_get('mnist')}")
    if n and (labels.min() < 0 or labels.max() > 9):
        raise DatasetError(f"MNIST: {where} holds labels from {labels.min()} to {labels.max()}; allowed: digits "
                           f"0-9. {how_to_get('mnist')}")


class PixelSequenceDataset(Dataset):
    """uint8 images (n, L) -> (x (L, 1) float in [0, 1], y long); optional fixed permutation."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor,
                 permutation: Optional[torch.Tensor] = None) -> None:
        self.images, self.labels, self.permutation = images, labels, permutation  # (n, L) uint8, (n,)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i]
        if self.permutation is not None:
            x = x[self.permutation]
        return (x.float() / 255.0).unsqueeze(-1), self.labels[i]  # (L, 1), ()


def mnist_permutation(seed: int = 0) -> torch.Tensor:
    """The fixed pMNIST permutation of the 784 pixel positions for `seed`."""
    return torch.randperm(MNIST_LEN, generator=torch.Generator().manual_seed(int(seed)))


def train_val_indices(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split range(n) as torch.utils.data.random_split(..., (n - n_val, n_val)) does with a
    generator seeded by `seed`, n_val = n - int(n * (1 - val_fraction)) (the S4 code's rule)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_train = int(n * (1.0 - val_fraction))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return perm[:n_train], perm[n_train:]


def load_mnist(data_dir: Optional[Path] = None, *, permute: bool = False, perm_seed: int = 0,
               val_fraction: float = 0.1, split_seed: int = 42, cache: bool = True) -> TaskData:
    """sMNIST (``permute=False``) or pMNIST (``permute=True``): sequences (784, 1), 10 classes.

    data_dir is the data root ($DATA_PATH, default ./data); the IDX files are read from
    ``<data_dir>/mnist/``.
    """
    root = data_root(data_dir)
    folder = root / MNIST_DIR
    if not folder.is_dir():
        raise DataMissing(f"MNIST: no directory {folder} (expected the four IDX files "
                          f"{', '.join(MNIST_FILES)}, raw or .gz, in it). {how_to_get('mnist')}")
    missing = [n for n in MNIST_FILES if _find(folder, n) is None]
    if missing:
        raise DataMissing(f"MNIST: {folder} lacks {', '.join(missing)} (raw or .gz). {how_to_get('mnist')}")
    sources = [_find(folder, n) for n in MNIST_FILES]

    def build() -> dict:
        tr_x, tr_y = _read_split(folder, "train")
        te_x, te_y = _read_split(folder, "t10k")
        return {"train_x": torch.from_numpy(tr_x.reshape(len(tr_x), -1)),  # (n, 784) uint8
                "train_y": torch.from_numpy(tr_y.astype(np.int64)),
                "test_x": torch.from_numpy(te_x.reshape(len(te_x), -1)),
                "test_y": torch.from_numpy(te_y.astype(np.int64))}

    key = {"v": 1, "sources": [p.name for p in sources], "content": content_fingerprint(sources, folder)}
    t = cached(root, "mnist", key, build, enabled=cache)
    tr_idx, va_idx = train_val_indices(len(t["train_y"]), val_fraction, split_seed)
    perm = mnist_permutation(perm_seed) if permute else None
    make = lambda x, y: PixelSequenceDataset(x, y, perm)  # noqa: E731
    info = {"source": str(folder), "pixel_scale": "x / 255, no further normalisation (as the S4 code)",
            "val": f"{len(va_idx)} training images held out with torch.randperm(seed={split_seed})",
            "split_seed": split_seed, "val_fraction": val_fraction}
    if permute:
        info["permutation_seed"] = perm_seed
        info["permutation"] = "torch.randperm(784, generator=torch.Generator().manual_seed(permutation_seed))"
    return TaskData(
        name="pmnist" if permute else "smnist",
        train=make(t["train_x"][tr_idx], t["train_y"][tr_idx]),
        val=make(t["train_x"][va_idx], t["train_y"][va_idx]),
        test=make(t["test_x"], t["test_y"]),
        seq_len=MNIST_LEN, d_output=10, d_input=1, info=info)
