"""Names of the LRA release's files and folders (no torch import, so the generators' worker processes start
fast)."""
from __future__ import annotations

LRA_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
LISTOPS_DIRNAME = "listops-1000"
LISTOPS_SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
LISTOPS_OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
PATHFINDER_DIFFICULTY = "curv_contour_length_14"
