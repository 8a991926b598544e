"""Cell-by-cell comparison of results files with expected/: PASS, FAIL, IMPROVED, NOT-RUN, CONTEXT.

One (spec, tier) may have several results files (a run of some cells, a rerun of one): each expected cell is
judged by the newest file whose ``selected_cells`` holds it and that measured it (:func:`judge_tier`): a newer file
that left the cell null with a declared reason (not measured here) never hides an older measurement. The check
kinds and their verdicts are described in expected/README.md; the results files are read and checked by
:mod:`runners.store.read`.

Every judged value is first held against its unit's physical range (% in [0, 100], times, memory, rates and
speed-ups > 0, ...: :func:`runners.specs.expected.unit_range`), in the cell itself and in the cells an ordering refers
to; a null value is FAIL where the results file shows the cell was trained and gave none (every validation metric NaN:
diverged), and NOT-RUN only with the runner's reason.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.textfmt import column_label, fmt
from ..specs.expected import DEFAULT_PLAUSIBLE_FACTOR, check_kind, check_role, fraction_error, range_error, unit_range

CLAIM_VERDICTS = ("PASS", "FAIL", "IMPROVED", "STALE", "NOT-RUN")
VERDICTS = CLAIM_VERDICTS + ("CONTEXT",)
Key = tuple[str, str]


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
    overrides: tuple[str, ...] = ()  # the ``--set`` overrides the judging results file ran with
    stale: tuple[str, ...] = ()  # STALE: how the newest measurement's setting differs from today's ("key: a -> b")
    seeds: tuple[tuple[Any, Any, int], ...] = ()  # (seed, value, results file index) of each seed judged together

    @property
    def sigmas(self) -> float | None:
        """(ours - paper) in the paper's standard deviations, where the paper gives one; else None."""
        if _num(self.measured) and _num(self.paper) and _num(self.std) and self.std > 0 \
                and math.isfinite(self.measured):
            return (self.measured - self.paper) / self.std
        return None

    @property
    def unexpected_fail(self) -> bool:
        return self.verdict == "FAIL" and not self.known_fail

    @property
    def stale_known_fail(self) -> bool:
        """A cell whose FAIL is analysed in expected/ (known_fail) but that no longer fails."""
        return bool(self.known_fail) and self.verdict in ("PASS", "IMPROVED")


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


def _plausible_limit(centre: float, check: dict, higher: bool) -> tuple[float, float]:
    """(largest plausible gain over ``centre`` on the better side, the value at that gain) under the check's
    ``plausible_factor`` f: (f - 1) |centre| when higher is better, (1 - 1/f) |centre| when lower is."""
    f = check.get("plausible_factor", DEFAULT_PLAUSIBLE_FACTOR)
    limit = (f - 1) * abs(centre) if higher else (1 - 1 / f) * abs(centre)
    return limit, (centre + limit if higher else centre - limit)


def _implausible(value: float, centre: float, check: dict, higher: bool) -> str | None:
    """The "implausible" text when ``value`` is better than ``centre`` beyond the plausible factor, else None."""
    gain = value - centre if higher else centre - value
    limit, bound = _plausible_limit(centre, check, higher)
    if gain <= limit:
        return None
    f = check.get("plausible_factor", DEFAULT_PLAUSIBLE_FACTOR)
    return (f"implausible: {fmt(value)} is beyond {fmt(bound)}, the plausible factor {f:g} from the paper's "
            f"{fmt(centre)} on the better side (a unit or scale error?)")


def _beyond(out: CellVerdict, value: float, centre: float, check: dict, higher: bool) -> None:
    """Outside the check: IMPROVED on the ``better`` side while within ``plausible_factor`` f of the paper value,
    else FAIL. For a positive paper value: centre / f <= value <= centre * f; in general the gain over the paper
    may be at most (f - 1) |centre| (higher is better) or (1 - 1/f) |centre| (lower is better)."""
    gain = value - centre if higher else centre - value
    if gain <= 0:
        out.verdict = "FAIL"
        return
    why = _implausible(value, centre, check, higher)
    if why is None:
        out.verdict = "IMPROVED"
        return
    out.verdict = "FAIL"
    out.detail = f"{why}; " + out.detail


def _x_rank(x_counts_as: str, higher: bool) -> float:
    """An "X" as a number in an ordering: worse (better) than every measured value in the cell's direction."""
    worse = -math.inf if higher else math.inf
    return worse if x_counts_as == "worse" else -worse


