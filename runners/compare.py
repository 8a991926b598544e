"""Cell-by-cell comparison of results files with expected/: PASS, FAIL, IMPROVED, NOT-RUN, CONTEXT.

One (spec, tier) may have several results files (a run of some cells, a rerun of one): each expected cell is
judged by the newest file whose ``selected_cells`` holds it (:func:`judge_tier`). The check kinds and their
verdicts are described in expected/README.md.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import results as results_mod
from .expected import DEFAULT_PLAUSIBLE_FACTOR, check_kind, check_role
from .textfmt import column_label, fmt

CLAIM_VERDICTS = ("PASS", "FAIL", "IMPROVED", "NOT-RUN")
VERDICTS = CLAIM_VERDICTS + ("CONTEXT",)
Key = tuple[str, str]


class ResultsError(ValueError):
    """A results file cannot be judged (corrupt, truncated, wrong shape): one line naming the file and the key."""


@dataclass
class CellVerdict:
    row: str
    column: str
    paper: Any
    measured: Any
    check: str  # the check that judged the cell, as text (e.g. "59.6 ± 2", "> Transformer")
    verdict: str
    detail: str = ""
    known_fail: str | None = None  # the analysis of a FAIL that is real (the paper's statement does not hold)
    std: Any = None  # the paper's standard deviation, where it gives one
    unit: str | None = None
    role: str = "claim"  # "claim" or "sanity" (guards the machinery; counted apart)
    kind: str = ""  # the check kind: tolerance, bound, within_factor, std, ordering, not_run, context
    result: int | None = None  # index (into judge_tier's ``results``) of the results file that judged it

    @property
    def unexpected_fail(self) -> bool:
        return self.verdict == "FAIL" and not self.known_fail

    @property
    def stale_known_fail(self) -> bool:
        """A cell whose FAIL is analysed in expected/ (known_fail) but that no longer fails."""
        return bool(self.known_fail) and self.verdict in ("PASS", "IMPROVED")


# ------------------------------------------------------------------------------------------------- results files

def _result_name(tier: str) -> re.Pattern:
    """<UTC stamp>_<tier>.json, or with a uniqueness suffix: <stamp>_<tier>_<suffix>.json."""
    return re.compile(rf"^(\d{{8}}T\d{{6,}})_{re.escape(tier)}(?:_([A-Za-z0-9-]+))?\.json$")


def _stamp_key(path: Path, tier: str) -> tuple[str, int, str]:
    """Sort key of a results file: its stamp, then a numeric uniqueness suffix, then the name."""
    stamp, suffix = _result_name(tier).match(path.name).groups()
    return stamp, int(suffix) if suffix and suffix.isdigit() else 0, path.name


def result_paths(spec_id: str, tier: str, root: Path | None = None) -> list[Path]:
    """Every results/<spec id>/<stamp>_<tier>[_<suffix>].json, newest first."""
    base = (root or results_mod.RESULTS_DIR) / spec_id
    pattern = _result_name(tier)
    files = [p for p in base.glob(f"*_{tier}*.json") if pattern.match(p.name)]
    return sorted(files, key=lambda p: _stamp_key(p, tier), reverse=True)


def latest_result(spec_id: str, tier: str, root: Path | None = None) -> Path | None:
    """The newest results/<spec id>/<stamp>_<tier>*.json, or None."""
    paths = result_paths(spec_id, tier, root)
    return paths[0] if paths else None


def _value_ok(value: Any) -> bool:
    """A measured value a results file may hold: a number (NaN and inf included: they are judged FAIL),
    "X" (out of memory / failure) or null (not measured; the note says why)."""
    return value is None or value == "X" or (isinstance(value, (int, float)) and not isinstance(value, bool))


def result_errors(doc: Any) -> list[str]:
    """What makes a parsed results file unusable (empty list: usable)."""
    if not isinstance(doc, dict):
        return [f"top level must be a JSON object, got {type(doc).__name__}"]
    cells = doc.get("cells")
    if "cells" not in doc:
        return ["no 'cells' key (a results file lists its measured cells as [{row, column, value}, ...])"]
    if not isinstance(cells, list):
        return [f"'cells' must be a list of {{row, column, value}}, got {type(cells).__name__}"]
    errs, seen = [], set()
    for i, c in enumerate(cells):
        if not isinstance(c, dict):
            errs.append(f"cells[{i}] must be an object {{row, column, value}}, got {type(c).__name__}")
            continue
        missing = [k for k in ("row", "column", "value") if k not in c]
        if missing:
            errs.append(f"cells[{i}] lacks {missing}")
            continue
        if not (isinstance(c["row"], str) and isinstance(c["column"], str)):
            errs.append(f"cells[{i}]: row and column must be strings, got {c['row']!r}, {c['column']!r}")
            continue
        if not _value_ok(c["value"]):
            errs.append(f"cells[{i}] ({c['row']} / {c['column']}).value must be a number, 'X' or null, "
                        f"got {c['value']!r}")
        if c.get("note") is not None and not isinstance(c["note"], str):
            errs.append(f"cells[{i}].note must be a string or null, got {c['note']!r}")
        if (c["row"], c["column"]) in seen:
            errs.append(f"cells[{i}]: ({c['row']} / {c['column']}) is reported twice")
        seen.add((c["row"], c["column"]))
    sel = doc.get("selected_cells")
    if "selected_cells" in doc and not (isinstance(sel, list) and all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in sel)):
        errs.append("'selected_cells' must be a list of [row, column] pairs of strings")
    for key in ("spec_id", "tier"):
        if key in doc and not isinstance(doc[key], str):
            errs.append(f"'{key}' must be a string, got {doc[key]!r}")
    if "notes" in doc and not (isinstance(doc["notes"], list) and all(isinstance(n, str) for n in doc["notes"])):
        errs.append("'notes' must be a list of strings")
    for key in ("environment", "series"):
        if key in doc and doc[key] is not None and not isinstance(doc[key], dict):
            errs.append(f"'{key}' must be an object, got {type(doc[key]).__name__}")
    return errs


def load_result(path: Path, spec_id: str | None = None, tier: str | None = None) -> dict:
    """Read and check one results file; raise ResultsError (one line naming the file) if it cannot be judged.

    With ``spec_id`` / ``tier``, a file that says it belongs to another spec or tier is an error too.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not UTF-8 text; a results file is JSON written by `runners run`") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}): "
                           f"a truncated or corrupt results file; rerun the spec or remove the file") from None
    except RecursionError:
        raise ResultsError(f"{path}: not valid JSON (nested too deeply)") from None
    errs = result_errors(doc)
    if not errs:
        for key, want in (("spec_id", spec_id), ("tier", tier)):
            if want is not None and key in doc and doc[key] != want:
                errs.append(f"'{key}' is {doc[key]!r}, but the file is filed under {want!r}")
    if errs:
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise ResultsError(f"{path}: {errs[0]}{more}")
    return doc


