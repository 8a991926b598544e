"""The reproduction suite's command line: python -m runners (installed as ssm-repro).

    run       run specs at a tier and write a results file to local/results/ (--reference: results/)
    check     judge every results file of each tier against the papers' values (expected/); exit 1 on FAIL
    report    write the markdown reports local/tables/*.md (--results reference: tables/) from the results
    compare   two results files of one spec side by side, or a spec's newest reference and local results;
              exit 1 when a cell regressed
    list      the specs, their runners and which tiers have results
    progress  the training cells in progress under runs/: epochs done, validation so far, hours spent and projected
    validate  every spec and expected file

Results and reports live in two stores. The reference store is what the repository commits: results/<spec id>/
(moved by $SSM_RESULTS_DIR) and its reports tables/. The local store is a researcher's own: local/results/<spec id>/
and local/tables/ (git-ignored; $SSM_LOCAL_DIR moves local/). `run` writes to the local store (`run --reference`:
the reference store; `--output DIR`: DIR). check, report and list read the reference results overlaid by the local
ones: each cell is judged by the newest file of either store that measured it, and every verdict line says which
store it came from; `--results reference`, `--results local` or `--results DIR` reads that alone. `compare SPEC`
shows the newest local results of a spec against the newest reference ones.

Bad input is one line naming the file and key (exit 2); so is anything unexpected that escapes, naming the command
(``--debug`` anywhere on the command line shows its traceback instead). Ctrl-C stops with "interrupted; the same
command resumes" (exit 130).

Exit codes: 0 done (check, compare: nothing failed); 1 a FAIL (check: a verdict; compare: a regression; run --gpus:
a training cell's process failed); 2 bad input (a spec, expected or results file, data, a setting) or an
unexpected error; 3 cannot run here (no GPU, no data: the cell reads NOT-RUN with the reason); 4 paused at
--stop-after-minutes (the same command resumes); 130 interrupted.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from tabulate import tabulate

from . import registry
from . import result_files
from . import results as results_mod
from .compare import ResultsError, counts_text, judge_tier, latest_result, load_result, load_tier_results
from .expected import expected_path, load_expected
from .overrides import apply_overrides, config_yaml
from .progress import finished_under, progress_table, training_progress
from .projection import StepRateError, cell_projection, load_step_rates, projection_text, projections
from .registry import Paused
from .report import report_all
from .result_diff import compare_files, regressions
from .run import (RUNS_DIR, NotRunnable, restart_cells, run_spec, tier_config, training_folders, training_series,
                  work_dir_for)
from .scheduler import EXIT_PAUSED, child_launcher, log_tail, parse_gpus, schedule_units
from .selection import cell_name, check_data_variant, glob_escape, select_cells, selected_set
from .spec import DATA_VARIANTS, TIERS, SpecError, find_spec, load_spec, spec_paths
from .textfmt import column_label, fmt, paper_text
from .train.tb_log import LOG_KINDS, LogUnavailable, check_logs
from .validate import selection_problems, validate_all

EXIT_FAIL, EXIT_NOT_RUNNABLE, EXIT_BAD_SPEC = 1, 3, 2  # EXIT_PAUSED (4): stopped at --stop-after-minutes


def _specs(names: list[str]) -> list:
    return [load_spec(find_spec(n)) for n in names] if names else [load_spec(p) for p in spec_paths()]


def cmd_run(args: argparse.Namespace) -> int:
    """Every named spec is loaded and checked against its expected file before the first one runs: a spec error
    is printed (one line, naming the file and key) and exits 2 without running anything."""
    check_logs(args.log)
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
    return result_files.store_root(result_files.REFERENCE if getattr(args, "reference", False)
                                   else result_files.LOCAL)


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
    """``run --gpus``: one training cell per GPU in its own process (runners/scheduler.py), then the results file."""
    from .train.table import TrainTableConfig, units_to_train

    try:
        gpus = parse_gpus(args.gpus)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
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
    tables also each cell's projected GPU time from its newest measured step rate (runners/projection.py)."""
    import torch

    rates = [] if args.show_config else load_step_rates(Path(args.output or results_mod.RESULTS_DIR))

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


