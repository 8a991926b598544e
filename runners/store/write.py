"""Writing results files: one JSON per run under <store>/<spec id>/, written atomically, never overwritten.

Two stores hold them (runners/core/layout.py): the reference store ``results/`` (tracked in git: the results a
maintainer commits; its reports are ``tables/``; ``$SSM_RESULTS_DIR`` moves it) and the local store
``local/results/`` (git-ignored: a researcher's runs; its reports are ``local/tables/``; ``$SSM_LOCAL_DIR`` moves
``local/``). ``run`` writes to the local store unless told otherwise (``run --reference``, ``--output DIR``).
Reading them back: runners/store/read.py."""
from __future__ import annotations

import itertools
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ..core import layout
from ..core.atomic import to_json_text, write_bytes_new
from ..core.errors import SpecError


def result_names(kind_dir: str, tier: str, root: Path | None = None) -> Iterator[Path]:
    """results/<kind_dir>/<UTC timestamp>_<tier>.json, then ..._<tier>_001.json, _002, ... (sorted by name =
    sorted by time, for up to 999 files of one tier in one second)."""
    base = (root or layout.RESULTS_DIR) / kind_dir
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    yield base / f"{stamp}_{tier}.json"
    for n in itertools.count(1):
        yield base / f"{stamp}_{tier}_{n:03d}.json"


def refuse_links(root: Path, kind_dir: str) -> None:
    """A store (or its spec folder) that is a symbolic link is refused before anything is written: what a run
    wrote through it, check would refuse to read (runners/store/read.py), and it could lead outside the store."""
    for folder in (Path(root), Path(root) / kind_dir):
        if folder.is_symlink():
            raise SpecError(f"{folder}: a symbolic link; results are written into real folders only (point "
                            f"--output, $SSM_RESULTS_DIR or $SSM_LOCAL_DIR at the folder itself)")


def write_new_result(kind_dir: str, tier: str, obj: Any, root: Path | None = None) -> Path:
    """Write ``obj`` as a new results file (see :func:`result_names`) and return its path; created exclusively,
    so concurrent runs never overwrite each other's results."""
    refuse_links(root or layout.RESULTS_DIR, kind_dir)
    return write_bytes_new(result_names(kind_dir, tier, root), to_json_text(obj).encode("utf-8"))


def new_result_path(kind_dir: str, tier: str, root: Path | None = None) -> Path:
    """A new, empty results file reserved for a script that rewrites it as it measures (created exclusively:
    O_EXCL, so two processes never get the same name)."""
    for path in result_names(kind_dir, tier, root):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")
