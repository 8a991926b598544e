"""A step-level learning curve: the training loss and the largest gradient norm of every window of
``TrainConfig.log_every_steps`` optimizer steps, one line per window in ``run_dir/steps.jsonl``.

The epoch's metrics average a collapse inside an epoch away (a loss that jumps within a few steps and recovers,
a gradient that blows up once); this log keeps it. Lines (JSON objects):

- ``step``: the global optimizer step at the window's end (steps done since the run began);
- ``epoch``: the epoch (1-based) the window belongs to; a window never spans two epochs or a checkpoint: one cut
  by an epoch's end, a pause or a checkpoint (``checkpoint_every_steps``) is written then, with fewer ``steps``;
- ``steps``: optimizer steps in the window;
- ``train_loss``: the mean training loss over the window's examples (all processes together);
- ``grad_norm_max``: the largest global gradient norm of the window's steps (the L2 norm over every parameter's
  gradient, as ``clip_grad_norm_`` measures it, before any clipping; fp16 gradients unscaled first; non-finite if
  a step's gradient was), or null when the window has no gradient norm;
- ``lr``: the global learning rate of the window's last step.

Reading the gradients does not change what is computed. The values stay on the device between windows (one host
synchronization per window). The lines are kept in the checkpoint too, and ``steps.jsonl`` is rewritten from it
when a run resumes, as ``metrics.jsonl`` is: a window written after the last checkpoint by a run that was then
killed is dropped, and written again when its steps are redone, so a resumed run's log is the uninterrupted run's.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Optional

import torch
from torch import Tensor

from runners.core.atomic import atomic_path

from . import distributed as dist_io

STEPS_NAME = "steps.jsonl"


def gradient_norm(parameters: Iterable[torch.nn.Parameter]) -> Optional[Tensor]:
    """The global L2 norm of the parameters' gradients (a 0-d tensor on their device; no host synchronization), as
    ``clip_grad_norm_`` measures it; None when no parameter has a gradient."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads, norm_type=2.0) if grads else None


class StepLog:
    """Windows of ``every`` steps (0: off). ``lines``: the windows so far, those of the checkpoint first."""

    def __init__(self, run_dir: Path, every: int, lines: list[dict], accum: Tensor, write: bool):
        self.path, self.every, self.write = Path(run_dir) / STEPS_NAME, every, write
        self.lines = list(lines)
        self._start = accum[[0, 2]].clone()  # (2,): the loss sum and the example count where the window began
        self._norm: Optional[Tensor] = None  # 0-d: the largest gradient norm of the window so far
        self._steps = 0
        if self.write:
            with atomic_path(self.path, fsync=True) as tmp:
                tmp.write_text("".join(json.dumps(line) + "\n" for line in self.lines))

    @property
    def on(self) -> bool:
        return self.every > 0

    def step(self, norm: Optional[Tensor]) -> None:
        """Record one optimizer step's gradient norm (a 0-d tensor, or None)."""
        self._steps += 1
        if norm is not None:
            norm = norm.detach().float()
            self._norm = norm if self._norm is None else torch.maximum(self._norm, norm)

    def due(self, global_step: int) -> bool:
        return self.on and global_step % self.every == 0

    def flush(self, accum: Tensor, global_step: int, epoch: int, lr: float, info: dist_io.DistInfo) -> None:
        """Close the window (if it has a step): one line, appended to the file and kept for the checkpoint.
        Collective under DDP: every process calls it at the same steps."""
        if not self.on or self._steps == 0:
            return
        sums = dist_io.all_reduce_sum(accum[[0, 2]].clone() - self._start, info)  # (2,) over every process
        norm = self._norm if self._norm is not None else torch.full((), math.nan, device=accum.device)
        loss_sum, n, largest = torch.cat([sums, norm.to(sums)[None]]).tolist()
        line = {"step": global_step, "epoch": epoch, "steps": self._steps,
                "train_loss": loss_sum / n if n else None,
                "grad_norm_max": None if self._norm is None else largest, "lr": lr}
        self.lines.append(line)
        if self.write:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        self.restart(accum)

    def restart(self, accum: Tensor) -> None:
        """Begin a window at ``accum``'s current sums (after they were reset, or a line was written)."""
        self._start = accum[[0, 2]].clone()
        self._norm, self._steps = None, 0
