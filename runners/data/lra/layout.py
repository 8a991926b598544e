"""Names of the LRA release's files and folders, and an atomic text writer (no torch import, so the
generators' worker processes start fast)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

LRA_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
LISTOPS_DIRNAME = "listops-1000"
LISTOPS_SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
LISTOPS_OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
PATHFINDER_DIFFICULTY = "curv_contour_length_14"


def write_text_atomic(path: Path, text: str, newline: Optional[str] = None) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
