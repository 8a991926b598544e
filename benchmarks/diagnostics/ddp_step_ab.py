"""GPU: one cell's training step on one GPU against K GPUs under data parallelism, at the same global batch.

    python -m benchmarks.diagnostics.ddp_step_ab s4d-table-6 Path-X S4D --gpus 4 --rounds 2 --steps 120 \\
        --n-train 160000 --output ab.json

Alternates, ``--rounds`` times, ``train_step_profile.py`` on the first GPU alone (the baseline) and the same under
``torchrun`` on the first K GPUs with ``sync_batchnorm`` (each process B / K examples of every batch, BatchNorm's
statistics over all B: what one GPU computes, to rounding, as tests/test_train.py checks on two GPUs), each run a
fresh process on the cell's model and random images of its task's shape. Prints each steady rate, the medians, the
wall-clock speed-up and, with ``--n-train``, the cell's schedule (its epochs of ``n_train // batch`` steps) in hours
of wall clock and in GPU-hours: K GPUs shorten the wall clock, not the GPU time.

``--profile-steps N`` also records N steps of the last round's K-GPU run under the profiler (after its timed run, so
the rate is unaffected): its first process prints where the step's time goes, and the JSON keeps it.

``--baseline-tree DIR`` runs the one-GPU arm on the suite's code in DIR instead (an earlier commit's ``ssm_core``,
``runners`` and specs, e.g. unpacked with ``git archive``), timed by this checkout's profiler (found behind DIR's own
packages; a DIR with the ``benchmarks`` package times with its own): earlier code on one GPU against this code on K,
in one call on one machine. Each run records the folder its ``runners`` package was imported
from; a baseline run that imported another copy (an installed package takes precedence over DIR) is refused. The
JSON names those folders relative to this checkout (DIR by its name where it lies outside), never by a path of the
machine that ran them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from tabulate import tabulate

from runners.core.atomic import write_json_atomic
from runners.core.provenance import git_provenance, utc_now

from .full_step_rate import add_cell_arguments, cell_setup
from .train_step_profile import with_sets

PROFILE = "benchmarks.diagnostics.train_step_profile"  # run as a module (``-m``), here or under torchrun
#: this checkout: where the profiler is found when a run works in --baseline-tree (behind the tree's own packages)
HERE = Path(__file__).resolve().parents[2]
SYNC = "sync_batchnorm=true"


def commands(args: argparse.Namespace, output: Path) -> list[str]:
    """train_step_profile's command line for one run, after the launcher (python or torchrun)."""
    cmd = ["-m", PROFILE, args.spec, args.task, args.row, "--tier", args.tier, "--steps", str(args.steps),
           "--output", str(output)]
    for item in args.set:
        cmd += ["--set", item]
    return cmd


def launches(args: argparse.Namespace, folder: Path) -> list[tuple[str, dict, list[str], Path, Path]]:
    """(arm, environment, command, output, working folder) of every run in the order they run: one GPU, then K,
    ``rounds`` times. The one-GPU arm works in ``--baseline-tree`` when given, the K-GPU arm in this checkout."""
    here = Path.cwd()
    base = Path(args.baseline_tree) if args.baseline_tree else here
    # in the tree, its own packages come first (the working folder of ``python -m``), this checkout's profiler next
    tools = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))} \
        if args.baseline_tree else {}
    out = []
    for round_ in range(1, args.rounds + 1):
        one = folder / f"one_gpu_r{round_}.json"
        out.append(("one", {"CUDA_VISIBLE_DEVICES": "0", **tools}, [sys.executable] + commands(args, one), one,
                    base))
        many = folder / f"{args.gpus}_gpus_r{round_}.json"
        visible = ",".join(str(i) for i in range(args.gpus))
        profile = ["--profile-steps", str(args.profile_steps)] if args.profile_steps and round_ == args.rounds else []
        out.append(("many", {"CUDA_VISIBLE_DEVICES": visible},
                    [sys.executable, "-m", "torch.distributed.run", "--standalone",
                     f"--nproc_per_node={args.gpus}"] + commands(args, many) + ["--set", SYNC] + profile, many, here))
    return out


