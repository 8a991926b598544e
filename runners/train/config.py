"""TrainConfig: every knob of the training loop, checked when it is built.

Batch sizes: ``batch_size`` is the global batch of one optimizer step (the number in S4 Table 11
and S4D Table 12). It is split over the processes of a ``torchrun`` launch and over the
``grad_accum`` micro-batches of a step: each forward pass sees
``batch_size / (world_size * grad_accum)`` examples, so neither knob changes what is optimized.
"""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Mapping

from pydantic import Strict

from ..specs.schema import Bool, Choice, Int, Num, Opt, Problem, SettingsError, allowed, settings

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
                    "eval_batch_size", "grad_accum", "log_every_steps", "chance_stop_epoch")


def _err(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"TrainConfig.{field} = {value!r} is not allowed; expected {allowed}")


def _message(found: list[Problem]) -> str:
    """TrainConfig's refusals read "TrainConfig.<field> = <value> is not allowed; expected ..."."""
    first = found[0]
    if first.kind == "unknown":
        return f"unknown TrainConfig fields {sorted(p.key for p in found if p.kind == 'unknown')}"
    if first.kind == "missing":
        return f"missing required TrainConfig fields {[p.key for p in found if p.kind == 'missing']}"
    if first.key and first.tail:
        return f"TrainConfig.{first.key} = {first.value!r} is not allowed; {first.tail}"
    return first.text


#: the types of TrainConfig's fields, each with the phrase its refusal ends with
PositiveNum = Num(0, lo_open=True, tail="expected a number > 0")
NonNegativeNum = Num(0, tail="expected a number >= 0")
Fraction = Num(0, 1, lo_open=True, hi_open=True, tail="expected a number in (0, 1)")
Beta = Num(0, 1, hi_open=True)
Betas = Annotated[tuple[Beta, Beta], Strict(False), allowed("expected two numbers in [0, 1)")]
PositiveInt = Int(1, tail="expected an integer >= 1")
NonNegativeInt = Int(0, tail="expected an integer >= 0")
OptionalPositiveNum = Opt(Num(0, lo_open=True, tail="expected None or a number > 0"))
OptionalPositiveInt = Opt(Int(1, tail="expected None or an integer >= 1"))
OptionalNonNegativeInt = Opt(Int(0, tail="expected None or an integer >= 0"))
StepEpochs = Opt(Int(1, tail="expected an integer >= 1 (required by scheduler 'step')"))
StepGamma = Opt(Num(0, 1, lo_open=True, tail="expected a number in (0, 1] (required by scheduler 'step')"))
LogEvery = Int(0, tail="expected an integer >= 0 (0: no step log)")
Seed = Int(0, 2**32 - 1, tail="expected an integer in [0, 2**32 - 1] (numpy's seed range)")
Optimizer = Choice(OPTIMIZERS, tail=f"expected one of {list(OPTIMIZERS)}")
Scheduler = Choice(SCHEDULERS, tail=f"expected one of {list(SCHEDULERS)}")
Amp = Choice(AMP_MODES, tail=f"expected one of {list(AMP_MODES)}")
Monitor = Opt(Choice(MONITORS, tail=f"expected None or one of {list(MONITORS)}"))


