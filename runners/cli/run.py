"""``run``: run specs at a tier and write their results files; ``--gpus`` spreads a training table's cells over GPUs,
``--show-config`` and ``--dry-run`` show what would run."""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from ..core import layout
from ..core.errors import EXIT_FAIL, EXIT_NOT_RUNNABLE, EXIT_PAUSED, NotRunnable, Paused, SpecError
from ..execute.run import restart_cells, run_spec, training_folders
from ..execute.scheduler import child_launcher, log_tail, parse_gpus, schedule_units
from ..judge.validate import selection_problems
from ..report.projection import cell_projection, load_step_rates, projection_text, projections
from ..specs import registry
from ..specs.expected import expected_path, load_expected
from ..specs.overrides import apply_overrides, config_yaml
from ..specs.selection import cell_name, check_data_variant, glob_escape, select_cells, selected_set, tier_config
from ..specs.spec import find_spec, load_spec, spec_paths, work_dir_for
from ..store import read as store_read
from ..store.read import load_result
from ..train.table import TrainTableConfig, training_series, units_to_train
from ..train.tb_log import check_logs


def cmd_run(args: argparse.Namespace) -> int:
    """Every named spec is loaded and checked against its expected file before the first one runs: a spec error
    is printed (one line, naming the file and key) and exits 2 without running anything."""
    check_logs(args.log)
    if getattr(args, "seeds", None):
        return run_seeds(args)
    status = 0
    specs = []
    if args.cells_per_gpu != 1 and not args.gpus:
        raise SpecError("--cells-per-gpu applies with --gpus")
    if args.gpus and args.train_only:
        raise SpecError("--gpus trains with --train-only children and then writes the results file; drop --train-only")
    if (args.cells or args.data != "release" or args.gpus or args.unit) and len(args.spec) != 1:
        raise SpecError("--cells, --data, --gpus and --unit apply to one spec: name exactly one")
    for name in args.spec or [str(p) for p in spec_paths()]:
        specs.append(load_spec(find_spec(name)))
    if args.train_only:
        trains_nothing = [s.id for s in specs if registry.get(s.runner).kind != "train"]
        if trains_nothing:
            raise SpecError(f"--train-only: {', '.join(trains_nothing)} train(s) nothing (runner kind not 'train'); "
                            f"drop --train-only or name a training table")
    specs = [with_settings(spec, args) for spec in specs]
    output = results_destination(args)
    for spec in specs:  # before anything runs: the data variant, the expected file, the selected cells
        check_data_variant(spec, args.tier, args.data)
        problems = selection_problems(spec, args.tier, args.cells, args.data)
        if problems and not (args.set or args.seed is not None):  # --set may change what a tier produces
            if not (args.show_config or args.dry_run):
                raise SpecError(problems[0] + (f" (and {len(problems) - 1} more such cells)"
                                               if len(problems) > 1 else ""))
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr)
    if args.show_config or args.dry_run:
        return show_plan(specs, args) or status
    deadline = time.time() + 60.0 * args.stop_after_minutes if args.stop_after_minutes is not None else None
    for spec in specs:
        if args.gpus:
            try:
                status = run_on_gpus(spec, args, deadline) or status
            except NotRunnable as exc:
                print(f"NOT-RUN: {exc}", file=sys.stderr)
                status = status or EXIT_NOT_RUNNABLE
            continue
        unit = None
        if args.unit:
            row, sep, task = args.unit.partition("|")
            if not sep:
                raise SpecError(f"--unit {args.unit!r}: expected 'ROW|TASK'")
            unit = [(row, task)]
        try:
            path = run_spec(spec, args.tier, progress=not args.no_progress, cells=args.cells, data=args.data,
                            deadline=deadline, write_result=not args.train_only, units=unit,
                            results_root=output, logs=args.log,
                            restart=args.restart)
        except NotRunnable as exc:
            print(f"NOT-RUN: {exc}", file=sys.stderr)
            status = status or EXIT_NOT_RUNNABLE
            continue
        except Paused as exc:
            print(f"PAUSED: {spec.id} [{args.tier}]: stopped at the deadline; checkpoints saved, run the same command "
                  f"to resume: " + "; ".join(exc.cells), file=sys.stderr)
            status = status or EXIT_PAUSED
            continue
        print(f"{spec.id} [{args.tier}]: " + (f"wrote {path}" if path else "trained (--train-only: no results file)"))
        for problem in (load_result(path).get("problems", []) if path else []):
            print(f"{spec.id} [{args.tier}]: {problem}", file=sys.stderr)
    return status