def _reference(cell: dict, check: dict | None = None) -> Any:
    """The number that sets a cell's scale: its paper value, else its check's target."""
    paper = cell.get("paper")
    return paper if _num(paper) else (check or {}).get("target")


def value_problem(value: float, unit: Any, cell: dict, check: dict | None = None,
                  recorded_unit: Any = None) -> str | None:
    """Why a finite measured value cannot be a measurement of ``cell``: outside its unit's physical range (the
    expected file's unit; the results file's own where the expected unit has no range), or a fraction in a %
    cell whose paper value is a percentage (:func:`runners.specs.expected.fraction_error`). None when it can be."""
    used = unit if unit_range(unit) is not None or unit_range(recorded_unit) is None else recorded_unit
    return range_error(value, used) or fraction_error(value, used, _reference(cell, check))


def _judge_ordering(out: CellVerdict, cell: dict, check: dict, value: Any,
                    lookup: Mapping[Key, tuple[Any, str | None, str]],
                    table: Mapping[Key, dict] | None = None) -> CellVerdict:
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
            ref_cell = (table or {}).get((ref["row"], ref["column"]), cell)
            problem = value_problem(other, ref_cell.get("unit"), ref_cell)
            if problem:
                fails.append(f"{name} = {fmt(other)}: {problem}{where}")
                continue
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
          others: Mapping[Key, tuple[Any, str | None, str]] | None = None, *,
          failed_nulls: Mapping[Key, str] | None = None, units: Mapping[Key, str | None] | None = None,
          table: Mapping[Key, dict] | None = None, integrity_only: bool = False) -> CellVerdict:
    """Apply the tier's check of one expected cell to the measured values of the run that selected it.

    ``measured``: (row, column) -> value of that run (a cell absent from it is FAIL, "missing in the result");
    ``notes``: the run's note per cell (a null value with a note is NOT-RUN, the runner's reason);
    ``others``: (row, column) -> (value, note, where) from the tier's other runs, for ordering references the
    run did not measure; ``failed_nulls``: the run's null cells that are FAIL whatever their note, with the reason
    (:func:`null_failures`: trained and gave no value, e.g. diverged); ``units``: the unit each cell of the run
    records; ``table``: the expected file's cells by (row, column) (the units of ordering references).
    ``integrity_only``: only what makes a value no measurement at all (missing, null without a reason, diverged,
    not finite, outside its unit's physical range, beyond the plausible factor of the paper): FAIL for those, else
    the verdict is left NOT-RUN (a value measured at another setting than today's is held to these alone).
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
        if failed_nulls and key in failed_nulls:
            out.verdict, out.detail = "FAIL", failed_nulls[key]
        elif notes.get(key):
            out.detail = f"not measured: {notes[key]}"
        else:
            out.verdict, out.detail = "FAIL", "no value and no reason (null without a note in the result)"
        return out
    if _not_finite(value):
        out.verdict, out.detail = "FAIL", f"not a finite number ({value})"
        return out
    if _num(value):
        problem = value_problem(value, cell.get("unit"), cell, check, (units or {}).get(key))
        if problem:
            out.verdict, out.detail = "FAIL", problem
            return out
    if integrity_only:
        centre = check.get("target", cell.get("paper"))
        if _num(value) and _num(centre) and math.isfinite(centre) and kind != "ordering":
            why = _implausible(value, centre, check, cell.get("better") == "higher")
            if why:
                out.verdict, out.detail = "FAIL", why
        return out
    if kind == "ordering":
        lookup = dict(others or {})
        lookup.update({k: (v, notes.get(k), "") for k, v in measured.items() if v is not None or k not in lookup})
        return _judge_ordering(out, cell, check, value, lookup, table)
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
        paper = cell.get("paper")
        why = _implausible(value, paper, check, higher) if ok and _num(paper) and math.isfinite(paper) else None
        if why:  # a one-sided bound caps a result better than the paper as a tolerance does
            out.verdict, out.detail = "FAIL", why
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


# ------------------------------------------------------------------------------------------ null cells of a run

def _finite(x: Any) -> bool:
    return _num(x) and math.isfinite(x)


def _test_columns(result: dict, task: str) -> set[str]:
    """The columns a trained (row, task) reports its validation-selected test value in: the task itself, '<task>
    accuracy' / '<task> rmse', and the task's picked columns of a validation metric (config tasks.<task>.columns)."""
    cols = {task, f"{task} accuracy", f"{task} rmse"}
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    tasks = config.get("tasks") if isinstance(config.get("tasks"), dict) else {}
    picks = (tasks.get(task) or {}).get("columns") if isinstance(tasks.get(task), dict) else None
    if isinstance(picks, dict):  # a metric names one column or a list of them
        for metric, names in picks.items():
            if metric in ("test", "best_val", "first_val"):
                cols |= {str(c) for c in (names if isinstance(names, list) else [names])}
    return cols


def _no_finite_validation(series: Any) -> bool:
    """A training series with at least one evaluated epoch whose validation metrics are all NaN or null."""
    history = series.get("history") if isinstance(series, dict) else None
    if not (isinstance(history, list) and history):
        return False
    return not any(isinstance(e, dict) and (_finite(e.get("val_metric")) or _finite(e.get("val_loss")))
                   for e in history)


def series_of(result: dict, row: str, column: str) -> Any:
    """The training series ("<row> / <task>") whose validation-selected test value ``(row, column)`` reports (a
    transposed table's cells read the other way round), or None."""
    series = result.get("series") if isinstance(result.get("series"), dict) else {}
    for name, s in series.items():
        if not isinstance(name, str) or " / " not in name:
            continue
        r, _, task = name.partition(" / ")
        if (r == row and column in _test_columns(result, task)) or (r == column and row in _test_columns(result, task)):
            return s
    return None


_STOP = re.compile(r"\bstop: ([A-Za-z_]+)")


def null_failures(result: dict) -> dict[Key, str]:
    """The null cells of one results file that are FAIL whatever their note, with the reason: the file shows the
    run trained the cell and it gave no value -- its training series has no finite validation metric (diverged,
    or NaN in the data), or its note records a training stop ("stop: completed") with no value. A null cell the
    runner declared unmeasurable here (no CUDA device, data missing) is not among them."""
    out: dict[Key, str] = {}
    for c in result.get("cells", []):
        if c.get("value") is not None:
            continue
        key, note = (c["row"], c["column"]), c.get("note") or ""
        series = series_of(result, *key)
        stop = _STOP.search(note)
        if series is not None and _no_finite_validation(series):
            n = len(series["history"])
            out[key] = (f"diverged: every validation metric of its training is NaN ({n} epoch{'s' * (n != 1)}), so "
                        f"there is no best epoch to take a test value from" + (f" ({note})" if note else ""))
        elif stop:
            out[key] = (f"no value although the run trained this cell (stop: {stop.group(1)}): no validation epoch "
                        f"gave a finite metric; note: {note}")
    return out


@dataclass
class Run:
    """One results file as the judging reads it."""

    measured: dict[Key, Any]  # (row, column) -> value
    notes: dict[Key, "str | None"]
    selected: set[Key]  # the cells it was asked to produce
    units: dict[Key, "str | None"] = field(default_factory=dict)  # the unit each cell records
    failed_nulls: dict[Key, str] = field(default_factory=dict)  # null cells that are FAIL (null_failures)
    overrides: tuple[str, ...] = ()  # its --set overrides
    doc: dict = field(default_factory=dict)  # the results file itself (its configuration, seed, series)

    def declared_null(self, key: Key) -> bool:
        """The run left ``key`` null with a reason the runner declared (not a FAIL): not a measurement."""
        return key in self.measured and self.measured[key] is None and key not in self.failed_nulls \
            and bool(self.notes.get(key))


def _run_of(result: dict, expected: dict, tier: str) -> Run:
    cells = result["cells"]
    overrides = result.get("overrides") or []
    return Run(measured={(c["row"], c["column"]): c["value"] for c in cells},
               notes={(c["row"], c["column"]): c.get("note") for c in cells},
               selected=selected_cells(result, expected, tier),
               units={(c["row"], c["column"]): c.get("unit") for c in cells},
               failed_nulls=null_failures(result),
               overrides=tuple(str(o) for o in overrides) if isinstance(overrides, list) else (), doc=result)


def tier_runs(expected: dict, results: list[dict], tier: str
              ) -> tuple[list[Run], dict[Key, tuple[Any, str | None, str]]]:
    """Each results file (newest first) as a :class:`Run`, and per cell the newest measured value with its note
    and the file it came from (what ordering checks read for references a run did not measure; a null there is
    taken only where no file measured the cell)."""
    runs = [_run_of(result, expected, tier) for result in results]
    newest: dict[Key, tuple[Any, str | None, str]] = {}
    for i, run in enumerate(runs):
        for key, value in run.measured.items():
            if key not in newest or (newest[key][0] is None and value is not None):
                newest[key] = (value, run.notes[key], f"from results file {i + 1}")
    return runs, newest


def judge_run(cell: dict, tier: str, run: Run, newest: Mapping[Key, tuple[Any, str | None, str]],
              table: Mapping[Key, dict] | None = None, integrity_only: bool = False) -> CellVerdict:
    """:func:`judge` of one expected cell on one run."""
    return judge(cell, tier, run.measured, run.notes, newest, failed_nulls=run.failed_nulls, units=run.units,
                 table=table, integrity_only=integrity_only)


def judge_run_today(cell: dict, tier: str, runs: list[Run], index: int,
                    newest: Mapping[Key, tuple[Any, str | None, str]], table: Mapping[Key, dict] | None = None,
                    today: Any = None) -> CellVerdict:
    """:func:`judge_run` of run ``index``, or STALE where ``today`` (the spec's setting now) says that run measured
    the cell at another setting."""
    gap = today.gap(runs[index].doc, cell["row"], cell["column"]) if today is not None else None
    if gap:
        return _stale_verdict(cell, tier, runs[index], index, gap, newest)
    return judge_run(cell, tier, runs[index], newest, table)


def _stale_verdict(cell: dict, tier: str, run: Run, index: int, gap: list[str],
                   newest: Mapping[Key, tuple[Any, str | None, str]]) -> CellVerdict:
    """STALE: the newest measurement of the cell was made at a setting that is not today's. A value that is no
    measurement at all (:func:`judge`'s ``integrity_only``) stays FAIL at any setting."""
    v = judge_run(cell, tier, run, newest, integrity_only=True)
    shown = "; ".join(gap[:4]) + (f"; and {len(gap) - 4} more" if len(gap) > 4 else "")
    where = (f"measured at another setting than today's (--set {' '.join(run.overrides)}): " if run.overrides
             else "measured at another setting than today's: ") + shown
    v.result, v.stale = index, tuple(gap)
    if v.verdict == "FAIL":
        v.detail = f"{v.detail}; {where}"
    else:
        v.verdict, v.detail = "STALE", where
    return v


def _series_key(run: Run, key: Key) -> str | None:
    """The training series behind a run's cell, as text (two files with the same series are one run)."""
    series = series_of(run.doc, *key)
    history = series.get("history") if isinstance(series, dict) else None
    return json.dumps(history, sort_keys=True) if history else None


def _seed_runs(runs: list[Run], picks: list[int], key: Key, today: Any) -> list[tuple[Any, Any, int]]:
    """(seed, value, index) of the newest numeric measurement per seed among ``picks`` (today's setting), a run
    whose series repeats another's counted once; a cell with no training series (a parameter count, a timing) has
    the newest measurement alone."""
    out: list[tuple[Any, Any, int]] = []
    seen_seeds, seen_series = set(), set()
    for i in picks:
        value = runs[i].measured.get(key)
        if not _num(value) or runs[i].declared_null(key):
            continue
        seed = today.seed_of(runs[i].doc, *key)
        series = _series_key(runs[i], key)
        if series is None:  # not a trained cell's test value: the newest run alone judges it
            return out[:1] or [(seed, value, i)]
        if json.dumps(seed) in seen_seeds or series in seen_series:
            continue
        seen_seeds.add(json.dumps(seed))
        seen_series.add(series)
        out.append((seed, value, i))
    return out


def _today_picks(runs: list[Run], picks: list[int], key: Key, today: Any) -> tuple[list[int], list[str] | None]:
    """The picks measured at today's setting (seed apart), and, where there are none, how the newest one's setting
    differs (None: no pick, or today's spec no longer says)."""
    current, first_gap = [], None
    for i in picks:
        gap = today.gap(runs[i].doc, *key)
        if gap is None or not gap:
            current.append(i)
        elif first_gap is None and not runs[i].declared_null(key):
            first_gap = gap
    return current, first_gap


def judge_tier(expected: dict, results: list[dict], tier: str, today: Any = None) -> list[CellVerdict]:
    """A verdict for every expected cell at ``tier`` from all results files of that (spec, tier).

    ``results`` newest first: each cell is judged by the newest result whose selected cells hold it and that
    measured it -- a newer result that left it null with a declared reason never hides an older measured value
    (a null that is FAIL, e.g. diverged, is a verdict of its own and stands); a cell no result selects is NOT-RUN
    ("tier not run" without results, else "not selected by any run"). Ordering references a run did not measure
    are read from the newest other run that did.

    With ``today`` (:class:`runners.judge.settings.Today`, the spec's setting now), only results files that
    measured the cell at today's setting judge it (:mod:`runners.judge.settings`); where only others did, the cell
    is STALE, with the keys that differ. Several seeds of today's setting (distinct series) are judged together:
    the check is applied to their mean, and every seed is listed (``seeds``).
    """
    runs, newest = tier_runs(expected, results, tier)
    table = {(c["row"], c["column"]): c for c in expected["cells"]}
    verdicts = []
    for cell in expected["cells"]:
        key = (cell["row"], cell["column"])
        kind = check_kind(cell["checks"][tier])
        picks = [i for i, run in enumerate(runs) if key in run.selected]
        seeds: list[tuple[Any, Any, int]] = []
        if today is not None and picks and kind not in ("not_run", "context"):
            current, gap = _today_picks(runs, picks, key, today)
            if not current:
                pick = next((i for i in picks if not runs[i].declared_null(key)), picks[0])
                verdicts.append(_stale_verdict(cell, tier, runs[pick], pick, gap or ["(not recorded)"], newest))
                continue
            picks = current
            seeds = _seed_runs(runs, picks, key, today)
        if kind in ("not_run", "context"):
            v = judge(cell, tier, {})  # the check says why nothing is judged
            v.measured = newest.get(key, (None,))[0]  # shown, not judged
        elif not picks:
            v = _base(cell, tier, None)
            v.detail = "tier not run" if not runs else "not selected by any run of this tier"
        elif len(seeds) > 1:
            v = _judge_seeds(cell, tier, runs, seeds, newest, table)
        else:
            pick = next((i for i in picks if not runs[i].declared_null(key)), picks[0])
            v = judge_run(cell, tier, runs[pick], newest, table)
            v.result, v.seeds = pick, tuple(seeds)
            skipped = [i for i in picks if i < pick]
            if skipped:
                v.detail = (f"{v.detail}; " if v.detail else "") + "newer results file(s) " + ", ".join(
                    f"{i + 1} (not measured: {runs[i].notes.get(key)})" for i in skipped) + \
                    " did not measure it: judged from the newest one that did"
            if runs[pick].overrides and today is not None:  # its setting is today's: the overrides changed nothing
                v.detail = (f"{v.detail}; " if v.detail else "") + \
                    f"ran with --set {' '.join(runs[pick].overrides)}, which today's spec sets the same"
            elif runs[pick].overrides and v.verdict in ("PASS", "IMPROVED"):
                v.overrides = runs[pick].overrides
                v.detail = (f"{v.detail}; " if v.detail else "") + \
                    f"rests on --set {' '.join(runs[pick].overrides)}"
        verdicts.append(v)
    return verdicts


def _judge_seeds(cell: dict, tier: str, runs: list[Run], seeds: list[tuple[Any, Any, int]],
                 newest: Mapping[Key, tuple[Any, str | None, str]], table: Mapping[Key, dict]) -> CellVerdict:
    """The check applied to the mean of several seeds' values (S4D reports mean and standard deviation)."""
    key = (cell["row"], cell["column"])
    values = [float(v) for _, v, _ in seeds]
    mean = statistics.fmean(values)
    run = runs[seeds[0][2]]
    v = judge(cell, tier, {**run.measured, key: mean}, run.notes, newest, units=run.units, table=table)
    v.result, v.seeds = seeds[0][2], tuple(seeds)
    listed = ", ".join(f"seed {seed}: {fmt(value)}" for seed, value, _ in sorted(seeds, key=lambda x: str(x[0])))
    v.detail = (f"mean of {len(seeds)} seeds {fmt(mean)} +- {fmt(statistics.stdev(values))} ({listed})"
                + (f"; {v.detail}" if v.detail else ""))
    return v


def compare(expected: dict, result: dict | None, tier: str) -> list[CellVerdict]:
    """Verdict for every expected cell at ``tier`` from one results file (NOT-RUN for all when there is none)."""
    return judge_tier(expected, [] if result is None else [result], tier)


# ------------------------------------------------------------------------------------------------------- counts

def summary(verdicts: list[CellVerdict], role: str = "claim") -> dict[str, int]:
    """Verdict counts of the cells of one ``role``: the claims by default (context rows not included)."""
    counts = {v: 0 for v in CLAIM_VERDICTS}
    for v in verdicts:
        if v.role == role and v.verdict in counts:
            counts[v.verdict] += 1
    return counts


def sanity_summary(verdicts: list[CellVerdict]) -> dict[str, int]:
    """Verdict counts of the sanity checks (they guard the machinery; not claims of the paper)."""
    return summary(verdicts, "sanity")


def context_count(verdicts: list[CellVerdict]) -> int:
    return sum(v.verdict == "CONTEXT" for v in verdicts)


def overrides_text(verdicts: list[CellVerdict]) -> str:
    """"3 PASS rest on --set step_graph=true" for the passing cells judged from runs with ``--set`` overrides
    ('' when none)."""
    resting = [v for v in verdicts if v.overrides and v.verdict in ("PASS", "IMPROVED")]
    if not resting:
        return ""
    sets = sorted({" ".join(v.overrides) for v in resting})
    n = len(resting)
    return (f"{n} PASS/IMPROVED rest{'s' if n == 1 else ''} on --set overrides "
            f"({'; '.join(f'--set {s}' for s in sets)}): not the spec's settings as written")


def counts_text(verdicts: list[CellVerdict]) -> str:
    """"claims: PASS 2, FAIL 1, IMPROVED 0, NOT-RUN 3; context 120; sanity: PASS 4, FAIL 0, ..." and, where passing
    cells were judged from runs with ``--set`` overrides, how many and which overrides."""
    claims = ", ".join(f"{k} {n}" for k, n in summary(verdicts).items() if n or k != "STALE")  # STALE where any
    sanity = sanity_summary(verdicts)
    text = f"claims: {claims}; context {context_count(verdicts)}"
    if any(sanity.values()):
        text += "; sanity: " + ", ".join(f"{k} {n}" for k, n in sanity.items() if n or k != "STALE")
    if resting := overrides_text(verdicts):
        text += f"; {resting}"
    return text


def schedule_done(result: dict, row: str, column: str) -> tuple[int, int] | None:
    """(epochs completed, epochs the cell's setting plans) of a trained cell of ``result``; None for a cell that did
    not train or whose setting cannot be read today."""
    from .settings import cell_setting

    series = series_of(result, row, column)
    history = series.get("history") if isinstance(series, dict) else None
    if not isinstance(history, list):
        return None
    try:
        setting = cell_setting(result.get("runner", ""), result.get("config") or {}, result.get("seed"), row, column)
    except (TypeError, ValueError, KeyError):
        return None
    planned = ((setting or {}).get("train") or {}).get("epochs")
    if not _num(planned):
        return None
    return sum(1 for e in history if isinstance(e, dict) and not e.get("partial")), int(planned)


def verdict_marks(v: CellVerdict, files: list[tuple[Any, dict]]) -> list[str]:
    """What a reader must know beside a verdict: that it rests on --set overrides, how many seeds it has (a trained
    cell), a schedule shorter than its setting plans, and its distance from the paper's mean in the paper's
    standard deviations."""
    out = ["rests on --set"] if v.overrides else []
    if v.result is None or v.verdict in ("NOT-RUN", "CONTEXT") or v.result >= len(files):
        return out
    doc = files[v.result][1]
    done = schedule_done(doc, v.row, v.column)
    if done is not None:
        seeds = len(v.seeds) or 1
        out.append(f"{seeds} seed{'s' * (seeds > 1)}")
        if done[0] < done[1]:
            out.append(f"{done[0]} of {done[1]} epochs")
    if v.sigmas is not None:
        out.append(f"{v.sigmas:+.1f} paper std")
    return out


#: why a cell reads NOT-RUN, as the index counts it
NOT_RUN_WHY = ("not configured", "not yet run", "no data here")


def not_run_why(v: CellVerdict) -> str | None:
    """For a NOT-RUN claim: "not configured" (the expected file's check at this tier is not_run: the tier does not
    measure it), "no data here" (its run found no data on this machine; the details say how to get it) or "not
    yet run" (the tier measures it and no run has yet: compute not yet spent); None for another verdict."""
    if v.verdict != "NOT-RUN":
        return None
    if v.kind == "not_run":
        return "not configured"
    if "data missing" in v.detail or "DATA_PATH" in v.detail or "no data" in v.detail:
        return "no data here"
    return "not yet run"
