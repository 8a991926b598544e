"""Cell-by-cell comparison of a results file with expected/: PASS, FAIL, IMPROVED, NOT-RUN."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import results as results_mod
from .expected import CHECK_KINDS

VERDICTS = ("PASS", "FAIL", "IMPROVED", "NOT-RUN")


@dataclass
class CellVerdict:
    row: str
    column: str
    paper: Any
    measured: Any
    check: str
    verdict: str
    detail: str = ""
    known_fail: str | None = None  # the analysis of a FAIL that is real (the paper's statement does not hold)

    @property
    def unexpected_fail(self) -> bool:
        return self.verdict == "FAIL" and not self.known_fail


def latest_result(spec_id: str, tier: str, root: Path | None = None) -> Path | None:
    """The newest results/<spec id>/<stamp>_<tier>*.json, or None."""
    base = (root or results_mod.RESULTS_DIR) / spec_id
    files = sorted(base.glob(f"*_{tier}.json")) + sorted(base.glob(f"*_{tier}_*.json"))
    return max(files, key=lambda p: p.name) if files else None


def load_result(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def accuracy_gap_z(a: float, b: float, n: int) -> float:
    """|a - b| in standard errors of a difference of two accuracies (in %), each measured on n examples.

    Two-proportion z statistic with the pooled proportion: s.e. = sqrt(p (1 - p) 2 / n), p = (a + b) / 200.
    A gap between two equal extreme accuracies (both 0 or 100) is 0; any gap beside a zero s.e. is infinite.
    """
    p = (a + b) / 200.0
    se = math.sqrt(max(p * (1.0 - p), 0.0) * 2.0 / n)
    gap = abs(a - b) / 100.0
    if se == 0.0:
        return math.inf if gap > 0 else 0.0
    return gap / se


def describe(check: dict, centre: Any) -> str:
    kind = next(k for k in check if k in CHECK_KINDS)
    arg = check[kind]
    if kind == "tolerance":
        (which, tol), = arg.items()
        return f"{centre} ± {tol}{'' if which == 'abs' else ' (rel)'}"
    if kind == "bound":
        (which, lim), = arg.items()
        return f"{'>=' if which == 'min' else '<='} {lim}"
    if kind == "within_factor":
        return f"within {arg}x of {centre}"
    if kind == "ordering":
        (which, refs), = arg.items()
        sign = ">" if which == "greater_than" else "<"
        text = " and ".join(f"{sign} [{r['row']} / {r['column']}]" for r in refs)
        sig = check.get("significance")
        return text + (f" by > {sig['z']:g} s.e. (n = {sig['n']})" if sig else "")
    return "not run"


def judge(cell: dict, tier: str, measured: dict[tuple[str, str], Any]) -> CellVerdict:
    """Apply the tier's check of one expected cell to the measured values of one run."""
    check = cell["checks"][tier]
    key = (cell["row"], cell["column"])
    value = measured.get(key)
    centre = check.get("target", cell["paper"])
    out = CellVerdict(cell["row"], cell["column"], cell["paper"], value, describe(check, centre), "NOT-RUN",
                      known_fail=cell.get("known_fail"))
    if "not_run" in check:
        out.detail = check["not_run"]
        return out
    if value is None:
        out.detail = "no measurement in the results"
        return out
    higher = cell["better"] == "higher"
    if value == "X" or centre == "X":
        ok = value == centre if "tolerance" in check or "within_factor" in check else False
        out.verdict = "PASS" if ok else "FAIL"
        out.detail = "failure (X) expected and measured" if ok else f"measured {value!r}, check needs {centre!r}"
        return out
    if not _num(value):
        out.verdict, out.detail = "FAIL", f"measured value {value!r} is not a number"
        return out
    if "tolerance" in check:
        (which, tol), = check["tolerance"].items()
        width = tol if which == "abs" else tol * abs(centre)
        if abs(value - centre) <= width:
            out.verdict = "PASS"
        else:
            better = value > centre if higher else value < centre
            out.verdict = "IMPROVED" if better else "FAIL"
        out.detail = f"|{value:.4g} - {centre:.4g}| = {abs(value - centre):.3g} vs {width:.3g}"
    elif "bound" in check:
        (which, lim), = check["bound"].items()
        ok = value >= lim if which == "min" else value <= lim
        out.verdict = "PASS" if ok else "FAIL"
    elif "within_factor" in check:
        f = check["within_factor"]
        ok = centre / f <= value <= centre * f
        if ok:
            out.verdict = "PASS"
        else:
            better = value > centre if higher else value < centre
            out.verdict = "IMPROVED" if better else "FAIL"
        out.detail = f"ratio to paper {value / centre:.3g}"
    elif "ordering" in check:
        (which, refs), = check["ordering"].items()
        fails, missing = [], []
        for ref in refs:
            other = measured.get((ref["row"], ref["column"]))
            if not _num(other):
                if other == "X":  # the other failed / ran out of memory: this one beats it if it ran at all
                    continue
                missing.append(f"{ref['row']} / {ref['column']}")
            elif (value <= other) if which == "greater_than" else (value >= other):
                fails.append(f"{ref['row']} / {ref['column']} = {other:.4g}")
            elif "significance" in check:
                z = accuracy_gap_z(value, other, check["significance"]["n"])
                if z <= check["significance"]["z"]:
                    fails.append(f"{ref['row']} / {ref['column']} = {other:.4g} (gap only {z:.2f} s.e.)")
        if missing:
            out.detail = "reference cell(s) not measured: " + ", ".join(missing)
            return out
        out.verdict = "FAIL" if fails else "PASS"
        out.detail = ("violated by " + ", ".join(fails)) if fails else ""
    return out


def compare(expected: dict, result: dict | None, tier: str) -> list[CellVerdict]:
    """Verdict for every expected cell at ``tier`` (NOT-RUN for all when there is no result)."""
    measured = {}
    if result is not None:
        measured = {(c["row"], c["column"]): c["value"] for c in result["cells"]}
    verdicts = []
    for cell in expected["cells"]:
        v = judge(cell, tier, measured)
        if result is None and "not_run" not in cell["checks"][tier]:
            v.detail = "tier not run"
        verdicts.append(v)
    return verdicts


def summary(verdicts: list[CellVerdict]) -> dict[str, int]:
    counts = {v: 0 for v in VERDICTS}
    for v in verdicts:
        counts[v.verdict] += 1
    return counts