def results_destination(args: argparse.Namespace) -> Path:
    """Where ``run`` writes its results file: ``--output DIR``; ``--reference``: the reference store
    (``results/``, what a maintainer commits); else the local store (``local/results/``)."""
    if getattr(args, "reference", False) and getattr(args, "output", None):
        raise SpecError("run: --reference and --output DIR both say where the results file goes; give one of them")
    if getattr(args, "output", None):
        return Path(args.output)
    return store_read.store_root(store_read.REFERENCE if getattr(args, "reference", False)
                                   else store_read.LOCAL)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def training_selection(args: argparse.Namespace, cells: list[tuple[str, str]]) -> frozenset | None:
    """The selected cells that decide which (row, task) pairs a training table trains: None (all pairs) unless
    ``--cells`` or ``--data suite`` narrowed the selection."""
    return selected_set(cells) if args.cells or args.data == "suite" else None


def run_on_gpus(spec, args: argparse.Namespace, deadline: float | None) -> int:
    """``run --gpus``: one training cell per GPU in its own process (runners/execute/scheduler.py), then the results
    file."""
    try:
        gpus = parse_gpus(args.gpus)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    try:  # before anything is deleted or started: the GPUs named must be this machine's
        parse_gpus(args.gpus, torch.cuda.device_count())
    except ValueError as exc:
        raise (NotRunnable if torch.cuda.device_count() == 0 else SpecError)(str(exc)) from None
    config = tier_config(spec, args.tier, args.data)
    if not isinstance(config, TrainTableConfig):
        raise SpecError(f"{spec.path}: --gpus places training cells on GPUs; runner {spec.runner!r} is not a "
                        f"training table")
    selected = select_cells(spec, args.tier, load_expected(expected_path(spec.id)), args.cells, args.data)
    try:
        units = units_to_train(config, training_selection(args, selected))
    except ValueError as exc:
        raise SpecError(f"{spec.path}: {exc}") from None
    if args.restart:  # once, here: the children resume from what is left
        restart_cells(spec, args.tier, config, training_selection(args, selected), units)
    log_dir = work_dir_for(spec, args.tier) / "logs"
    per_gpu = args.cells_per_gpu
    print(f"{spec.id} [{args.tier}, data {args.data}]: {len(units)} cell(s) on GPU(s) {', '.join(gpus)}"
          + (f", {per_gpu} per GPU" if per_gpu > 1 else ""))
    launcher = child_launcher(spec.path, args.tier, args.data, args.cells, n_gpus=len(gpus),
                              extra_args=settings_args(args), per_gpu=per_gpu)
    outcome = schedule_units(units, gpus, launcher, log_dir, deadline, per_gpu=per_gpu)
    for o in outcome.failed:
        print(f"FAILED: {o.unit[0]} / {o.unit[1]} on GPU {o.gpu} ({o.status}); end of {o.log}:\n{log_tail(o.log)}",
              file=sys.stderr)
    if outcome.failed:
        return EXIT_FAIL
    if not outcome.complete:
        waiting = [f"{u[0]} / {u[1]} (paused)" for u in (o.unit for o in outcome.paused)]
        waiting += [f"{u[0]} / {u[1]} (not started)" for u in outcome.not_started]
        print(f"PAUSED: {spec.id} [{args.tier}]: {len(outcome.finished)} of {len(units)} cell(s) finished; run the "
              f"same command to resume: " + "; ".join(waiting), file=sys.stderr)
        return EXIT_PAUSED
    try:
        path = run_spec(spec, args.tier, progress=False, cells=args.cells, data=args.data,
                        results_root=results_destination(args))
    except NotRunnable as exc:  # e.g. a task's data missing: its cells are recorded as not run
        print(f"NOT-RUN: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNABLE
    print(f"{spec.id} [{args.tier}]: wrote {path}")
    return 0


def run_seeds(args: argparse.Namespace) -> int:
    """``run --seeds 0,1,2``: the same run once per seed, one after another (each with --gpus where given: one cell
    per GPU). The tier's own seed runs as the spec's own setting (its folder, no override); every other seed is
    ``--seed N`` (its own folder). ``check`` and ``report`` then judge the seeds of today's setting together, their
    mean against the paper's (runners/judge/verdicts.py). Returns the most severe exit status of the runs."""
    if args.seed is not None:
        raise SpecError("--seeds and --seed: give one of them")
    if len(args.spec) != 1:
        raise SpecError("--seeds applies to one spec: name exactly one")
    seeds = parse_seeds(args.seeds)
    own = load_spec(find_spec(args.spec[0])).tiers[args.tier].seed
    statuses = []
    for seed in seeds:
        print(f"--seeds: seed {seed}" + (" (the tier's own)" if seed == own else ""), file=sys.stderr)
        one = argparse.Namespace(**{**vars(args), "seeds": None, "seed": None if seed == own else seed})
        statuses.append(cmd_run(one))
    severity = [EXIT_FAIL, EXIT_NOT_RUNNABLE, EXIT_PAUSED, 0]  # a failure first, then not runnable, then paused
    return next((code for code in severity if code in statuses), max(statuses))


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]: distinct integers >= 0 written in ASCII digits."""
    words = [w.strip() for w in str(text).split(",")]
    if not words or any(not re.fullmatch(r"[0-9]+", w) for w in words) or len(set(words)) != len(words):
        raise SpecError(f"--seeds {text!r} not allowed; give distinct seeds (integers >= 0) separated by commas, "
                        f"e.g. --seeds 0,1,2")
    return [int(w) for w in words]


def with_settings(spec, args: argparse.Namespace):
    """``spec`` with ``run --set`` and ``--seed`` applied to the tier that runs (``--seed N`` is ``--set seed=N``)."""
    texts = list(args.set) + ([f"seed={args.seed}"] if args.seed is not None else [])
    return apply_overrides(spec, args.tier, texts)


def settings_args(args: argparse.Namespace) -> list[str]:
    """The options of ``run`` that change what a cell computes or logs, as arguments (for a cell's command and
    for the child processes of ``--gpus``)."""
    parts = [w for text in args.set for w in ("--set", text)]
    parts += ["--seed", str(args.seed)] if args.seed is not None else []
    return parts + [w for kind in args.log for w in ("--log", kind)]


def cell_command(spec, args: argparse.Namespace, row: str, column: str) -> str:
    """The command that runs one cell with this run's settings."""
    parts = ["ssm-repro", "run", spec.id, "--tier", args.tier, "--cells", glob_escape(cell_name(row, column))]
    parts += ["--data", args.data] if args.data != "release" else []
    parts += settings_args(args) + (["--output", str(args.output)] if args.output else [])
    parts += ["--reference"] if getattr(args, "reference", False) else []
    return shlex.join(parts)


