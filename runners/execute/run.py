"""Run one spec at one tier and write its results file."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..core import layout
from ..core.atomic import json_digest, write_text_atomic
from ..core.errors import NotRunnable, SpecError
from ..core.lock import exclusive
from ..core.provenance import environment, physical_device_key, utc_now
from ..data.base import DatasetError, data_root, without_machine_paths
from ..data.status import raise_for_data_problems
from ..judge.settings import Today
from ..judge.verdicts import judge_tier, summary
from ..specs import registry
from ..specs.expected import expected_path, load_expected
from ..specs.selection import select_cells, selected_set, tier_config
from ..specs.spec import ID_PATTERN, Spec, command_for, work_dir_for
from ..store import ledger
from ..store.write import refuse_links, write_new_result
from ..train.checkpoint import CheckpointMismatch
from ..train.table import TrainTableConfig, cell_path, units_to_train


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_lock(kind: str, work_dir: Path, device: torch.device) -> contextlib.AbstractContextManager:
    """The lock a run holds: a benchmark one per device (a concurrent run would distort its timings), an analytic
    one per spec and tier; training locks each cell and each prepared dataset itself (runners/train/table.py), so
    that several processes can share a table's cells."""
    if kind == "benchmark":
        return exclusive(layout.RUNS_DIR / f".benchmark-{physical_device_key(device)}.lock", f"benchmarks on {device}")
    if kind == "analytic":
        return exclusive(work_dir.parent / f".{work_dir.name}.lock", f"{work_dir}")
    return contextlib.nullcontext()


def restart_cells(spec: Spec, tier: str, config: Any, selected: frozenset | None = None,
                  units: Sequence[tuple[str, str]] | None = None) -> list[Path]:
    """Delete what earlier runs of the selected cells left under runs/ (checkpoints, metrics, extra evaluations),
    so that they start over: for a training table, the run directories of the (row, task) pairs that the
    selection trains; for other runners, everything of the tier. Prepared datasets (``data/``) are kept: they
    depend on their own arguments only, which are checked when they are reused. Returns the deleted paths."""
    work_dir = work_dir_for(spec, tier)
    if isinstance(config, TrainTableConfig):
        paths = training_folders(spec, tier, config, selected, units)
    else:
        paths = [p for p in sorted(work_dir.iterdir()) if p.name != "data" and not p.name.endswith(".lock")] \
            if work_dir.is_dir() else []
    gone = []
    for path in paths:
        if not path.exists():
            continue
        with exclusive(path.parent / f".{path.name}.lock", f"restarting {path}"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        gone.append(path)
    return gone


def training_folders(spec: Spec, tier: str, config: Any, selected: frozenset | None = None,
                     units: Sequence[tuple[str, str]] | None = None) -> list[Path]:
    """The folders runs/<spec>/<tier>[-set-<key>]/<row>__<task>/ where a training table's selected (row, task)
    pairs train and keep their checkpoints (all pairs when ``selected`` is None; of these, only ``units`` when
    given); a row with ``train_in`` trains in the other spec's folder of that row."""
    work_dir = work_dir_for(spec, tier)
    only = None if units is None else frozenset(map(tuple, units))
    return [cell_path(work_dir, tier, config.models[row], row, col)
            for row, col in units_to_train(config, selected, only)]


class ResultsNotWritten(SpecError):
    """A run's results file could not be written; the message names the recovery file that holds its values."""


def record_overrides(spec: Spec, work_dir: Path) -> None:
    """Write the ``--set`` texts of a run into its folder (once: the folder's key is the configuration they give),
    so that ``progress`` and a reader can tell what a ``<tier>-set-<key>`` folder trains."""
    path = work_dir / layout.OVERRIDES_NAME
    if spec.overrides and not path.exists():
        write_text_atomic(path, json.dumps({"set": list(spec.overrides)}, indent=1) + "\n")


def run_spec(spec: Spec, tier: str, results_root: Path | None = None, progress: bool = True, *,
             cells: Sequence[str] = (), data: str = "release", deadline: float | None = None,
             write_result: bool = True, units: Sequence[tuple[str, str]] | None = None,
             logs: Sequence[str] = (), restart: bool = False) -> Path | None:
    """Run ``spec`` at ``tier``; return the path of the new results file (never overwrites one), written under
    ``results_root`` (default: the local store, local/results/; the reference store results/ only when asked).

    ``cells``: glob patterns on "row/column" (runners/specs/selection.py); ``data``: "release" or "suite" (the tier's
    suite-data variant); ``deadline``: a ``time.time()`` value after which training checkpoints and stops
    (raises :class:`runners.core.errors.Paused`; the same call resumes); ``write_result=False`` trains / computes
    without writing a results file (returns None); ``units``: train only these (row, task) pairs of a training
    table (one child of ``run --gpus``, runners/execute/scheduler.py); ``logs``: extra training logs beside each cell's
    metrics.jsonl (``run --log tensorboard``); ``restart``: the selected cells start over
    (:func:`restart_cells`).
    """
    if not ID_PATTERN.fullmatch(spec.id):  # load_spec checks it; the paths below are built from it
        raise SpecError(f"{spec.path}: key 'id' is {spec.id!r}; allowed: lower-case letters, digits and '-'")
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
    if write_result:  # a store behind a symbolic link is refused before anything runs, not after
        refuse_links(Path(results_root or layout.local_results_dir()), spec.id)
    work_dir = work_dir_for(spec, tier)
    narrowed = bool(cells) or data == "suite"  # else the runner produces all it can (not_run cells for reference)
    if restart:
        restart_cells(spec, tier, config, selected_set(selected) if narrowed else None, units)
    work_dir.mkdir(parents=True, exist_ok=True)
    record_overrides(spec, work_dir)
    ctx = registry.RunContext(spec_id=spec.id, tier=tier, device=device, seed=tier_spec.seed, work_dir=work_dir,
                              data_dir=data_root(), progress=progress,
                              selected=selected_set(selected) if narrowed else None, deadline=deadline,
                              units=None if units is None else frozenset(map(tuple, units)), logs=tuple(logs))
    seed_everything(tier_spec.seed)
    entry = registry.get(spec.runner)
    started, t0 = utc_now(), time.perf_counter()
    try:
        with run_lock(entry.kind, work_dir, device):
            output = entry.fn(config, ctx)
    except DatasetError as exc:
        raise NotRunnable(f"{spec.id} tier '{tier}': {' '.join(str(exc).split())} Then: "
                          f"{command_for(spec, tier)}") from exc
    except CheckpointMismatch as exc:
        raise SpecError(f"{spec.path}: tiers.{tier}: {' '.join(str(exc).split())} To start the tier's cells over: "
                        f"python -m runners run {spec.path} --tier {tier} --restart") from exc
    except SpecError as exc:  # a setting that only the data can refute (a batch larger than the training set)
        raise SpecError(f"{spec.path}: tiers.{tier}: {exc}") from exc
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
        # with --cells: the selected cells, and any other cell the runner measured on the way (a value, not a
        # placeholder): the report judges only the selected ones, and reads the others as ordering references
        "cells": [{**dataclasses.asdict(c), "note": None if c.note is None else without_machine_paths(c.note)}
                  for c in output.cells
                  if not cells or (c.row, c.column) in wanted or c.value is not None],
        "series": output.series,
        "notes": [without_machine_paths(n) for n in output.notes],
        "problems": [without_machine_paths(p) for p in output.problems],
        "digests": digests(spec, config, output.data),
    }
    store_root = Path(results_root or layout.local_results_dir())
    path = write_result_or_recover(spec, tier, result, store_root)
    counts = summary(judge_tier(expected, [result], tier, Today.of_spec(spec, tier)))
    ledger.add(store_root, [path], {path.relative_to(store_root).as_posix(): counts})
    raise_for_data_problems(output.problems, path, f"{spec.id} tier '{tier}'", command_for(spec, tier))  # exit 3 / 2
    return path


