"""Atomic file writes: write a temp file in the target's folder, then os.replace it onto the target, so a reader
never sees a half-written file and a failure leaves the old one (and no temp file); JSON written that way. No torch
import: the data generators' worker processes use it and start fast."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional


#: a temp file older than this (seconds) was left by a writer that was killed: every write here takes far less
STALE_TEMP_AGE_S = 600
#: the end of every temp file this module makes (``.<name>.<random>.ssm-partial``): only such files are ever removed
TEMP_SUFFIX = ".ssm-partial"


def remove_stale_temps(folder: Path, max_age_s: float = STALE_TEMP_AGE_S) -> list[Path]:
    """Delete the temp files (``.<name>.<random>.ssm-partial``, as :func:`atomic_path` and :func:`write_bytes_new`
    make them; a user's own ``*.tmp`` is never touched) that a killed writer left in ``folder`` more than
    ``max_age_s`` ago; a live writer's are younger and
    stay. Returns what was removed. Called where a run writes into a folder of its own kind (a new results file,
    a checkpoint), not on every atomic write (a folder of thousands of generated images would be listed per
    image)."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)) \
                or not entry.is_file(follow_symlinks=False):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > max_age_s:
                os.remove(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue  # gone already, or not ours to remove
    return removed


@contextlib.contextmanager
def atomic_path(path: Path, *, fsync: bool = False, suffix: str = TEMP_SUFFIX) -> Iterator[Path]:
    """Yield a temp file's path beside ``path`` (its folder is created) for the caller to write; on a normal exit
    the file gets the usual mode (0666 minus the umask; mkstemp makes 0600), is flushed to disk if ``fsync``, and
    replaces ``path``; on an exception it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_bytes_new(candidates: Iterable[Path], data: bytes) -> Path:
    """Write ``data`` to the first of ``candidates`` (paths in one folder) that does not exist yet, and return it.

    Never replaces a file, also when other processes write to the same names at the same moment: the data goes to
    a temp file first, which then claims the name with a hard link (``os.link`` fails if the name exists, in one
    step, unlike an exists() check before a rename). A reader never sees a partial file; no temp file is left."""
    candidates = iter(candidates)
    first = Path(next(candidates))
    first.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(first.parent)
    fd, tmp = tempfile.mkstemp(dir=first.parent, prefix=f".{first.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        path: Path | None = first
        while True:
            try:
                os.link(tmp, path)
                return Path(path)
            except FileExistsError:
                path = next(candidates, None)
                if path is None:
                    raise FileExistsError(f"{first}: every candidate name for the new file exists") from None
    finally:
        os.remove(tmp)


def write_text_atomic(path: Path, text: str, newline: Optional[str] = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; ``newline`` translates '\\n' as open() does on writing
    (None: os.linesep; '' or '\\n': untranslated)."""
    newline = os.linesep if newline is None else newline
    if newline not in ("", "\n"):
        text = text.replace("\n", newline)
    write_bytes_atomic(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def to_json_text(obj: Any) -> str:
    """``obj`` as the suite writes JSON files: indented, keys in their order, paths and devices as text, numpy and
    torch scalars as numbers."""
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    """JSON through :func:`write_text_atomic`."""
    write_text_atomic(path, to_json_text(obj))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    torch = sys.modules.get("torch")  # a torch.device can only exist where torch is imported
    if torch is not None and isinstance(obj, torch.device):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def json_digest(obj: Any) -> str:
    """SHA-256 of ``obj`` as canonical JSON (keys sorted, no spaces; tuples as lists): equal for equal contents."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
