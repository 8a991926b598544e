"""Cells that train in another spec's run (a row's ``train_in: {spec, row}``): one training run serves two tables,
but each table's verdict reads its own results file, written by running that table's spec on the run's checkpoint.
When the other spec's results hold a newer result of the run than the one a table judges, the table's report says
so, with the command that judges it there."""
from __future__ import annotations

import shlex
from pathlib import Path

from ..core.textfmt import fmt
from ..judge.verdicts import CellVerdict
from ..specs.selection import tier_config
from ..specs.spec import Spec
from ..store.read import load_tier_results, recorded_time
from ..train.table import TrainTableConfig, runs_task


def shared_cells(spec: Spec, tier: str) -> list[tuple[str, str, str, str, str]]:
    """(row, task, data variant, home spec, home row) of every training cell of ``tier`` that trains in another
    spec's run; [] for a spec that is not a training table."""
    out = []
    for data in ("release", "suite") if spec.tiers[tier].suite_data is not None else ("release",):
        config = tier_config(spec, tier, data)
        if not isinstance(config, TrainTableConfig):
            return []
        for row, model in config.models.items():
            home = model.get("train_in")
            out += [(row, task, data, home["spec"], home["row"]) for task in config.tasks
                    if home and runs_task(model, task)]
    return out


def newer_shared_run_lines(spec: Spec, tier: str, files: list[tuple[Path, dict]], verdicts: list[CellVerdict],
                           results_root: Path | None = None) -> list[str]:
    """One report line per shared cell whose run has, in its home spec's results (``results_root`` as
    :func:`runners.store.read.load_tier_results` reads it), a value newer than the results file judging the cell here
    (or none judges it here)."""
    judged = {(v.row, v.column): v for v in verdicts}
    shared = [c for c in shared_cells(spec, tier) if (c[0], c[1]) in judged]
    homes = {home: load_tier_results(home, tier, results_root) for home in {c[3] for c in shared}}  # read once each
    lines = []
    for row, task, data, home_spec, home_row in shared:
        verdict = judged[(row, task)]
        newest = next(((path, doc, cell) for path, doc in homes[home_spec]
                       for cell in doc.get("cells") or []
                       if (cell.get("row"), cell.get("column")) == (home_row, task) and cell.get("value") is not None),
                      None)
        if newest is None:
            continue
        path, doc, cell = newest
        mine = files[verdict.result] if verdict.result is not None else None
        if mine is not None and recorded_time(*mine, tier) >= recorded_time(path, doc, tier):
            continue
        command = ["ssm-repro", "run", spec.id, "--tier", tier, "--cells", f"{row}/{task}"]
        command += ["--data", data] if data != "release" else []
        here = f"`{mine[0]}`" if mine is not None else "no results file"
        lines += [f"**A newer run of a shared cell:** `{row} / {task}` trains in {home_spec}'s run of `{home_row}` "
                  f"(`train_in`), and that run has a newer result than the one judged here: {fmt(cell['value'])} in "
                  f"`{path}` (finished {doc.get('finished') or doc.get('started') or 'at a time not recorded'}). "
                  f"This table's verdict reads {here}; to judge the newer run here, run `{shlex.join(command)}` "
                  f"where that run's finished checkpoint lies under runs/.", ""]
    return lines
