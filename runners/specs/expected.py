"""expected/<table>.yaml: the papers' numbers per cell, and the checks per tier (schema in expected/README.md)."""
from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.yamlio import load_yaml, non_finite
from .spec import TIERS

EXPECTED_DIR = Path("expected")

TOP_KEYS = {"table", "paper", "title", "source", "rows", "columns", "cells"}
CELL_KEYS = {"row", "column", "paper", "std", "unit", "better", "source", "note", "checks"}
OPTIONAL_CELL_KEYS = {"known_fail"}

CHECK_KINDS = {"tolerance", "bound", "within_factor", "ordering", "std", "not_run", "context"}
#: keys allowed beside the check kind in one tier's check
CHECK_MODIFIERS = {"target", "significance", "x_counts_as", "plausible_factor", "role"}
#: kinds that judge a measurement (the other two say why there is none to judge)
JUDGING_KINDS = CHECK_KINDS - {"not_run", "context"}
#: kinds whose result beyond the check on the ``better`` side is IMPROVED (bounded by ``plausible_factor``); a
#: one-sided ``bound`` is capped too, at the default factor (DEFAULT_PLAUSIBLE_FACTOR, relative to the cell's paper
#: value): a result better than the paper beyond it is FAIL ("implausible"), not PASS
IMPROVABLE_KINDS = {"tolerance", "within_factor", "std"}
ROLES = ("claim", "sanity")
X_COUNTS_AS = ("worse", "better")
DEFAULT_PLAUSIBLE_FACTOR = 2.0


# ------------------------------------------------------------------------------------------ units' physical range

#: units whose values are positive: times, memory, rates, speed-ups and other ratios, parameter counts
POSITIVE_UNITS = frozenset({"ms", "s", "us", "µs", "min", "h", "kb", "mb", "mib", "gb", "gib", "images/s",
                            "tokens/s", "steps/s", "ratio", "x", "parameters"})
#: units whose values are >= 0: errors (RMSE, relative errors)
NON_NEGATIVE_UNITS = frozenset({"rmse", "rmse (target std units)", "rel"})
#: a cell that reports that a run fitted in memory: 1 (or "X")
RAN_UNITS = frozenset({"1 = ran, x = out of memory"})
#: a percentage below this, in a cell whose paper value (or target) is at least this, is refused as a fraction
#: written where a percentage belongs (0.1715 for 17.15 %): FAIL "implausible" vs the paper value
PERCENT_FRACTION_LIMIT = 1.0


def is_percent(unit: Any) -> bool:
    """A unit in % (an accuracy or another percentage): '%', '% acc', ..."""
    return isinstance(unit, str) and unit.strip().startswith("%")


def unit_range(unit: Any) -> tuple[float, bool, float, bool, str] | None:
    """The physical range of ``unit`` as (low, low included, high, high included, text), or None for a unit whose
    values may be any real number (a delta, a logarithm, a rate that may be negative, an unknown unit)."""
    if not isinstance(unit, str):
        return None
    u = unit.strip().lower()
    if is_percent(u):
        return 0.0, True, 100.0, True, "[0, 100]"
    if u in POSITIVE_UNITS:
        return 0.0, False, math.inf, False, "> 0"
    if u in NON_NEGATIVE_UNITS:
        return 0.0, True, math.inf, False, ">= 0"
    if u in RAN_UNITS:
        return 1.0, True, 1.0, True, "1 (it ran) or X"
    return None


def range_error(value: float, unit: Any) -> str | None:
    """Why a finite measured ``value`` is outside the physical range of ``unit`` (None when inside or unknown)."""
    rng = unit_range(unit)
    if rng is None:
        return None
    lo, lo_in, hi, hi_in, text = rng
    inside = (value >= lo if lo_in else value > lo) and (value <= hi if hi_in else value < hi)
    return None if inside else f"outside the physical range of its unit ({unit}: {text})"


def fraction_error(value: float, unit: Any, reference: Any) -> str | None:
    """Why ``value`` in % is implausible as a percentage: below :data:`PERCENT_FRACTION_LIMIT` while the cell's
    paper value (or target) ``reference`` is at least that -- a fraction written where a percentage belongs. A
    cell without a paper value is judged as measured (a model can score 0.1 % where its check wants it low)."""
    if not is_percent(unit) or value >= PERCENT_FRACTION_LIMIT:
        return None
    if not (_is_number(reference) and reference >= PERCENT_FRACTION_LIMIT):
        return None
    return (f"implausible: {value:g} {unit.strip()} against the paper's {reference:g} {unit.strip()}: a fraction "
            f"written where a percentage belongs ({reference / 100:.4g} for {reference:g} %)? A value in % below "
            f"{PERCENT_FRACTION_LIMIT:g} is refused where the paper's value is at least {PERCENT_FRACTION_LIMIT:g}")


