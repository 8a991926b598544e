"""Learning-rate schedules as one multiplicative factor applied to every parameter group.

Each group keeps its own starting rate (``initial_lr``: the global lr, or the lower rate of the SSM
parameters, S4 Appendix D.2); the schedule sets ``group["lr"] = initial_lr * factor``, so all
groups move together, as in the official code.

    factor = warmup(step) * main
    warmup(step) = min(1, (step + 1) / warmup_steps)                       (linear warmup)
    cosine:   main = 0.5 * (1 + cos(pi * (step - W) / (T - W)))  for step >= W, else 1
              (S4D Appendix B: "cosine scheduler with 1 epoch warmup and decaying to 0")
    plateau:  main = plateau_factor ** (number of plateaus)  (S4 Appendix D.2: "constant learning
              rate schedule with decay on validation plateau"; a plateau is more than ``patience``
              epochs without a strictly better monitored metric, as torch's ReduceLROnPlateau)
    step:     main = step_gamma ** (epochs_done // step_epochs)   (S4D BIDMC: 0.5 every 100 epochs)
    constant: main = 1

``step`` counts optimizer steps from the start of training; T = epochs * steps_per_epoch, or ``schedule_steps``
where given (the cosine then reaches 0 there, before or after the last epoch, as a step-counting configuration
has it); W = warmup_epochs * steps_per_epoch, or ``warmup_steps`` where given.
The cosine and warmup parts are per step; the plateau and step parts change at epoch ends.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from .config import TrainConfig, monitor_mode


class LRSchedule:
    """Per-step learning-rate factor; its state is a plain dict (checkpointed)."""

    def __init__(self, cfg: TrainConfig, steps_per_epoch: int, monitor: str = "val_acc") -> None:
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.kind = cfg.scheduler
        # the cosine's length and the warmup: in steps where the configuration gives them so (an authors' config
        # that counts steps), else from the epochs
        self.total_steps = cfg.schedule_steps or cfg.epochs * steps_per_epoch
        self.warmup_steps = (cfg.warmup_steps if cfg.warmup_steps is not None
                             else int(round(cfg.warmup_epochs * steps_per_epoch)))
        self.patience = cfg.patience
        self.plateau_factor = cfg.plateau_factor
        self.step_epochs = cfg.step_epochs
        self.step_gamma = cfg.step_gamma
        self.mode = monitor_mode(monitor)
        # mutable state
        self.epochs_done = 0
        self.best: float | None = None
        self.bad_epochs = 0
        self.n_decays = 0

    def factor(self, step: int) -> float:
        """Multiplier of every group's initial lr for optimizer step ``step`` (0-based)."""
        warm = min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        if self.kind == "cosine":
            if step < self.warmup_steps:
                main = 1.0
            else:
                progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
                main = 0.5 * (1.0 + math.cos(math.pi * progress))
        elif self.kind == "plateau":
            main = self.plateau_factor ** self.n_decays
        elif self.kind == "step":
            main = self.step_gamma ** (self.epochs_done // self.step_epochs)
        else:
            main = 1.0
        return warm * main

    def epoch_end(self, metric: float | None) -> None:
        """Record a finished epoch and its monitored validation metric (plateau bookkeeping)."""
        self.epochs_done += 1
        if self.kind != "plateau" or metric is None or math.isnan(metric):
            return
        better = self.best is None or (metric > self.best if self.mode == "max" else metric < self.best)
        if better:
            self.best, self.bad_epochs = float(metric), 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs > self.patience:
                self.n_decays += 1
                self.bad_epochs = 0

    @staticmethod
    def init_groups(optimizer: torch.optim.Optimizer) -> None:
        """Remember each group's starting lr as ``initial_lr`` (kept if already there)."""
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every group's lr for optimizer step ``step``; returns the factor."""
        f = self.factor(step)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] * f
        return f

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_done": self.epochs_done, "best": self.best, "bad_epochs": self.bad_epochs,
                "n_decays": self.n_decays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epochs_done = int(state["epochs_done"])
        self.best = None if state["best"] is None else float(state["best"])
        self.bad_epochs = int(state["bad_epochs"])
        self.n_decays = int(state["n_decays"])
