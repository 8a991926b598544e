"""expected/<table>.yaml: the papers' numbers per cell, and the checks per tier (schema in expected/README.md)."""
from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import annotated_types as at
from pydantic import AfterValidator, BaseModel, Strict, ValidationError

from ..core.errors import SpecError
from ..core.yamlio import load_yaml, non_finite
from .schema import STRICT, UNSET, Choice, Int, Num, Opt, Problem, Text, allowed, problems
from .spec import PAPERS, TIERS

EXPECTED_DIR = Path("expected")

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


# ------------------------------------------------------------------------------------------------- the schema
# pydantic checks each key's type and range (every tail below is the message's end, "{got}" the value given); the
# rules across keys (a modifier that goes with its check kind, a reference to a cell of the table) follow in
# :func:`_rule_errors`.

def _must(tp: Any, tail: str) -> Any:
    return Annotated[tp, allowed(tail)]


NameText = Annotated[str, Strict()]  # a row or column name
Finite = Num()
Paper = _must(Union[Finite, Literal["X"], None], "must be a number (finite: no .inf / .nan), 'X' or null, got {got}")


def _one_key(value: dict) -> dict:
    if len(value) != 1:
        raise ValueError("exactly one key")
    return value


def _nonempty(value: list) -> list:
    if not value:
        raise ValueError("empty")
    return value


class Significance(BaseModel):
    model_config = STRICT
    n: Int(1)  # test examples
    z: Num(0, lo_open=True)  # standard errors


#: the check kinds' and modifiers' arguments
Tolerance = _must(Annotated[dict[Literal["abs", "rel"], Num(0)], AfterValidator(_one_key)],
                  "must be {abs: a} or {rel: r} with a finite number >= 0, got {got}")
Bound = _must(Annotated[dict[Literal["min", "max"], Finite], AfterValidator(_one_key)],
              "must be {min: m} or {max: m} with a finite number, got {got}")
WithinFactor = _must(Num(1), "must be a finite number >= 1, got {got}")
Ordering = _must(Annotated[dict[Literal["greater_than", "less_than"], Annotated[list, AfterValidator(_nonempty)]],
                           AfterValidator(_one_key)], "must be {greater_than|less_than: [cells]}, got {got}")
StdCheck = _must(Num(0, lo_open=True), "must be a finite number k > 0 (PASS within k standard deviations), got {got}")
Reason = _must(Text, "must be a non-empty reason string")
Target = _must(Union[Finite, Literal["X"]], "must be a finite number or 'X', got {got}")
SignificanceArg = _must(Significance, "must be {n: test examples (int > 0), z: standard errors (finite number > 0)}, "
                                      "got {got}")
XCountsAs = _must(Choice(X_COUNTS_AS), f"must be one of {list(X_COUNTS_AS)}, got {{got}}")
PlausibleFactor = _must(Num(1, lo_open=True), "must be a finite number > 1, got {got}")
Role = _must(Choice(ROLES), f"must be one of {list(ROLES)}, got {{got}}")
#: a cell's values
NonEmpty = _must(Text, "must be a non-empty string")
Std = _must(Opt(Num(0)), "must be null or a number >= 0 (finite), got {got}")
Better = _must(Choice(("higher", "lower")), "must be 'higher' or 'lower', got {got}")
Note = _must(Opt(Text), "must be null or a non-empty string")
KnownFail = _must(Text, "must be the analysis of a measured FAIL (non-empty text)")
#: the file's
PaperName = _must(Choice(PAPERS), "must be 's4' or 's4d', got {got}")
Names = _must(Annotated[list[Text], at.MinLen(1)], "must be a non-empty list of strings")


class CheckDocument(BaseModel):
    """One tier's check of one cell: one check kind and the modifiers that go with it (expected/README.md)."""

    model_config = STRICT
    tolerance: Tolerance = UNSET
    bound: Bound = UNSET
    within_factor: WithinFactor = UNSET
    ordering: Ordering = UNSET
    std: StdCheck = UNSET
    not_run: Reason = UNSET
    context: Reason = UNSET
    target: Target = UNSET
    significance: SignificanceArg = UNSET
    x_counts_as: XCountsAs = UNSET
    plausible_factor: PlausibleFactor = UNSET
    role: Role = UNSET


class ChecksDocument(BaseModel):
    model_config = STRICT
    smoke: CheckDocument
    budget: CheckDocument
    full: CheckDocument


class CellDocument(BaseModel):
    """One cell of the paper's table: its value, where it comes from, and a check per tier."""

    model_config = STRICT
    row: NameText
    column: NameText
    paper: Paper
    std: Std
    unit: NonEmpty
    better: Better
    source: NonEmpty
    note: Note
    checks: ChecksDocument
    known_fail: KnownFail = UNSET


