"""What every dataset loader returns, and the errors it raises.

A task's loader reads the dataset's own published on-disk layout under the data directory
($DATA_PATH, default ./data) and returns a :class:`TaskData`. A missing or malformed directory
raises :class:`DatasetError` naming the path, what was expected there, and how to get it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from torch.utils.data import Dataset


class DatasetError(RuntimeError):
    """A dataset directory is missing, incomplete or malformed."""


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else $DATA_PATH, else ./data."""
    return Path(explicit or os.environ.get("DATA_PATH", "data"))


@dataclass
class TaskData:
    """Splits of one task plus what a model needs to know about its inputs and outputs.

    Each dataset item is ``(x, y)``; for dual-input tasks (LRA Retrieval) it is ``((x1, x2), y)``.
    Token inputs: x is a LongTensor (L,) and ``vocab_size`` is set. Real-valued inputs: x is a
    FloatTensor (L, d_input) and ``vocab_size`` is None. y is a LongTensor scalar (classification)
    or a FloatTensor (d_output,) (regression).
    """

    name: str
    train: Dataset
    val: Dataset
    test: Dataset
    seq_len: int
    d_output: int  # number of classes, or regression targets
    d_input: int = 1
    vocab_size: Optional[int] = None
    task_type: str = "classification"  # or "regression"
    dual: bool = False
    collate_fn: Optional[Callable] = None
    info: dict = field(default_factory=dict)  # provenance: paths, generator parameters, "stand-in" notes


def require_files(root: Path, relative_paths: list[str], dataset: str, how_to_get: str) -> None:
    """Raise DatasetError listing every missing file of the expected layout."""
    missing = [p for p in relative_paths if not (root / p).exists()]
    if missing:
        raise DatasetError(
            f"{dataset}: the data directory {root} does not hold the expected layout; missing: "
            + ", ".join(missing) + f". {how_to_get}")
