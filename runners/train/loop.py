"""The training loop shared by every training table, in one file (nanoGPT style).

    result = train(lambda: MyModel(...), task, TrainConfig(lr=0.01, epochs=40, batch_size=50),
                   run_dir=Path("work/listops"), device=torch.device("cuda"))

What it does, in order:
  * checks the config against the task (batch divisible by processes x accumulation, enough data,
    monitor fits the task type) before anything is built;
  * builds the model with the seed, AdamW over ``ssm_core.optim.param_groups`` (SSM parameters at
    their own lr, no decay: S4 Appendix D.2), the lr schedule and (fp16 only) a gradient scaler;
  * resumes from ``run_dir/checkpoint.pt`` if it is there (refusing one made by another config);
  * per epoch: a seeded permutation of the training set (seed + epoch, so an epoch's order never
    depends on what ran before; a resumed epoch skips the batches already done; with ``device_data`` the same
    batches are gathered on the device from a copy of the training set kept there), optimizer steps of
    ``batch_size`` examples split into ``grad_accum`` micro-batches (and over processes under
    ``torchrun``, whose BatchNorm statistics cover the global batch with ``sync_batchnorm``), optional autocast
    (``amp``; with ``bf16_stream`` also a bf16 residual stream) and gradient clipping, the model's forward and
    backward optionally replayed from CUDA graphs (SSM_STEP_GRAPHS=1, :mod:`runners.train.step_graph`), then
    validation and test evaluation (under the same autocast);
  * checkpoints every epoch and every ``checkpoint_every_steps`` steps, appends one line per epoch
    to ``run_dir/metrics.jsonl`` and one per ``log_every_steps`` steps (training loss, largest gradient norm) to
    ``run_dir/steps.jsonl`` (:mod:`runners.train.step_log`), and writes ``run_dir/summary.json``;
  * reports the test score at the best validation epoch, as the papers do.

History entries (also the lines of metrics.jsonl): epoch (1-based), train_loss, train_metric,
val_loss, val_metric, test_loss, test_metric, lr (global lr at the epoch's last step), seconds,
steps, partial. Train numbers are averages over the epoch's steps in train mode.

Losses: cross-entropy with accuracy in percent (classification), MSE with RMSE (regression).
Dual-input tasks (LRA Retrieval) call ``model(x1, x2)``. A wall-clock budget (``max_minutes``,
summed over resumed runs) stops training at the end of the step that crosses it (the clock of each run starts
after its first training step, which carries one-off costs: CUDA context, Triton compilation and autotuning,
so a cell is not cut short by its start-up); that partial
epoch is still evaluated and logged with ``"partial": true``, and a later run with a larger budget
continues it from the checkpoint. A ``deadline`` (``time.time()`` value; ``run --stop-after-minutes``) stops this
call the same way with stop reason "paused": the run is not over, and the same command resumes it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from tqdm.auto import tqdm

from runners.core.atomic import atomic_path, write_json_atomic
from runners.core.layout import CELLS_PER_GPU_ENV
from runners.core.provenance import device_name, git_provenance
from runners.data.base import TaskData
from ssm_core.blocks import SequenceModel, residual_stream, sync_batch_norms
from ssm_core.optim import build_optimizer

from . import checkpoint as ckpt_io
from . import distributed as dist_io
from . import step_graph
from .chance import stops_at_chance
from .config import RESUMABLE_FIELDS, TrainConfig, monitor_mode
from .schedule import LRSchedule
from .step_log import StepLog, gradient_norm
from .tb_log import EpochLog

TASK_TYPES = ("classification", "regression")


@dataclass
class TrainResult:
    best_epoch: Optional[int]  # 1-based epoch of the best monitored validation metric
    best_val: Optional[float]  # that validation metric
    test_at_best_val: Optional[float]  # the test metric at that epoch: the number the papers report
    history: list[dict]  # one dict per evaluated epoch (see module docstring)
    steps_per_second: Optional[float]  # optimizer steps per second of training in this call (in the call that
    #                                    trained, when this one resumed a finished run and trained no step)
    peak_memory_mb: Optional[float]  # CUDA peak allocated memory (max over processes; same rule); None on CPU
    n_params: int
    monitor: str = "val_acc"
    # or "max_minutes", or "at_chance" (still at chance after chance_stop_epoch), or "paused" (a deadline stopped
    # this call; not finished)
    stop_reason: str = "completed"
    world_size: int = 1
    segments: list[dict] = dataclasses.field(default_factory=list)  # the code that trained it: see code_segments
    cells_per_gpu: int = 1  # training cells that shared the GPU when steps_per_second was measured (run --gpus)
    elapsed_seconds: Optional[float] = None  # training time of every call together (the max_minutes clock)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# the loop


def train(model_fn: Callable[[], nn.Module], task: TaskData, cfg: TrainConfig, run_dir: Path,
          device: torch.device, progress: bool = True, *, model_config: Optional[dict] = None,
          on_step: Optional[Callable[[int, int], None]] = None, deadline: Optional[float] = None,
          logs: Sequence[str] = ()) -> TrainResult:
    """Train ``model_fn()`` on ``task`` under ``cfg``; resumes from ``run_dir/checkpoint.pt`` if present.

    ``model_config`` (plain JSON-able dict, optional) is stored in the checkpoint and must match on
    resume. ``on_step(epoch_index, steps_done_in_epoch)`` is called after every optimizer step
    (after that step's checkpoint, if any); an exception from it aborts training as a crash would.
    ``deadline`` (a ``time.time()`` value): stop at the first step past it, evaluate and checkpoint the partial
    epoch, and return with stop reason "paused" (see the module docstring).
    ``logs``: extra logs of each epoch beside metrics.jsonl, e.g. ("tensorboard",) (runners/train/tb_log.py).
    """
    cfg.validate()
    check_device_data(task, cfg)
    monitor = cfg.resolved_monitor(task.task_type)
    if task.task_type not in TASK_TYPES:
        raise ValueError(f"task {task.name!r}: task_type {task.task_type!r} is not one of {list(TASK_TYPES)}")
    run_dir, device = Path(run_dir), torch.device(device)
    info, device = dist_io.setup(device)
    return _train(model_fn, task, cfg, run_dir, device, progress and info.is_main, info, monitor, model_config,
                  on_step, deadline, logs)


def _train(model_fn: Callable[[], nn.Module], task: TaskData, cfg: TrainConfig, run_dir: Path, device: torch.device,
           show: bool, info: dist_io.DistInfo, monitor: str, model_config: Optional[dict],
           on_step: Optional[Callable[[int, int], None]], deadline: Optional[float],
           logs: Sequence[str] = ()) -> TrainResult:
    run = _Training(model_fn, task, cfg, run_dir, device, info, monitor, model_config, logs, show)
    run.resume()
    stop_reason = "max_minutes" if run.budget_spent() else "completed"
    while run.epoch < cfg.epochs and stop_reason == "completed" and not run.at_chance():
        stop_reason = run.train_epoch(on_step, deadline)
        run.end_epoch()
    if stop_reason == "completed" and run.at_chance():
        stop_reason = "at_chance"
    return run.finish(stop_reason)


class _Training:
    """One call of :func:`train`: the model, its optimizer and schedule, where training stands (epoch, step, the
    epoch's running sums, the history) and this call's clocks. Read top to bottom: :meth:`resume`,
    :meth:`train_epoch` (with :meth:`step`), :meth:`end_epoch`, :meth:`finish`."""

    def __init__(self, model_fn: Callable[[], nn.Module], task: TaskData, cfg: TrainConfig, run_dir: Path,
                 device: torch.device, info: dist_io.DistInfo, monitor: str, model_config: Optional[dict],
                 logs: Sequence[str], show: bool) -> None:
        self.task, self.cfg, self.run_dir, self.device, self.info = task, cfg, run_dir, device, info
        self.monitor, self.model_config, self.logs, self.show = monitor, model_config, logs, show
        world, rank = info.world_size, info.rank
        self.per_rank, self.micro, self.steps_per_epoch = batch_plan(task, cfg, world)
        # ---- model, optimizer, schedule (every rank builds the same initial model)
        _seed_everything(cfg.seed)
        self.model = model_fn().to(device)
        if cfg.sync_batchnorm and world > 1:
            if device.type != "cuda":
                raise ValueError(f"TrainConfig.sync_batchnorm = True needs CUDA devices under data parallelism (this "
                                 f"run trains on {device.type} in {world} processes); set it to false")
            sync_batch_norms(self.model)
        if rank > 0:  # different dropout masks per process
            _seed_everything(cfg.seed + 1_000_003 * rank)
        check_amp(self.model, cfg)
        self.n_params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.optimizer = build_optimizer(self.model, cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.betas,
                                         decay_1d=cfg.weight_decay_1d)
        LRSchedule.init_groups(self.optimizer)
        self.schedule = LRSchedule(cfg, self.steps_per_epoch, monitor)
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.amp == "fp16")
        self.amp_dtype, self.stream = autocast_dtype(cfg), stream_dtype(cfg)
        self.use_step_graph = step_graph.requested()
        if self.use_step_graph and (why := step_graph.refusal(device, world, cfg.grad_accum, task.dual, cfg.amp)):
            raise ValueError(f"{step_graph.ENV_VAR}=1 asks for the training step from CUDA graphs, but {why}; "
                             f"unset it or set {step_graph.ENV_VAR}=0 to train eagerly")
        self.graphed: Optional[step_graph.GraphedForward] = None  # captured at this call's first step
        # ---- where training stands (fresh; resume() reads a checkpoint's)
        self.epoch, self.step, self.global_step = 0, 0, 0  # epochs finished, steps of the current epoch, steps done
        self.accum = torch.zeros(4, dtype=torch.float64, device=device)  # train sums: loss*n, correct|SE, n, elements
        self.history: list[dict] = []
        self.partial: Optional[dict] = None  # evaluation of an epoch cut short by max_minutes
        self.elapsed_before, self.epoch_seconds_before = 0.0, 0.0  # wall time of earlier runs (budget, epoch timing)
        self.measured_before: Optional[dict] = None  # speed and memory measured by the run that saved the checkpoint
        self.segments: list[dict] = []  # code of the calls that trained it (see code_segments)
        self.ckpt_path = run_dir / ckpt_io.CHECKPOINT_NAME
        self.task_sig = task_signature(task)
        # ---- this call's clocks
        self.budget_s = cfg.max_minutes * 60 if cfg.max_minutes is not None else math.inf
        self.t_clock: Optional[float] = None  # start of this call's budget clock (set after its first step)
        self.t_epoch = time.perf_counter()  # start of the current epoch (or of its part in this call)
        self.steps_this_call, self.train_seconds, self.save_seconds = 0, 0.0, 0.0  # this call's steps, their time
        self.lr_factor = 1.0

    # ------------------------------------------------------------------------------------------ resume
    def resume(self) -> None:
        """Continue from ``run_dir/checkpoint.pt`` where there is one (refusing one made by another config), then
        open the logs: metrics.jsonl rewritten to the checkpoint's history, the step log, the epoch log."""
        cfg, info, device, main = self.cfg, self.info, self.device, self.info.is_main
        step_lines: list[dict] = []  # the step log's windows (steps.jsonl)
        if self.ckpt_path.exists():
            ckpt = ckpt_io.load(self.ckpt_path)
            ckpt_io.check_compatible(ckpt, self.ckpt_path, config=cfg.to_dict(), resumable=RESUMABLE_FIELDS,
                                     model_config=self.model_config, task=self.task_sig,
                                     shapes=ckpt_io.model_shapes(self.model),
                                     config_defaults=TrainConfig.field_defaults())
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.schedule.load_state_dict(ckpt["schedule"])
            self.scaler.load_state_dict(ckpt["scaler"])
            self.epoch, self.step, self.global_step = ckpt["epoch"], ckpt["step"], ckpt["global_step"]
            if main:  # the saved sums are global; the other ranks start theirs from zero
                self.accum.copy_(ckpt["accum"])
            self.history, self.partial = list(ckpt["history"]), ckpt["partial"]
            self.elapsed_before, self.epoch_seconds_before = ckpt["elapsed_seconds"], ckpt["epoch_seconds"]
            self.measured_before = ckpt.get("measured")
            self.segments = list(ckpt.get("segments", [{"git_commit": None, "from_global_step": 0}]))
            step_lines = list(ckpt.get("steps_log", []))  # none in a checkpoint from before the step log
            if ckpt["world_size"] == info.world_size:
                ckpt_io.set_rng_state(ckpt["rng"][info.rank], device)
            else:
                warnings.warn(f"{self.ckpt_path}: saved with {ckpt['world_size']} processes, resumed with "
                              f"{info.world_size}; data order is unchanged but random states (dropout) are reseeded")
                _seed_everything(cfg.seed + 7919 * self.global_step + 1_000_003 * info.rank)
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            _rewrite_jsonl(self.run_dir / "metrics.jsonl", self.history + ([self.partial] if self.partial else []))
        self.step_log = StepLog(self.run_dir, cfg.log_every_steps, step_lines, self.accum, write=main)
        self.epoch_log = EpochLog(self.run_dir, self.logs if main else (), self.task.task_type,
                                  next_epoch=len(self.history) + 1)
        self.net: nn.Module = (DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)
                               if info.world_size > 1 else self.model)
        self.saved_elapsed = self.elapsed_before  # the training clock as the last checkpoint recorded it
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def budget_spent(self) -> bool:
        """Earlier calls spent the ``max_minutes`` budget before the schedule's end: this call trains no step."""
        return self.elapsed_before >= self.budget_s and self.epoch < self.cfg.epochs

    # ------------------------------------------------------------------------------------- one epoch
    def train_epoch(self, on_step: Optional[Callable[[int, int], None]], deadline: Optional[float]) -> str:
        """Optimizer steps from where the epoch stands to its end, or to the budget or the deadline; the stop
        reason ("completed", "max_minutes" or "paused")."""
        cfg, task, device, info = self.cfg, self.task, self.device, self.info
        self.t_epoch, self.partial = time.perf_counter(), None
        batches = iter(_train_loader(task, cfg, info.world_size, info.rank, self.epoch, self.step, self.per_rank,
                                     self.micro, self.steps_per_epoch, device))
        bar = tqdm(total=self.steps_per_epoch, initial=self.step, desc=f"epoch {self.epoch + 1}/{cfg.epochs}",
                   unit="step", disable=not self.show, leave=False, dynamic_ncols=True)
        self.net.train()
        self.lr_factor = self.schedule.factor(self.global_step)
        t_train, self.save_seconds = time.perf_counter(), 0.0
        stop_reason = "completed"
        while self.step < self.steps_per_epoch:
            self.optimizer_step(batches)
            bar.update(1)
            if self.show and (self.step % 10 == 0 or self.step == self.steps_per_epoch):
                bar.set_postfix(loss=f"{(self.accum[0] / self.accum[2]).item():.4f}",
                                lr=f"{cfg.lr * self.lr_factor:.2e}")
            if (cfg.checkpoint_every_steps and self.step % cfg.checkpoint_every_steps == 0
                    and self.step < self.steps_per_epoch):
                self.close_window()  # no window spans a save
                self.save(None)
            if on_step is not None:
                on_step(self.epoch, self.step)
            if self.budget_s < math.inf and dist_io.any_flag(self.elapsed() >= self.budget_s, info, device):
                stop_reason = "max_minutes"
                break
            if deadline is not None and dist_io.any_flag(time.time() >= deadline, info, device):
                stop_reason = "paused"
                break
        bar.close()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # so the steps' GPU time is counted as training time
        self.train_seconds += time.perf_counter() - t_train - self.save_seconds
        return stop_reason

    def optimizer_step(self, batches: Iterator[Any]) -> None:
        """One optimizer step: ``grad_accum`` micro-batches forward and backward (under autocast, replayed from CUDA
        graphs where asked), clipping, the step, the step log; then this call's clock starts if it had not."""
        cfg, task, device, net, world = self.cfg, self.task, self.device, self.net, self.info.world_size
        self.lr_factor = self.schedule.apply(self.optimizer, self.global_step)
        for i in range(cfg.grad_accum):
            x, y = (_to(t, device) for t in next(batches))
            last = i == cfg.grad_accum - 1
            if self.use_step_graph and self.graphed is None:
                self.graphed = step_graph.GraphedForward(net, x, self.amp_dtype)
            with (net.no_sync() if world > 1 and not last else nullcontext()):
                with torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None), \
                        residual_stream(self.stream):
                    out = self.graphed(net, x) if self.graphed is not None else _forward(net, x, task.dual)
                loss = _loss_and_accumulate(out, y, task, self.accum)
                self.scaler.scale(loss / cfg.grad_accum).backward()
        norm = None  # the global gradient norm, for the step log
        if cfg.grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        elif self.step_log.on:
            self.scaler.unscale_(self.optimizer)  # fp16: the gradients' own scale (scaler.step then does not again)
            norm = gradient_norm(self.model.parameters())
        self.step_log.step(norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.steps_this_call == 0:
            self.segments = code_segments(self.segments, self.global_step, device_name(device),
                                          step_graphs=self.use_step_graph)
        self.step, self.global_step = self.step + 1, self.global_step + 1
        self.steps_this_call += 1
        if self.step_log.due(self.global_step):
            self.close_window()
        if self.t_clock is None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.t_clock = time.perf_counter()

    def at_chance(self) -> bool:
        """Still at chance past the spec's ``chance_stop_epoch`` (runners/train/chance.py): stop training."""
        return stops_at_chance(self.history, self.task.task_type, self.task.d_output, self.cfg.chance_stop_epoch)

    def end_epoch(self) -> None:
        """At the end of the epoch (or of the budget): evaluate on val and test, log the epoch, checkpoint."""
        cfg, task, info = self.cfg, self.task, self.info
        self.close_window()  # the window cut by it, if any
        train_loss, train_metric = _finish(dist_io.all_reduce_sum(self.accum.clone(), info), task.task_type)
        val_loss, val_metric = evaluate(self.model, task.val, task, cfg, self.device, info, self.amp_dtype)
        test_loss, test_metric = evaluate(self.model, task.test, task, cfg, self.device, info, self.amp_dtype)
        entry = {"epoch": self.epoch + 1, "train_loss": train_loss, "train_metric": train_metric,
                 "val_loss": val_loss, "val_metric": val_metric, "test_loss": test_loss,
                 "test_metric": test_metric, "lr": cfg.lr * self.lr_factor,
                 "seconds": self.epoch_seconds_before + time.perf_counter() - self.t_epoch, "steps": self.step,
                 "partial": self.step < self.steps_per_epoch}
        if entry["partial"]:  # budget ran out mid-epoch: keep the position, log the evaluation
            self.partial = entry
            self.save(self.partial)
        else:
            self.history.append(entry)
            self.schedule.epoch_end(val_loss if self.monitor == "val_loss" else val_metric)
            self.epoch, self.step, self.epoch_seconds_before = self.epoch + 1, 0, 0.0
            self.accum.zero_()
            self.step_log.restart(self.accum)
            self.t_epoch = time.perf_counter()  # the next epoch's clock starts at this checkpoint
            self.save(None)
        if info.is_main:
            _append_jsonl(self.run_dir / "metrics.jsonl", entry)
            self.epoch_log.write(entry)
            if self.show:
                tqdm.write(_epoch_line(entry, cfg.epochs, task.task_type))

    def finish(self, stop_reason: str) -> TrainResult:
        """The result: the test score at the best validation epoch, this call's speed and memory; summary.json."""
        self.epoch_log.close()
        speed_memory = self.measured()
        full_history = self.history + ([self.partial] if self.partial else [])
        best = best_validation(full_history, self.monitor)
        result = TrainResult(best_epoch=best["epoch"], best_val=best["val"], test_at_best_val=best["test"],
                             history=full_history, steps_per_second=speed_memory["steps_per_second"],
                             peak_memory_mb=speed_memory["peak_memory_mb"], n_params=self.n_params,
                             monitor=self.monitor, stop_reason=stop_reason, world_size=self.info.world_size,
                             segments=self.segments, cells_per_gpu=speed_memory.get("cells_per_gpu") or 1,
                             elapsed_seconds=self.saved_elapsed)
        if self.info.is_main:
            write_json_atomic(self.run_dir / "summary.json", {
                **result.to_dict(), "config": self.cfg.to_dict(), "model_config": self.model_config,
                "task": self.task_sig, "device": str(self.device), "epochs_done": self.epoch})
        dist_io.barrier(self.info)
        return result

    # ---------------------------------------------------------------------------------- clocks and records
    def elapsed(self) -> float:
        """The budget clock: this call's time after its first step (start-up costs excluded, see the module
        docstring) on top of the earlier calls'."""
        return self.elapsed_before + (time.perf_counter() - self.t_clock if self.t_clock is not None else 0.0)

    def close_window(self) -> None:
        """The step log's open window as one line, at the step where training stands (collective under DDP)."""
        self.step_log.flush(self.accum, self.global_step, self.epoch + 1, self.cfg.lr * self.lr_factor, self.info)

    def measured(self) -> dict:
        """Steps/s and CUDA peak memory of this call's training (collective: every rank); kept in the checkpoint,
        so that a later call that trains no step (a finished cell resumed) reports what the training measured."""
        if self.steps_this_call == 0:
            return self.measured_before or {"steps_per_second": None, "peak_memory_mb": None}
        peak = (max(dist_io.gather_objects(torch.cuda.max_memory_allocated(self.device) / 2**20, self.info))
                if self.device.type == "cuda" else None)
        return {"steps_per_second": self.steps_this_call / self.train_seconds if self.train_seconds > 0 else None,
                "peak_memory_mb": peak, "cells_per_gpu": int(os.environ.get(CELLS_PER_GPU_ENV, "1"))}

    def save(self, partial_entry: Optional[dict]) -> None:
        """The checkpoint (collective: every rank gives its random state; the main process writes)."""
        t_save = time.perf_counter()
        speed_memory = self.measured()
        self.saved_elapsed = self.elapsed()
        rng = dist_io.gather_objects(ckpt_io.rng_state(self.device), self.info)
        sums = dist_io.all_reduce_sum(self.accum.clone(), self.info)
        if self.info.is_main:
            ckpt_io.save_atomic({
                "format": ckpt_io.FORMAT, "config": self.cfg.to_dict(), "model_config": self.model_config,
                "task": self.task_sig, "world_size": self.info.world_size,
                "model_shapes": ckpt_io.model_shapes(self.model), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "scaler": self.scaler.state_dict(), "epoch": self.epoch, "step": self.step,
                "global_step": self.global_step, "accum": sums.cpu(), "history": self.history,
                "partial": partial_entry, "best": best_validation(self.history, self.monitor),
                "steps_log": self.step_log.lines, "elapsed_seconds": self.saved_elapsed,
                "epoch_seconds": self.epoch_seconds_before + time.perf_counter() - self.t_epoch,
                "measured": speed_memory, "segments": self.segments, "rng": rng,
            }, self.ckpt_path)
        dist_io.barrier(self.info)  # no process runs ahead of the file on disk
        self.save_seconds += time.perf_counter() - t_save


# ----------------------------------------------------------------------------------------------
# pieces of the loop


def code_segments(segments: list[dict], global_step: int, card: str, step_graphs: bool = False) -> list[dict]:
    """``segments`` with this call's code and card appended when either differs from the last segment's.

    A segment is {"git_commit", "git_dirty", "git_dirty_diff_sha256" (when dirty), "device", "from_global_step"}:
    the code, and the card (``device_name``) it ran on, that trained from that optimizer step on, plus
    "step_graphs": true where the forward and backward were replayed from CUDA graphs (SSM_STEP_GRAPHS=1). A run
    resumed at another commit, on another card or with the graphs switched thus records both, and its result says
    so. A checkpoint written before segments were recorded starts with {"git_commit": None, ...}; one written
    before cards were recorded has segments without "device".
    """
    here = {**git_provenance(), "device": card, **({"step_graphs": True} if step_graphs else {}),
            "from_global_step": global_step}
    code = {k: v for k, v in here.items() if k != "from_global_step"}
    if segments and {k: v for k, v in segments[-1].items() if k != "from_global_step"} == code:
        return segments
    return [*segments, here]


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, task: TaskData, cfg: TrainConfig, device: torch.device,
             info: dist_io.DistInfo, amp_dtype: Optional[torch.dtype] = None) -> tuple[float, float]:
    """(mean loss, metric) over the whole split; each process takes every world_size-th example. Under autocast
    (``amp_dtype``) the residual stream is that of ``cfg.amp`` (:func:`stream_dtype`)."""
    stream = stream_dtype(cfg) if amp_dtype is not None else None
    was_training = model.training
    model.eval()
    indices = list(range(info.rank, len(dataset), info.world_size))
    loader = _loader(dataset, indices, cfg.eval_batch_size or cfg.batch_size, task, cfg, device, seed=0)
    sums = torch.zeros(4, dtype=torch.float64, device=device)
    for x, y in loader:
        x, y = _to(x, device), _to(y, device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None), residual_stream(stream):
            out = _forward(model, x, task.dual)
        _loss_and_accumulate(out, y, task, sums)
    model.train(was_training)
    return _finish(dist_io.all_reduce_sum(sums, info), task.task_type)