class ExpectedDocument(BaseModel):
    """One expected/<id>.yaml (expected/README.md)."""

    model_config = STRICT
    table: Any
    paper: PaperName
    title: NonEmpty
    source: NonEmpty
    rows: Names
    columns: Names
    cells: Annotated[list[CellDocument], at.MinLen(1)]


def _cell_where(doc: dict, name: str, i: int) -> str:
    """A cell as messages name it: "<file>: cell ('row', 'column')", or by its index where those are not text."""
    cell = doc["cells"][i]
    row, column = (cell.get("row"), cell.get("column")) if isinstance(cell, dict) else (None, None)
    if isinstance(row, str) and isinstance(column, str):
        return f"{name}: cell ({row!r}, {column!r})"
    return f"{name}: cells[{i}]"


def _problem_line(doc: dict, name: str, found: list[Problem], p: Problem) -> str | None:
    """One problem of :func:`schema_errors` as the suite words it (None: said with another problem already)."""
    loc, tail = p.loc, p.tail.replace("{got}", repr(p.value))
    if len(loc) <= 1:
        if p.kind in ("unknown", "missing"):
            keys = sorted(q.key for q in found if q.kind == p.kind and len(q.loc) == 1)
            return None if keys[0] != p.key else f"{name}: {p.kind} top-level key(s) {keys}"
        if loc == ("cells",):
            return f"{name}: 'cells' must be a non-empty list"
        return f"{name}: '{p.key}' {tail}"
    i, where = loc[1], _cell_where(doc, name, loc[1])
    if len(loc) == 2:
        return f"{where}: must be a mapping"
    field = loc[2]
    if field in ("row", "column") and len(loc) == 3:
        return f"{name}: cells[{i}].{field}: {p.value!r} not allowed; expected a row or column name (text)"
    if field != "checks" and p.kind in ("unknown", "missing"):
        keys = sorted(str(q.loc[2]) for q in found if q.kind == p.kind and q.loc[:2] == loc[:2] and len(q.loc) == 3)
        return None if keys[0] != field else f"{where}: {p.kind} key(s) {keys}"
    if field != "checks":
        return f"{where}: '{field}' {tail}"
    checks = doc["cells"][i].get("checks")
    if len(loc) == 3 or (len(loc) == 4 and p.kind in ("unknown", "missing")):
        got = sorted(checks) if isinstance(checks, dict) else checks
        return f"{where}: 'checks' must have exactly the tiers {list(TIERS)}, got {got!r}"
    at_ = f"{where}.checks.{loc[3]}"
    if len(loc) == 4:
        return f"{at_}: must be a mapping with one check key, got {p.value!r}"
    if p.kind == "unknown":
        keys = sorted(str(q.loc[4]) for q in found if q.kind == "unknown" and q.loc[:4] == loc[:4])
        return None if keys[0] != loc[4] else (f"{at_}: unknown key(s) {keys}; allowed: one of {sorted(CHECK_KINDS)} "
                                               f"and {sorted(CHECK_MODIFIERS)}")
    return f"{at_}.{loc[4]}: {tail}"


def schema_errors(doc: Any, name: str) -> list[str]:
    """All schema violations of one expected/<id>.yaml document (empty list: valid): pydantic's checks of each key
    (:class:`ExpectedDocument`), then the rules across keys. ``name`` is the file's stem; the document's ``table``
    must equal it."""
    if not isinstance(doc, dict):
        return [f"{name}: top level must be a mapping"]
    try:
        ExpectedDocument.model_validate(doc)
    except ValidationError as exc:
        found = problems(exc)
        lines = [_problem_line(doc, name, found, p) for p in found]
        return _table_errors(doc, name) + list(dict.fromkeys(line for line in lines if line))
    return _table_errors(doc, name) + _rule_errors(doc, name)


def _table_errors(doc: dict, name: str) -> list[str]:
    errs = [] if doc.get("table") == name else [f"{name}: 'table' is {doc.get('table')!r}, must equal the file name "
                                                 f"{name!r}"]
    for key in ("rows", "columns"):
        values = doc.get(key)
        if isinstance(values, list) and all(isinstance(v, str) for v in values) and len(set(values)) != len(values):
            errs.append(f"{name}: '{key}' has duplicates")
    return errs