def load_tier_results(spec_id: str, tier: str, root: Path | None = None) -> list[tuple[Path, dict]]:
    """Every results file of (spec, tier), newest first, each checked by :func:`load_result`."""
    return [(p, load_result(p, spec_id, tier)) for p in result_paths(spec_id, tier, root)]


# ------------------------------------------------------------------------------------------------------ judging

def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _not_finite(x: Any) -> bool:
    return isinstance(x, float) and not math.isfinite(x)


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


def _ref_name(ref: dict, cell: dict) -> str:
    """A referenced cell, short: its row when it shares the column, its column when it shares the row."""
    if ref["column"] == cell.get("column"):
        return ref["row"]
    if ref["row"] == cell.get("row"):
        return column_label(ref["column"])
    return f"{ref['row']} / {column_label(ref['column'])}"


def describe(check: dict, centre: Any, cell: dict | None = None) -> str:
    """The check as a short text, e.g. "59.6 ± 2", ">= 37.27", "within 2x of 5.3", "> Transformer"."""
    cell = cell or {}
    kind = check_kind(check)
    arg = check[kind]
    plaus = (f", plausible within {check['plausible_factor']:g}x" if "plausible_factor" in check else "")
    if kind == "tolerance":
        (which, tol), = arg.items()
        return f"{fmt(centre)} ± {fmt(tol) if which == 'abs' else f'{100 * tol:g}%'}{plaus}"
    if kind == "std":
        return f"{fmt(cell.get('paper'))} ± {arg:g} std (± {fmt(arg * cell.get('std', 0))}){plaus}"
    if kind == "bound":
        (which, lim), = arg.items()
        return f"{'>=' if which == 'min' else '<='} {fmt(lim)}"
    if kind == "within_factor":
        return f"within {arg:g}x of {fmt(centre)}{plaus}"
    if kind == "ordering":
        (which, refs), = arg.items()
        sign = ">" if which == "greater_than" else "<"
        text = " and ".join(f"{sign} {_ref_name(r, cell)}" for r in refs)
        sig = check.get("significance")
        text += f" by > {sig['z']:g} s.e. (n = {sig['n']})" if sig else ""
        return text + (f"; X counts as {check['x_counts_as']}" if "x_counts_as" in check else "")
    return "context" if kind == "context" else "not run"


