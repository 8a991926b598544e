"""A training table's cells rebuilt from the series its results file records: the evidence behind each value.

A results file of the training-table runner records, per trained (row, task), the series it trained
(``series["<row> / <task>"]``: every evaluated epoch's metrics, the step rate, the peak memory, the parameter count,
the monitored metric). The value of each cell is a function of that series -- the test metric at the first best
validation epoch (the number the papers report), a validation metric the table picks, the step rate, ... -- and this
module computes it again with the very functions the runner recorded it with (:func:`runners.train.table.
metric_cells`, :func:`runners.train.derived.picked_cells`, :func:`runners.train.derived.post_process`), so a value
that does not follow from its series is found. Cells of another test set (``extra_eval``) are not in a series and
are not rebuilt.
"""
from __future__ import annotations

from typing import Any

from .derived import picked_cells, post_process
from .loop import TrainResult, best_validation
from .table import TrainTableConfig, metric_cells

Key = tuple[str, str]


def _result_of(series: dict[str, Any]) -> TrainResult:
    """The TrainResult a series records (what the runner built its cells from)."""
    history = series["history"]
    monitor = series.get("monitor") or "val_acc"
    best = best_validation(history, monitor)
    return TrainResult(best_epoch=best["epoch"], best_val=best["val"], test_at_best_val=best["test"],
                       history=history, steps_per_second=series.get("steps_per_second"),
                       peak_memory_mb=series.get("peak_memory_mb"), n_params=series.get("n_params"),
                       monitor=monitor, stop_reason=series.get("stop_reason") or "completed")


def _regression(series: dict[str, Any], recorded_units: set[Any]) -> bool:
    monitor = series.get("monitor")
    if monitor in ("val_acc", "val_rmse"):
        return monitor == "val_rmse"
    return "rmse" in recorded_units  # monitored on the validation loss: the unit the cells were recorded in


def cells_from_series(config: dict[str, Any], series: dict[str, Any],
                      recorded: dict[Key, tuple[Any, Any]]) -> dict[Key, Any]:
    """(row, column) -> value for every cell that the series of ``series`` determine, as the runner of the table
    ``config`` (a results file's recorded ``config``) builds them. ``recorded``: (row, column) -> (value, unit) of
    the file's cells (a regression task monitored on its loss is told by its cells' unit). ValueError where the
    configuration is not one of today's training tables or a series is malformed."""
    cfg = TrainTableConfig(**config)
    cells = []
    for name, one in series.items():
        row, sep, col = name.partition(" / ")
        if not sep or row not in cfg.models or col not in cfg.tasks or not isinstance(one, dict):
            continue
        picks = cfg.tasks[col].get("columns")
        units = {unit for (r, c), (_, unit) in recorded.items() if row in (r, c)}
        regression = _regression(one, units)
        if "out_of_memory" in one:
            cells += (picked_cells(row, picks, regression, fill="X") if picks
                      else metric_cells(row, col, cfg.metrics, regression, oom=str(one["out_of_memory"])))
            continue
        if not isinstance(one.get("history"), list):
            raise ValueError(f"series {name!r}: no history (a list of evaluated epochs)")
        result = _result_of(one)
        cells += (picked_cells(row, picks, regression, result) if picks
                  else metric_cells(row, col, cfg.metrics, regression, result))
    rows = {c.row for c in cells}
    # a delta row's cells need its base row's; a base that this file did not train is not rebuilt here
    incomplete = {row for row in rows if row in cfg.deltas and cfg.deltas[row] not in rows}
    return {(c.row, c.column): c.value for c in post_process(cells, cfg.deltas, cfg.transpose)
            if not ({c.row, c.column} & incomplete)}
