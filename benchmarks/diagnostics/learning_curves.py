"""CPU: learning curves of training cells in progress, from their metrics.jsonl, beside the papers' values.

    python -m benchmarks.diagnostics.learning_curves \
        'runs/s4d-table-5/full/S4D-Lin_suite_data__Pathfinder/metrics.jsonl=s4d-table-5:S4D-Lin (suite data) / Pathfinder' \
        'runs/s4d-table-6/full/S4D_suite_data__Path-X/metrics.jsonl=s4d-table-6:S4D (suite data) / Path-X' \
        --out curves.png

Each argument is ``METRICS=SPEC:ROW / TASK`` or ``METRICS=SPEC:ROW / TASK|LABEL``: a cell's metrics.jsonl (one line
per evaluated epoch, as training writes it under runs/), the cell it belongs to and, for runs of one cell with
different settings, a label that tells them apart (drawn as "ROW, LABEL / TASK", against the cell's paper value).
``--runs DIR`` adds every ``DIR/<spec>/<folder>/<cell>/metrics.jsonl`` (a runs folder, ``checkpoints/``, or the
``logs/runs/runs/`` of a campaign call), each run of a ``--set`` folder labelled with the settings its
overrides.json records (with the folder's name where it records none). The report's learning-curve plot (training loss and validation
metric per epoch, one row of panels per task) is drawn for them, with the paper's value of each cell from the spec's
expected file as a dashed line: the same plot a results file gets, for runs that have not finished. Only complete
epochs are drawn: an epoch cut at a deadline (``"partial": true``) is left out, even as the last line, since its
training loss may average a handful of steps and its evaluation runs on BatchNorm statistics that lag the weights
(``runners progress`` says where training stands now).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import runners.train.plots  # noqa: F401  (registers the plot)
from runners.report.progress import SET_MARK, cell_of, read_overrides
from runners.specs.expected import expected_path, load_expected
from runners.specs.registry import PLOTS
from runners.train.loop import read_metrics


class UsageError(ValueError):
    """An argument this script cannot use; the message names it and what is allowed."""


def read_history(path: Path) -> list[dict]:
    """The complete epochs of a metrics.jsonl (an epoch cut at a deadline is left out)."""
    try:
        lines = read_metrics(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return [h for h in lines if not h.get("partial")]


def parse_entry(text: str) -> tuple[Path, str, str, str]:
    """``METRICS=SPEC:ROW / TASK[|LABEL]`` -> (metrics path, spec id, cell "ROW / TASK", label or "")."""
    head, bar, label = text.partition("|")  # the label may hold '=' (a setting)
    path, sep, cell = head.rpartition("=")
    spec_id, sep2, series = cell.partition(":")
    if not sep or not sep2 or " / " not in series or (bar and not label.strip()):
        raise UsageError(f"{text!r}: expected METRICS=SPEC:ROW / TASK or METRICS=SPEC:ROW / TASK|LABEL, e.g. "
                         f"'runs/.../metrics.jsonl=s4d-table-5:S4D-Lin (suite data) / Pathfinder|float32'")
    return Path(path), spec_id, series, label.strip()


def labelled(series: str, label: str) -> str:
    """The series name "ROW, LABEL / TASK" of a labelled run of the cell "ROW / TASK" ("ROW / TASK" without one)."""
    row, _, task = series.rpartition(" / ")
    return f"{row}, {label} / {task}" if label else series


def runs_entries(runs: Path) -> list[str]:
    """``METRICS=SPEC:ROW / TASK[|LABEL]`` of every run under ``runs`` whose cell its spec still names; a ``--set``
    folder's runs are labelled with its overrides (``tasks.<task>.`` left out)."""
    if not runs.is_dir():
        raise UsageError(f"--runs {runs}: no such folder")
    entries = []
    for metrics in sorted(runs.glob("*/*/*/metrics.jsonl")):
        spec_id, folder, cell_dir = metrics.relative_to(runs).parts[:3]
        row_task = cell_of(spec_id, folder, cell_dir)
        if row_task is None:
            continue
        label = ""
        if SET_MARK in folder:
            try:
                texts = read_overrides(metrics.parent.parent)
            except ValueError:  # not recorded (a run older than the record): the folder names it
                texts = [folder]
            label = ", ".join(t.split(".", 2)[2] if t.startswith("tasks.") and t.count(".") >= 2 else t
                              for t in texts)
        entries.append(f"{metrics}={spec_id}:{row_task[0]} / {row_task[1]}" + (f"|{label}" if label else ""))
    if not entries:
        raise UsageError(f"--runs {runs}: no <spec>/<folder>/<cell>/metrics.jsonl of a cell a spec names")
    return entries


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="*", help="METRICS=SPEC:ROW / TASK[|LABEL]")
    parser.add_argument("--runs", type=Path, help="also every run's metrics.jsonl under this folder")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--title", default="training in progress", help="the figure's title")
    args = parser.parse_args(argv)
    if not args.entries and args.runs is None:
        parser.error("give METRICS=SPEC:ROW / TASK entries, --runs DIR, or both")
    try:
        series, cells = {}, []
        for text in args.entries + (runs_entries(args.runs) if args.runs is not None else []):
            path, spec_id, cell, label = parse_entry(text)
            name = labelled(cell, label)
            if name in series:
                raise UsageError(f"{text!r}: a second run named {name!r}; tell them apart with |LABEL")
            series[name] = {"history": read_history(path)}
            try:
                spec_cells = load_expected(expected_path(spec_id))["cells"]
            except Exception as exc:  # noqa: BLE001 - any unreadable expected file: name it
                raise UsageError(f"{text!r}: spec {spec_id!r} has no readable expected file ({exc})") from None
            row, new_row = cell.rpartition(" / ")[0], name.rpartition(" / ")[0]
            cells += spec_cells
            if label:  # the paper's value for the labelled run (a transposed table holds the row as its column)
                cells += [{**c, "row": new_row} for c in spec_cells if c.get("row") == row]
                cells += [{**c, "column": new_row} for c in spec_cells if c.get("column") == row]
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    PLOTS["learning_curves"]({"spec_id": args.title, "tier": "full", "series": series}, args.out, {"cells": cells})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
