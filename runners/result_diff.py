"""``compare RESULT_A RESULT_B``: two results files of one spec side by side, the change per cell, regressions.

A cell regresses when B is worse than A by more than ``threshold`` relative to |A|, in the direction of the
expected cell's ``better`` (expected/<id>.yaml: higher or lower), or when A measured a number and B an "X"
(failed / out of memory). A cell measured in only one of the two files, or without a ``better`` (a cell the
expected file does not list), is shown and not judged.

The kernel and layer benchmarks (benchmarks/bench_*.py: results/bench-kernels/, results/bench-layers/) write
lists of records instead of cells: there a record's descriptive fields (op, impl, sizes, ...) name its row, each
measured field (times ``ms`` / ``*_ms`` / ``us``, memory ``*_mib``, errors ``rel_err*``: lower is better) is a
column, and the reference numbers a record carries (``official_*``, ``target_*``, ``floor_ms``) are left out.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .expected import expected_path, load_expected
from .spec import SpecError

STATUSES = ("regressed", "improved", "within", "failed now", "fixed", "only in A", "only in B", "not judged")


@dataclass
class CellChange:
    row: str
    column: str
    a: Any
    b: Any
    change: float | None  # (b - a) / |a|; None when not both numbers (or a = 0 and b != 0: +-inf)
    better: str | None  # "higher" | "lower" | None (not in the expected file)
    status: str  # one of STATUSES


def read_result(path: str | Path) -> dict:
    """A results file; SpecError naming the file when it is missing or not a results file."""
    path = Path(path)
    try:
        result = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found (a results file, e.g. results/<spec id>/<stamp>_<tier>.json)") \
            from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: not a JSON results file: {exc}") from None
    table = (isinstance(result, dict) and isinstance(result.get("spec_id"), str)
             and isinstance(result.get("cells"), list))
    bench = isinstance(result, dict) and isinstance(result.get("spec"), str) and bool(_records(result))
    if not (table or bench):
        raise SpecError(f"{path}: not a results file (a table's has 'spec_id' and 'cells'; a benchmark's 'spec' "
                        f"and lists of records)")
    return result


def result_id(result: dict) -> str:
    """The spec of a table's results file, or the benchmark of a benchmark's (bench-kernels, bench-layers)."""
    return result["spec_id"] if "cells" in result else result["spec"]


#: reference numbers that benchmark records carry beside their measurements (not measured by the run)
_REFERENCE_PREFIXES = ("official", "target", "floor", "meets")


def _bench_better(field: str) -> str | None:
    """Which way a benchmark record's field is better, or None for a field that names the record."""
    if field.startswith(_REFERENCE_PREFIXES):
        return None
    if field in ("ms", "us") or field.endswith(("_ms", "_us", "_mib", "_mb")) or field.startswith("rel_err"):
        return "lower"
    return None


def _records(result: dict) -> dict[str, list[dict]]:
    return {k: v for k, v in result.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)}


def measured_cells(result: dict, expected: dict | None = None) -> dict[tuple[str, str], tuple[Any, str | None]]:
    """{(row, column): (value, better)} of a results file, in its order."""
    if "cells" in result:
        better = {(c["row"], c["column"]): c.get("better") for c in (expected or {}).get("cells", [])}
        return {(c["row"], c["column"]): (c.get("value"), better.get((c["row"], c["column"])))
                for c in result["cells"]}
    out: dict[tuple[str, str], tuple[Any, str | None]] = {}
    for section, records in _records(result).items():
        for record in records:
            measures = {k: v for k, v in record.items() if _bench_better(k) and (v is None or _number(v))}
            name = " ".join(f"{k}={v}" for k, v in record.items()
                            if k not in measures and not str(k).startswith(_REFERENCE_PREFIXES))
            for field, value in measures.items():
                out[(f"{section}: {name}", field)] = (value, _bench_better(field))
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def judge_change(a: Any, b: Any, better: str | None, threshold: float) -> tuple[float | None, str]:
    """(relative change, status) of one cell from A to B."""
    if a is None and b is None:
        return None, "not judged"
    if b is None:
        return None, "only in A"
    if a is None:
        return None, "only in B"
    if _number(a) and b == "X":
        return None, "failed now"
    if a == "X" and _number(b):
        return None, "fixed"
    if not (_number(a) and _number(b)):
        return None, "not judged" if a != b else "within"
    if a == b:
        change = 0.0
    elif a == 0:
        change = math.copysign(math.inf, b)
    else:
        change = (b - a) / abs(a)
    if better not in ("higher", "lower"):
        return (None if math.isinf(change) else change), "not judged"
    worse = -change if better == "higher" else change  # > 0: B is worse
    status = "regressed" if worse > threshold else "improved" if -worse > threshold else "within"
    return (None if math.isinf(change) else change), status


