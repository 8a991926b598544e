"""``check``, ``list`` and ``validate``: verdicts of the results against the papers' values, the specs and their
results, the spec and expected files."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tabulate import tabulate

from ..core.errors import EXIT_BAD_INPUT, EXIT_FAIL, SpecError
from ..core.textfmt import column_label, fmt, paper_text
from ..judge.settings import Today
from ..judge.validate import validate_all
from ..judge.verdicts import counts_text, judge_tier, summary
from ..specs import registry
from ..specs.expected import expected_path, load_expected
from ..specs.spec import TIERS, find_spec, load_spec, spec_paths
from ..store import ledger
from ..store import read as store_read
from ..store.read import ResultsError, latest_result, load_tier_results


def _specs(names: list[str]) -> list:
    return [load_spec(find_spec(n)) for n in names] if names else [load_spec(p) for p in spec_paths()]


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 on a FAIL (claims and sanity checks alike), except FAILs whose analysis is recorded in expected/
    (``known_fail``), and on a ``known_fail`` cell that passes (a stale analysis); exit 2 on a results file that
    cannot be read, or that its store's ledger lists as missing or changed or does not list."""
    failed = bad_file = False
    errors: set[str] = set()  # a bad entry of a spec's folder that names no tier is reported once, not per tier
    tiers = [args.tier] if args.tier else list(TIERS)
    specs = _specs(args.spec)
    for _, root in store_read.read_roots():  # each store held to its ledger: a file missing, changed or unlisted
        try:
            for problem in ledger.problems(root, {spec.id for spec in specs}):
                print(f"error: {problem}", file=sys.stderr)
                bad_file = True
        except ledger.LedgerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            bad_file = True
    for spec in specs:
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
            verdicts = judge_tier(expected, [doc for _, doc in loaded], tier, Today.of_spec(spec, tier))
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
                                 "-" if v.result is None else store_read.store_of(loaded[v.result][0]), v.detail]
                                for v in shown], headers=["row", "column", "paper", "ours", "check", "verdict",
                                                          "store", "detail"]))
    return EXIT_BAD_INPUT if bad_file else EXIT_FAIL if failed else 0


def _file_text(path: Path) -> str:
    """A results file for a verdict line: "local: local/results/<id>/<name>.json" (the store it lies in first)."""
    return f"{store_read.store_of(path)}: {path}"


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for path in spec_paths():
        spec = load_spec(path)
        have = [f"{t} ({store_read.store_of(path)})" for t in TIERS if (path := latest_result(spec.id, t))]
        rows.append([spec.id, f"{spec.paper.upper()} {spec.table}", ",".join(spec.groups), spec.runner,
                     f"make {spec.make}" if spec.make else "-", ",".join(have) or "-"])
    print(tabulate(rows, headers=["id", "table", "groups", "runner", "make", "results"]))
    print(f"\n{len(registry.load_all())} runners registered: {', '.join(sorted(registry.RUNNERS))}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Load every spec and expected file: keys, types and ranges; every spec has an expected file and vice versa;
    ids are unique; every checked cell is one its spec can produce. Every problem is printed, one line each."""
    problems, n_specs = validate_all()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return EXIT_BAD_INPUT
    print(f"{n_specs} specs and their expected files are valid")
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    """``ledger add FILE...``: list results files in their store's ledger (each must be a results file that reads,
    under <store>/<spec id>/); ``ledger check``: what check holds each store to, alone."""
    if args.action == "check":
        if args.files:
            raise SpecError("ledger check takes no files: it holds every store read (--results) to its ledger")
        found = [p for _, root in store_read.read_roots() for p in ledger.problems(root)]
        for problem in found:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT if found else 0
    if not args.files:
        raise SpecError("ledger add: name the results files to add (<store>/<spec id>/<name>.json)")
    for name in args.files:
        path = Path(name)
        if path.suffix != ".json" or not path.is_file():
            raise SpecError(f"ledger add {name}: not a results file (a .json file under <store>/<folder>/)")
        counts = None
        if expected_path(path.parent.name).exists():  # a spec's results file: it must read as one
            doc = store_read.load_result(path, path.parent.name)
            spec = load_spec(find_spec(doc["spec_id"]))
            counts = summary(judge_tier(load_expected(expected_path(spec.id)), [doc], doc["tier"],
                                        Today.of_spec(spec, doc["tier"])))
        else:  # a benchmark's or step-rate record: JSON
            store_read.read_json_file(path)
        root = path.parent.parent
        added = ledger.add(root, [path], {f"{path.parent.name}/{path.name}": counts} if counts else None)
        print(f"{ledger.ledger_path(root)}: added {', '.join(added)}")
    return 0
