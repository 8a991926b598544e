"""Atomic file writes: write a temp file in the target's folder, then os.replace it onto the target, so a reader
never sees a half-written file and a failure leaves the old one (and no temp file). No torch import: the data
generators' worker processes use it and start fast."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Optional


@contextlib.contextmanager
def atomic_path(path: Path, *, fsync: bool = False, suffix: str = ".tmp") -> Iterator[Path]:
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