def _forward(model: nn.Module, x: Any, dual: bool) -> torch.Tensor:
    return model(*x) if dual else model(x)


def _loss_and_accumulate(out: torch.Tensor, y: torch.Tensor, task: TaskData, sums: torch.Tensor) -> torch.Tensor:
    """Mean loss of the batch; adds [loss * n, correct (or squared error), n, elements] to ``sums``.

    Cross-entropy and accuracy (classification) or MSE and squared error (regression), in float32
    whatever the autocast dtype; the float64 sums stay on the device (no host sync per step).
    """
    n = y.shape[0]
    if out.shape != (n, task.d_output):
        raise ValueError(f"task {task.name!r}: the model returned shape {tuple(out.shape)}, expected "
                         f"(batch, d_output) = ({n}, {task.d_output})")
    out = out.float()
    if task.task_type == "classification":
        loss = F.cross_entropy(out, y)
        hits = (out.argmax(dim=-1) == y).sum()
        elements = n
    else:
        y = y.float().reshape(out.shape)
        loss = F.mse_loss(out, y)
        hits = (out.detach() - y).pow(2).sum()
        elements = y.numel()
    sums[0] += loss.detach().double() * n
    sums[1] += hits.double()
    sums[2] += n
    sums[3] += elements
    return loss


def _finish(sums: torch.Tensor, task_type: str) -> tuple[float, float]:
    """(mean loss, accuracy in percent | RMSE) from the sums of :func:`_loss_and_accumulate`."""
    loss_sum, hits, n, elements = sums.tolist()
    if n == 0:
        return math.nan, math.nan
    metric = 100.0 * hits / n if task_type == "classification" else math.sqrt(hits / elements)
    return loss_sum / n, metric