def baseline_tree(value: Optional[str]) -> Optional[str]:
    """``--baseline-tree`` as an absolute folder holding the suite's packages; refused by name otherwise."""
    if value is None:
        return None
    folder = Path(value).resolve()
    missing = [name for name in ("ssm_core", "runners") if not (folder / name / "__init__.py").is_file()]
    if not folder.is_dir() or missing:
        what = "is not a folder" if not folder.is_dir() else f"has no {' or '.join(missing)} package"
        raise SystemExit(f"ddp_step_ab: --baseline-tree {value}: {what}; expected a checkout of the suite "
                         "(its ssm_core and runners packages and its specs)")
    return str(folder)


def shown(folder: Path) -> str:
    """A folder as the results record it: relative to this checkout ('.' for the checkout itself), or by its name
    where it lies outside (never a path of the machine that ran it)."""
    folder, here = folder.resolve(), Path.cwd().resolve()
    return str(folder.relative_to(here)) if folder.is_relative_to(here) else folder.name


def _run(env: dict, cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stdout.flush()  # each run's rates reach a redirected log even if a later run is cut off
    if done.returncode != 0:
        raise SystemExit(f"ddp_step_ab: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def summary(rates: dict[str, list[float]], gpus: int, batch: int, steps_per_schedule: Optional[int]) -> dict:
    """Medians, the speed-up of K GPUs over one, and (given the schedule's steps) hours of wall clock and GPU."""
    med = {arm: statistics.median(v) for arm, v in rates.items()}
    out = {"gpus": gpus, "batch": batch, "rates": rates, "medians": med, "speedup": med["many"] / med["one"]}
    if steps_per_schedule:
        out["schedule_steps"] = steps_per_schedule
        out["wall_hours"] = {arm: steps_per_schedule / m / 3600 for arm, m in med.items()}
        out["gpu_hours"] = {"one": out["wall_hours"]["one"], "many": gpus * out["wall_hours"]["many"]}
    return out


def table(s: dict) -> str:
    rows = []
    one = "1 GPU" + (f", {s['baseline_name']}" if s.get("baseline_name") else "")
    for arm, name in (("one", one), ("many", f"{s['gpus']} GPUs, {s['batch'] // s['gpus']} examples each, "
                                                  "synced BatchNorm")):
        row = [name, ", ".join(f"{r:.2f}" for r in s["rates"][arm]), f"{s['medians'][arm]:.2f}",
               f"{1e3 / s['medians'][arm]:.2f}"]
        if "wall_hours" in s:
            row += [f"{s['wall_hours'][arm]:.2f}", f"{s['gpu_hours'][arm]:.2f}"]
        rows.append(row)
    headers = ["", "steps/s by round", "median", "step ms"] + (["schedule: wall h", "GPU-h"] if "wall_hours" in s
                                                                else [])
    return tabulate(rows, headers=headers, tablefmt="github")


def main(argv: Optional[Sequence[str]] = None, run: Callable[[dict, list[str], Path], None] = _run,
         device_count: Optional[Callable[[], int]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_arguments(parser)
    parser.add_argument("--gpus", type=int, default=4, help="K, the GPUs of the data-parallel arm (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="times each arm runs, alternately (default 2)")
    parser.add_argument("--steps", type=int, default=120, help="training steps of each run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a TrainConfig field for both arms")
    parser.add_argument("--n-train", type=int, default=None, help="training examples per epoch: print the schedule")
    parser.add_argument("--output", default=None, help="JSON file to write")
    parser.add_argument("--profile-steps", type=int, default=0, metavar="N",
                        help="the last K-GPU run also records N steps under the profiler (default 0: none)")
    parser.add_argument("--baseline-tree", default=None, metavar="DIR",
                        help="the one-GPU arm runs the suite's code in DIR (e.g. an earlier commit's, unpacked)")
    parser.add_argument("--baseline-name", default=None, metavar="TEXT",
                        help="what the baseline tree holds, for the table (default: its folder's name)")
    args = parser.parse_args(argv)
    args.baseline_tree = baseline_tree(args.baseline_tree)
    if args.baseline_name is not None and not args.baseline_tree:
        raise SystemExit("ddp_step_ab: --baseline-name names a --baseline-tree; give the tree too")
    if args.profile_steps < 0:
        raise SystemExit(f"ddp_step_ab: --profile-steps {args.profile_steps}: expected an integer >= 0")
    for name in ("gpus", "rounds", "steps"):
        if getattr(args, name) < (2 if name == "gpus" else 1):
            raise SystemExit(f"ddp_step_ab: --{name} {getattr(args, name)}: expected an integer >= "
                             f"{2 if name == 'gpus' else 1}")
    if args.n_train is not None and args.n_train < 1:
        raise SystemExit(f"ddp_step_ab: --n-train {args.n_train}: expected an integer >= 1")
    if device_count is None:
        import torch
        device_count = torch.cuda.device_count
    found = device_count()
    if found < args.gpus:
        raise SystemExit(f"ddp_step_ab: --gpus {args.gpus} needs {args.gpus} CUDA devices; this machine has {found}")
    _, train_dict, _ = cell_setup(args.spec, args.task, args.row, args.tier)
    train_dict = with_sets(train_dict, args.set)  # as train_step_profile reads them
    batch = train_dict["batch_size"]
    if not isinstance(batch, int) or isinstance(batch, bool) or batch % args.gpus:
        raise SystemExit(f"ddp_step_ab: the global batch {batch} does not split over --gpus {args.gpus}")
    rates: dict[str, list[float]] = {"one": [], "many": []}
    devices = set()
    profile = None
    code_roots: dict[str, set] = {"one": set(), "many": set()}
    with tempfile.TemporaryDirectory() as tmp:
        for arm, env, cmd, output, cwd in launches(args, Path(tmp)):
            run(env, cmd, cwd)
            measured = json.loads(output.read_text())
            imported = measured.get("code_root")  # '.': the folder the run worked in (train_step_profile.code_root)
            if args.baseline_tree and arm == "one" and imported != ".":
                raise SystemExit(f"ddp_step_ab: the one-GPU arm imported the suite from {imported}, "
                                 f"not from --baseline-tree {args.baseline_tree}: an installed copy of the package "
                                 "takes precedence; run where the suite is not installed")
            rates[arm].append(measured["steady_steps_per_second"])
            devices.add(measured["device"])
            code_roots[arm].add(shown(cwd) if imported == "." else str(imported))
            if "profile" in measured:
                profile = measured["profile"]
    steps = int(train_dict["epochs"]) * (args.n_train // batch) if args.n_train else None
    result = summary(rates, args.gpus, batch, steps)
    if args.baseline_tree:
        result.update(baseline_tree=shown(Path(args.baseline_tree)),
                      baseline_name=args.baseline_name or Path(args.baseline_tree).name)
    result["code_roots"] = {arm: sorted(roots) for arm, roots in code_roots.items()}
    if profile is not None:
        result["profile_many"] = profile
    print(table(result))
    against = f"one running {result['baseline_name']}" if args.baseline_tree else "one"
    print(f"K = {args.gpus} GPUs: {result['speedup']:.2f}x the steps per second of {against} (wall clock)")
    result.update(spec=args.spec, task=args.task, row=args.row, tier=args.tier, steps=args.steps, sets=args.set,
                  device=", ".join(sorted(devices)), measured=utc_now(), **git_provenance())
    if args.output:
        write_json_atomic(Path(args.output), result)
    return result


if __name__ == "__main__":
    main()