def _rule_errors(doc: dict, name: str) -> list[str]:
    """The rules across keys of a document whose keys are each valid: every cell in the table's rows and columns
    and given once, a paper value or a note, and each check's kind with the modifiers and references it allows."""
    rows, columns = set(doc["rows"]), set(doc["columns"])
    errs: list[str] = []
    seen: set[tuple] = set()
    for i, c in enumerate(doc["cells"]):
        where = _cell_where(doc, name, i)
        if c["row"] not in rows:
            errs.append(f"{where}: row not listed in 'rows'")
        if c["column"] not in columns:
            errs.append(f"{where}: column not listed in 'columns'")
        if (c["row"], c["column"]) in seen:
            errs.append(f"{where}: duplicate (row, column)")
        seen.add((c["row"], c["column"]))
        if c["paper"] is None and not _is_text(c.get("note")):
            errs.append(f"{where}: 'paper: null' needs a non-empty note")
        for tier in TIERS:
            errs += _check_errors(f"{where}.checks.{tier}", c["checks"][tier], c, rows, columns)
    return errs


def _modifier_errors(where: str, kind: str, check: dict, cell: dict) -> list[str]:
    """The modifiers beside the check kind that do not go with it: target, significance, x_counts_as,
    plausible_factor, role."""
    errs = []
    if "target" in check and kind not in ("tolerance", "within_factor"):
        errs.append(f"{where}.target: only goes with tolerance or within_factor, not {kind!r}")
    if "significance" in check:
        if kind != "ordering":
            errs.append(f"{where}.significance: only goes with an ordering check, not {kind!r}")
        elif not str(cell.get("unit", "")).startswith("%"):
            errs.append(f"{where}.significance: compares accuracies in %, but the cell's unit is {cell.get('unit')!r}")
    if "x_counts_as" in check and kind != "ordering":
        errs.append(f"{where}.x_counts_as: only goes with an ordering check, not {kind!r}")
    if "plausible_factor" in check:
        f = check["plausible_factor"]
        if kind not in IMPROVABLE_KINDS:
            errs.append(f"{where}.plausible_factor: only goes with {sorted(IMPROVABLE_KINDS)}, not {kind!r}")
        elif kind == "within_factor" and f <= check[kind]:
            errs.append(f"{where}.plausible_factor: {f!r} is not above within_factor {check[kind]!r}, so no result "
                        f"could be IMPROVED; drop it or make it larger")
    if "role" in check and kind not in JUDGING_KINDS:
        errs.append(f"{where}.role: a {kind!r} check judges nothing, so it has no role")
    return errs


def _check_errors(where: str, check: dict, cell: dict, rows: set, columns: set) -> list[str]:
    """The rules of one tier's check of one cell (expected/README.md, 'Check kinds'): one kind, its modifiers, the
    values it needs from the cell, the cells it names."""
    kinds = [k for k in check if k in CHECK_KINDS]
    if len(kinds) != 1:
        return [f"{where}: needs exactly one of {sorted(CHECK_KINDS)}, got {kinds}"]
    kind, arg = kinds[0], check[kinds[0]]
    errs = _modifier_errors(where, kind, check, cell)
    centre = check.get("target", cell.get("paper"))
    if kind == "tolerance" and not (_is_number(centre) or centre == "X"):
        errs.append(f"{where}.tolerance: needs a numeric paper value or target (finite), got {centre!r}")
    elif kind == "within_factor" and not (_is_number(centre) and centre > 0):
        errs.append(f"{where}.within_factor: needs a positive numeric paper value or target (finite), got {centre!r}")
    elif kind == "std":
        if not (_is_number(cell.get("std")) and cell["std"] > 0):
            errs.append(f"{where}.std: needs the cell's 'std' to be a number > 0 (finite), got {cell.get('std')!r}")
        if not _is_number(cell.get("paper")):
            errs.append(f"{where}.std: needs a numeric paper value (finite), got {cell.get('paper')!r}")
    elif kind == "ordering":
        for direction, refs in arg.items():
            for j, ref in enumerate(refs):
                names = [ref.get(k) for k in ("row", "column")] if isinstance(ref, dict) else []
                bad = [(k, v) for k, v in zip(("row", "column"), names) if isinstance(v, (list, dict))]
                if bad:
                    errs.append(f"{where}.ordering.{direction}[{j}].{bad[0][0]}: {bad[0][1]!r} not allowed; expected "
                                f"a row or column name (text)")
                elif not (isinstance(ref, dict) and ref.get("row") in rows and ref.get("column") in columns):
                    errs.append(f"{where}.ordering: {ref!r} is not a {{row, column}} of this table")
    return errs


def load_expected(path: Path) -> dict:
    """Load and validate one expected file; raise SpecError listing every problem with the file named."""
    doc = load_yaml(Path(path), SpecError)
    bad = [f"{Path(path).stem}: {where}: inf or NaN is not allowed (paper values, bounds and tolerances are "
           f"finite numbers)" for where in non_finite(doc)]
    try:
        errs = bad or schema_errors(doc, Path(path).stem)
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