def batch_plan(task: TaskData, cfg: TrainConfig, world: int) -> tuple[int, int, int]:
    """(examples per process per step, micro-batch size, steps per epoch); bad combinations raise."""
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(f"TrainConfig.batch_size = {cfg.batch_size} must be divisible by world_size x grad_accum "
                         f"= {world} x {cfg.grad_accum} (it is the global batch of one optimizer step)")
    n_train = len(task.train)
    if n_train < cfg.batch_size:
        raise ValueError(f"TrainConfig.batch_size = {cfg.batch_size} is larger than the training set of "
                         f"task {task.name!r} ({n_train} examples)")
    for split in ("val", "test"):
        if len(getattr(task, split)) == 0:
            raise ValueError(f"task {task.name!r}: the {split} split is empty")
    steps = n_train // cfg.batch_size  # the last incomplete batch is dropped
    if cfg.max_steps_per_epoch is not None:
        steps = min(steps, cfg.max_steps_per_epoch)
    per_rank = cfg.batch_size // world
    return per_rank, per_rank // cfg.grad_accum, steps


def _train_loader(task: TaskData, cfg: TrainConfig, world: int, rank: int, epoch: int, start_step: int,
                  per_rank: int, micro: int, steps_per_epoch: int, device: torch.device):
    """This process's micro-batches of ``epoch`` from step ``start_step`` on: a DataLoader, or with
    ``cfg.device_data`` the same batches gathered on the device (:func:`_device_batches`).

    The permutation is torch.randperm seeded with seed + epoch (DistributedSampler); process r takes
    positions r, r + W, r + 2W, ..., so step s of all processes together covers positions
    [s * batch_size, (s + 1) * batch_size) of the permutation, whatever the number of processes.
    """
    sampler = DistributedSampler(task.train, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed,
                                 drop_last=True)
    sampler.set_epoch(epoch)
    indices = list(sampler)[start_step * per_rank: steps_per_epoch * per_rank]
    if cfg.device_data:
        return _device_batches(task.train, indices, micro, device)
    return _loader(task.train, indices, micro, task, cfg, device, seed=cfg.seed + epoch)