def _base(cell: dict, tier: str, value: Any) -> CellVerdict:
    check = cell["checks"][tier]
    centre = check.get("target", cell["paper"])
    return CellVerdict(cell["row"], cell["column"], cell["paper"], value, describe(check, centre, cell), "NOT-RUN",
                       known_fail=cell.get("known_fail"), std=cell.get("std"), unit=cell.get("unit"),
                       role=check_role(check), kind=check_kind(check))


def _beyond(out: CellVerdict, value: float, centre: float, check: dict, higher: bool) -> None:
    """Outside the check: IMPROVED on the ``better`` side while within ``plausible_factor`` f of the paper value,
    else FAIL. For a positive paper value: centre / f <= value <= centre * f; in general the gain over the paper
    may be at most (f - 1) |centre| (higher is better) or (1 - 1/f) |centre| (lower is better)."""
    gain = value - centre if higher else centre - value
    if gain <= 0:
        out.verdict = "FAIL"
        return
    f = check.get("plausible_factor", DEFAULT_PLAUSIBLE_FACTOR)
    limit = (f - 1) * abs(centre) if higher else (1 - 1 / f) * abs(centre)
    if gain <= limit:
        out.verdict = "IMPROVED"
        return
    bound = centre + limit if higher else centre - limit
    out.verdict = "FAIL"
    out.detail = (f"implausible: {fmt(value)} is beyond {fmt(bound)}, the plausible factor {f:g} from the paper's "
                  f"{fmt(centre)} on the better side (a unit or scale error?); " + out.detail)


def _x_rank(x_counts_as: str, higher: bool) -> float:
    """An "X" as a number in an ordering: worse (better) than every measured value in the cell's direction."""
    worse = -math.inf if higher else math.inf
    return worse if x_counts_as == "worse" else -worse


def _judge_ordering(out: CellVerdict, cell: dict, check: dict, value: Any,
                    lookup: Mapping[Key, tuple[Any, str | None, str]]) -> CellVerdict:
    (which, refs), = check["ordering"].items()
    higher = cell["better"] == "higher"
    x_counts = check.get("x_counts_as")
    fails, unmeasured = [], []
    if value == "X" and x_counts is None:
        out.verdict, out.detail = "FAIL", "measured X without x_counts_as (what X means in this ordering)"
        return out
    if not (_num(value) or value == "X"):
        out.verdict, out.detail = "FAIL", f"measured value {value!r} is not a number"
        return out
    mine = _x_rank(x_counts, higher) if value == "X" else value
    for ref in refs:
        name = f"{ref['row']} / {ref['column']}"
        if (ref["row"], ref["column"]) not in lookup:
            unmeasured.append(name)
            continue
        other, note, where = lookup[(ref["row"], ref["column"])]
        where = f" ({where})" if where else ""
        if other is None:
            unmeasured.append(name + (f" ({note})" if note else ""))
            continue
        if _not_finite(other):
            fails.append(f"{name} = {other}: not a finite number{where}")
            continue
        if other == "X":
            if x_counts is None:
                fails.append(f"{name} = X without x_counts_as{where}")
                continue
            theirs = _x_rank(x_counts, higher)
        elif _num(other):
            theirs = other
        else:
            fails.append(f"{name} = {other!r}: not a number{where}")
            continue
        ok = mine > theirs if which == "greater_than" else mine < theirs
        shown = "X" if other == "X" else fmt(other)
        if not ok:
            fails.append(f"{name} = {shown}{where}")
        elif "significance" in check and _num(other) and _num(value):
            z = accuracy_gap_z(value, other, check["significance"]["n"])
            if z <= check["significance"]["z"]:
                fails.append(f"{name} = {shown} (gap only {z:.2f} s.e.){where}")
    if fails:
        out.verdict, out.detail = "FAIL", "violated by " + ", ".join(fails)
    elif unmeasured:
        out.detail = "reference cell(s) not measured: " + ", ".join(unmeasured)
    else:
        out.verdict = "PASS"
        out.detail = "" if value != "X" else f"X counts as {x_counts}"
    return out


