"""ListOps generator with LRA's procedure (Tay et al. 2021, after Nangia & Bowman 2018), written anew.

A tree is grown from depth 1: below max_depth a node is an operator with probability 0.25 (else a
digit 0-9); an operator node draws 2..max_args arguments recursively and one of MAX, MIN, MED
(median of the arguments, truncated to an integer), SM (sum modulo 10). Its length counts digits,
operators and closing brackets (not parentheses); trees are kept when min_length < length <
max_length (LRA: 500 and 2000), duplicates dropped, and the first n_train / n_val / n_test
(LRA: 96000 / 2000 / 2000) form the splits. The text is LRA's: every application is parenthesised
as LRA's to_string writes it, e.g. ``( ( ( [MAX 2 ) 9 ) ] )`` for MAX(2, 9).

Output: ``<out>/listops-1000/basic_{train,val,test}.tsv`` with header ``Source<TAB>Target``, as in the
release. The work is split into chunks of fixed size, each seeded by (seed, chunk index), so the data
does not depend on the number of worker processes. Trees that grow past max_length are abandoned as
soon as they do (the accepted trees have exactly LRA's distribution; only the random stream differs).
"""
from __future__ import annotations

import csv
import io
import math
import random
from multiprocessing import get_context
from pathlib import Path
from typing import Optional

import numpy as np

from runners.core.atomic import write_text_atomic
from runners.data.lra.layout import LISTOPS_DIRNAME, LISTOPS_OPERATORS as OPERATORS, LISTOPS_SPLIT_FILES as SPLIT_FILES
from runners.data.progress_bar import progress_bar

VALUE_P = 0.25  # probability that a node above max_depth is an operator (LRA)
CHUNK = 250


class _TooLong(Exception):
    pass


def apply_op(op: str, args: list[int]) -> int:
    """Value of one ListOps operator on its digit arguments (LRA semantics)."""
    if op == "[MAX":
        return max(args)
    if op == "[MIN":
        return min(args)
    if op == "[MED":  # int(np.median(args)): mean of the two middle values, truncated
        s = sorted(args)
        m = len(s) // 2
        return s[m] if len(s) % 2 else (s[m - 1] + s[m]) // 2
    if op == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown ListOps operator {op!r}; allowed: {OPERATORS}")


def _grow(rng: random.Random, depth: int, max_depth: int, max_args: int, max_length: int,
          count: list[int]) -> tuple[str, int]:
    """(text, value) of a random subtree; count[0] accumulates the tree's length, _TooLong past max_length."""
    if depth < max_depth and rng.random() <= VALUE_P:
        count[0] += 2  # operator token and its closing bracket
        if count[0] >= max_length:
            raise _TooLong
        n = rng.randint(2, max_args)
        kids = [_grow(rng, depth + 1, max_depth, max_args, max_length, count) for _ in range(n)]
        op = rng.choice(OPERATORS)
        # LRA's to_string of (((op, a0), a1), ..., ']'): "( ( ( [OP a0 ) a1 ) ] )"
        text = "( " * (n + 1) + op + " " + kids[0][0] + " )" + "".join(f" {k[0]} )" for k in kids[1:]) + " ] )"
        return text, apply_op(op, [k[1] for k in kids])
    count[0] += 1
    if count[0] >= max_length:
        raise _TooLong
    v = rng.randrange(10)
    return str(v), v


def sample_listops(rng: random.Random, *, min_length: int = 500, max_length: int = 2000, max_depth: int = 10,
                   max_args: int = 10) -> tuple[str, int, int]:
    """One accepted expression: (text, value, length) with min_length < length < max_length."""
    while True:
        count = [0]
        try:
            text, value = _grow(rng, 1, max_depth, max_args, max_length, count)
        except _TooLong:
            continue
        if count[0] > min_length:
            return text, value, count[0]


def _chunk(job: tuple) -> list[tuple[str, int]]:
    seed, index, size, kw = job
    state = np.random.SeedSequence([seed, index]).generate_state(2)
    rng = random.Random(int(state[0]) << 32 | int(state[1]))
    return [sample_listops(rng, **kw)[:2] for _ in range(size)]


def generate_listops(out: Path, *, n_train: int = 96000, n_val: int = 2000, n_test: int = 2000,
                     min_length: int = 500, max_length: int = 2000, max_depth: int = 10, max_args: int = 10,
                     seed: int = 0, workers: int = 1, progress: bool = True) -> Path:
    """Write ``out/listops-1000/basic_{train,val,test}.tsv``; returns that folder."""
    for name, v in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if v < 1:
            raise ValueError(f"generate_listops: {name} must be >= 1, got {v}")
    if not 0 <= min_length < max_length - 1 or max_depth < 1 or max_args < 2:
        raise ValueError("generate_listops: need 0 <= min_length < max_length - 1, max_depth >= 1, max_args >= 2; "
                         f"got {min_length}, {max_length}, {max_depth}, {max_args}")
    total = n_train + n_val + n_test
    kw = {"min_length": min_length, "max_length": max_length, "max_depth": max_depth, "max_args": max_args}
    rows: dict[str, int] = {}  # insertion-ordered, deduplicated on the text
    next_chunk = 0
    ctx = get_context("spawn") if workers > 1 else None
    pool = ctx.Pool(workers) if ctx else None
    try:
        with progress_bar(total, "listops", "expr", show=None if progress else False) as bar:
            while len(rows) < total:
                n_chunks = math.ceil((total - len(rows)) / CHUNK)
                jobs = [(seed, next_chunk + i, CHUNK, kw) for i in range(n_chunks)]
                next_chunk += n_chunks
                results = pool.imap(_chunk, jobs) if pool else map(_chunk, jobs)
                for chunk in results:
                    before = len(rows)
                    for text, value in chunk:
                        if len(rows) < total:
                            rows.setdefault(text, value)
                    bar.update(len(rows) - before)
    finally:
        if pool:
            pool.close()
            pool.join()
    items = list(rows.items())
    folder = Path(out) / LISTOPS_DIRNAME
    parts = {"train": items[:n_train], "val": items[n_train:n_train + n_val], "test": items[n_train + n_val:]}
    for split, part in parts.items():
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter="\t")  # as LRA's write_to_file (csv, tab, CRLF line ends)
        writer.writerow(["Source", "Target"])
        writer.writerows(part)
        write_text_atomic(folder / SPLIT_FILES[split], buf.getvalue(), newline="")
    return folder


def listops_length_stats(folder: Path, split: Optional[str] = "train") -> dict:
    """Token-length summary of a generated split (for reports)."""
    from runners.data.lra.listops import read_listops_tsv, tokenize_listops
    sources, targets = read_listops_tsv(Path(folder) / SPLIT_FILES[split])
    lengths = np.array([len(tokenize_listops(s)) for s in sources])
    return {"n": len(sources), "min": int(lengths.min()), "max": int(lengths.max()), "mean": float(lengths.mean()),
            "target_counts": np.bincount(targets, minlength=10).tolist()}
