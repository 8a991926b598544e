"""``compare RESULT_A RESULT_B``: two results files of one spec side by side, the change per cell, regressions.
(``compare SPEC``: A and B are the spec's newest results files in the reference store and the local store.)

A cell regresses when B is worse than A by more than ``threshold`` relative to |A|, in the direction of the
expected cell's ``better`` (expected/<id>.yaml: higher or lower), or when A measured a number and B did not: an
"X" (failed / out of memory), NaN or inf, null, or no cell at all ("only in A"; a cell B's ``selected_cells``
leaves out is shown as "not selected in B" and not judged). A cell measured only in B, or without a ``better``
(a cell the expected file does not list), is shown and not judged.

Both files are read by the suite's one loader (:mod:`runners.store.read`: a regular file, UTF-8 JSON without a
key given twice, the results schema). The ``spec_id`` a file records is a plain spec id, resolved through the
specs under reproductions/ (never used as a path); its expected file gives each cell's ``better``.

The kernel and layer benchmarks (benchmarks/bench_*.py: results/bench-kernels/, results/bench-layers/) write
lists of records instead of cells: there a record's descriptive fields (op, impl, sizes, ...) name its row, each
measured field (times ``ms`` / ``*_ms`` / ``us``, memory ``*_mib``, errors ``rel_err*``: lower is better) is a
column, and the reference numbers a record carries (``official_*``, ``target_*``, ``floor_ms``) are left out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..specs.expected import expected_path, load_expected
from ..specs.spec import resolve_includes, spec_paths
from ..store.read import ResultsError, check_result, plain_id_error, read_json_file

STATUSES = ("regressed", "improved", "within", "failed now", "not finite now", "fixed", "only in A",
            "not selected in B", "only in B", "not judged")


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
    """A results file (a table's or a benchmark's) through the suite's one loader; ResultsError naming the file
    when it is missing, not a regular file, not JSON, gives a key twice or is not a results file."""
    path = Path(path)
    result = read_json_file(path)
    if isinstance(result, dict) and "cells" in result:
        return check_result(path, result)
    if isinstance(result, dict) and isinstance(result.get("spec"), str) and _records(result):
        if (why := plain_id_error("spec", result["spec"])) is not None:
            raise ResultsError(f"{path}: {why}")
        return result
    raise ResultsError(f"{path}: not a results file (a table's has 'spec_id', 'tier' and 'cells'; a benchmark's "
                       f"'spec' and lists of records)")


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
            measures = {k: v for k, v in record.items() if _bench_better(k) and (v is None or _real(v))}
            name = " ".join(f"{k}={v}" for k, v in record.items()
                            if k not in measures and not str(k).startswith(_REFERENCE_PREFIXES))
            for field, value in measures.items():
                out[(f"{section}: {name}", field)] = (value, _bench_better(field))
    return out


def _real(x: Any) -> bool:
    """A number, finite or not (NaN and inf are kept: they are what a regression to a broken run looks like)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return _real(x) and math.isfinite(x)


def judge_change(a: Any, b: Any, better: str | None, threshold: float) -> tuple[float | None, str]:
    """(relative change, status) of one cell from A to B (None: no value or no cell)."""
    if _number(a):
        if b is None:
            return None, "only in A"  # a number lost: a regression (see regressions)
        if b == "X":
            return None, "failed now"
        if _real(b) and not _number(b):
            return None, "not finite now"
        if not _number(b):
            return None, "not judged"
    elif a is None:
        return None, "not judged" if b is None else "only in B"
    elif b is None:
        return None, "only in A"  # A had no number (X, NaN): nothing measured is lost
    elif _number(b):
        return None, "fixed"  # from X / NaN / inf to a number
    else:
        return None, "within" if a == b else "not judged"
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
    b_selected = ({(r, c) for r, c in b["selected_cells"]} if "cells" in b and "selected_cells" in b else None)
    listed = [(c["row"], c["column"]) for c in (expected or {}).get("cells", [])]
    order = [k for k in listed if k in cells_a or k in cells_b]
    order += [k for k in {**cells_a, **cells_b} if k not in set(order)]
    out = []
    for key in order:
        (va, ba), (vb, bb) = cells_a.get(key, (None, None)), cells_b.get(key, (None, None))
        better = ba or bb
        change, status = judge_change(va, vb, better, threshold)
        if status == "only in A" and key not in cells_b and b_selected is not None and key not in b_selected:
            status = "not selected in B"  # B was a narrower run (--cells): it was not asked for this cell
        out.append(CellChange(key[0], key[1], va, vb, change, better, status))
    return out


def regressions(changes: list[CellChange]) -> list[CellChange]:
    """The cells that make ``compare`` exit 1: worse beyond the threshold, failed (X), not finite, or a number in A
    that B lost (null or no cell)."""
    return [c for c in changes if c.status in ("regressed", "failed now", "not finite now")
            or (c.status == "only in A" and _number(c.a))]


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
    bad = regressions(changes)
    if bad:
        lines.append(f"regressions: {len(bad)} (" + "; ".join(
            f"{c.row} / {c.column}: {_fmt(c.a)} -> {'none' if c.status == 'only in A' else _fmt(c.b)}"
            f" {c.status}" for c in bad[:8]) + (f"; and {len(bad) - 8} more" if len(bad) > 8 else "") + ")")
    return "\n".join(lines)


def spec_of_result(path: str | Path, result: dict) -> str:
    """The spec id a table's results file records, checked as a plain id and found among the specs under
    reproductions/ (ResultsError otherwise): the expected file is then expected/<that id>.yaml, never a path the
    file chose."""
    spec_id = result["spec_id"]
    if (why := plain_id_error("spec_id", spec_id)) is not None:
        raise ResultsError(f"{path}: {why}")
    known = []
    for spec_path in spec_paths():
        try:
            found = resolve_includes(spec_path).get("id")
        except SpecError:
            continue
        if found == spec_id:
            return spec_id
        known.append(str(found))
    raise ResultsError(f"{path}: 'spec_id' is {spec_id!r}, not a spec of reproductions/; allowed: "
                       f"{', '.join(sorted(known)) or 'the ids of the specs under reproductions/'}")


def compare_files(path_a: str, path_b: str, threshold: float) -> tuple[str, list[CellChange]]:
    """Read, diff and render two results files; the changes are returned for the exit status."""
    a, b = read_result(path_a), read_result(path_b)
    if result_id(a) != result_id(b):
        diff_results(a, b, threshold)  # raises: different specs
    expected = None
    if "cells" in a:
        spec_id = spec_of_result(path_a, a)
        if "cells" not in b:
            raise ResultsError(f"{path_b}: a benchmark's results file; {path_a} is a table's: compare two runs of "
                               f"one spec")
        spec_of_result(path_b, b)
        exp_file = expected_path(spec_id)
        expected = load_expected(exp_file) if exp_file.exists() else None
    changes = diff_results(a, b, threshold, expected)
    return render(path_a, a, path_b, b, changes, threshold), changes
