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
import math
import shlex
import sys
from pathlib import Path

from ..core import layout
from ..core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, SpecError
from ..report.projection import StepRateError
from ..specs.spec import DATA_VARIANTS, TIERS
from ..store import read as store_read
from ..store.read import ResultsError
from ..train.tb_log import LOG_KINDS, LogUnavailable
from .check import cmd_check, cmd_ledger, cmd_list, cmd_validate
from .report import cmd_compare, cmd_progress, cmd_report
from .run import cmd_run, positive_int


def use_results_dir(args: argparse.Namespace) -> None:
    """``--results`` of check / report / list: "reference" or "local" reads that store alone, any other value the
    folder it names; without it, the reference store overlaid by the local one."""
    choice = getattr(args, "results", None)
    if choice is not None and not choice.strip():
        raise SpecError("--results '': give reference, local or a folder")
    if choice:
        if choice not in store_read.STORES and not Path(choice).is_dir():
            raise SpecError(f"--results {choice}: no such folder (give reference, local or a folder that run "
                            f"--output wrote)")
        store_read.READ_FROM = choice if choice in store_read.STORES else Path(choice)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """``run``'s settings, preview and output options."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the tier's configuration by dotted key, VALUE read as YAML, e.g. "
                        "--set train.lr=0.004 --set model_defaults.ssm.d_model=256 --set t_max=4.0 (repeatable; "
                        "--show-config lists the keys; +KEY=VALUE adds a key the configuration does not have); "
                        "recorded in the results file and shown in the report")
    p.add_argument("--seed", type=int, metavar="N", help="the run's seed instead of the tier's (same as --set seed=N)")
    p.add_argument("--seeds", metavar="LIST",
                   help="run once per seed, e.g. 0,1,2 (the tier's own seed as the spec's setting, the others as "
                        "--seed N, each in its own folder); check and report judge the seeds together, their mean "
                        "against the paper's mean +- std")
    p.add_argument("--show-config", action="store_true",
                   help="print the tier's resolved configuration (includes merged, --set applied, defaults filled "
                        "in) as YAML and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the spec and its settings, list the cells that would run and the command that "
                        "runs each, and exit without running")
    p.add_argument("--output", type=folder_path, metavar="DIR",
                   help="write the results file under DIR/<spec id>/ (default: the local store local/results/, "
                        "or $SSM_LOCAL_DIR/results/); check / report / list read it with --results DIR")
    p.add_argument("--reference", action="store_true",
                   help="write the results file to the reference store results/<spec id>/ ($SSM_RESULTS_DIR), the "
                        "committed results a maintainer updates, instead of the local store")
    p.add_argument("--log", action="append", default=[], choices=LOG_KINDS,
                   help="also write each training cell's epochs as TensorBoard event files beside its "
                        "metrics.jsonl under runs/ (needs the tensorboard package: pip install "
                        "'ssm-repro[tensorboard]')")


def folder_path(text: str) -> Path:
    """argparse type: a folder's path, not empty (an empty one would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder")
    return Path(text)


def positive_minutes(text: str) -> float:
    """argparse type: a finite number of minutes > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number of minutes > 0")
    return value


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
    p.add_argument("--stop-after-minutes", type=positive_minutes, metavar="M",
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
    p = sub.add_parser("ledger", help="the ledger of a store's results files: add files written before it, or "
                                      "check every store against its ledger")
    p.add_argument("action", choices=["add", "check"],
                   help="add: list FILES in their store's ledger; check: exit 2 if a listed file is missing or "
                        "changed, or a results file is not listed")
    p.add_argument("files", nargs="*", help="with add: results files (<store>/<spec id>/<name>.json)")
    add_results_option(p)
    p.set_defaults(fn=cmd_ledger)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line. ``--debug`` anywhere in it: an unexpected error shows its traceback instead of one line."""
    invoked = Path(sys.argv[0]).name
    prog = "ssm-repro" if invoked == "ssm-repro" else "python -m runners"
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words
    words = [w for w in words if w != "--debug"]
    args = build_parser(prog).parse_args(words)
    default_results = layout.RESULTS_DIR
    try:
        for problem in layout.environment_problems():
            raise SpecError(problem)
        use_results_dir(args)
        return args.fn(args)
    except (SpecError, LogUnavailable, ResultsError, StepRateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted; the same command resumes (each training cell from its last checkpoint)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # anything not foreseen: one line naming the command, the traceback with --debug
        if debug:
            raise
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"error: `{prog} {shlex.join(words)}` stopped on an unexpected {type(exc).__name__}: {text} "
              f"(run it again with --debug for the traceback)", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        layout.RESULTS_DIR = default_results
        store_read.READ_FROM = None


if __name__ == "__main__":
    sys.exit(main())