def check_device_data(task: TaskData, cfg: TrainConfig) -> None:
    """``cfg.device_data`` needs a training set that gathers its batches on the device (a ``gather`` method)."""
    if cfg.device_data and not callable(getattr(task.train, "gather", None)):
        raise ValueError(f"TrainConfig.device_data = True: the training set of task {task.name!r} "
                         f"({type(task.train).__name__}) cannot gather batches on the device; set device_data "
                         "false for this task")


def _device_batches(dataset: Any, indices: list[int], micro: int, device: torch.device):
    """The micro-batches of ``indices`` (in order, ``micro`` items each) from ``dataset.gather`` on ``device``."""
    positions = torch.tensor(indices, dtype=torch.long)
    for i in range(0, len(indices), micro):
        yield dataset.gather(positions[i:i + micro], device)


def _loader(dataset: Dataset, indices: list[int], batch_size: int, task: TaskData, cfg: TrainConfig,
            device: torch.device, seed: int) -> DataLoader:
    # An explicit generator keeps the DataLoader from drawing its worker seed from the global RNG.
    gen = torch.Generator()
    gen.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=indices, collate_fn=task.collate_fn,
                      num_workers=cfg.num_workers, pin_memory=device.type == "cuda", generator=gen)


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(_to(t, device) for t in x)
    return x.to(device, non_blocking=True)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def task_signature(task: TaskData) -> dict[str, Any]:
    """What a checkpoint records of its task (compared on resume): its sizes, the generator's version where it has
    one, and how the inputs are scaled where the loader says (``info["values"]``, e.g. Pathfinder's x / 255 or
    (x - 127.5) / 127.5): a run never resumes on inputs scaled otherwise than it trained on."""
    extra = {key: task.info[key] for key in ("data_version", "values") if key in task.info}
    return {"name": task.name, "task_type": task.task_type, "seq_len": task.seq_len, "d_output": task.d_output,
            "n_train": len(task.train), "n_val": len(task.val), "n_test": len(task.test), "dual": task.dual,
            **extra}


