"""Training cells in progress: where each long run stands, read from its checkpoint under runs/.

``python -m runners progress [SPEC ...] [--runs DIR]`` lists every training cell with a checkpoint under
``runs/<spec id>/<tier or configuration>/<cell>/`` (or ``DIR``, e.g. ``checkpoints/``): the paper's value of the
cell (its expected file), epochs done of the schedule's, the last complete epoch's validation value and the best so
far, the training time spent (every call together) beside the projected GPU-hours of the whole schedule
(runners/report/projection.py, from a measured step rate), the devices its calls trained on (the checkpoint's segments),
and whether it finished. Nothing here is a verdict: verdicts come from results files (``check``).

``progress --finished PATTERN`` answers one question for a script: has every checkpoint under ``runs/PATTERN`` (a
cell folder or a folder of cells, globs allowed) finished its schedule? Exit 0 when it has, 1 when one has not or
none is there (a run not yet started), 2 when one cannot be read; one line says which. A finished run resumed trains
nothing and writes its results file again: a campaign that runs its cells call after call asks this first.

A classification run that has not started to learn (:mod:`runners.train.chance`) is marked "at chance" in its
state: a run to look at before it takes more GPU time. A run that its spec's ``chance_stop_epoch`` stopped at chance
has finished: it trains no further.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Sequence

from tabulate import tabulate

from ..core.errors import SpecError
from ..core.layout import OVERRIDES_NAME, SET_MARK, cell_folder_name
from ..specs.expected import expected_path, load_expected, series_cell
from ..specs.selection import tier_config
from ..specs.spec import find_spec, load_spec
from ..train import chance
from ..train import checkpoint as ckpt_io
from ..train.table import TrainTableConfig
from .projection import load_step_rates, projections, series_projection



@dataclass
class CellProgress:
    """One training cell's checkpoint, summarized."""

    spec_id: str
    folder: str  # the tier, or "<tier>-set-<key>" and on a second line the --set texts that made it
    cell: str  # "<row> / <task>", or the cell folder's name when the spec no longer names it
    epochs_done: int
    epochs: Optional[int]
    steps_into_epoch: int
    last_val: Optional[float]
    cut_val: Optional[float]  # the evaluation at the last deadline, mid-epoch
    best: Optional[dict]
    hours: Optional[float]
    projected_hours: Optional[float]
    problem: Optional[str] = None  # why the checkpoint could not be read
    paper: Optional[float] = None  # the paper's value of the cell (its expected file), for comparison only
    chance_epochs: Optional[int] = None  # complete epochs, all with the training loss of chance (see the module)
    cards: tuple[str, ...] = ()  # the devices its calls trained on, in order (the checkpoint's segments)

    stop_epoch: Optional[int] = None  # the config's chance_stop_epoch (a run at chance then stops)

    @property
    def finished(self) -> bool:
        """At the end of its schedule, or stopped at chance (runners/train/chance.py)."""
        if self.problem is not None or self.epochs is None:
            return False
        stopped = self.stop_epoch is not None and (self.chance_epochs or 0) >= self.stop_epoch
        return self.epochs_done >= self.epochs or stopped


@lru_cache(maxsize=None)
def _cell_names(spec_id: str, tier: str) -> dict[str, tuple[str, str]]:
    """{cell folder name: (row, task)} of every training cell of ``spec_id`` at ``tier`` (both data variants; read
    once per spec and tier)."""
    try:
        spec = load_spec(find_spec(spec_id))
    except SpecError:
        return {}
    if tier not in spec.tiers:
        return {}
    names: dict[str, tuple[str, str]] = {}
    variants = ["release"] + (["suite"] if spec.tiers[tier].suite_data is not None else [])
    for data in variants:
        cfg = tier_config(spec, tier, data)
        if isinstance(cfg, TrainTableConfig):
            names.update({cell_folder_name(row, col): (row, col) for row in cfg.models for col in cfg.tasks})
    return names


@lru_cache(maxsize=None)
def _expected_of(spec_id: str) -> Optional[dict]:
    """The expected file of ``spec_id`` (read once per spec; None where it cannot be read)."""
    try:
        return load_expected(expected_path(spec_id))
    except SpecError:
        return None


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(float(value)) else None


