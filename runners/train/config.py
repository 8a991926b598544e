"""TrainConfig: every knob of the training loop, checked when it is built.

Batch sizes: ``batch_size`` is the global batch of one optimizer step (the number in S4 Table 11
and S4D Table 12). It is split over the processes of a ``torchrun`` launch and over the
``grad_accum`` micro-batches of a step: each forward pass sees
``batch_size / (world_size * grad_accum)`` examples, so neither knob changes what is optimized.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

OPTIMIZERS = ("adamw", "adam", "sgd")
#: cosine: cosine decay to 0 with linear warmup (S4D paper); plateau: constant with decay on
#: validation plateau (S4 paper); step: multiply by step_gamma every step_epochs epochs (S4D BIDMC);
#: constant: the learning rate as given.
SCHEDULERS = ("cosine", "plateau", "step", "constant")
#: none: float32; bf16 / fp16: autocast (the SSM layers' position-wise projections and the decoder in that dtype, the
#: SSM kernel, the FFT convolution, the norms and the residual stream in float32); bf16_stream: bf16 autocast with
#: the residual stream, the norms' inputs and outputs and the SSM convolutions' inputs also in bf16 (the kernel, the
#: FFTs and the norms' statistics still in float32; ssm_core.blocks.residual_stream; SequenceModel models only)
AMP_MODES = ("none", "bf16", "fp16", "bf16_stream")
MONITORS = ("val_acc", "val_rmse", "val_loss")

#: Fields that may differ between a checkpoint and the config that resumes it (they do not change
#: what is computed). ``epochs`` may grow except under the cosine schedule, whose length it sets.
RESUMABLE_FIELDS = ("epochs", "max_minutes", "checkpoint_every_steps", "num_workers", "device_data",
                    "eval_batch_size", "grad_accum", "log_every_steps")


def _err(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"TrainConfig.{field} = {value!r} is not allowed; expected {allowed}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(kw_only=True)
class TrainConfig:
    """Training hyperparameters; invalid values raise ValueError naming the field."""

    lr: float
    epochs: int
    batch_size: int
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    # weight decay also on 1-D parameters (biases, norm weights), as the authors' code applies it to every parameter
    # but the SSM's own; default: none on them (ssm_core.optim.param_groups)
    weight_decay_1d: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    scheduler: str = "cosine"
    warmup_epochs: float = 0  # linear warmup length, in epochs (fractions allowed); any scheduler
    patience: int = 5  # plateau: epochs without improvement before a decay
    plateau_factor: float = 0.2  # plateau: lr multiplier at each decay
    step_epochs: Optional[int] = None  # step: decay every this many epochs
    step_gamma: Optional[float] = None  # step: lr multiplier at each decay
    grad_accum: int = 1
    amp: str = "none"  # one of AMP_MODES
    grad_clip: Optional[float] = None  # max global gradient norm
    max_minutes: Optional[float] = None  # wall-clock budget summed over resumed runs
    max_steps_per_epoch: Optional[int] = None
    eval_batch_size: Optional[int] = None  # per process; default batch_size
    checkpoint_every_steps: Optional[int] = None
    # the training loss and largest gradient norm of every this many optimizer steps, in steps.jsonl (0: none)
    log_every_steps: int = 50
    num_workers: int = 0
    # the training set kept on the training device and each batch gathered there (same batches, same order, no
    # host work per step); for datasets that can (a ``gather`` method, e.g. LRA's images); others are refused
    device_data: bool = False
    # under data parallelism (torchrun, CUDA), BatchNorm statistics over the global batch rather than each process's
    # share of it (ssm_core.blocks.SyncBatchNormOverLength): K processes then compute what one process computes at
    # the same global batch, to rounding. One process: no change.
    sync_batchnorm: bool = False
    seed: int = 0
    monitor: Optional[str] = None  # default "val_acc" (classification) or "val_rmse" (regression)

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        self.validate()

    def validate(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise _err("optimizer", self.optimizer, f"one of {list(OPTIMIZERS)}")
        if not _is_num(self.lr) or self.lr <= 0:
            raise _err("lr", self.lr, "a number > 0")
        if not _is_num(self.weight_decay) or self.weight_decay < 0:
            raise _err("weight_decay", self.weight_decay, "a number >= 0")
        if not isinstance(self.weight_decay_1d, bool):
            raise _err("weight_decay_1d", self.weight_decay_1d, "true or false")
        if (not isinstance(self.betas, tuple) or len(self.betas) != 2
                or not all(_is_num(b) and 0 <= b < 1 for b in self.betas)):
            raise _err("betas", self.betas, "two numbers in [0, 1)")
        if self.scheduler not in SCHEDULERS:
            raise _err("scheduler", self.scheduler, f"one of {list(SCHEDULERS)}")
        if not _is_int(self.epochs) or self.epochs < 1:
            raise _err("epochs", self.epochs, "an integer >= 1")
        if not _is_num(self.warmup_epochs) or self.warmup_epochs < 0:
            raise _err("warmup_epochs", self.warmup_epochs, "a number >= 0")
        if self.scheduler == "cosine" and self.warmup_epochs >= self.epochs:
            raise _err("warmup_epochs", self.warmup_epochs, f"less than epochs ({self.epochs}) for the cosine schedule")
        if not _is_int(self.patience) or self.patience < 0:
            raise _err("patience", self.patience, "an integer >= 0")
        if not _is_num(self.plateau_factor) or not 0 < self.plateau_factor < 1:
            raise _err("plateau_factor", self.plateau_factor, "a number in (0, 1)")
        if self.scheduler == "step" or self.step_epochs is not None:
            if not _is_int(self.step_epochs) or self.step_epochs < 1:
                raise _err("step_epochs", self.step_epochs, "an integer >= 1 (required by scheduler 'step')")
        if self.scheduler == "step" or self.step_gamma is not None:
            if not _is_num(self.step_gamma) or not 0 < self.step_gamma <= 1:
                raise _err("step_gamma", self.step_gamma, "a number in (0, 1] (required by scheduler 'step')")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise _err("batch_size", self.batch_size, "an integer >= 1")
        if not _is_int(self.grad_accum) or self.grad_accum < 1:
            raise _err("grad_accum", self.grad_accum, "an integer >= 1")
        if self.batch_size % self.grad_accum:
            raise _err("grad_accum", self.grad_accum, f"a divisor of batch_size ({self.batch_size})")
        if self.amp not in AMP_MODES:
            raise _err("amp", self.amp, f"one of {list(AMP_MODES)}")
        if self.grad_clip is not None and (not _is_num(self.grad_clip) or self.grad_clip <= 0):
            raise _err("grad_clip", self.grad_clip, "None or a number > 0")
        if self.max_minutes is not None and (not _is_num(self.max_minutes) or self.max_minutes <= 0):
            raise _err("max_minutes", self.max_minutes, "None or a number > 0")
        for name in ("max_steps_per_epoch", "eval_batch_size", "checkpoint_every_steps"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise _err(name, value, "None or an integer >= 1")
        if not _is_int(self.log_every_steps) or self.log_every_steps < 0:
            raise _err("log_every_steps", self.log_every_steps, "an integer >= 0 (0: no step log)")
        if not _is_int(self.num_workers) or self.num_workers < 0:
            raise _err("num_workers", self.num_workers, "an integer >= 0")
        if not isinstance(self.device_data, bool):
            raise _err("device_data", self.device_data, "true or false")
        if not isinstance(self.sync_batchnorm, bool):
            raise _err("sync_batchnorm", self.sync_batchnorm, "true or false")
        if not _is_int(self.seed) or not 0 <= self.seed <= 2**32 - 1:
            raise _err("seed", self.seed, "an integer in [0, 2**32 - 1] (numpy's seed range)")
        if self.monitor is not None and self.monitor not in MONITORS:
            raise _err("monitor", self.monitor, f"None or one of {list(MONITORS)}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "train config") -> "TrainConfig":
        """Build from a mapping (e.g. a YAML section); unknown or missing keys raise ValueError."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping of TrainConfig fields, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{where}: unknown TrainConfig fields {unknown}; allowed: {sorted(names)}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise ValueError(f"{where}: missing required TrainConfig fields {missing}")
        try:
            return cls(**data)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    @staticmethod
    def field_defaults() -> dict[str, Any]:
        """Each field's default: a checkpoint written before a field existed was trained with it."""
        return {f.name: f.default for f in dataclasses.fields(TrainConfig)
                if f.default is not dataclasses.MISSING}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able / ``weights_only``-loadable dict (tuples as lists)."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out

    def resolved_monitor(self, task_type: str) -> str:
        """The validation metric that picks the best epoch, checked against the task type."""
        if self.monitor is None:
            return "val_acc" if task_type == "classification" else "val_rmse"
        if self.monitor == "val_acc" and task_type != "classification":
            raise _err("monitor", self.monitor, f"'val_rmse' or 'val_loss' for a {task_type} task")
        if self.monitor == "val_rmse" and task_type != "regression":
            raise _err("monitor", self.monitor, f"'val_acc' or 'val_loss' for a {task_type} task")
        return self.monitor


def monitor_mode(monitor: str) -> str:
    """"max" for accuracy, "min" for errors and losses."""
    return "max" if monitor == "val_acc" else "min"
