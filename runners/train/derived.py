"""Cells derived from training results for the ablation tables (S4D Tables 3a, 3b and 6).

Options of the ``train.table`` runner (see runners/train/table.py) implemented here:

    tasks.<task>.columns: {metric: column}   report these metrics of the task under these column names (a list
                                             of names reports one metric in several cells, each judged by its
                                             own check: S4D Table 6 on suite data, the reproduction and "Path-X
                                             solved")
        best_val   the best validation metric over the epochs (accuracy: max, RMSE: min). S4D Appendix B:
                   "Reported results are all best validation accuracy" (Tables 2, 3).
        first_val  the validation metric after the first epoch (S4D Table 3b "Acc (first)").
        test       the test metric at the best validation epoch (the runner's default number).
        n_params   the number of trainable parameters (S4D Table 6: "models of between 150K and 200K parameters
                   (differing only depending on whether B is trained)").
    models.<row>.tasks: [task, ...]          the tasks this row trains on (default: all)
    deltas: {row: base_row}                  each cell of ``row`` becomes value(row) - value(base_row) in the
                                             same column (S4D Table 3a prints its ablations as such deltas)
    transpose: true                          report (column, row) instead of (row, column) (S4D Table 6 has
                                             one row and the variants as columns)
"""
from __future__ import annotations

from typing import Any, Optional

from ..specs.registry import Cell
from .loop import best_validation

COLUMN_METRICS = ("best_val", "first_val", "test", "n_params")


def _names(value: Any) -> Optional[list[str]]:
    """The column names one metric of ``columns`` maps to (a name or a non-empty list of names); None if neither."""
    names = [value] if isinstance(value, str) else value if isinstance(value, list) and value else None
    if names is None or not all(isinstance(c, str) and c.strip() for c in names):
        return None
    return names


def column_pairs(picks: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, column) for every column of a valid ``tasks.<task>.columns``, in order."""
    return [(metric, column) for metric, value in picks.items() for column in _names(value)]


def check_derived(tasks: dict[str, dict], models: dict[str, dict], deltas: dict[str, str]) -> None:
    """Raise ValueError naming the key for a malformed ``columns`` / ``tasks`` / ``deltas`` option."""
    for col, t in tasks.items():
        picks = t.get("columns")
        if picks is None:
            continue
        ok = (isinstance(picks, dict) and picks and all(m in COLUMN_METRICS for m in picks)
              and all(_names(v) is not None for v in picks.values()))
        if not ok or len({c for _, c in column_pairs(picks)}) != len(column_pairs(picks)):
            raise ValueError(f"tasks.{col}.columns: {picks!r} not allowed; a mapping from metrics in "
                             f"{list(COLUMN_METRICS)} to distinct column names (a name, or a list of names)")
    for row, m in models.items():
        only = m.get("tasks")
        if only is not None and not (isinstance(only, list) and only and all(t in tasks for t in only)):
            raise ValueError(f"models.{row}.tasks: {only!r} not allowed; a non-empty list of task names from "
                             f"{sorted(tasks)}")
    if not isinstance(deltas, dict):
        raise ValueError(f"deltas: {deltas!r} not allowed; a mapping row -> base row")
    for row, base in deltas.items():
        if row not in models or base not in models or base in deltas or row == base:
            raise ValueError(f"deltas: {row!r}: {base!r} not allowed; both must be rows of models, and the base "
                             f"row must not itself be a delta row")
        missing = [t for t in models[row].get("tasks", list(tasks)) if t not in models[base].get("tasks", list(tasks))]
        if missing:
            raise ValueError(f"deltas: {row!r} trains on task(s) {missing} that its base row {base!r} does not")


def runs_task(row_cfg: dict, task: str) -> bool:
    """Whether a row (``models.<row>``) trains on ``task``."""
    return task in row_cfg.get("tasks", [task])


def picked_cells(row: str, picks: dict[str, Any], regression: bool, result: Any = None,
                 fill: Any = None, note: Optional[str] = None) -> list[Cell]:
    """The cells of ``tasks.<task>.columns`` for one row from its TrainResult (or all ``fill``, e.g. "X")."""
    cells = []
    for metric, column in column_pairs(picks):
        unit = "parameters" if metric == "n_params" else "rmse" if regression else "% acc"
        if result is None:
            cells.append(Cell(row, column, fill, unit, note=note))
            continue
        history = result.history
        if metric == "best_val":
            value = best_validation(history, "val_rmse" if regression else "val_acc")["val"]
            why = f"best validation {'RMSE' if regression else 'accuracy'} over {len(history)} epoch(s)"
        elif metric == "first_val":
            first = history[0] if history else None
            value = first["val_metric"] if first is not None and first["epoch"] == 1 and not first["partial"] else None
            why = ("validation metric after epoch 1" if value is not None else
                   "the first epoch did not finish (time budget)")
        elif metric == "n_params":
            value, why = result.n_params, "trainable parameters"
        else:
            value = result.test_at_best_val
            why = f"test at best validation epoch {result.best_epoch}"
        cells.append(Cell(row, column, value, unit, note=f"{why}; stop: {result.stop_reason}"))
    return cells


def post_process(cells: list[Cell], deltas: dict[str, str], transpose: bool) -> list[Cell]:
    """Apply ``deltas`` (S4D Table 3a) then ``transpose`` (S4D Table 6) to the measured cells."""
    measured = {(c.row, c.column): c.value for c in cells}
    out = []
    for c in cells:
        if c.row in deltas:
            base = measured.get((deltas[c.row], c.column))
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (c.value, base))
            value = c.value - base if numeric else None
            why = (f"{c.row} minus {deltas[c.row]} ({c.value:.4g} - {base:.4g})" if numeric else
                   f"delta not computed: {c.row} = {c.value!r}, {deltas[c.row]} = {base!r}")
            c = Cell(c.row, c.column, value, f"delta {c.unit or ''}".strip(),
                     note=why + (f"; {c.note}" if c.note else ""))
        if transpose:
            c = Cell(c.column, c.row, c.value, c.unit, c.note)
        out.append(c)
    return out