def digests(spec: Spec, config: Any, data: dict[str, Any]) -> dict[str, Any]:
    """What a results file was made from, as digests: the tier's resolved configuration (as the file records it),
    the spec (after its includes and overrides), the expected file, and per dataset loaded its manifest (splits'
    sizes and a digest of its files; :func:`runners.data.cache.data_manifest`)."""
    return {"config": json_digest(dataclasses.asdict(config)), "spec": json_digest(spec.resolved),
            "expected": hashlib.sha256(expected_path(spec.id).read_bytes()).hexdigest(), "data": data}


def write_result_or_recover(spec: Spec, tier: str, result: dict, results_root: Path) -> Path:
    """Write the results file; where it cannot be written (disk full, a read-only or missing folder, a file where a
    folder should be), the computed values are kept first in a recovery file in the run's working folder
    (``runs/<spec id>/<tier>/``) and the error names it, so no measurement is lost."""
    try:
        return write_new_result(spec.id, tier, result, results_root)
    except OSError as exc:
        target = Path(results_root) / spec.id
        reason = exc.strerror or str(exc)
        try:
            work = work_dir_for(spec, tier)  # runs/<spec id>/<tier>/: the file keeps its results-file name
            kept = write_new_result(work.name, tier, result, work.parent)
        except OSError as again:
            raise ResultsNotWritten(f"{target}/: the results file could not be written ({reason}), nor a recovery "
                                    f"file ({again.strerror or again}); nothing was kept") from None
        raise ResultsNotWritten(f"{target}/: the results file could not be written ({reason}); its values are kept "
                                f"in {kept}: move it to {target}/ once the folder is writable (it is the results "
                                f"file)") from None