def _is_number(x: Any) -> bool:
    """A finite real number (YAML's .inf and .nan load as floats and are rejected here)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _is_text(x: Any) -> bool:
    return isinstance(x, str) and x.strip() != ""


def check_kind(check: dict) -> str:
    """The one check kind of a (valid) tier check."""
    return next(k for k in check if k in CHECK_KINDS)


def check_role(check: dict) -> str:
    """'claim' (the default) or 'sanity'."""
    return check.get("role", "claim")


def _modifier_errors(where: str, kind: str, check: dict, cell: dict) -> list[str]:
    """Errors in the keys beside the check kind: target, significance, x_counts_as, plausible_factor, role."""
    errs = []
    if "target" in check:
        if kind not in ("tolerance", "within_factor"):
            errs.append(f"{where}.target: only goes with tolerance or within_factor, not {kind!r}")
        elif not (_is_number(check["target"]) or check["target"] == "X"):
            errs.append(f"{where}.target: must be a finite number or 'X', got {check['target']!r}")
    if "significance" in check:
        sig = check["significance"]
        if kind != "ordering":
            errs.append(f"{where}.significance: only goes with an ordering check, not {kind!r}")
        elif not (isinstance(sig, dict) and set(sig) == {"n", "z"} and isinstance(sig["n"], int)
                  and not isinstance(sig["n"], bool) and sig["n"] > 0 and _is_number(sig["z"]) and sig["z"] > 0):
            errs.append(f"{where}.significance: must be {{n: test examples (int > 0), z: standard errors (finite "
                        f"number > 0)}}, got {sig!r}")
        elif not str(cell.get("unit", "")).startswith("%"):
            errs.append(f"{where}.significance: compares accuracies in %, but the cell's unit is {cell.get('unit')!r}")
    if "x_counts_as" in check:
        if kind != "ordering":
            errs.append(f"{where}.x_counts_as: only goes with an ordering check, not {kind!r}")
        elif check["x_counts_as"] not in X_COUNTS_AS:
            errs.append(f"{where}.x_counts_as: must be one of {list(X_COUNTS_AS)}, got {check['x_counts_as']!r}")
    if "plausible_factor" in check:
        f = check["plausible_factor"]
        if kind not in IMPROVABLE_KINDS:
            errs.append(f"{where}.plausible_factor: only goes with {sorted(IMPROVABLE_KINDS)}, not {kind!r}")
        elif not (_is_number(f) and f > 1):
            errs.append(f"{where}.plausible_factor: must be a finite number > 1, got {f!r}")
        elif kind == "within_factor" and _is_number(check[kind]) and f <= check[kind]:
            errs.append(f"{where}.plausible_factor: {f!r} is not above within_factor {check[kind]!r}, so no result "
                        f"could be IMPROVED; drop it or make it larger")
    if "role" in check:
        if kind not in JUDGING_KINDS:
            errs.append(f"{where}.role: a {kind!r} check judges nothing, so it has no role")
        elif check["role"] not in ROLES:
            errs.append(f"{where}.role: must be one of {list(ROLES)}, got {check['role']!r}")
    return errs


def _check_errors(where: str, check: Any, cell: dict, rows: set, columns: set) -> list[str]:
    """Errors in one tier's check of one cell (expected/README.md, 'Check kinds')."""
    if not isinstance(check, dict):
        return [f"{where}: must be a mapping with one check key, got {check!r}"]
    kinds = [k for k in check if k in CHECK_KINDS]
    unknown = set(check) - CHECK_KINDS - CHECK_MODIFIERS
    errs = ([f"{where}: unknown key(s) {sorted(unknown)}; allowed: one of {sorted(CHECK_KINDS)} and "
             f"{sorted(CHECK_MODIFIERS)}"] if unknown else [])
    if len(kinds) != 1:
        return errs + [f"{where}: needs exactly one of {sorted(CHECK_KINDS)}, got {kinds}"]
    kind, arg = kinds[0], check[kinds[0]]
    errs += _modifier_errors(where, kind, check, cell)
    centre = check.get("target", cell.get("paper"))
    if kind in ("not_run", "context"):
        if not _is_text(arg):
            errs.append(f"{where}.{kind}: must be a non-empty reason string")
    elif kind == "tolerance":
        if not (isinstance(arg, dict) and len(arg) == 1 and set(arg) <= {"abs", "rel"}
                and _is_number(next(iter(arg.values()))) and next(iter(arg.values())) >= 0):
            errs.append(f"{where}.tolerance: must be {{abs: a}} or {{rel: r}} with a finite number >= 0, got {arg!r}")
        if not (_is_number(centre) or centre == "X"):
            errs.append(f"{where}.tolerance: needs a numeric paper value or target (finite), got {centre!r}")
    elif kind == "bound":
        if not (isinstance(arg, dict) and len(arg) == 1 and set(arg) <= {"min", "max"}
                and _is_number(next(iter(arg.values())))):
            errs.append(f"{where}.bound: must be {{min: m}} or {{max: m}} with a finite number, got {arg!r}")
    elif kind == "within_factor":
        if not (_is_number(arg) and arg >= 1):
            errs.append(f"{where}.within_factor: must be a finite number >= 1, got {arg!r}")
        if not (_is_number(centre) and centre > 0):
            errs.append(f"{where}.within_factor: needs a positive numeric paper value or target (finite), "
                        f"got {centre!r}")
    elif kind == "std":
        if not (_is_number(arg) and arg > 0):
            errs.append(f"{where}.std: must be a finite number k > 0 (PASS within k standard deviations), got {arg!r}")
        if not (_is_number(cell.get("std")) and cell["std"] > 0):
            errs.append(f"{where}.std: needs the cell's 'std' to be a number > 0 (finite), got {cell.get('std')!r}")
        if not _is_number(cell.get("paper")):
            errs.append(f"{where}.std: needs a numeric paper value (finite), got {cell.get('paper')!r}")
    elif kind == "ordering":
        if not (isinstance(arg, dict) and len(arg) == 1 and set(arg) <= {"greater_than", "less_than"}
                and isinstance(next(iter(arg.values())), list) and next(iter(arg.values()))):
            return errs + [f"{where}.ordering: must be {{greater_than|less_than: [cells]}}, got {arg!r}"]
        for ref in next(iter(arg.values())):
            if not (isinstance(ref, dict) and ref.get("row") in rows and ref.get("column") in columns):
                errs.append(f"{where}.ordering: {ref!r} is not a {{row, column}} of this table")
    return errs


