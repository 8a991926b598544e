"""Results files: one JSON per run under <store>/<spec id>/, written atomically, never overwritten.

Two stores hold them: the reference store ``results/`` (tracked in git: the results a maintainer commits; its
reports are ``tables/``; ``$SSM_RESULTS_DIR`` moves it) and the local store ``local/results/`` (git-ignored: a
researcher's runs; its reports are ``local/tables/``; ``$SSM_LOCAL_DIR`` moves ``local/``). ``run`` writes to the
local store unless told otherwise (``run --reference``, ``--output DIR``)."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import torch

from .atomic import write_bytes_new, write_text_atomic  # noqa: F401 (write_text_atomic: re-exported)

#: the reference store: committed results (``results/``, or ``$SSM_RESULTS_DIR``)
RESULTS_DIR = Path(os.environ.get("SSM_RESULTS_DIR", "results"))
#: the local store's root (``local/``, or ``$SSM_LOCAL_DIR``): results in ``results/``, reports in ``tables/``
LOCAL_DIR = Path(os.environ.get("SSM_LOCAL_DIR", "local"))


def local_results_dir() -> Path:
    """The local store's results folder: ``local/results/`` (``$SSM_LOCAL_DIR/results``)."""
    return LOCAL_DIR / "results"


def local_tables_dir() -> Path:
    """The local store's reports folder: ``local/tables/`` (``$SSM_LOCAL_DIR/tables``)."""
    return LOCAL_DIR / "tables"


def to_json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    """JSON through :func:`write_text_atomic`."""
    write_text_atomic(path, to_json_text(obj))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, torch.device):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def git_provenance() -> dict[str, Any]:
    """The code a result was measured with: ``git_commit`` (a clean commit id: $SSM_GIT_COMMIT when set, for a
    copy of the tree on a remote GPU machine whose .git may be missing or stale, else HEAD), ``git_dirty``
    (tracked files differ from it) and, when dirty, ``git_dirty_diff_sha256``: the SHA-256 of ``git diff HEAD``
    (the uncommitted changes; ``git diff HEAD | sha256sum`` on the same tree gives the same hash)."""
    if os.environ.get("SSM_GIT_COMMIT"):
        return {"git_commit": os.environ["SSM_GIT_COMMIT"], "git_dirty": False}
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        diff = subprocess.run(["git", "diff", "HEAD", "--binary"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}
    if out.returncode != 0 or diff.returncode != 0:
        return {"git_commit": None, "git_dirty": None}
    record: dict[str, Any] = {"git_commit": out.stdout.strip(), "git_dirty": bool(diff.stdout)}
    if diff.stdout:
        record["git_dirty_diff_sha256"] = hashlib.sha256(diff.stdout).hexdigest()
    return record


def git_commit() -> str | None:
    """The clean commit id of :func:`git_provenance` (never with a "-dirty" suffix)."""
    return git_provenance()["git_commit"]


def device_name(device: torch.device) -> str:
    """The card's name for a CUDA device (e.g. "NVIDIA H200"), else the CPU's with its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def environment(device: torch.device | None = None) -> dict[str, Any]:
    """Where a result was measured: device name, library versions, git commit, host."""
    try:
        import triton  # noqa: F401

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    dev = device or torch.device("cpu")
    return {
        "device": str(dev),
        "device_name": device_name(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": platform.python_version(),
        **git_provenance(),
        "host": platform.node(),
        "ssm_backend_env": os.environ.get("SSM_BACKEND"),
    }


def result_names(kind_dir: str, tier: str, root: Path | None = None) -> Iterator[Path]:
    """results/<kind_dir>/<UTC timestamp>_<tier>.json, then ..._<tier>_001.json, _002, ... (sorted by name =
    sorted by time, for up to 999 files of one tier in one second)."""
    base = (root or RESULTS_DIR) / kind_dir
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    yield base / f"{stamp}_{tier}.json"
    for n in itertools.count(1):
        yield base / f"{stamp}_{tier}_{n:03d}.json"


def write_new_result(kind_dir: str, tier: str, obj: Any, root: Path | None = None) -> Path:
    """Write ``obj`` as a new results file (see :func:`result_names`) and return its path; created exclusively,
    so concurrent runs never overwrite each other's results."""
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


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
