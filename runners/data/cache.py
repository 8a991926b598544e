"""Cache of processed dataset tensors under <data>/_cache, keyed by parameters and the content of the source files.

A cache key holds :func:`content_fingerprint` of every file the build reads: a hash over each file's path relative to
the dataset folder, its size and its bytes. An edited dataset (even one byte of one image, at the same size and
modification time) gets a new key, so stale tensors are never served. Cost, measured on 2 cores (see the report in
tests/test_data_boundary.py): 200 000 files of 1 KB in about 3 s from the page cache (~15 us a file).
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional

import torch

from runners.core.atomic import atomic_path
from runners.data.base import one_line, read_error

CACHE_DIRNAME = "_cache"
CACHE_VERSION = 2  # 2: keys hold content hashes (content_fingerprint), not (size, mtime)
_HASH_THREADS = max(1, min(4, os.cpu_count() or 1))  # 2 threads on 2 cores: 200k files of 1 KB in ~3 s
_BLOCK = 1 << 20


def _file_digest(path: str) -> tuple[int, bytes]:
    """(size, blake2b digest of the bytes) of one file, read in 1 MiB blocks."""
    h = hashlib.blake2b(digest_size=16)
    size = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            block = os.read(fd, _BLOCK)
            if not block:
                break
            size += len(block)
            h.update(block)
    finally:
        os.close(fd)
    return size, h.digest()


def _digests(paths: list[str]) -> list[tuple[int, bytes]]:
    return [_file_digest(p) for p in paths]


def content_fingerprint(paths: Iterable[Path], base: Optional[Path] = None) -> str:
    """One hex digest over (path relative to ``base``, size, hash of the bytes) of each file, in the given order.

    Changes when any file's bytes change (even at the same size and modification time), when a file is added,
    removed or renamed, or when the order changes. Files are read by a few threads (reading and hashing release
    the GIL). Raises DatasetError naming a file that cannot be read (DataMissing when it is gone).
    """
    paths = [str(p) for p in paths]
    base_s = str(base) if base is not None else None

    def rel(p: str) -> str:
        return os.path.relpath(p, base_s) if base_s is not None else p

    try:
        if len(paths) > 256:
            step = max(256, len(paths) // (8 * _HASH_THREADS))
            with ThreadPoolExecutor(max_workers=_HASH_THREADS) as pool:
                digests = [d for part in pool.map(_digests, [paths[i:i + step] for i in range(0, len(paths), step)])
                           for d in part]
        else:
            digests = _digests(paths)
    except OSError as exc:
        raise read_error(exc)(f"cannot read {getattr(exc, 'filename', None) or exc} to key the cache: "
                              f"{one_line(exc.strerror or exc)}") from exc
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{len(paths)}\0".encode())
    for p, (size, digest) in zip(paths, digests):
        h.update(f"{rel(p)}\0{size}\0".encode("utf-8", "surrogateescape"))
        h.update(digest)
    return h.hexdigest()


def folder_files(folder: Path, suffix: str = "") -> list[Path]:
    """Regular files directly in ``folder`` whose name ends with ``suffix``, sorted by name."""
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name.endswith(suffix) and e.is_file())
    return [Path(folder) / n for n in names]


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


def data_manifest(root: Path, splits: dict[str, int]) -> dict:
    """What a run loaded from ``root``: the size of each split (``splits``) and one digest over every file under
    ``root`` (:func:`content_fingerprint`; the cache folder and lock files apart), for the results file to record."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and CACHE_DIRNAME not in p.relative_to(root).parts
                   and not p.name.endswith(".lock"))
    return {**splits, "files": len(files), "digest": content_fingerprint(files, base=root)}