def show_plan(specs: list, args: argparse.Namespace) -> int:
    """``run --show-config``: each spec's resolved tier configuration as YAML. ``run --dry-run``: validate and
    list the cells each spec would run and the command that runs each, without running anything; for training
    tables also each cell's projected GPU time from its newest measured step rate (runners/report/projection.py)."""
    import torch

    rates = [] if args.show_config else load_step_rates(Path(args.output or layout.RESULTS_DIR))

    for i, spec in enumerate(specs):
        if args.show_config:
            print(("---\n" if i else "") + config_yaml(spec, args.tier, args.data), end="")
            continue
        expected = load_expected(expected_path(spec.id))
        tier_spec = spec.tiers[args.tier]
        cells = select_cells(spec, args.tier, expected, args.cells, args.data)
        where = results_destination(args) / spec.id
        print(f"{spec.id} [{args.tier}]: valid ({spec.path}, runner {spec.runner}, device {tier_spec.device}, seed "
              f"{tier_spec.seed}" + (f", --set {' '.join(spec.overrides)}" if spec.overrides else "") +
              f"); {len(cells)} of {len(expected['cells'])} cells selected (those its results file is judged "
              f"on); results in {where}/")
        if spec.overrides:
            print(f"  trains in {work_dir_for(spec, args.tier)}/ (the folder of this configuration)")
        if spec.runner.startswith("train.") and cells:
            config = tier_config(spec, args.tier, args.data)
            for folder in training_folders(spec, args.tier, config, training_selection(args, cells)):
                print(f"  checkpoint folder: {folder}/")
        if tier_spec.device == "cuda" and not torch.cuda.is_available():
            print("  NOT-RUN here: this tier needs a CUDA GPU and none is visible")
        if not cells:
            print("  no cell to run: every matching cell is not_run / context at this tier")
            continue
        if spec.runner.startswith("train."):
            projected, series = projections(rates, spec.id, args.tier), training_series(spec, args.tier)
            print(tabulate([[f"{r}/{c}", projection_text(cell_projection(projected, cell_name(r, c),
                                                                         series.get(cell_name(r, c)))),
                             cell_command(spec, args, r, c)] for r, c in cells],
                           headers=["cell (row/column)", "projected GPU time (measured step rate)", "command"]))
            continue
        print(tabulate([[f"{r}/{c}", cell_command(spec, args, r, c)] for r, c in cells],
                       headers=["cell (row/column)", "command"]))
    return 0
