"""GPU: where one full-configuration training step's time goes, and the training loop's step rate.

    python -m benchmarks.diagnostics.train_step_profile s4d-table-6 Path-X S4D --steps 60 --profile-steps 8 \\
        --output profile.json

Builds the cell's model as the training table does (``full_step_rate.cell_setup``) and trains it with the suite's
own loop (``runners.train.loop.train``: its data loader, optimizer and schedule; no checkpoint within the epoch) on
random images of the task's shape (uint8 pixels scaled as the loader scales them), one epoch of ``--steps`` steps.
The rate is the steady one: steps from the WARMUP_STEPS-th to the last over the time between them (the GPU
synchronized at both ends); the loop's own count, which includes its start-up, is printed beside. With ``--profile-steps K`` a second run records K steps
under ``torch.profiler`` (after 4 unrecorded ones) and splits each step's wall time into what the GPU ran, by
part of the model, and the time the GPU sat idle ("host gaps": waiting for the host to issue work); the host time
spent fetching batches from the data loader is given beside (it overlaps the GPU's work unless the GPU waits).

A kernel is put in the part of the first CPU op, from the one that launched it outwards, whose name matches a part's
pattern (``PARTS``); kernels run by a CUDA graph replay (the SSM kernel's graph) are "SSM kernel generation".
``--set KEY=VALUE`` sets a TrainConfig field (VALUE read as YAML) for the run, e.g. ``--set amp=bf16``.

A same-process A/B: ``--candidate KEY=VALUE`` (repeatable) also times the cell with those fields set on top of the
``--set`` ones, the two alternated ``--rounds`` times (baseline, candidate, baseline, ...; each a fresh model and
loop on the same data); each rate is printed, then the median of each and the candidate's step time against the
baseline's. With ``--profile-steps`` both are profiled. E.g. the bf16 residual stream against today's bf16 step:

    python -m benchmarks.diagnostics.train_step_profile s4d-table-6 Path-X S4D --steps 80 --rounds 2 \
        --candidate amp=bf16_stream --profile-steps 6 --output ab.json

``--candidate-env NAME=VALUE`` (repeatable) sets an environment variable for the candidate's runs only (restored
after each), with or without ``--candidate``: e.g. ``--candidate-env SSM_STEP_GRAPHS=1``, the training step replayed
from CUDA graphs, against the eager step. (Under it the profile's parts go by the kernels' own names: the op that
launches them is the graph's replay.)

Under ``torchrun --nproc_per_node K`` every process trains its share of each batch (the loop's data parallelism;
``--set sync_batchnorm=true`` keeps BatchNorm's statistics over the global batch) and the first prints and writes;
``ddp_step_ab.py`` times one GPU against K this way.

``--record --n-train N`` (the cell's configuration as the spec gives it, no ``--set`` or ``--batch``) also writes a
step-rate record under ``results/step-rates/`` (``runners/report/projection.py``): the steady rate and, for each table
cell the row and task serve (the release row, and the suite-data row where the tier has one), the projected
GPU-hours of its schedule, epochs x (N // batch) steps at that rate. ``run --dry-run`` and the report show them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

import torch
import yaml

from runners.core.atomic import write_json_atomic
from runners.core.layout import RESULTS_DIR
from runners.core.provenance import git_provenance, utc_now
from runners.data.base import TaskData
from runners.data.lra.common import ImageSequenceDataset, stack_collate
from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.config import TrainConfig
from runners.train.loop import train
from runners.train.table import unit_cells

from .full_step_rate import SHAPES, add_cell_arguments, cell_setup

#: (part, pattern on a kernel's name or on the names of the CPU ops around its launch), first match wins; the
#: kernel's own name is tried first, then its launching op and that op's parents, innermost first
PARTS = [
    ("communication (NCCL)", r"nccl|all_reduce|all_gather|allreduce|allgather|c10d::"),
    ("SSM kernel generation", r"vandermonde|cauchy|GraphLaunch|_kernel_fn|DiagKernel|DPLRKernel"),
    ("FFT convolution: cuFFT", r"fft"),
    ("FFT convolution: pointwise passes", r"_pack_kernel|_unpack_kernel|_spectral_(fwd|bwd)_kernel|_full_spectrum"
                                         r"|KernelConv|FFTConv|fft_conv|kernel_conv"),
    ("optimizer", r"multi_tensor|adam|Adam|Optimizer\.step|_foreach"),
    ("norm", r"batch_norm|layer_norm|BatchNorm|LayerNorm|bn_fw|bn_bw|welford"),
    ("linear / GLU", r"gemm|gemv|cutlass|xmma|cublas|aten::(addmm|mm|bmm|linear|glu)|Addmm|MmBackward|GluBackward"),
    ("activation / dropout", r"gelu|Gelu|dropout|Dropout"),
    ("loss / pooling / decoder", r"cross_entropy|nll_loss|log_softmax|aten::mean|MeanBackward|NllLoss|LogSoftmax"),
    ("layout copies", r"aten::copy_|aten::contiguous|aten::clone|CloneBackward|TransposeBackward|aten::transpose"),
    ("residual / other elementwise", r"aten::add|aten::mul|aten::sub|aten::div|AddBackward|MulBackward|aten::fill_"
                                     r"|aten::zero_|aten::sum"),
]


def synthetic_task(task: str, n_train: int, n_eval: int, seed: int = 0) -> TaskData:
    """Random uint8 images of an LRA image task's shape in the loader's dataset class (x / 255 in [0, 1])."""
    length, d_input, vocab, classes = SHAPES[task]
    if vocab is not None or d_input != 1:
        raise SystemExit(f"train_step_profile: {task} is not an image task (it needs {vocab} tokens)")
    side = int(round(length ** 0.5))
    g = torch.Generator().manual_seed(seed)
    n = n_train + 2 * n_eval
    images = torch.randint(0, 256, (n, side, side), generator=g, dtype=torch.uint8)  # (N, R, R)
    labels = torch.randint(0, classes, (n,), generator=g)
    idx = torch.arange(n)
    parts = {"train": idx[:n_train], "val": idx[n_train:n_train + n_eval], "test": idx[n_train + n_eval:]}
    ds = {k: ImageSequenceDataset(images, labels, v) for k, v in parts.items()}
    return TaskData(name=task, train=ds["train"], val=ds["val"], test=ds["test"], seq_len=length, d_output=classes,
                    d_input=1, collate_fn=stack_collate)


#: steps left out of the steady rate (Triton compilation and autotuning, cuFFT plans, CUDA graph captures)
WARMUP_STEPS = 10


def _part_of(names: list[str]) -> str:
    for name in names:
        for part, pattern in PARTS:
            if re.search(pattern, name):
                return part
    return "unclassified"


def breakdown(prof: torch.profiler.profile, steps: int) -> dict:
    """Per-step milliseconds by part, GPU busy and idle time, and the data loader's host time."""
    events = prof.events()
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name.startswith("ProfilerStep")]
    if not windows:
        raise SystemExit("train_step_profile: the profiler recorded no step")
    t0, t1 = min(w[0] for w in windows), max(w[1] for w in windows)
    by_part: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, float] = defaultdict(float)
    intervals = []
    loader_us = 0.0
    for e in events:
        inside = t0 <= e.time_range.start <= t1
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if inside:
                intervals.append((e.time_range.start, e.time_range.end))
            continue
        if inside and "DataLoader" in e.name and "__next__" in e.name:
            loader_us += e.time_range.end - e.time_range.start
        if not inside:
            continue
        for k in e.kernels:
            chain, op = [k.name, e.name], e.cpu_parent
            while op is not None:
                chain.append(op.name)
                op = op.cpu_parent
            by_part[_part_of(chain)] += k.duration
            by_kernel[k.name[:90]] += k.duration
    busy, end = 0.0, -1.0
    for a, b in sorted(intervals):
        if b <= end:
            continue
        busy += b - max(a, end)
        end = b
    wall = (t1 - t0) / steps / 1e3
    ms = {part: v / steps / 1e3 for part, v in sorted(by_part.items(), key=lambda kv: -kv[1])}
    top = dict(sorted(((n, v / steps / 1e3) for n, v in by_kernel.items()), key=lambda kv: -kv[1])[:25])
    return {"step_wall_ms": wall, "gpu_busy_ms": busy / steps / 1e3, "host_gaps_ms": wall - busy / steps / 1e3,
            "parts_ms": ms, "data_loader_host_ms": loader_us / steps / 1e3, "top_kernels_ms": top}


