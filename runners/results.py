"""Results files: one JSON per run under results/<spec id>/, written atomically, never overwritten."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .atomic import write_text_atomic  # noqa: F401 (re-exported: reports and benchmarks write through it)

RESULTS_DIR = Path(os.environ.get("SSM_RESULTS_DIR", "results"))


def write_json_atomic(path: Path, obj: Any) -> None:
    """JSON through :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, torch.device):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def git_commit() -> str | None:
    """$SSM_GIT_COMMIT when set (a copy of the tree on a remote GPU machine, whose .git may be missing or stale),
    else HEAD (+ "-dirty")."""
    if os.environ.get("SSM_GIT_COMMIT"):
        return os.environ["SSM_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def environment(device: torch.device | None = None) -> dict[str, Any]:
    """Where a result was measured: device name, library versions, git commit, host."""
    try:
        import triton  # noqa: F401

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    dev = device or torch.device("cpu")
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name(dev)
    else:
        device_name = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {
        "device": str(dev),
        "device_name": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "host": platform.node(),
        "ssm_backend_env": os.environ.get("SSM_BACKEND"),
    }


def new_result_path(kind_dir: str, tier: str, root: Path | None = None) -> Path:
    """results/<kind_dir>/<UTC timestamp>_<tier>.json, unique: never an existing file."""
    base = (root or RESULTS_DIR) / kind_dir
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = base / f"{stamp}_{tier}.json"
    n = 1
    while path.exists():
        path = base / f"{stamp}_{tier}_{n}.json"
        n += 1
    return path


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