def cmd_compare(args: argparse.Namespace) -> int:
    """Exit 1 when a cell of B regressed from A beyond --threshold. ``compare SPEC``: A is the spec's newest
    reference results file of the tier, B its newest local one."""
    if args.result_b is None:
        path_a, path_b = store_pair(args.result_a, args.tier)
        print(f"reference (A) against local (B): {path_a} -> {path_b}")
    else:
        if args.tier:
            raise SpecError("compare: --tier applies to `compare SPEC` (two results files name their own tiers)")
        path_a, path_b = args.result_a, args.result_b
    text, changes = compare_files(str(path_a), str(path_b), args.threshold)
    print(text)
    return EXIT_FAIL if regressions(changes) else 0


def store_pair(name: str, tier: str | None) -> tuple[Path, Path]:
    """The newest reference and the newest local results file of spec ``name`` at ``tier`` (default: the most
    faithful tier both stores have run); SpecError naming what each store holds when one has none."""
    if name.endswith(".json"):
        raise SpecError(f"compare {name}: give two results files (RESULT_A RESULT_B), or a spec id to compare its "
                        f"newest reference and local results")
    spec = load_spec(find_spec(name))
    stores = (result_files.REFERENCE, result_files.LOCAL)
    have = {store: [t for t in TIERS if load_tier_results(spec.id, t, result_files.store_root(store))]
            for store in stores}
    tiers = [tier] if tier else [t for t in reversed(TIERS) if all(t in have[s] for s in stores)][:1]
    missing = [s for s in stores if (tier not in have[s] if tier else not have[s])]
    if missing or not tiers:
        held = "; ".join(f"{s} ({result_files.store_root(s)}/{spec.id}/): {', '.join(have[s]) or 'none'}"
                         for s in stores)
        if missing:
            raise SpecError(f"compare {spec.id}" + (f" --tier {tier}" if tier else "") + ": no " +
                            (f"{tier} " if tier else "") + f"results in the {' and '.join(missing)} "
                            f"store{'s' * (len(missing) > 1)}; tiers with results: {held}")
        raise SpecError(f"compare {spec.id}: no tier has results in both stores; tiers with results: {held}; "
                        f"run the spec at one of the reference store's tiers (or name one with --tier)")
    newest = [load_tier_results(spec.id, tiers[0], result_files.store_root(s))[0][0] for s in stores]
    return newest[0], newest[1]


