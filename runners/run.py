"""Run one spec at one tier and write its results file."""
from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from . import registry
from .data.base import DatasetError, data_root
from .expected import expected_path, load_expected
from .results import RESULTS_DIR, environment, new_result_path, utc_now, write_json_atomic
from .selection import check_data_variant, select_cells, selected_set
from .spec import Spec, SpecError

RUNS_DIR = Path(os.environ.get("SSM_RUNS_DIR", "runs"))


class NotRunnable(RuntimeError):
    """This tier cannot run here (no GPU, no data): the message says why and what would run it."""


def command_for(spec: Spec, tier: str) -> str:
    cli = f"ssm-repro run {spec.path} --tier {tier}"
    return f"make {spec.make} TIER={tier}   (or: {cli})" if spec.make else cli


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def tier_config(spec: Spec, tier: str, data: str = "release") -> Any:
    """The runner config of ``tier`` for the data variant ``data`` (see runners/spec.py, ``suite_data``)."""
    check_data_variant(spec, tier, data)
    tier_spec = spec.tiers[tier]
    return tier_spec.suite_data.config if data == "suite" else tier_spec.config


def work_dir_for(spec: Spec, tier: str) -> Path:
    """Scratch space of a spec's tier (checkpoints, generated data): runs/<spec id>/<tier>/."""
    return RUNS_DIR / spec.id / tier


def run_spec(spec: Spec, tier: str, results_root: Path | None = None, progress: bool = True, *,
             cells: Sequence[str] = (), data: str = "release", deadline: float | None = None,
             write_result: bool = True, units: Sequence[tuple[str, str]] | None = None,
             logs: Sequence[str] = ()) -> Path | None:
    """Run ``spec`` at ``tier``; return the path of the new results file (never overwrites one).

    ``cells``: glob patterns on "row/column" (runners/selection.py); ``data``: "release" or "suite" (the tier's
    suite-data variant); ``deadline``: a ``time.time()`` value after which training checkpoints and stops
    (raises :class:`runners.registry.Paused`; the same call resumes); ``write_result=False`` trains / computes
    without writing a results file (returns None); ``units``: train only these (row, task) pairs of a training
    table (one child of ``run --gpus``, runners/scheduler.py); ``logs``: extra training logs beside each cell's
    metrics.jsonl (``run --log tensorboard``).
    """
    tier_spec = spec.tiers[tier]
    config = tier_config(spec, tier, data)
    if tier_spec.device == "cuda" and not torch.cuda.is_available():
        raise NotRunnable(f"{spec.id} tier '{tier}' needs a CUDA GPU and none is visible here. "
                          f"On a GPU machine: {command_for(spec, tier)}")
    expected = load_expected(expected_path(spec.id))
    selected = select_cells(spec, tier, expected, cells, data)
    if not selected:
        raise SpecError(f"{spec.id} tier '{tier}'" + (f" --data {data}" if data != "release" else "") +
                        (f" --cells {' '.join(cells)}" if cells else "") +
                        ": no cell to run (every matching cell is not_run / context at this tier in "
                        f"{expected_path(spec.id)})")
    device = torch.device(tier_spec.device)
    work_dir = work_dir_for(spec, tier)
    work_dir.mkdir(parents=True, exist_ok=True)
    narrowed = bool(cells) or data == "suite"  # else the runner produces all it can (not_run cells for reference)
    ctx = registry.RunContext(spec_id=spec.id, tier=tier, device=device, seed=tier_spec.seed, work_dir=work_dir,
                              data_dir=data_root(), progress=progress,
                              selected=selected_set(selected) if narrowed else None, deadline=deadline,
                              units=None if units is None else frozenset(map(tuple, units)), logs=tuple(logs))
    seed_everything(tier_spec.seed)
    entry = registry.get(spec.runner)
    started, t0 = utc_now(), time.perf_counter()
    try:
        output = entry.fn(config, ctx)
    except DatasetError as exc:
        raise NotRunnable(f"{spec.id} tier '{tier}': {exc} Then: {command_for(spec, tier)}") from exc
    wall = time.perf_counter() - t0
    known = {(c["row"], c["column"]) for c in expected["cells"]}
    stray = [(c.row, c.column) for c in output.cells if (c.row, c.column) not in known]
    if stray:
        raise RuntimeError(f"runner {spec.runner} produced cells that {expected_path(spec.id)} does not list: {stray}")
    if not write_result:
        return None
    wanted = set(selected)
    result = {
        "spec_id": spec.id,
        "tier": tier,
        "paper": spec.paper,
        "table": spec.table,
        "runner": spec.runner,
        "spec_path": str(spec.path),
        "spec": spec.resolved,
        "data": data,
        "data_note": tier_spec.suite_data.note if data == "suite" else "",
        "selected_cells": [list(c) for c in selected],
        "cell_patterns": list(cells),
        "overrides": list(spec.overrides),
        "config": dataclasses.asdict(config),
        "seed": tier_spec.seed,
        "started": started,
        "finished": utc_now(),
        "wall_time_s": round(wall, 3),
        "environment": environment(device),
        "cells": [dataclasses.asdict(c) for c in output.cells if not cells or (c.row, c.column) in wanted],
        "series": output.series,
        "notes": output.notes,
    }
    path = new_result_path(spec.id, tier, results_root or RESULTS_DIR)
    write_json_atomic(path, result)
    return path
