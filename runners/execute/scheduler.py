"""A training table's cells on several GPUs: one cell per GPU, each in its own process, all resumable.

    python -m runners run SPEC --tier full --data suite --gpus 0,1,2,3 [--stop-after-minutes 9]

The parent lists the (row, task) units the selection trains (runners/train/table.py ``units_to_train``) and starts
one child per GPU: ``python -m runners run SPEC ... --unit ROW|TASK --train-only`` with ``CUDA_VISIBLE_DEVICES`` set
to that GPU, its output in ``runs/<spec>/<tier>/logs/<row>__<task>.log``. A freed GPU takes the next unit.
``--cells-per-gpu K`` runs up to K children on each GPU at once (small models leave most of a large GPU idle; each
child's steps/s is then a shared-GPU rate, and its results say so). Every child trains under the cell's lock from
its checkpoint, so running the same command again resumes every cell where it stopped. With ``--stop-after-minutes``
each child checkpoints and stops at the deadline (exit code ``EXIT_PAUSED``); no unit starts after it.

When every unit has finished, the parent runs the selection once more in its own process: each cell resumes a
finished checkpoint (no training step) and the parent writes the run's one results file.
"""
from __future__ import annotations

import re

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..core.errors import EXIT_PAUSED
from ..core.layout import CELLS_PER_GPU_ENV, cell_folder_name

Unit = tuple[str, str]  # (row, task)
#: launch(unit, gpu, log path, minutes left or None) -> a started process (``poll()``, ``wait()``, ``returncode``)
Launcher = Callable[[Unit, str, Path, "float | None"], "subprocess.Popen"]


@dataclass
class UnitOutcome:
    unit: Unit
    gpu: str
    returncode: int
    seconds: float
    log: Path

    @property
    def status(self) -> str:
        return {0: "finished", EXIT_PAUSED: "paused"}.get(self.returncode, f"failed (exit {self.returncode})")


@dataclass
class Schedule:
    finished: list[UnitOutcome] = field(default_factory=list)
    paused: list[UnitOutcome] = field(default_factory=list)
    failed: list[UnitOutcome] = field(default_factory=list)
    not_started: list[Unit] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (self.paused or self.failed or self.not_started)


def parse_gpus(text: str, available: int | None = None) -> list[str]:
    """'0,1,2,3' -> ['0', '1', '2', '3']; each entry a CUDA device index (ASCII digits), no repeats, and with
    ``available`` (the machine's CUDA device count) each below it."""
    gpus = [g.strip() for g in text.split(",")]
    if not gpus or any(not re.fullmatch(r"[0-9]+", g) for g in gpus) or len(set(gpus)) != len(gpus):
        raise ValueError(f"--gpus {text!r} not allowed; give distinct CUDA device indices separated by commas, "
                         f"e.g. --gpus 0,1,2,3")
    if available is not None:
        missing = [g for g in gpus if int(g) >= available]
        if missing:
            have = f"devices 0-{available - 1}" if available else "no CUDA device"
            raise ValueError(f"--gpus {text}: GPU {', '.join(missing)} not on this machine ({have})")
    return gpus


def unit_slug(unit: Unit) -> str:
    """The name of a unit's log file: its cell folder's name (runners/core/layout.py)."""
    return cell_folder_name(*unit)


def schedule_units(units: Sequence[Unit], gpus: Sequence[str], launch: Launcher, log_dir: Path,
                   deadline: float | None = None, poll_seconds: float = 1.0,
                   echo: Callable[[str], None] = print, per_gpu: int = 1) -> Schedule:
    """Run ``units`` on ``gpus``, up to ``per_gpu`` at a time on each GPU, in order; return what became of each."""
    if per_gpu < 1:
        raise ValueError(f"per_gpu must be >= 1, got {per_gpu}")
    log_dir.mkdir(parents=True, exist_ok=True)
    queue = list(units)
    free = [(gpu, k) for k in range(per_gpu) for gpu in gpus]  # slots: every GPU's first, then its second, ...
    running: dict[tuple[str, int], tuple[Unit, subprocess.Popen, float, Path]] = {}
    out = Schedule()
    while queue or running:
        while queue and free and (deadline is None or time.time() < deadline):
            unit, slot = queue.pop(0), free.pop(0)
            gpu = slot[0]
            log = log_dir / f"{unit_slug(unit)}.log"
            left = None if deadline is None else max((deadline - time.time()) / 60.0, 0.0)
            running[slot] = (unit, launch(unit, gpu, log, left), time.time(), log)
            echo(f"[gpu {gpu}] start {unit[0]} / {unit[1]} (log: {log})")
        if queue and not running:  # the deadline passed before these could start
            out.not_started += queue
            queue = []
            break
        time.sleep(poll_seconds)
        for slot, (unit, proc, t0, log) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[slot]
            free.append(slot)
            gpu = slot[0]
            outcome = UnitOutcome(unit, gpu, proc.returncode, time.time() - t0, log)
            {0: out.finished, EXIT_PAUSED: out.paused}.get(proc.returncode, out.failed).append(outcome)
            echo(f"[gpu {gpu}] {outcome.status}: {unit[0]} / {unit[1]} after {outcome.seconds / 60:.1f} min")
        if deadline is not None and time.time() >= deadline and queue:
            out.not_started += queue
            queue = []
    return out


def child_launcher(spec_path: Path, tier: str, data: str, patterns: Sequence[str], env: dict | None = None,
                   n_gpus: int = 1, extra_args: Sequence[str] = (), per_gpu: int = 1) -> Launcher:
    """A launcher that trains one unit of the spec per process on the GPU it is given; ``extra_args``: more
    options of ``run`` for every child (the parent's --set / --seed / --log); ``per_gpu``: children per GPU."""

    def launch(unit: Unit, gpu: str, log: Path, minutes_left: float | None) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "runners", "run", str(spec_path), "--tier", tier, "--data", data,
               "--unit", f"{unit[0]}|{unit[1]}", "--train-only", "--no-progress"]
        for p in patterns:
            cmd += ["--cells", p]
        cmd += list(extra_args)
        if minutes_left is not None:
            cmd += ["--stop-after-minutes", f"{minutes_left:.3f}"]
        child_env = {**os.environ, **(env or {}), "CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1",
                     CELLS_PER_GPU_ENV: str(per_gpu)}
        # each child gets its share of the host's cores: torch's default (every core per process) oversubscribes
        # the host with several children and slowed each training step about 4x on a 4-GPU machine
        child_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, n_gpus * per_gpu))))
        with open(log, "ab") as fh:
            fh.write(f"$ CUDA_VISIBLE_DEVICES={gpu} {' '.join(cmd)}\n".encode())
            return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=child_env)

    return launch


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text[-lines:])