def schema_errors(doc: Any, name: str) -> list[str]:
    """All schema violations of one expected/<id>.yaml document (empty list: valid).

    ``name`` is the file's stem; the document's ``table`` must equal it.
    """
    if not isinstance(doc, dict):
        return [f"{name}: top level must be a mapping"]
    errs: list[str] = []
    missing, unknown = TOP_KEYS - set(doc), set(doc) - TOP_KEYS
    if missing:
        errs.append(f"{name}: missing top-level key(s) {sorted(missing)}")
    if unknown:
        errs.append(f"{name}: unknown top-level key(s) {sorted(unknown)}")
    if doc.get("table") != name:
        errs.append(f"{name}: 'table' is {doc.get('table')!r}, must equal the file name {name!r}")
    if doc.get("paper") not in ("s4", "s4d"):
        errs.append(f"{name}: 'paper' must be 's4' or 's4d', got {doc.get('paper')!r}")
    for key in ("title", "source"):
        if key in doc and not _is_text(doc[key]):
            errs.append(f"{name}: '{key}' must be a non-empty string")
    axes = {}
    for key in ("rows", "columns"):
        val = doc.get(key)
        if not (isinstance(val, list) and val and all(_is_text(v) for v in val)):
            errs.append(f"{name}: '{key}' must be a non-empty list of strings")
            val = []
        elif len(set(val)) != len(val):
            errs.append(f"{name}: '{key}' has duplicates")
        axes[key] = set(val)
    cells = doc.get("cells")
    if not (isinstance(cells, list) and cells):
        return errs + [f"{name}: 'cells' must be a non-empty list"]
    seen: set[tuple] = set()
    for i, c in enumerate(cells):
        where = f"{name}: cells[{i}]"
        if not isinstance(c, dict):
            errs.append(f"{where}: must be a mapping")
            continue
        where = f"{name}: cell ({c.get('row')!r}, {c.get('column')!r})"
        missing, unknown = CELL_KEYS - set(c), set(c) - CELL_KEYS - OPTIONAL_CELL_KEYS
        if missing:
            errs.append(f"{where}: missing key(s) {sorted(missing)}")
        if unknown:
            errs.append(f"{where}: unknown key(s) {sorted(unknown)}")
        if c.get("row") not in axes["rows"]:
            errs.append(f"{where}: row not listed in 'rows'")
        if c.get("column") not in axes["columns"]:
            errs.append(f"{where}: column not listed in 'columns'")
        key = (c.get("row"), c.get("column"))
        if key in seen:
            errs.append(f"{where}: duplicate (row, column)")
        seen.add(key)
        paper = c.get("paper")
        if paper is None:
            if not _is_text(c.get("note")):
                errs.append(f"{where}: 'paper: null' needs a non-empty note")
        elif not (_is_number(paper) or paper == "X"):
            errs.append(f"{where}: 'paper' must be a number (finite: no .inf / .nan), 'X' or null, got {paper!r}")
        std = c.get("std")
        if std is not None and not (_is_number(std) and std >= 0):
            errs.append(f"{where}: 'std' must be null or a number >= 0 (finite), got {std!r}")
        if not _is_text(c.get("unit")):
            errs.append(f"{where}: 'unit' must be a non-empty string")
        if c.get("better") not in ("higher", "lower"):
            errs.append(f"{where}: 'better' must be 'higher' or 'lower', got {c.get('better')!r}")
        if not _is_text(c.get("source")):
            errs.append(f"{where}: 'source' must be a non-empty string")
        if c.get("note") is not None and not _is_text(c.get("note")):
            errs.append(f"{where}: 'note' must be null or a non-empty string")
        if "known_fail" in c and not _is_text(c["known_fail"]):
            errs.append(f"{where}: 'known_fail' must be the analysis of a measured FAIL (non-empty text)")
        chk = c.get("checks")
        if not isinstance(chk, dict) or set(chk) != set(TIERS):
            errs.append(f"{where}: 'checks' must have exactly the tiers {list(TIERS)}, "
                        f"got {sorted(chk) if isinstance(chk, dict) else chk!r}")
            continue
        for tier in TIERS:
            errs += _check_errors(f"{where}.checks.{tier}", chk[tier], c, axes["rows"], axes["columns"])
    return errs