def run_once(model_fn, task: TaskData, cfg: TrainConfig, model_config: dict, steps: int, profile_steps: int,
             progress: bool = False):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as run_dir:
        if not profile_steps:
            marks: dict[int, float] = {}
            first = min(WARMUP_STEPS, steps - 1)

            def mark(epoch: int, step: int) -> None:
                if step in (first, steps):
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    marks[step] = time.perf_counter()

            res = train(model_fn, task, cfg, Path(run_dir), device, progress=progress, model_config=model_config,
                        on_step=mark)
            return res, (steps - first) / (marks[steps] - marks[first])
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        sched = torch.profiler.schedule(wait=2, warmup=2, active=profile_steps, repeat=1)
        with torch.profiler.profile(activities=activities, schedule=sched) as prof:
            res = train(model_fn, task, cfg, Path(run_dir), device, progress=progress, model_config=model_config,
                        on_step=lambda epoch, step: prof.step())
        return res, breakdown(prof, profile_steps)


def with_sets(train_dict: dict, sets: list[str]) -> dict:
    """``train_dict`` with each KEY=VALUE of ``sets`` (VALUE read as YAML)."""
    out = dict(train_dict)
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"train_step_profile: {item!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


class CandidateEnvironment:
    """A context in which each NAME=VALUE of ``items`` is set in ``os.environ``, and put back as it was after."""

    def __init__(self, items: list[str]):
        self.values: dict[str, str] = {}
        for item in items:
            name, sep, value = item.partition("=")
            if not sep or not name or name[0].isdigit() or not name.replace("_", "").isalnum():
                raise SystemExit(f"train_step_profile: --candidate-env {item!r}: expected NAME=VALUE with NAME made "
                                 "of letters, digits and '_'")
            self.values[name] = value
        self.saved: dict[str, Optional[str]] = {}

    def __enter__(self) -> None:
        self.saved = {name: os.environ.get(name) for name in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _print_profile(prof: dict, label: str) -> None:
    print(f"  {label}step {prof['step_wall_ms']:.2f} ms under the profiler: GPU busy {prof['gpu_busy_ms']:.2f} ms, "
          f"idle (host gaps) {prof['host_gaps_ms']:.2f} ms; data loader host time "
          f"{prof['data_loader_host_ms']:.2f} ms")
    for part, v in prof["parts_ms"].items():
        print(f"    {part:40s} {v:8.3f} ms  {100 * v / prof['step_wall_ms']:5.1f} %")
    print("  top kernels:")
    for name, v in list(prof["top_kernels_ms"].items())[:15]:
        print(f"    {v:8.3f} ms  {name}")


def code_root() -> str:
    """The folder the suite's ``runners`` package was imported from, which checkout's code this run timed: '.' for
    the working folder (the checkout this runs in), a path relative to it for a folder inside it, and the absolute
    path only for one outside it (an installed copy; a record of the run would then name this machine)."""
    import runners

    root, here = Path(runners.__file__).resolve().parents[1], Path.cwd().resolve()
    return str(root.relative_to(here)) if root.is_relative_to(here) else str(root)


def launch() -> tuple[int, int]:
    """(processes, this process's rank) of a torchrun launch; (1, 0) without one. Read here rather than through
    runners.train.distributed, so that this script also times older checkouts (ddp_step_ab.py --baseline-tree)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        raise SystemExit("train_step_profile: WORLD_SIZE and RANK must be integers (as torchrun sets them)") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_arguments(parser)
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: the cell's)")
    parser.add_argument("--steps", type=int, default=60, help="training steps of the timed run")
    parser.add_argument("--profile-steps", type=int, default=0, help="steps recorded by the profiler (0: none)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field")
    parser.add_argument("--candidate", action="append", default=[], metavar="KEY=VALUE",
                        help="A/B in this process: also time the cell with this TrainConfig field set (on top of "
                             "--set), alternating with the baseline, e.g. --candidate amp=bf16_stream")
    parser.add_argument("--candidate-env", action="append", default=[], metavar="NAME=VALUE",
                        help="A/B in this process: the candidate runs with this environment variable set (with or "
                             "without --candidate), e.g. --candidate-env SSM_STEP_GRAPHS=1")
    parser.add_argument("--rounds", type=int, default=2, help="with a candidate: how many times the baseline and "
                        "the candidate are each timed, alternately (default 2)")
    parser.add_argument("--label", default="", help="a name for this run in the output")
    parser.add_argument("--output", default=None, help="JSON file to write")
    parser.add_argument("--progress", action="store_true", help="the loop's progress bar (it reads the loss on the "
                        "host every 10 steps)")
    parser.add_argument("--record", action="store_true", help="write a step-rate record under results/step-rates/")
    parser.add_argument("--n-train", type=int, default=None, help="training examples per epoch (with --record)")
    args = parser.parse_args()
    if args.record and (args.set or args.candidate or args.candidate_env or args.batch or not args.n_train
                        or args.n_train < 1):
        raise SystemExit("train_step_profile: --record measures the cell as configured: give --n-train N (>= 1) "
                         "and no --set, --candidate, --candidate-env or --batch")
    if args.rounds < 1:
        raise SystemExit(f"train_step_profile: --rounds {args.rounds}: expected an integer >= 1")
    world, rank = launch()
    if args.record and world > 1:
        raise SystemExit(f"train_step_profile: --record measures one GPU (this launch has {world} processes)")
    say = print if rank == 0 else (lambda *a, **k: None)
    model_fn, train_dict, model_config = cell_setup(args.spec, args.task, args.row, args.tier)
    train_dict = with_sets(train_dict, args.set)
    if args.batch:
        train_dict["batch_size"] = args.batch
    batch = train_dict["batch_size"]
    n_steps = max(args.steps, args.profile_steps + 6, WARMUP_STEPS + 5)
    train_dict.update(epochs=1, warmup_epochs=0, max_steps_per_epoch=n_steps, checkpoint_every_steps=None,
                      max_minutes=None)
    cfg = TrainConfig.from_dict(train_dict)
    configs = {"baseline": cfg}
    candidate_env = CandidateEnvironment(args.candidate_env)  # checked before anything is timed
    ab = bool(args.candidate or args.candidate_env)
    if ab:  # built (and checked) before anything is timed
        configs["candidate"] = TrainConfig.from_dict(with_sets(train_dict, args.candidate))
    environments = {"baseline": CandidateEnvironment([]), "candidate": candidate_env}
    candidate_name = " ".join(args.candidate + [f"env {item}" for item in args.candidate_env])
    task = synthetic_task(args.task, n_train=batch * n_steps, n_eval=batch)
    out: dict = {"label": args.label, "spec": args.spec, "task": args.task, "row": args.row, "batch": batch,
                 "world_size": world,
                 "sets": args.set, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                 "torch": torch.__version__, "code": Path.cwd().name, "code_root": code_root(),
                 **git_provenance()}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds if ab else 1):
        for name, run_cfg in configs.items():
            t = time.perf_counter()
            with environments[name]:
                res, steady = run_once(model_fn, task, run_cfg, model_config, n_steps, 0, args.progress)
            rates[name].append(steady)
            tag = f"{name} (round {round_ + 1}, amp {run_cfg.amp}) " if ab else ""
            if name == "baseline" and round_ == 0:
                out.update(steps=n_steps, steady_steps_per_second=steady,
                           loop_steps_per_second=res.steps_per_second, peak_memory_mb=res.peak_memory_mb,
                           n_params=res.n_params, run_seconds=time.perf_counter() - t)
            elif name == "candidate" and round_ == 0:
                out["candidate"] = {"sets": args.candidate, "env": args.candidate_env,
                                    "peak_memory_mb": res.peak_memory_mb}
            say(f"{tag}{args.label or args.row}: {args.spec} {args.row} / {args.task} batch {batch}"
                f"{f' over {world} processes ({batch // world} each)' if world > 1 else ''} on "
                f"{out['device']}: {steady:.2f} steps/s from step {WARMUP_STEPS} to {n_steps} (the loop's own "
                f"count, its start-up included: {res.steps_per_second:.2f}), peak {res.peak_memory_mb} MiB",
                flush=True)
    if ab:
        base, cand = (statistics.median(rates[name]) for name in ("baseline", "candidate"))
        out["ab"] = {"rounds": args.rounds, "baseline_steps_per_second": rates["baseline"],
                     "candidate_steps_per_second": rates["candidate"], "baseline_median": base,
                     "candidate_median": cand, "step_time_ratio": base / cand}
        say(f"A/B ({args.rounds} rounds, medians): baseline {base:.2f}, candidate ({candidate_name}) "
            f"{cand:.2f} steps/s: step time {1e3 / base:.2f} -> {1e3 / cand:.2f} ms "
            f"({100 * (1 - base / cand):+.1f} % of the baseline's time saved)", flush=True)
    if args.profile_steps:
        for name, run_cfg in configs.items():
            with environments[name]:
                _, prof = run_once(model_fn, task, run_cfg, model_config, args.profile_steps + 6,
                                   args.profile_steps, args.progress)
            if name == "baseline":
                out["profile"] = prof
            else:
                out["candidate"]["profile"] = prof
            if rank == 0:
                _print_profile(prof, f"{name}: " if ab else "")
    if rank > 0:
        return
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1))
    if args.record:
        path = record_step_rate(args.spec, args.tier, args.row, args.task, batch, args.n_train,
                                out["steady_steps_per_second"], out)
        print(f"step-rate record: {path}")


def record_step_rate(spec_id: str, tier: str, row: str, task: str, batch: int, n_train: int, rate: float,
                     measured: dict) -> Path:
    """Write the step-rate record of one (row, task) of ``spec_id`` at ``tier`` (see runners/report/projection.py)."""
    spec = load_spec(find_spec(spec_id))
    variants = [("release", row)]
    suite = spec.tiers[tier].suite_data
    if suite is not None and row in suite.rows:
        variants.append(("suite", suite.rows[row]))
    cells = []
    for data, name in variants:
        cfg = tier_config(spec, tier, data)
        if name not in cfg.models or task not in cfg.tasks:
            continue
        train_cfg = cfg.cell_train(name, task)
        epochs = int(train_cfg["epochs"])
        steps = epochs * (n_train // int(train_cfg["batch_size"]))
        for r, c in unit_cells(cfg, name, task):
            cells.append({"cell": f"{r}/{c}", "data": data, "series": f"{name} / {task}", "epochs": epochs,
                          "projected_gpu_hours": steps / rate / 3600})
    stamp = utc_now()
    doc = {"spec_id": spec.id, "tier": tier, "row": row, "task": task, "batch": batch, "n_train": n_train,
           "steps_per_second": rate, "device": measured["device"], "recorded": stamp, "cells": cells,
           "measured": "steady steps/s of the suite's training loop on random data of the task's shape "
                       f"(steps {WARMUP_STEPS}..{measured['steps']})", "peak_memory_mb": measured["peak_memory_mb"],
           "torch": measured["torch"], **git_provenance()}
    from runners.report.projection import STEP_RATES  # here, so that the timing runs against older checkouts too

    path = RESULTS_DIR / STEP_RATES / f"{stamp.replace('-', '').replace(':', '')[:15]}_{spec.id}.json"
    write_json_atomic(path, doc)
    return path


if __name__ == "__main__":
    main()
