"""Optional TensorBoard event files beside a cell's metrics.jsonl (``run --log tensorboard``).

One scalar per metrics.jsonl field at each evaluated epoch (step = epoch): loss/{train,val,test},
acc/{train,val,test} (classification, %) or rmse/{train,val,test} (regression), lr, epoch_seconds.
``tensorboard --logdir runs/<spec id>/<tier>`` then shows one run per cell. The writer comes from
``torch.utils.tensorboard`` (needs the ``tensorboard`` package) or ``tensorboardX``: the optional extra
``pip install 'ssm-repro[tensorboard]'``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

#: what ``run --log`` accepts
LOG_KINDS = ("tensorboard",)


class LogUnavailable(RuntimeError):
    """A log was asked for whose package is not installed; the message says what to install."""


def check_logs(logs: Sequence[str]) -> None:
    """Raise ValueError for an unknown kind and LogUnavailable when a kind's package is missing."""
    bad = [k for k in logs if k not in LOG_KINDS]
    if bad:
        raise ValueError(f"--log {bad[0]!r} not allowed; choose one of {list(LOG_KINDS)}")
    if "tensorboard" in logs:
        summary_writer_class()


def summary_writer_class() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise LogUnavailable("--log tensorboard needs the tensorboard package (or tensorboardX), which is not "
                                 "installed: pip install 'ssm-repro[tensorboard]' (or: pip install tensorboard)") \
                from None
    return SummaryWriter


class EpochLog:
    """Writes each epoch's metrics.jsonl entry to the logs in ``kinds`` (none: does nothing)."""

    def __init__(self, run_dir: Path, kinds: Sequence[str], task_type: str, next_epoch: int) -> None:
        check_logs(kinds)
        self.metric = "acc" if task_type == "classification" else "rmse"
        self.writer: Any = None
        if "tensorboard" in kinds:
            # purge_step: a resumed run drops the events of epochs after its checkpoint (a cut-short epoch)
            self.writer = summary_writer_class()(str(run_dir), purge_step=next_epoch)

    def write(self, entry: dict) -> None:
        if self.writer is None:
            return
        step = entry["epoch"]
        for split in ("train", "val", "test"):
            self.writer.add_scalar(f"loss/{split}", entry[f"{split}_loss"], step)
            self.writer.add_scalar(f"{self.metric}/{split}", entry[f"{split}_metric"], step)
        self.writer.add_scalar("lr", entry["lr"], step)
        self.writer.add_scalar("epoch_seconds", entry["seconds"], step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
