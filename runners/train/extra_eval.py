"""Extra test sets of a training-table cell, evaluated at a given step-size rate (train.table's ``extra_eval``).

S4 Table 5 column 0.5x and S4D Table 11 column 8000 Hz: a model trained on 16 kHz audio is tested on the test
audio decimated to 8 kHz, with its step size Delta multiplied by 2 and no retraining (S4 Section 4.3; the SSM
discretizes its continuous-time parameters with the step dt * rate, ssm_core.layers.SSMLayer ``rate``).

A task of train.table may hold::

    extra_eval: [{column: "0.5x", loader_args: {test_decimation: 2}, rate: 2.0}, ...]   (or one mapping)

``loader_args`` are merged over the task's own loader arguments to load the other test set (only its test
split is used); ``rate`` multiplies the model's step size (1.0: the model as trained, e.g. a model without a
step size). The extra test sets are evaluated at the end of every epoch, on exactly the weights that the loop
evaluates there (``train``'s ``on_step`` hook after an epoch's last step), and kept in
``<run dir>/extra_eval.json``, so the value reported is the one at the best validation epoch, like the task's own
column, and a resumed run keeps the epochs evaluated before. Where that epoch's value is missing (a best epoch
cut short by ``max_minutes``), the final weights are evaluated instead and the cell's note says so.
"""
from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..core.atomic import write_json_atomic
from ..data.base import TaskData
from . import distributed as dist_io
from .config import TrainConfig
from .loop import TrainResult, autocast_dtype, batch_plan, evaluate

EXTRA_KEYS = ("column", "loader_args", "rate")
FILE_NAME = "extra_eval.json"


@dataclass(frozen=True)
class ExtraEval:
    column: str
    loader_args: dict
    rate: float = 1.0

    def signature(self) -> dict[str, Any]:
        return {"column": self.column, "loader_args": self.loader_args, "rate": self.rate}


def parse_extra_evals(raw: Any, where: str) -> list[ExtraEval]:
    """A task's ``extra_eval`` value (None, one mapping or a list of them) -> ExtraEvals; bad input raises
    ValueError naming ``where`` and the key."""
    if raw is None:
        return []
    items = [raw] if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a mapping or a list of mappings, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{at}: expected a mapping with keys {list(EXTRA_KEYS)}, got {item!r}")
        unknown = sorted(set(item) - set(EXTRA_KEYS))
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {unknown}; allowed: {list(EXTRA_KEYS)}")
        column, args, rate = item.get("column"), item.get("loader_args", {}), item.get("rate", 1.0)
        if not isinstance(column, str) or not column.strip():
            raise ValueError(f"{at}.column: needs a non-empty column name, got {column!r}")
        if not isinstance(args, dict):
            raise ValueError(f"{at}.loader_args: expected a mapping of loader arguments, got {args!r}")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"{at}.rate: expected a number > 0 (the step-size multiplier), got {rate!r}")
        out.append(ExtraEval(column, dict(args), float(rate)))
    return out


def has_step_size(model: nn.Module) -> bool:
    """Whether ``model.forward`` takes ``rate`` (SSM backbones do; attention baselines have no step size)."""
    return "rate" in inspect.signature(model.forward).parameters


class AtRate(nn.Module):
    """``model`` run with its step size multiplied by ``rate``: forward(x) = model(x, rate=rate)."""

    def __init__(self, model: nn.Module, rate: float) -> None:
        super().__init__()
        if not has_step_size(model):
            raise ValueError(f"{type(model).__name__} has no step size (its forward takes no 'rate'); evaluate it "
                             f"at rate 1.0 or skip the cell")
        self.model, self.rate = model, rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, rate=self.rate)