def read_overrides(folder: Path) -> list[str]:
    """The ``--set`` texts that made a ``<tier>-set-<key>`` folder (its overrides.json); ValueError naming the file
    where they were not recorded or cannot be read."""
    path = folder / OVERRIDES_NAME
    if not path.is_file():
        raise ValueError(f"no {OVERRIDES_NAME}: overrides not recorded")
    try:
        texts = json.loads(path.read_text(encoding="utf-8"))["set"]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise TypeError("'set' is not a list of strings")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable: {' '.join(str(exc).split())}") from None
    return texts


def folder_overrides(folder: Path) -> str:
    """The ``--set`` texts that made a ``<tier>-set-<key>`` folder, as one line (or why they cannot be told)."""
    try:
        return " ".join(f"--set {t}" for t in read_overrides(folder))
    except ValueError as exc:
        return f"({exc})"


def cell_of(spec_id: str, folder: str, cell_dir: str) -> Optional[tuple[str, str]]:
    """(row, task) of the cell folder ``cell_dir`` of ``runs/<spec_id>/<folder>/`` (a tier or a configuration's
    folder), or None where the spec no longer names it."""
    return _cell_names(spec_id, folder.split(SET_MARK)[0]).get(cell_dir)


def summarize(path: Path, runs: Path, rates: list) -> CellProgress:
    """The :class:`CellProgress` of ``runs/<spec>/<folder>/<cell>/checkpoint.pt``; an unreadable checkpoint gives one
    with ``problem`` set (one line naming the file)."""
    spec_id, folder, cell_dir = path.relative_to(runs).parts[:3]
    tier = folder.split(SET_MARK)[0]
    row_task = cell_of(spec_id, folder, cell_dir)
    if SET_MARK in folder:
        folder = f"{folder}\n{folder_overrides(path.parent.parent)}"
    cell = f"{row_task[0]} / {row_task[1]}" if row_task else cell_dir
    empty = CellProgress(spec_id, folder, cell, 0, None, 0, None, None, None, None, None)
    try:
        ckpt = ckpt_io.load(path, advice="it cannot be resumed")
        history = [h for h in ckpt["history"] if isinstance(h, dict)]
        config, partial = ckpt["config"], ckpt.get("partial") or {}
        if not isinstance(config, dict):
            raise ValueError(f"its 'config' is a {type(config).__name__}, not a mapping of training settings")
        epochs_done, step = int(ckpt["epoch"]), int(ckpt["step"])
        hours = _number(ckpt.get("elapsed_seconds"))
    except (ckpt_io.CheckpointMismatch, KeyError, TypeError, ValueError) as exc:
        empty.problem = f"{path}: {' '.join(str(exc).split())}"
        return empty
    series = series_projection(projections(rates, spec_id, tier), cell) if row_task else None
    projected = series["projected_gpu_hours"] if series else None
    world = int(ckpt.get("world_size") or 1)
    return CellProgress(
        paper=_number((series_cell(_expected_of(spec_id), *row_task) or {}).get("paper")) if row_task else None,
        spec_id=spec_id, folder=folder, cell=cell, epochs_done=epochs_done, epochs=config.get("epochs"),
        steps_into_epoch=step, last_val=_number(history[-1].get("val_metric")) if history else None,
        cut_val=_number(partial.get("val_metric")) if step else None, best=ckpt.get("best"),
        hours=hours * world / 3600 if hours is not None else None, projected_hours=projected,
        chance_epochs=epochs_at_chance(history, ckpt.get("task") or {}), cards=trained_on(ckpt.get("segments")),
        stop_epoch=config.get("chance_stop_epoch"))


def trained_on(segments: Any) -> tuple[str, ...]:
    """The distinct devices a checkpoint's segments record, in order (a segment from before cards were recorded
    names none)."""
    cards: list[str] = []
    for segment in segments if isinstance(segments, list) else []:
        card = segment.get("device") if isinstance(segment, dict) else None
        if isinstance(card, str) and card and card not in cards:
            cards.append(card)
    return tuple(cards)


