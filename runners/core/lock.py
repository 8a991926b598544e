"""One process at a time per training cell / prepared dataset: an advisory file lock.

Two runs of one spec (two shells, or a cell trained ahead in another process) must not write one checkpoint or
one data directory at once; the second waits for the first and then resumes from what it left (a finished
cell's checkpoint, a prepared dataset's ``.complete``). Only the main process of a distributed run locks: the
other ranks follow it through the run's collectives.
"""
from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block; wait, saying so, if it is held."""
    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process that holds {path} ({what})", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