class ExtraEvaluator:
    """Evaluates the extra test sets of one cell at every epoch end; ``results`` picks the best epoch's values."""

    def __init__(self, evals: list[tuple[ExtraEval, TaskData]], task: TaskData, cfg: TrainConfig, run_dir: Path,
                 device: torch.device) -> None:
        for ev, extra in evals:
            same = (extra.d_output, extra.d_input, extra.task_type, extra.vocab_size, extra.dual)
            want = (task.d_output, task.d_input, task.task_type, task.vocab_size, task.dual)
            if same != want:
                raise ValueError(f"extra_eval {ev.column!r}: its test set has (d_output, d_input, task_type, "
                                 f"vocab_size, dual) = {same}, the trained task {want}")
        self.evals, self.cfg, self.device = evals, cfg, torch.device(device)
        self.path = Path(run_dir) / FILE_NAME
        self.amp_dtype = autocast_dtype(cfg)
        self.model: Optional[nn.Module] = None
        self.info, self.eval_device = dist_io.setup(self.device)  # as train() will find them
        self.steps_per_epoch = batch_plan(task, cfg, self.info.world_size)[2]
        self.signature = [ev.signature() for ev, _ in evals]
        self.by_epoch: dict[str, dict[str, float]] = {}
        if self.path.exists():  # a resumed run: keep the epochs evaluated before, if made by the same evals
            saved = json.loads(self.path.read_text())
            if saved.get("evals") == self.signature:
                self.by_epoch = saved.get("epochs", {})

    def wrap(self, model_fn: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
        """``model_fn`` that also keeps the model it builds (the loop trains it in place)."""
        def build() -> nn.Module:
            self.model = model_fn()
            return self.model
        return build

    def _evaluate_all(self) -> dict[str, float]:
        out = {}
        for ev, extra in self.evals:
            net = self.model if ev.rate == 1.0 else AtRate(self.model, ev.rate)
            _, metric = evaluate(net, extra.test, extra, self.cfg, self.eval_device, self.info, self.amp_dtype)
            out[ev.column] = metric
        return out

    def on_step(self, epoch: int, step: int) -> None:
        """train()'s hook: after the last step of an epoch the weights are those the loop evaluates next."""
        if step == self.steps_per_epoch:
            self.by_epoch[str(epoch + 1)] = self._evaluate_all()
            if self.info.is_main:
                write_json_atomic(self.path, {"evals": self.signature, "epochs": self.by_epoch})

    def results(self, result: TrainResult) -> dict[str, tuple[Optional[float], str]]:
        """column -> (value, note): the extra test sets at the best validation epoch."""
        best = result.best_epoch
        if best is None:
            return {ev.column: (None, "no valid validation epoch") for ev, _ in self.evals}
        values, where = self.by_epoch.get(str(best)), f"at best val epoch {best}"
        if values is None:  # the final weights: those the loop evaluated last (e.g. an epoch cut by max_minutes)
            values = self._evaluate_all()
            last = result.history[-1]
            where = (f"on the final weights (epoch {last['epoch']}{', partial' if last.get('partial') else ''})"
                     + ("" if last["epoch"] == best else f", not those of the best val epoch {best}, which was "
                        f"not evaluated on this test set"))
        return {ev.column: (values[ev.column], f"test {ev.loader_args or 'as trained'} with step size x{ev.rate:g}, "
                            + where) for ev, _ in self.evals}


def check_extra_evals(tasks: dict[str, dict], models: dict[str, dict], skip: list[list[str]]) -> set[str]:
    """Validate every task's ``extra_eval`` of a train.table config; returns the extra column names.

    Extra columns must not reuse a task's or another extra column's name; a rate other than 1 needs a model
    with a step size, so a Transformer row must skip that column.
    """
    columns: set[str] = set()
    for col, t in tasks.items():
        for ev in parse_extra_evals(t.get("extra_eval"), f"tasks.{col}.extra_eval"):
            if ev.column in tasks or ev.column in columns:
                raise ValueError(f"tasks.{col}.extra_eval: column {ev.column!r} is already a column of this config; "
                                 f"give each extra column its own name")
            columns.add(ev.column)
            for row, m in models.items():
                if ev.rate != 1.0 and m.get("arch") != "ssm" and [row, ev.column] not in skip:
                    raise ValueError(f"tasks.{col}.extra_eval {ev.column!r}: rate {ev.rate:g} needs a step size, which "
                                     f"models.{row} (arch {m.get('arch')}) has not; add [{row}, {ev.column}] to skip")
    return columns