def autocast_dtype(cfg: TrainConfig) -> Optional[torch.dtype]:
    """The autocast dtype of ``cfg.amp`` (None: full precision)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "bf16_stream": torch.bfloat16}.get(cfg.amp)


def stream_dtype(cfg: TrainConfig) -> Optional[torch.dtype]:
    """The residual stream's dtype of ``cfg.amp`` under autocast (``ssm_core.blocks.residual_stream``; None: the
    parameters' dtype)."""
    return torch.bfloat16 if cfg.amp == "bf16_stream" else None


def check_amp(model: nn.Module, cfg: TrainConfig) -> None:
    """A residual stream in bf16 (``amp: bf16_stream``) needs a model that has one to keep: an ssm_core
    SequenceModel (its encoder, blocks and norms); other models would silently run plain bf16 autocast."""
    if stream_dtype(cfg) is not None and not any(isinstance(m, SequenceModel) for m in model.modules()):
        raise ValueError(f"TrainConfig.amp = {cfg.amp!r} is not allowed for {type(model).__name__}: it keeps the "
                         f"residual stream of an ssm_core SequenceModel in bf16, and this model has none; use "
                         f"amp 'bf16'")


def best_validation(history: list[dict], monitor: str) -> dict[str, Any]:
    """Epoch, monitored validation value and test metric of the best validation epoch (first of ties)."""
    key = "val_loss" if monitor == "val_loss" else "val_metric"
    sign = 1.0 if monitor_mode(monitor) == "max" else -1.0
    best: dict[str, Any] = {"epoch": None, "val": None, "test": None}
    for entry in history:
        v = entry[key]
        if v is None or math.isnan(v):
            continue
        if best["val"] is None or sign * v > sign * best["val"]:
            best = {"epoch": entry["epoch"], "val": v, "test": entry["test_metric"]}
    return best


