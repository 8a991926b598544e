"""Cache of processed dataset tensors under <data>/_cache, keyed by parameters and source files."""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Callable, Sequence

import torch

from runners.atomic import atomic_path

CACHE_DIRNAME = "_cache"
CACHE_VERSION = 1


def file_fingerprint(paths: Sequence[Path]) -> list:
    """(path, size, mtime_ns) of each file or folder: a changed source changes the cache key."""
    out = []
    for p in paths:
        st = Path(p).stat()
        out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def cache_file(root: Path, name: str, params: dict) -> Path:
    """root/_cache/<name>-<hash of params>.pt"""
    blob = json.dumps({"v": CACHE_VERSION, **params}, sort_keys=True, default=str).encode()
    return Path(root) / CACHE_DIRNAME / f"{name}-{hashlib.sha1(blob).hexdigest()[:16]}.pt"


def cached(root: Path, name: str, params: dict, build: Callable[[], dict], enabled: bool = True) -> dict:
    """Load the dict of tensors ``build()`` makes from root/_cache, or build it and store it there
    atomically (temp file + os.replace). The file is memory-mapped on load (Path-X is ~3 GB), so
    pages are read as items are. An unreadable cache is rebuilt; an unwritable data directory only
    costs the rebuild next time."""
    path = cache_file(root, name, params)
    if enabled and path.exists():
        try:
            return torch.load(path, weights_only=True, mmap=True)
        except Exception as exc:  # noqa: BLE001 -- a corrupt cache is rebuilt, never fatal
            warnings.warn(f"ignoring unreadable cache file {path}: {exc}")
    obj = build()
    if enabled:
        try:
            with atomic_path(path) as tmp:
                torch.save(obj, tmp)
        except OSError as exc:
            warnings.warn(f"could not write cache file {path}: {exc}")
    return obj