def use_results_dir(args: argparse.Namespace) -> None:
    """``--results`` of check / report / list: "reference" or "local" reads that store alone, any other value the
    folder it names; without it, the reference store overlaid by the local one."""
    choice = getattr(args, "results", None)
    if choice:
        result_files.READ_FROM = choice if choice in result_files.STORES else Path(choice)


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 on a FAIL (claims and sanity checks alike), except FAILs whose analysis is recorded in expected/
    (``known_fail``), and on a ``known_fail`` cell that passes (a stale analysis); exit 2 on a results file that
    cannot be read."""
    failed = bad_file = False
    errors: set[str] = set()  # a bad entry of a spec's folder that names no tier is reported once, not per tier
    tiers = [args.tier] if args.tier else list(TIERS)
    for spec in _specs(args.spec):
        expected = load_expected(expected_path(spec.id))
        for tier in tiers:
            try:
                loaded = load_tier_results(spec.id, tier)
            except ResultsError as exc:
                if str(exc) not in errors:
                    print(f"error: {exc}", file=sys.stderr)
                    errors.add(str(exc))
                bad_file = True
                continue
            if not loaded:
                if args.tier:
                    print(f"{spec.id} [{tier}]: NOT-RUN (no results)")
                continue
            verdicts = judge_tier(expected, [doc for _, doc in loaded], tier)
            stale = [v for v in verdicts if v.stale_known_fail]
            failed |= any(v.unexpected_fail for v in verdicts) or bool(stale)
            files = sorted({v.result for v in verdicts if v.result is not None})
            where = (", ".join(f"{i + 1}: {_file_text(loaded[i][0])}" for i in files) if len(files) > 1
                     else _file_text(loaded[files[0] if files else 0][0]))
            print(f"{spec.id} [{tier}] ({where}): {counts_text(verdicts)}")
            for v in stale:
                print(f"  stale known_fail: {v.row} / {v.column} now reads {v.verdict}; {expected_path(spec.id)} "
                      f"says it fails ({v.known_fail})")
            shown = [v for v in verdicts if args.verbose or v.verdict in ("FAIL", "IMPROVED")]
            if shown:
                print(tabulate([[v.row, column_label(v.column), paper_text(v.paper, v.std), fmt(v.measured), v.check,
                                 v.verdict + (" (known)" if v.known_fail else "")
                                 + (" (sanity)" if v.role == "sanity" else ""),
                                 "-" if v.result is None else result_files.store_of(loaded[v.result][0]), v.detail]
                                for v in shown], headers=["row", "column", "paper", "ours", "check", "verdict",
                                                          "store", "detail"]))
    return EXIT_BAD_SPEC if bad_file else EXIT_FAIL if failed else 0


def _file_text(path: Path) -> str:
    """A results file for a verdict line: "local: local/results/<id>/<name>.json" (the store it lies in first)."""
    return f"{result_files.store_of(path)}: {path}"


def cmd_report(args: argparse.Namespace) -> int:
    """Reports of the results read (see :func:`use_results_dir`) to local/tables/, or tables/ for the reference
    store alone (``--results reference``)."""
    print(f"wrote {report_all()}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for path in spec_paths():
        spec = load_spec(path)
        have = [f"{t} ({result_files.store_of(path)})" for t in TIERS if (path := latest_result(spec.id, t))]
        rows.append([spec.id, f"{spec.paper.upper()} {spec.table}", ",".join(spec.groups), spec.runner,
                     f"make {spec.make}" if spec.make else "-", ",".join(have) or "-"])
    print(tabulate(rows, headers=["id", "table", "groups", "runner", "make", "results"]))
    print(f"\n{len(registry.load_all())} runners registered: {', '.join(sorted(registry.RUNNERS))}")
    return 0


def cmd_progress(args: argparse.Namespace) -> int:
    """``progress``: the training cells with a checkpoint under runs/ (``--runs DIR``), where each stands; exit 2
    when a checkpoint cannot be read (named in its row)."""
    runs = Path(args.runs) if args.runs else RUNS_DIR
    if not runs.is_dir():
        raise SpecError(f"progress: --runs {runs}: no such folder (training writes its checkpoints under runs/)")
    if args.finished is not None:
        if args.spec:
            raise SpecError("progress: --finished PATTERN reads the checkpoints under the pattern; name no spec")
        parts = Path(args.finished).parts
        if not args.finished.strip() or Path(args.finished).is_absolute() or ".." in parts:
            raise SpecError(f"progress: --finished {args.finished!r}: expected a path under {runs}/ such as "
                            "<spec>/<folder> or <spec>/<folder>/<cell> (globs allowed)")
        done, line = finished_under(runs, args.finished)
        print(line)
        return 0 if done else (EXIT_FAIL if done is False else EXIT_BAD_SPEC)
    ids = [load_spec(find_spec(s)).id for s in args.spec]  # an unknown spec: SpecError naming the known ones
    cells = training_progress(runs, results_mod.RESULTS_DIR, ids)
    if not cells:
        print(f"no training checkpoint under {runs}/<spec>/<tier>/<cell>/" + (f" for {', '.join(args.spec)}"
                                                                              if args.spec else ""))
        return 0
    print(progress_table(cells))
    return EXIT_BAD_SPEC if any(c.problem for c in cells) else 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Load every spec and expected file: keys, types and ranges; every spec has an expected file and vice versa;
    ids are unique; every checked cell is one its spec can produce. Every problem is printed, one line each."""
    problems, n_specs = validate_all()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return EXIT_BAD_SPEC
    print(f"{n_specs} specs and their expected files are valid")
    return 0