def judge(cell: dict, tier: str, measured: Mapping[Key, Any], notes: Mapping[Key, str | None] | None = None,
          others: Mapping[Key, tuple[Any, str | None, str]] | None = None) -> CellVerdict:
    """Apply the tier's check of one expected cell to the measured values of the run that selected it.

    ``measured``: (row, column) -> value of that run (a cell absent from it is FAIL, "missing in the result");
    ``notes``: the run's note per cell (a null value with a note is NOT-RUN, the runner's reason);
    ``others``: (row, column) -> (value, note, where) from the tier's other runs, for ordering references the
    run did not measure.
    """
    notes = notes or {}
    check = cell["checks"][tier]
    key = (cell["row"], cell["column"])
    out = _base(cell, tier, measured.get(key))
    kind = out.kind
    if kind == "context":
        out.verdict, out.detail = "CONTEXT", check["context"]
        return out
    if kind == "not_run":
        out.detail = check["not_run"]
        return out
    if key not in measured:
        out.verdict, out.detail = "FAIL", "missing in the result: the run was to measure this cell and did not"
        return out
    value = measured[key]
    if value is None:
        if notes.get(key):
            out.detail = f"not measured: {notes[key]}"
        else:
            out.verdict, out.detail = "FAIL", "no value and no reason (null without a note in the result)"
        return out
    if _not_finite(value):
        out.verdict, out.detail = "FAIL", f"not a finite number ({value})"
        return out
    if kind == "ordering":
        lookup = dict(others or {})
        lookup.update({k: (v, notes.get(k), "") for k, v in measured.items()})
        return _judge_ordering(out, cell, check, value, lookup)
    centre = check.get("target", cell["paper"])
    higher = cell["better"] == "higher"
    if value == "X" or centre == "X":
        ok = value == centre and kind in ("tolerance", "within_factor")
        out.verdict = "PASS" if ok else "FAIL"
        out.detail = "failure (X) expected and measured" if ok else f"measured {value!r}, check needs {centre!r}"
        return out
    if not _num(value):
        out.verdict, out.detail = "FAIL", f"measured value {value!r} is not a number"
        return out
    if kind in ("tolerance", "std"):
        if kind == "tolerance":
            (which, tol), = check["tolerance"].items()
            width = tol if which == "abs" else tol * abs(centre)
        else:
            centre, width = cell["paper"], check["std"] * cell["std"]
        out.detail = f"|{fmt(value)} - {fmt(centre)}| = {fmt(abs(value - centre))} vs {fmt(width)}"
        if abs(value - centre) <= width:
            out.verdict = "PASS"
        else:
            _beyond(out, value, centre, check, higher)
    elif kind == "bound":
        (which, lim), = check["bound"].items()
        ok = value >= lim if which == "min" else value <= lim
        out.verdict = "PASS" if ok else "FAIL"
        out.detail = "" if ok else f"{fmt(value)} {'<' if which == 'min' else '>'} {fmt(lim)}"
    elif kind == "within_factor":
        f = check["within_factor"]
        out.detail = f"ratio to paper {fmt(value / centre)}"
        if centre / f <= value <= centre * f:
            out.verdict = "PASS"
        else:
            _beyond(out, value, centre, check, higher)
    return out


def default_selected(expected: dict, tier: str) -> set[Key]:
    """The cells a results file without ``selected_cells`` was to measure: every cell the tier checks
    (neither not_run nor context)."""
    return {(c["row"], c["column"]) for c in expected["cells"]
            if check_kind(c["checks"][tier]) not in ("not_run", "context")}