def epochs_at_chance(history: Sequence[dict], task: dict) -> Optional[int]:
    """:func:`runners.train.chance.epochs_at_chance` of a checkpoint's history and task record."""
    if not isinstance(task, dict):
        return None
    return chance.epochs_at_chance(history, task.get("task_type"), task.get("d_output"))


def training_progress(runs: Path, results_root: Path, specs: Sequence[str] = ()) -> list[CellProgress]:
    """Every cell checkpoint under ``runs`` (those of ``specs`` when given), by spec, folder and cell."""
    rates = load_step_rates(results_root)
    found = sorted(Path(runs).glob(f"*/*/*/{ckpt_io.CHECKPOINT_NAME}"))
    _cell_names.cache_clear()  # the specs and expected files as they are now
    _expected_of.cache_clear()
    return [summarize(p, Path(runs), rates) for p in found if not specs or p.relative_to(runs).parts[0] in specs]


def finished_under(runs: Path, pattern: str) -> tuple[Optional[bool], str]:
    """(True, line) when every checkpoint under ``runs/pattern`` (a cell folder or a folder of cells; globs allowed)
    has finished its schedule, (False, line) when one has not or none is there, (None, line) when one cannot be read;
    the line says which."""
    runs = Path(runs)
    found = sorted(set(runs.glob(f"{pattern}/{ckpt_io.CHECKPOINT_NAME}"))
                   | set(runs.glob(f"{pattern}/*/{ckpt_io.CHECKPOINT_NAME}")))
    if not found:
        return False, f"not finished: no checkpoint under {runs}/{pattern} (not started)"
    cells = [summarize(path, runs, []) for path in found]
    for cell, path in zip(cells, found):
        if cell.problem:
            return None, f"unreadable: {cell.problem}"
        if not cell.finished:
            return False, (f"not finished: {path.parent} at epoch {cell.epochs_done} of {cell.epochs} "
                           f"(+{cell.steps_into_epoch} steps)")
    return True, (f"finished: {len(found)} checkpoint(s) under {runs}/{pattern}, every one at the end of its schedule "
                  f"or stopped at chance")


def progress_rows(cells: Sequence[CellProgress]) -> list[list[str]]:
    """Table rows: spec, folder, cell, the paper's value, epochs, last validation, best, hours so far, projected
    hours, the devices it trained on, state."""
    def pct(v: Optional[float]) -> str:
        return f"{v:.2f}" if v is not None else "-"

    rows = []
    for c in cells:
        if c.problem:
            rows.append([c.spec_id, c.folder, c.cell, "-", "-", "-", "-", "-", "-", "-", f"unreadable: {c.problem}"])
            continue
        epochs = f"{c.epochs_done} of {c.epochs}" + (f" (+{c.steps_into_epoch} steps)" if c.steps_into_epoch else "")
        last = pct(c.last_val) + (f" (cut: {pct(c.cut_val)})" if c.cut_val is not None else "")
        best = c.best if isinstance(c.best, dict) else {}
        best_text = f"{pct(_number(best.get('val')))} (epoch {best.get('epoch')})" if best.get("val") is not None \
            else "-"
        rows.append([c.spec_id, c.folder, c.cell, pct(c.paper), epochs, last, best_text,
                     f"{c.hours:.2f}" if c.hours is not None else "-",
                     f"{c.projected_hours:.1f}" if c.projected_hours is not None else "-",
                     "\n".join(c.cards) or "-",
                     ("finished" if c.finished else "in progress")
                     + (f"; at chance ({c.chance_epochs} epochs)" if c.chance_epochs else "")])
    return rows


PROGRESS_HEADERS = ["spec", "folder", "cell", "paper (test)", "epochs done", "last validation", "best validation",
                    "hours so far", "projected GPU-h", "trained on", "state"]


def progress_table(cells: Sequence[CellProgress]) -> str:
    """The cells as the table ``python -m runners progress`` prints."""
    return tabulate(progress_rows(cells), headers=PROGRESS_HEADERS)