def _epoch_line(e: dict, epochs: int, task_type: str) -> str:
    m = "acc" if task_type == "classification" else "rmse"
    tail = " (partial: time budget)" if e["partial"] else ""
    return (f"epoch {e['epoch']}/{epochs}: train loss {e['train_loss']:.4f} {m} {e['train_metric']:.4f} | "
            f"val loss {e['val_loss']:.4f} {m} {e['val_metric']:.4f} | test {m} {e['test_metric']:.4f} | "
            f"lr {e['lr']:.2e} | {e['steps']} steps {e['seconds']:.1f}s{tail}")


def _append_jsonl(path: Path, entry: dict) -> None:
    """One whole line per call, flushed and fsynced, so a crash never leaves half a line."""
    with open(path, "a") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_metrics(path: Path) -> list[dict]:
    """Every line of a cell's metrics.jsonl (one object per evaluated epoch, as training writes it; a line with
    ``"partial": true`` is an epoch cut by a deadline); ValueError naming the file where it cannot be read as one."""
    try:
        lines = [json.loads(text) for text in Path(path).read_text(encoding="utf-8").splitlines() if text.strip()]
    except FileNotFoundError:
        raise ValueError(f"{path}: no such metrics file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a metrics.jsonl (one JSON object per line): {exc}") from None
    if not all(isinstance(h, dict) and "epoch" in h for h in lines):
        raise ValueError(f"{path}: every line must be an object with 'epoch'")
    return lines


def _rewrite_jsonl(path: Path, entries: list[dict]) -> None:
    """Make metrics.jsonl agree with the checkpoint's history (atomically) when a run starts."""
    with atomic_path(path, fsync=True) as tmp:
        tmp.write_text("".join(json.dumps(e) + "\n" for e in entries))