def _name_errors(doc: Any, name: str) -> list[str]:
    """Row and column names that are not text, wherever the schema compares them (they must be hashable)."""
    errs = []

    def text(where: str, value: Any) -> None:
        if isinstance(value, (list, dict)):
            errs.append(f"{name}: {where}: {value!r} not allowed; expected a row or column name (text)")

    if not isinstance(doc, dict):
        return errs
    for key in ("rows", "columns"):
        for i, v in enumerate(doc.get(key) if isinstance(doc.get(key), list) else []):
            text(f"{key}[{i}]", v)
    for i, c in enumerate(doc.get("cells") if isinstance(doc.get("cells"), list) else []):
        if not isinstance(c, dict):
            continue
        text(f"cells[{i}].row", c.get("row"))
        text(f"cells[{i}].column", c.get("column"))
        for tier, check in (c.get("checks") or {}).items() if isinstance(c.get("checks"), dict) else []:
            order = check.get("ordering") if isinstance(check, dict) else None
            for direction, refs in order.items() if isinstance(order, dict) else []:
                for j, ref in enumerate(refs if isinstance(refs, list) else []):
                    for key in ("row", "column"):
                        if isinstance(ref, dict):
                            text(f"cells[{i}].checks.{tier}.ordering.{direction}[{j}].{key}", ref.get(key))
    return errs


def load_expected(path: Path) -> dict:
    """Load and validate one expected file; raise SpecError listing every problem with the file named."""
    doc = load_yaml(Path(path), SpecError)
    bad = [f"{Path(path).stem}: {where}: inf or NaN is not allowed (paper values, bounds and tolerances are "
           f"finite numbers)" for where in non_finite(doc)]
    try:
        errs = bad or _name_errors(doc, Path(path).stem) or schema_errors(doc, Path(path).stem)
    except (TypeError, AttributeError, KeyError) as exc:  # e.g. a list where a row name belongs
        raise SpecError(f"{path}: invalid expected file: a value has the wrong type ({type(exc).__name__}: {exc}); "
                        f"rows, columns and cell keys are strings, checks are mappings") from None
    if errs:
        raise SpecError(f"{path}: invalid expected file: " + "; ".join(errs))
    return doc


def series_cell(expected: dict | None, row: str, task: str) -> dict | None:
    """The expected cell of a training series "<row> / <task>": its test column (<task>, "<task> accuracy" or
    "<task> rmse"), also in a transposed table (row and column swapped); None where the file has none."""
    if not expected:
        return None
    cells = {(c["row"], c["column"]): c for c in expected["cells"]}
    for key in ((row, task), (row, f"{task} accuracy"), (row, f"{task} rmse"), (task, row)):
        if key in cells:
            return cells[key]
    return None


def expected_path(spec_id: str, root: Path | None = None) -> Path:
    return (root or EXPECTED_DIR) / f"{spec_id}.yaml"
