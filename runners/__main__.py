"""CLI: python -m runners {run, check, report, list, validate}."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tabulate import tabulate

from . import registry
from .compare import compare, latest_result, load_result, summary
from .expected import expected_path, load_expected
from .report import fmt, report_all
from .run import NotRunnable, run_spec
from .spec import TIERS, SpecError, find_spec, load_spec, spec_paths

EXIT_FAIL, EXIT_NOT_RUNNABLE, EXIT_BAD_SPEC = 1, 3, 2


def _specs(names: list[str]) -> list:
    return [load_spec(find_spec(n)) for n in names] if names else [load_spec(p) for p in spec_paths()]


def cmd_run(args: argparse.Namespace) -> int:
    status = 0
    specs = []
    for name in args.spec or [str(p) for p in spec_paths()]:
        try:
            specs.append(load_spec(find_spec(name)))
        except SpecError:
            if not expected_path(name).exists():
                raise
            print(f"NOT-RUN: {name}: no spec / runner for this table yet; the paper's values are in "
                  f"{expected_path(name)} and its report lists every cell as NOT-RUN", file=sys.stderr)
            status = EXIT_NOT_RUNNABLE
    for spec in specs:
        try:
            path = run_spec(spec, args.tier, progress=not args.no_progress)
        except NotRunnable as exc:
            print(f"NOT-RUN: {exc}", file=sys.stderr)
            status = status or EXIT_NOT_RUNNABLE
            continue
        print(f"{spec.id} [{args.tier}]: wrote {path}")
    return status


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
    p.add_argument("--tier", choices=TIERS, default="smoke")
    p.add_argument("--no-progress", action="store_true")
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
