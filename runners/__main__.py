"""CLI: python -m runners {run, check, report, list, validate}."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tabulate import tabulate

from . import registry
from .compare import compare, latest_result, load_result, summary
from .expected import expected_path, load_expected
from .report import fmt, report_all
from .registry import Paused
from .run import NotRunnable, run_spec, tier_config, work_dir_for
from .scheduler import EXIT_PAUSED, child_launcher, log_tail, parse_gpus, schedule_units
from .spec import DATA_VARIANTS, TIERS, SpecError, find_spec, load_spec, spec_paths

EXIT_FAIL, EXIT_NOT_RUNNABLE, EXIT_BAD_SPEC = 1, 3, 2  # EXIT_PAUSED (4): stopped at --stop-after-minutes


def _specs(names: list[str]) -> list:
    return [load_spec(find_spec(n)) for n in names] if names else [load_spec(p) for p in spec_paths()]


def cmd_run(args: argparse.Namespace) -> int:
    status = 0
    specs = []
    if (args.cells or args.data != "release" or args.gpus or args.unit) and len(args.spec) != 1:
        raise SpecError("--cells, --data, --gpus and --unit apply to one spec: name exactly one")
    for name in args.spec or [str(p) for p in spec_paths()]:
        try:
            specs.append(load_spec(find_spec(name)))
        except SpecError:
            if not expected_path(name).exists():
                raise
            print(f"NOT-RUN: {name}: no spec / runner for this table yet; the paper's values are in "
                  f"{expected_path(name)} and its report lists every cell as NOT-RUN", file=sys.stderr)
            status = EXIT_NOT_RUNNABLE
    deadline = time.time() + 60.0 * args.stop_after_minutes if args.stop_after_minutes is not None else None
    for spec in specs:
        if args.gpus:
            status = run_on_gpus(spec, args, deadline) or status
            continue
        unit = None
        if args.unit:
            row, sep, task = args.unit.partition("|")
            if not sep:
                raise SpecError(f"--unit {args.unit!r}: expected 'ROW|TASK'")
            unit = [(row, task)]
        try:
            path = run_spec(spec, args.tier, progress=not args.no_progress, cells=args.cells, data=args.data,
                            deadline=deadline, write_result=not args.train_only, units=unit)
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
    return status


def run_on_gpus(spec, args: argparse.Namespace, deadline: float | None) -> int:
    """``run --gpus``: one training cell per GPU in its own process (runners/scheduler.py), then the results file."""
    from .selection import select_cells, selected_set
    from .train.table import TrainTableConfig, units_to_train

    try:
        gpus = parse_gpus(args.gpus)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    config = tier_config(spec, args.tier, args.data)
    if not isinstance(config, TrainTableConfig):
        raise SpecError(f"{spec.path}: --gpus places training cells on GPUs; runner {spec.runner!r} is not a "
                        f"training table")
    if args.train_only:
        raise SpecError("--gpus trains with --train-only children and then writes the results file; drop --train-only")
    selected = select_cells(spec, args.tier, load_expected(expected_path(spec.id)), args.cells, args.data)
    narrowed = bool(args.cells) or args.data == "suite"
    try:
        units = units_to_train(config, selected_set(selected) if narrowed else None)
    except ValueError as exc:
        raise SpecError(f"{spec.path}: {exc}") from None
    log_dir = work_dir_for(spec, args.tier) / "logs"
    print(f"{spec.id} [{args.tier}, data {args.data}]: {len(units)} cell(s) on GPU(s) {', '.join(gpus)}")
    outcome = schedule_units(units, gpus, child_launcher(spec.path, args.tier, args.data, args.cells, n_gpus=len(gpus)), log_dir,
                             deadline)
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
    path = run_spec(spec, args.tier, progress=False, cells=args.cells, data=args.data)
    print(f"{spec.id} [{args.tier}]: wrote {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 on a FAIL, except FAILs whose analysis is recorded in expected/ (``known_fail``)."""
    failed = False
    tiers = [args.tier] if args.tier else list(TIERS)
    for spec in _specs(args.spec):
        expected = load_expected(expected_path(spec.id))
        for tier in tiers:
            path = latest_result(spec.id, tier)
            if path is None:
                if args.tier:
                    print(f"{spec.id} [{tier}]: NOT-RUN (no results)")
                continue
            verdicts = compare(expected, load_result(path), tier)
            counts = summary(verdicts)
            failed |= any(v.unexpected_fail for v in verdicts)
            print(f"{spec.id} [{tier}] ({path}): " + ", ".join(f"{k} {n}" for k, n in counts.items()))
            shown = [v for v in verdicts if args.verbose or v.verdict in ("FAIL", "IMPROVED")]
            if shown:
                print(tabulate([[v.row, v.column, fmt(v.paper), fmt(v.measured), v.check,
                                 v.verdict + (" (known)" if v.known_fail else ""), v.detail]
                                for v in shown], headers=["row", "column", "paper", "ours", "check", "verdict",
                                                          "detail"]))
    return EXIT_FAIL if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    print(f"wrote {report_all()}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for path in spec_paths():
        spec = load_spec(path)
        have = [t for t in TIERS if latest_result(spec.id, t)]
        rows.append([spec.id, f"{spec.paper.upper()} {spec.table}", ",".join(spec.groups), spec.runner,
                     f"make {spec.make}", ",".join(have) or "-"])
    print(tabulate(rows, headers=["id", "table", "groups", "runner", "make", "results"]))
    print(f"\n{len(registry.load_all())} runners registered: {', '.join(sorted(registry.RUNNERS))}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Load every spec and expected file; every spec must have an expected file and vice versa."""
    ids = {load_spec(p).id for p in spec_paths()}
    for eid in sorted(p.stem for p in Path("expected").glob("*.yaml")):
        load_expected(expected_path(eid))
    missing = sorted(i for i in ids if not expected_path(i).exists())
    if missing:
        raise SpecError(f"spec(s) without an expected file: {missing} (create expected/<id>.yaml)")
    print(f"{len(ids)} specs and their expected files are valid")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run specs at a tier and write results/")
    p.add_argument("spec", nargs="*", help="spec paths or ids (default: all)")
    p.add_argument("--tier", choices=TIERS, default="smoke", help="smoke (CPU, seconds), budget (one GPU, "
                   "minutes) or full (the paper's configuration); default smoke")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (logs stay line by line)")
    p.add_argument("--cells", action="append", default=[], metavar="PATTERN",
                   help="run only the cells whose 'row/column' matches this shell glob, e.g. 'S4D-*/ListOps' "
                        "(repeatable: any pattern); the results file records the selection and is judged on it")
    p.add_argument("--data", choices=DATA_VARIANTS, default="release",
                   help="release: the papers' datasets under $DATA_PATH (default); suite: the tier's configuration "
                        "on data the suite generates by the dataset's own procedure (tiers with 'suite_data'), "
                        "reported in the '(suite data)' rows")
    p.add_argument("--gpus", metavar="IDS", help="train one cell per GPU, each in its own process, e.g. 0,1,2,3; "
                   "every cell resumes from its checkpoint when the command is run again")
    p.add_argument("--stop-after-minutes", type=float, metavar="M",
                   help="checkpoint and stop training after M minutes (exit code 4); the same command resumes")
    p.add_argument("--train-only", action="store_true",
                   help="train the selected cells (checkpoints under runs/) without writing a results file")
    p.add_argument("--unit", help=argparse.SUPPRESS)  # ROW|TASK: the one training cell of a --gpus child
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("check", help="diff the latest results with expected/; exit 1 on FAIL")
    p.add_argument("spec", nargs="*")
    p.add_argument("--tier", choices=TIERS)
    p.add_argument("-v", "--verbose", action="store_true", help="show every cell, not only FAIL / IMPROVED")
    p.set_defaults(fn=cmd_check)
    sub.add_parser("report", help="write tables/*.md from results").set_defaults(fn=cmd_report)
    sub.add_parser("list", help="list specs, runners and which tiers have results").set_defaults(fn=cmd_list)
    sub.add_parser("validate", help="validate every spec and expected file").set_defaults(fn=cmd_validate)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC


if __name__ == "__main__":
    sys.exit(main())