@settings(kw_only=True, message=_message)
class TrainConfig:
    """Training hyperparameters; invalid values raise ValueError naming the field (pydantic checks each field's type
    and range, ``__post_init__`` the rules across fields)."""

    lr: PositiveNum
    epochs: PositiveInt
    batch_size: PositiveInt
    optimizer: Optimizer = "adamw"
    weight_decay: NonNegativeNum = 0.0
    # weight decay also on 1-D parameters (biases, norm weights), as the authors' code applies it to every parameter
    # but the SSM's own; default: none on them (ssm_core.optim.param_groups)
    weight_decay_1d: Bool = False
    betas: Betas = (0.9, 0.999)
    scheduler: Scheduler = "cosine"
    warmup_epochs: NonNegativeNum = 0  # linear warmup length, in epochs (fractions allowed); any scheduler
    warmup_steps: OptionalNonNegativeInt = None  # the warmup in optimizer steps instead (not with warmup_epochs)
    # the cosine's length in optimizer steps (default: epochs x steps per epoch), for a configuration that counts
    # the schedule in steps
    schedule_steps: OptionalPositiveInt = None
    patience: NonNegativeInt = 5  # plateau: epochs without improvement before a decay
    plateau_factor: Fraction = 0.2  # plateau: lr multiplier at each decay
    step_epochs: StepEpochs = None  # step: decay every this many epochs
    step_gamma: StepGamma = None  # step: lr multiplier at each decay
    grad_accum: PositiveInt = 1
    amp: Amp = "none"  # one of AMP_MODES
    grad_clip: OptionalPositiveNum = None  # max global gradient norm
    max_minutes: OptionalPositiveNum = None  # wall-clock budget summed over resumed runs
    max_steps_per_epoch: OptionalPositiveInt = None
    eval_batch_size: OptionalPositiveInt = None  # per process; default batch_size
    checkpoint_every_steps: OptionalPositiveInt = None
    # the training loss and largest gradient norm of every this many optimizer steps, in steps.jsonl (0: none)
    log_every_steps: LogEvery = 50
    num_workers: NonNegativeInt = 0
    # the training set kept on the training device and each batch gathered there (same batches, same order, no
    # host work per step); for datasets that can (a ``gather`` method, e.g. LRA's images); others are refused
    device_data: Bool = False
    # under data parallelism (torchrun, CUDA), BatchNorm statistics over the global batch rather than each process's
    # share of it (ssm_core.blocks.SyncBatchNormOverLength): K processes then compute what one process computes at
    # the same global batch, to rounding. One process: no change.
    sync_batchnorm: Bool = False
    seed: Seed = 0
    monitor: Monitor = None  # default "val_acc" (classification) or "val_rmse" (regression)
    # a classification run still at chance after this many epochs stops (runners/train/chance.py): the epoch by which
    # the authors' runs have left chance; None: it trains its whole schedule
    chance_stop_epoch: OptionalPositiveInt = None

    def __post_init__(self) -> None:
        """The rules across fields (each field's own type and range are checked before)."""
        if self.warmup_steps is not None and self.warmup_epochs:
            raise _err("warmup_steps", self.warmup_steps, f"None while warmup_epochs is set ({self.warmup_epochs}): "
                       f"give the warmup in one of them")
        if self.scheduler != "cosine" and self.schedule_steps is not None:
            raise _err("schedule_steps", self.schedule_steps, "None unless the scheduler is 'cosine'")
        if self.scheduler == "cosine" and self.warmup_epochs >= self.epochs:
            raise _err("warmup_epochs", self.warmup_epochs, f"less than epochs ({self.epochs}) for the cosine schedule")
        if self.scheduler == "step" and self.step_epochs is None:
            raise _err("step_epochs", self.step_epochs, "an integer >= 1 (required by scheduler 'step')")
        if self.scheduler == "step" and self.step_gamma is None:
            raise _err("step_gamma", self.step_gamma, "a number in (0, 1] (required by scheduler 'step')")
        if self.batch_size % self.grad_accum:
            raise _err("grad_accum", self.grad_accum, f"a divisor of batch_size ({self.batch_size})")

    def validate(self) -> None:
        """Check the config again (after a field was changed in place): ValueError naming the field."""
        type(self)(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "train config") -> "TrainConfig":
        """Build from a mapping (e.g. a YAML section); unknown or missing keys raise ValueError."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping of TrainConfig fields, got {type(data).__name__}")
        try:
            return cls(**data)
        except SettingsError as exc:
            unknown = sorted(p.key for p in exc.problems if p.kind == "unknown")
            if unknown:
                names = sorted(f.name for f in dataclasses.fields(cls))
                raise ValueError(f"{where}: unknown TrainConfig fields {unknown}; allowed: {names}") from None
            raise ValueError(f"{where}: {exc}") from None

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
