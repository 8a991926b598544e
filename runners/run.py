"""Run one spec at one tier and write its results file."""
from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from . import registry
from .data.base import DatasetError, data_root
from .expected import expected_path, load_expected
from .results import RESULTS_DIR, environment, new_result_path, utc_now, write_json_atomic
from .spec import Spec

RUNS_DIR = Path(os.environ.get("SSM_RUNS_DIR", "runs"))


class NotRunnable(RuntimeError):
    """This tier cannot run here (no GPU, no data): the message says why and what would run it."""


def command_for(spec: Spec, tier: str) -> str:
    return f"make {spec.make} TIER={tier}   (or: python -m runners run {spec.path} --tier {tier})"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_spec(spec: Spec, tier: str, results_root: Path | None = None, progress: bool = True) -> Path:
    """Run ``spec`` at ``tier``; return the path of the new results file (never overwrites one)."""
    tier_spec = spec.tiers[tier]
    if tier_spec.device == "cuda" and not torch.cuda.is_available():
        raise NotRunnable(f"{spec.id} tier '{tier}' needs a CUDA GPU and none is visible here. "
                          f"On a GPU machine: {command_for(spec, tier)}")
    expected = load_expected(expected_path(spec.id))
    device = torch.device(tier_spec.device)
    work_dir = RUNS_DIR / spec.id / tier
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = registry.RunContext(spec_id=spec.id, tier=tier, device=device, seed=tier_spec.seed, work_dir=work_dir,
                              data_dir=data_root(), progress=progress)
    seed_everything(tier_spec.seed)
    entry = registry.get(spec.runner)
    started, t0 = utc_now(), time.perf_counter()
    try:
        output = entry.fn(tier_spec.config, ctx)
    except DatasetError as exc:
        raise NotRunnable(f"{spec.id} tier '{tier}': {exc} Then: {command_for(spec, tier)}") from exc
    wall = time.perf_counter() - t0
    known = {(c["row"], c["column"]) for c in expected["cells"]}
    stray = [(c.row, c.column) for c in output.cells if (c.row, c.column) not in known]
    if stray:
        raise RuntimeError(f"runner {spec.runner} produced cells that {expected_path(spec.id)} does not list: {stray}")
    result = {
        "spec_id": spec.id,
        "tier": tier,
        "paper": spec.paper,
        "table": spec.table,
        "runner": spec.runner,
        "spec_path": str(spec.path),
        "spec": spec.resolved,
        "config": dataclasses.asdict(tier_spec.config),
        "seed": tier_spec.seed,
        "started": started,
        "finished": utc_now(),
        "wall_time_s": round(wall, 3),
        "environment": environment(device),
        "cells": [dataclasses.asdict(c) for c in output.cells],
        "series": output.series,
        "notes": output.notes,
    }
    path = new_result_path(spec.id, tier, results_root or RESULTS_DIR)
    write_json_atomic(path, result)
    return path