def selected_cells(result: dict, expected: dict, tier: str) -> set[Key]:
    """The cells one results file was asked to produce (``selected_cells``; older files: :func:`default_selected`)."""
    if "selected_cells" in result:
        return {(row, col) for row, col in result["selected_cells"]}
    return default_selected(expected, tier)


Run = tuple[dict[Key, Any], dict[Key, "str | None"], set[Key]]  # one results file: values, notes, selected cells


def tier_runs(expected: dict, results: list[dict], tier: str
              ) -> tuple[list[Run], dict[Key, tuple[Any, str | None, str]]]:
    """Each results file (newest first) as (values, notes, selected cells), and per cell the newest measured value
    with its note and the file it came from (what ordering checks read for references a run did not measure)."""
    runs: list[Run] = []
    for result in results:
        measured = {(c["row"], c["column"]): c["value"] for c in result["cells"]}
        notes = {(c["row"], c["column"]): c.get("note") for c in result["cells"]}
        runs.append((measured, notes, selected_cells(result, expected, tier)))
    newest: dict[Key, tuple[Any, str | None, str]] = {}
    for i, (measured, notes, _) in enumerate(runs):
        for key, value in measured.items():
            newest.setdefault(key, (value, notes[key], f"from results file {i + 1}"))
    return runs, newest


def judge_tier(expected: dict, results: list[dict], tier: str) -> list[CellVerdict]:
    """A verdict for every expected cell at ``tier`` from all results files of that (spec, tier).

    ``results`` newest first: each cell is judged by the newest result whose selected cells hold it; a cell no
    result selects is NOT-RUN ("tier not run" without results, else "not selected by any run"). Ordering
    references a run did not measure are read from the newest other run that did.
    """
    runs, newest = tier_runs(expected, results, tier)
    verdicts = []
    for cell in expected["cells"]:
        key = (cell["row"], cell["column"])
        kind = check_kind(cell["checks"][tier])
        pick = next((i for i, run in enumerate(runs) if key in run[2]), None)
        if kind in ("not_run", "context"):
            v = judge(cell, tier, {})  # the check says why nothing is judged
            v.measured = newest.get(key, (None,))[0]  # shown, not judged
        elif pick is None:
            v = _base(cell, tier, None)
            v.detail = "tier not run" if not runs else "not selected by any run of this tier"
        else:
            measured, notes, _ = runs[pick]
            v = judge(cell, tier, measured, notes, newest)
            v.result = pick
        verdicts.append(v)
    return verdicts


def compare(expected: dict, result: dict | None, tier: str) -> list[CellVerdict]:
    """Verdict for every expected cell at ``tier`` from one results file (NOT-RUN for all when there is none)."""
    return judge_tier(expected, [] if result is None else [result], tier)


# ------------------------------------------------------------------------------------------------------- counts

def summary(verdicts: list[CellVerdict]) -> dict[str, int]:
    """Verdict counts of the claims (role claim; context rows not included)."""
    counts = {v: 0 for v in CLAIM_VERDICTS}
    for v in verdicts:
        if v.role == "claim" and v.verdict in counts:
            counts[v.verdict] += 1
    return counts


def sanity_summary(verdicts: list[CellVerdict]) -> dict[str, int]:
    """Verdict counts of the sanity checks (they guard the machinery; not claims of the paper)."""
    counts = {v: 0 for v in CLAIM_VERDICTS}
    for v in verdicts:
        if v.role == "sanity" and v.verdict in counts:
            counts[v.verdict] += 1
    return counts


def context_count(verdicts: list[CellVerdict]) -> int:
    return sum(v.verdict == "CONTEXT" for v in verdicts)


def counts_text(verdicts: list[CellVerdict]) -> str:
    """"claims: PASS 2, FAIL 1, IMPROVED 0, NOT-RUN 3; context 120; sanity: PASS 4, FAIL 0, ..." """
    claims = ", ".join(f"{k} {n}" for k, n in summary(verdicts).items())
    sanity = sanity_summary(verdicts)
    text = f"claims: {claims}; context {context_count(verdicts)}"
    if any(sanity.values()):
        text += "; sanity: " + ", ".join(f"{k} {n}" for k, n in sanity.items())
    return text
