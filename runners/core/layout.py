"""Where things live: the run folders (runs/), the two stores of results files, and the environment variables that
move them or pass settings to child processes.

    runs/<spec id>/<tier>/                  scratch space of a spec's tier: training cells, prepared data, locks
    runs/<spec id>/<tier>-set-<key>/        the same for a run with ``--set`` overrides (key: a hash of the tier's
                                            resolved configuration), with the texts in overrides.json
    runs/<spec id>/<tier>/<row>__<task>/    one training cell (names through :func:`slug`)
    results/<spec id>/<stamp>_<tier>.json   the reference store (committed; ``$SSM_RESULTS_DIR``)
    local/results/, local/tables/           the local store and its reports (git-ignored; ``$SSM_LOCAL_DIR``)

The folders are read from the module's attributes at each use, so a test (or a caller) may point them elsewhere.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

#: environment variables: the run folders' root, the reference store, the local store's root
RUNS_ENV, RESULTS_ENV, LOCAL_ENV = "SSM_RUNS_DIR", "SSM_RESULTS_DIR", "SSM_LOCAL_DIR"
#: set in a child of ``run --gpus --cells-per-gpu K``: the training cells sharing its GPU
CELLS_PER_GPU_ENV = "SSM_CELLS_PER_GPU"

#: scratch space of every run (checkpoints, prepared data, logs): ``runs/``, or ``$SSM_RUNS_DIR``
RUNS_DIR = Path(os.environ.get(RUNS_ENV, "runs"))
#: the reference store: committed results (``results/``, or ``$SSM_RESULTS_DIR``)
RESULTS_DIR = Path(os.environ.get(RESULTS_ENV, "results"))
#: the local store's root (``local/``, or ``$SSM_LOCAL_DIR``): results in ``results/``, reports in ``tables/``
LOCAL_DIR = Path(os.environ.get(LOCAL_ENV, "local"))

#: in a runs/<spec id>/<tier>-set-<key>/ folder: the --set texts that made it
OVERRIDES_NAME = "overrides.json"
#: what marks a configuration's folder changed by ``run --set``: runs/<spec>/<tier>-set-<key>/
SET_MARK = "-set-"


def local_results_dir() -> Path:
    """The local store's results folder: ``local/results/`` (``$SSM_LOCAL_DIR/results``)."""
    return LOCAL_DIR / "results"


def local_tables_dir() -> Path:
    """The local store's reports folder: ``local/tables/`` (``$SSM_LOCAL_DIR/tables``)."""
    return LOCAL_DIR / "tables"


def slug(text: str) -> str:
    """``text`` as a folder name: every run of characters other than letters, digits, '.', '_' and '-' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def cell_folder_name(row: str, task: str) -> str:
    """The folder of one training cell (row, task) under its tier's folder: ``<row>__<task>``."""
    return f"{slug(row)}__{slug(task)}"


def tier_work_dir(spec_id: str, tier: str, overridden: bool = False, configuration: Any = None) -> Path:
    """Scratch space of a spec's tier (checkpoints, generated data): runs/<spec id>/<tier>/; for a run with ``--set``
    overrides (``overridden``), runs/<spec id>/<tier>-set-<key>/, keyed by the tier's resolved ``configuration``: each
    configuration trains in its own folder, so a changed setting never meets the spec's checkpoints (nor touches
    them), and the same overrides resume their own run."""
    if not overridden:
        return RUNS_DIR / spec_id / tier
    resolved = json.dumps(configuration, sort_keys=True, default=str)
    return RUNS_DIR / spec_id / f"{tier}{SET_MARK}{hashlib.sha256(resolved.encode()).hexdigest()[:12]}"


#: every variable that names a folder, with the default it falls back to when unset
FOLDER_VARIABLES = {RUNS_ENV: "runs", RESULTS_ENV: "results", LOCAL_ENV: "local", "DATA_PATH": "data"}


def environment_problems(environ: dict[str, str] | None = None) -> list[str]:
    """One line per folder variable that is set but empty (an empty path would mean the current folder, and a
    run would write, or a check read, there): unset it or name a folder."""
    environ = os.environ if environ is None else environ
    return [f"${name} is set but empty; unset it (default: {default}/) or name a folder"
            for name, default in FOLDER_VARIABLES.items() if name in environ and not environ[name].strip()]