def diff_results(a: dict, b: dict, threshold: float, expected: dict | None = None) -> list[CellChange]:
    """Every cell of A or B, in the expected file's order (then any other), with its change and status."""
    if result_id(a) != result_id(b):
        raise SpecError(f"the results are of different specs ({result_id(a)!r} and {result_id(b)!r}); compare two "
                        f"runs of one spec")
    if not (isinstance(threshold, (int, float)) and threshold >= 0):
        raise SpecError(f"--threshold {threshold!r}: expected a relative change >= 0, e.g. 0.05")
    cells_a, cells_b = measured_cells(a, expected), measured_cells(b, expected)
    listed = [(c["row"], c["column"]) for c in (expected or {}).get("cells", [])]
    order = [k for k in listed if k in cells_a or k in cells_b]
    order += [k for k in {**cells_a, **cells_b} if k not in set(order)]
    out = []
    for key in order:
        (va, ba), (vb, bb) = cells_a.get(key, (None, None)), cells_b.get(key, (None, None))
        better = ba or bb
        change, status = judge_change(va, vb, better, threshold)
        out.append(CellChange(key[0], key[1], va, vb, change, better, status))
    return out


def regressions(changes: list[CellChange]) -> list[CellChange]:
    return [c for c in changes if c.status in ("regressed", "failed now")]


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _describe(name: str, path: str, r: dict) -> str:
    env = r.get("environment") or {}
    extra = f"; --set {' '.join(r['overrides'])}" if r.get("overrides") else ""
    when = r.get("finished") or r.get("created")
    return (f"{name}: {path} (tier {r.get('tier', '-')}, finished {when}, {env.get('device_name')}, "
            f"commit {env.get('git_commit')}{extra})")


def render(path_a: str, a: dict, path_b: str, b: dict, changes: list[CellChange], threshold: float) -> str:
    """The side-by-side table and a one-line summary."""
    from tabulate import tabulate

    rows = [[c.row, c.column, _fmt(c.a), _fmt(c.b),
             "-" if c.change is None else f"{100 * c.change:+.2f}%", c.better or "-", c.status] for c in changes]
    lines = [result_id(a), _describe("A", path_a, a), _describe("B", path_b, b)]
    if a.get("tier") != b.get("tier"):
        lines.append(f"note: different tiers ({a.get('tier')} and {b.get('tier')}): their configurations differ")
    lines += ["", tabulate(rows, headers=["row", "column", "A", "B", "change", "better", "status"]), ""]
    counts = {s: sum(c.status == s for c in changes) for s in STATUSES}
    lines.append(f"{len(changes)} cells; threshold {threshold:g} (relative): "
                 + ", ".join(f"{s} {n}" for s, n in counts.items() if n))
    return "\n".join(lines)


def compare_files(path_a: str, path_b: str, threshold: float) -> tuple[str, list[CellChange]]:
    """Read, diff and render two results files; the changes are returned for the exit status."""
    a, b = read_result(path_a), read_result(path_b)
    exp_file = expected_path(result_id(a))
    expected = load_expected(exp_file) if "cells" in a and exp_file.exists() else None
    changes = diff_results(a, b, threshold, expected)
    return render(path_a, a, path_b, b, changes, threshold), changes