def add_run_options(p: argparse.ArgumentParser) -> None:
    """``run``'s settings, preview and output options."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the tier's configuration by dotted key, VALUE read as YAML, e.g. "
                        "--set train.lr=0.004 --set model_defaults.ssm.d_model=256 --set t_max=4.0 (repeatable; "
                        "--show-config lists the keys; +KEY=VALUE adds a key the configuration does not have); "
                        "recorded in the results file and shown in the report")
    p.add_argument("--seed", type=int, metavar="N", help="the run's seed instead of the tier's (same as --set seed=N)")
    p.add_argument("--show-config", action="store_true",
                   help="print the tier's resolved configuration (includes merged, --set applied, defaults filled "
                        "in) as YAML and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the spec and its settings, list the cells that would run and the command that "
                        "runs each, and exit without running")
    p.add_argument("--output", type=Path, metavar="DIR",
                   help="write the results file under DIR/<spec id>/ (default: the local store local/results/, "
                        "or $SSM_LOCAL_DIR/results/); check / report / list read it with --results DIR")
    p.add_argument("--reference", action="store_true",
                   help="write the results file to the reference store results/<spec id>/ ($SSM_RESULTS_DIR), the "
                        "committed results a maintainer updates, instead of the local store")
    p.add_argument("--log", action="append", default=[], choices=LOG_KINDS,
                   help="also write each training cell's epochs as TensorBoard event files beside its "
                        "metrics.jsonl under runs/ (needs the tensorboard package: pip install "
                        "'ssm-repro[tensorboard]')")


def add_results_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", metavar="reference|local|DIR",
                   help="read only the reference store (results/, $SSM_RESULTS_DIR), only the local store "
                        "(local/results/, $SSM_LOCAL_DIR) or the folder DIR (what run --output DIR wrote); default: "
                        "the reference results overlaid by the local ones (each cell judged by the newest file "
                        "of either)")


def build_parser(prog: str = "python -m runners") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="run specs at a tier and write local/results/ (--reference: results/)",
                       description="Run specs at a tier and write one results file per spec: to the local store "
                                   "local/results/<spec id>/ (git-ignored; $SSM_LOCAL_DIR moves local/) by default, "
                                   "to the reference store results/<spec id>/ (committed) with --reference, or to "
                                   "DIR/<spec id>/ with --output DIR. SPEC is a spec id (ssm-repro list), a file "
                                   "name under reproductions/ or a path to any spec file.")
    p.add_argument("spec", nargs="*", help="spec ids or paths (default: every spec under reproductions/)")
    p.add_argument("--tier", choices=TIERS, default="smoke",
                   help="smoke (CPU, seconds), budget (one GPU, minutes) or full (the paper's configuration); "
                        "default smoke")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars; each cell still prints a line when it starts and one when it ends")
    p.add_argument("--cells", action="append", default=[], metavar="PATTERN",
                   help="run only the cells whose 'row/column' matches this shell glob, e.g. 'S4D-*/ListOps' "
                        "(repeatable: any pattern); the results file records the selection and is judged on it")
    p.add_argument("--data", choices=DATA_VARIANTS, default="release",
                   help="release: the papers' datasets under $DATA_PATH (default); suite: the tier's configuration "
                        "on data the suite generates by the dataset's own procedure (tiers with 'suite_data'), "
                        "reported in the '(suite data)' rows")
    p.add_argument("--gpus", metavar="IDS", help="train one cell per GPU, each in its own process, e.g. 0,1,2,3; "
                   "every cell resumes from its checkpoint when the command is run again")
    p.add_argument("--cells-per-gpu", type=positive_int, default=1, metavar="K",
                   help="with --gpus: run up to K cells on each GPU at once (default 1); their steps/s are then "
                        "shared-GPU rates, and the results say so")
    p.add_argument("--stop-after-minutes", type=float, metavar="M",
                   help="checkpoint and stop training after M minutes (exit code 4); the same command resumes")
    p.add_argument("--train-only", action="store_true",
                   help="train the selected cells (checkpoints under runs/) without writing a results file")
    p.add_argument("--unit", help=argparse.SUPPRESS)  # ROW|TASK: the one training cell of a --gpus child
    add_run_options(p)
    p.add_argument("--restart", action="store_true",
                   help="delete what the selected cells left under runs/ (checkpoints, metrics; prepared data is kept) "
                        "before running, so they start over (needed after a spec edit that a checkpoint does not "
                        "match)")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("check", help="judge every results file of each tier against expected/; exit 1 on FAIL or "
                                     "on a known_fail cell that passes")
    p.add_argument("spec", nargs="*", help="spec ids or paths (default: every spec)")
    p.add_argument("--tier", choices=TIERS, help="check this tier only (default: every tier with results)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every cell, not only FAIL / IMPROVED")
    add_results_option(p)
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("report", help="write local/tables/*.md from results (--results reference: tables/)",
                       description="Write a markdown report per spec and an index. Reads the reference results "
                                   "overlaid by the local ones (each value names its store) and writes "
                                   "local/tables/; with --results reference it reads the reference store alone "
                                   "and writes tables/ (the committed reports); with --results local or DIR it "
                                   "writes local/tables/.")
    add_results_option(p)
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("compare", help="two results files of one spec side by side, or a spec's newest reference "
                                       "and local results; exit 1 on a regression",
                       description="Show two runs of one spec side by side with the change of every cell; exit 1 "
                                   "when a cell of B is worse than in A by more than --threshold (the direction is "
                                   "the expected cell's 'better'), or failed (X) where A measured a number. "
                                   "`compare SPEC [--tier T]`: A is the spec's newest results file in the reference "
                                   "store (results/), B its newest in the local store (local/results/).")
    p.add_argument("result_a", metavar="RESULT_A|SPEC",
                   help="the earlier (reference) results file, results/<id>/*.json; or a spec id alone")
    p.add_argument("result_b", metavar="RESULT_B", nargs="?",
                   help="the later results file of the same spec (left out: compare SPEC's stores)")
    p.add_argument("--tier", choices=TIERS, help="with SPEC: the tier to compare (default: the most faithful tier "
                                                 "both stores have results of)")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="relative change beyond which a worse cell counts as a regression (default 0.05 = 5%%)")
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("list", help="list specs, runners and which tiers have results")
    add_results_option(p)
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("progress", help="training cells in progress under runs/: epochs done, validation so far, "
                                        "hours spent and projected",
                       description="List every training cell with a checkpoint under runs/<spec>/<tier>/<cell>/: "
                                   "epochs done of the schedule's, the last complete epoch's validation value (and "
                                   "the one at the last deadline, mid-epoch), the best so far, the training hours "
                                   "spent and the projected GPU-hours of the whole schedule, and the devices it "
                                   "trained on. No verdicts: check judges results files.")
    p.add_argument("spec", nargs="*", help="spec ids (default: every spec with a checkpoint)")
    p.add_argument("--runs", metavar="DIR", help="read checkpoints under DIR instead of runs/ (e.g. checkpoints/)")
    p.add_argument("--finished", metavar="PATTERN",
                   help="only say whether every checkpoint under DIR/PATTERN (a cell folder or a folder of cells, "
                        "globs allowed) has finished its schedule: exit 0 if so, 1 if not or none is there, 2 if one "
                        "cannot be read")
    p.set_defaults(fn=cmd_progress)
    sub.add_parser("validate", help="validate every spec and expected file").set_defaults(fn=cmd_validate)
    return parser


#: exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """The command line. ``--debug`` anywhere in it: an unexpected error shows its traceback instead of one line."""
    invoked = Path(sys.argv[0]).name
    prog = "ssm-repro" if invoked == "ssm-repro" else "python -m runners"
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words
    words = [w for w in words if w != "--debug"]
    args = build_parser(prog).parse_args(words)
    default_results = results_mod.RESULTS_DIR
    try:
        use_results_dir(args)
        return args.fn(args)
    except (SpecError, LogUnavailable, ResultsError, StepRateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC
    except KeyboardInterrupt:
        print("interrupted; the same command resumes (each training cell from its last checkpoint)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # anything not foreseen: one line naming the command, the traceback with --debug
        if debug:
            raise
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"error: `{prog} {shlex.join(words)}` stopped on an unexpected {type(exc).__name__}: {text} "
              f"(run it again with --debug for the traceback)", file=sys.stderr)
        return EXIT_BAD_SPEC
    finally:
        results_mod.RESULTS_DIR = default_results
        result_files.READ_FROM = None


if __name__ == "__main__":
    sys.exit(main())
