"""Where and with what a measurement was made: the card, the library versions, the code (git) and the clock."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch


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


def physical_device_key(device: torch.device) -> str:
    """A name of the card behind ``device`` that is the same in every process: CUDA numbers the cards each process
    sees (``CUDA_VISIBLE_DEVICES``), so two processes given different cards both call theirs cuda:0; the card's
    UUID tells them apart. The CPU is one device."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda-{torch.cuda.get_device_properties(index).uuid}"


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


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (``started`` / ``finished`` of a results file)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


#: dense bf16 (fp16 where a card has no bf16; fp32 for the K80) tensor peak of known cards, FLOP/s, from their
#: vendors' data sheets; a measured training step rate is held to it (runners/store/evidence.py)
CARD_PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "A10G": 125e12, "L40S": 362e12, "L4": 121e12,
                   "V100": 125e12, "T4": 65e12, "K80": 8.7e12, "P100": 21e12}


def card_peak(name: Any) -> float | None:
    """The peak of the known card whose model name appears in ``name`` (e.g. "NVIDIA H100 80GB HBM3"); None for a
    card not in CARD_PEAK_FLOPS (its rate cannot be verified) or a CPU."""
    if not isinstance(name, str):
        return None
    words = name.upper().replace("-", " ").split()
    return next((peak for card, peak in CARD_PEAK_FLOPS.items() if card in words), None)


def commit_known(commit: Any, repo: Path | None = None) -> bool | None:
    """Whether ``commit`` is in the history of the repository here: True or False; None where that cannot be told
    (no git, not a repository, a shallow clone)."""
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return False
    try:
        cwd = repo or Path.cwd()
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=cwd, capture_output=True,
                                 text=True, timeout=10)
        if shallow.returncode != 0 or shallow.stdout.strip() == "true":
            return None
        found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=cwd, capture_output=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.returncode == 0
