"""What every dataset loader returns, and the errors it raises.

A task's loader reads the dataset's own published on-disk layout under the data directory
($DATA_PATH, default ./data) and returns a :class:`TaskData`. Data that is not there (a folder or file the
loader needs is absent) raises :class:`DataMissing` naming the path and how to get it; data that is there but
malformed or unreadable raises :class:`DatasetError` naming the file (and line or key) and what is allowed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from torch.utils.data import Dataset

from ..core import layout


class DatasetError(RuntimeError):
    """A dataset file is malformed or unreadable (the message names the file, and the line or key where known);
    the subclass :class:`DataMissing` is data that is not there at all."""


class DataMissing(DatasetError):
    """A folder or file a loader needs is absent; the message says what to fetch and where to put it."""


def read_error(exc: BaseException) -> type[DatasetError]:
    """The error class for a file that could not be opened: :class:`DataMissing` when it is not there
    (FileNotFoundError), else :class:`DatasetError` (there, but unreadable)."""
    return DataMissing if isinstance(exc, FileNotFoundError) else DatasetError


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else $DATA_PATH, else ./data; an empty $DATA_PATH is refused (it would
    mean the current folder)."""
    if explicit:
        return Path(explicit)
    value = os.environ.get("DATA_PATH", "data")
    if not value.strip():
        raise DataMissing("$DATA_PATH is set but empty; unset it (default: data/) or name the data folder")
    return Path(value)


def shown_path(path: Path) -> str:
    """A data folder as a results file may record it, never by a machine's absolute path: under the data directory
    ``$DATA_PATH/<relative>``, under the current folder its relative path, else ``<the folder's name>``."""
    path = Path(path)
    for base, shown in ((data_root(), "$DATA_PATH"), (Path.cwd(), ".")):
        try:
            relative = path.resolve().relative_to(Path(base).resolve())
        except ValueError:
            continue
        return f"{shown}/{relative.as_posix()}" if relative.parts else shown
    return f"<{path.name}>"


def without_machine_paths(text: str) -> str:
    """``text`` (a note or a problem a results file records) with this machine's folders named as the suite names
    them: the data directory as ``$DATA_PATH``, the runs folder as ``$SSM_RUNS_DIR``, the current folder as ``.``."""
    out = str(text)
    places = [(data_root(), "$DATA_PATH"), (layout.RUNS_DIR, "$SSM_RUNS_DIR"), (Path.cwd(), ".")]
    for folder, name in places:
        for form in {str(Path(folder).resolve()), str(Path(folder).absolute())}:
            if len(form) > 1:
                out = out.replace(form, name)
    return out


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
    """Raise DataMissing listing every missing file of the expected layout."""
    missing = [p for p in relative_paths if not (root / p).exists()]
    if missing:
        raise DataMissing(
            f"{dataset}: the data directory {root} does not hold the expected layout; missing: "
            + ", ".join(missing) + f". {how_to_get}")


def one_line(text: object, limit: int = 200) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters: for quoting file content
    or a library's message inside a DatasetError."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _is_inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


class InsideFolder:
    """Checks paths read from a dataset's own files (listings, metadata lines) before anything is opened.

    ``guard(entry, listing, line)`` returns ``base / entry`` when ``entry`` is a relative path of plain names
    ('/'-separated, no '.', '..', empty part, backslash, NUL or drive) that stays inside ``base`` once symbolic links
    are followed; else it raises one-line DatasetError naming the listing file (and line), the entry and what is
    allowed. ``base`` is the dataset's folder under the data directory. The real path of each parent folder is
    computed once, so checking 200 000 entries of a few folders costs one lstat each.
    """

    def __init__(self, base: Path, dataset: str, how_to_get: str = "") -> None:
        self.base = Path(base)
        self.real_base = os.path.realpath(self.base)
        self.dataset, self.how_to_get = dataset, how_to_get
        self._parents: dict[str, bool] = {}

    def _fail(self, entry: str, listing: Path, line: Optional[int], why: str) -> DatasetError:
        where = f"{listing}" + (f" line {line}" if line is not None else "")
        return DatasetError(f"{self.dataset}: {where} names {one_line(repr(entry), 120)}, {why}; allowed: a relative "
                            f"path of plain names under {self.base}. {self.how_to_get}".rstrip())

    def __call__(self, entry: str, listing: Path, line: Optional[int] = None) -> Path:
        parts = entry.split("/")
        if not entry or "\\" in entry or "\x00" in entry or entry.startswith("/") or ":" in parts[0] \
                or any(p in ("", ".", "..") for p in parts):
            raise self._fail(entry, listing, line, "which is absolute or leaves its folder")
        path = self.base.joinpath(*parts)
        parent = os.path.dirname(str(path))
        ok = self._parents.get(parent)
        if ok is None:
            ok = self._parents[parent] = _is_inside(os.path.realpath(parent), self.real_base)
        if ok and os.path.islink(path):
            ok = _is_inside(os.path.realpath(path), self.real_base)
        if not ok:
            raise self._fail(entry, listing, line, "which is a link to a place outside its folder")
        return path
