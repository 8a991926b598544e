"""Cells measured in more than one results file of a tier: every run's value and the verdict its check gives.

A tier's verdict reads the newest run that measured a cell (:func:`runners.judge.verdicts.judge_tier`); when the
same cell was measured again (a rerun, a timing repeated on another card), the report also lists the other runs, so a
verdict that would have differed on an earlier run, or a timing that moves between runs, is in plain view. Each
earlier value is judged by the same check as the newest one, and, as the tier's verdict, is STALE where it was
measured at another setting than the spec's today.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.textfmt import column_label, fmt, md_inline
from .verdicts import CellVerdict, judge_run_today, tier_runs


@dataclass
class Repeat:
    row: str
    column: str
    runs: list[tuple[int, Any, str]]  # (results file index, newest first; value; verdict under the tier's check)

    @property
    def differs(self) -> bool:
        """An earlier run's verdict differs from the judged run's."""
        return any(verdict != self.runs[0][2] for _, _, verdict in self.runs[1:])

    @property
    def numbers(self) -> list[float]:
        return [float(v) for _, v, _ in self.runs if isinstance(v, (int, float)) and not isinstance(v, bool)]


def repeated_cells(expected: dict, results: list[dict], tier: str, verdicts: list[CellVerdict],
                   today: Any = None) -> list[Repeat]:
    """The claims (not context rows, not sanity checks) that two or more of ``results`` (newest first) selected and
    measured, in the expected file's order, each with every run's value and verdict (the judged run first; STALE
    where ``today``, :class:`runners.judge.settings.Today`, says the run's setting is not the spec's now). A run
    that left the cell null with a declared reason did not measure it and is not listed."""
    runs, newest = tier_runs(expected, results, tier)
    table = {(c["row"], c["column"]): c for c in expected["cells"]}
    judged = {(v.row, v.column): v for v in verdicts}
    out = []
    for cell in expected["cells"]:
        key = (cell["row"], cell["column"])
        v = judged.get(key)
        if v is None or v.role != "claim" or v.kind in ("context", "not_run") or v.result is None \
                or v.verdict == "NOT-RUN":
            continue
        found = [i for i, run in enumerate(runs) if key in run.selected and key in run.measured
                 and not run.declared_null(key)]
        if len(found) < 2:
            continue
        rows = [(i, runs[i].measured[key], judge_run_today(cell, tier, runs, i, newest, table, today).verdict)
                for i in found]
        rows.sort(key=lambda r: r[0] != v.result)  # the judged run first, the others newest first
        out.append(Repeat(cell["row"], cell["column"], rows))
    return out


def repeat_lines(repeats: list[Repeat], files: list[tuple[Path, dict]]) -> list[str]:
    """The report's section for one tier (empty without repeats): a visible line saying how many cells were
    measured more than once and whether any earlier run's verdict differs from the judged one, then per cell every
    run's value, verdict and results file, with the median and range of the values."""
    if not repeats:
        return []
    differ = [r for r in repeats if r.differs]
    commits = {i: _commit(files[i][1]) for r in repeats for i, _, _ in r.runs}
    spans = provenance(repeats, files)
    many = len(repeats) > 1
    head = (f"**Measured more than once:** {len(repeats)} claim{'s' if many else ''} of this tier "
            f"appear{'' if many else 's'} in several results files; the verdict reads the newest run that measured "
            f"each. "
            + (f"An earlier run's verdict differs for {len(differ)}: "
               + "; ".join(f"{r.row} / {column_label(r.column)}" for r in differ) + "."
               if differ else "Every earlier run gives the same verdict.")
            + (f" The runs come from {spans}: an earlier run may have measured other code or settings." if spans
               else ""))
    lines = [head, "", "<details><summary>Every run of the repeated cells (the judged run first, then newest first; "
             "results file and commit)</summary>", ""]
    for r in repeats:
        values = ", ".join(f"{fmt(value)} {verdict} (`{files[i][0].name}`, {commits[i]})"
                           for i, value, verdict in r.runs)
        nums = r.numbers
        spread = (f"; median {fmt(statistics.median(nums))}, range {fmt(min(nums))} to {fmt(max(nums))}"
                  if len(nums) == len(r.runs) else "")
        lines.append(f"- {r.row} / {column_label(r.column)}: {len(r.runs)} runs: {values}{spread}")
    return lines + ["", "</details>", ""]


def _commit(result: dict) -> str:
    """The short commit a results file records ('unknown' where it has none), marked where the tree differed."""
    env = result.get("environment") if isinstance(result.get("environment"), dict) else {}
    commit = env.get("git_commit")
    text = md_inline(commit[:7]) if isinstance(commit, str) and commit else "unknown"
    return text + (" + changes" if env.get("git_dirty") else "")


def provenance(repeats: list[Repeat], files: list[tuple[Path, dict]]) -> str:
    """"3 commits and 2 configurations" where the repeated cells' runs differ in the code or the resolved settings
    they record ('' where they all ran the same commit with the same configuration)."""
    used = {i for r in repeats for i, _, _ in r.runs}
    commits = {_commit(files[i][1]) for i in used}
    configs = {json.dumps(files[i][1].get("config"), sort_keys=True, default=str) for i in used}
    parts = [f"{len(commits)} commits"] if len(commits) > 1 else []
    parts += [f"{len(configs)} configurations"] if len(configs) > 1 else []
    return " and ".join(parts)
