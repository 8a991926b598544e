"""``report``, ``compare`` and ``progress``: the markdown reports, two runs side by side, training cells in
progress."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..core import layout
from ..core.errors import EXIT_BAD_INPUT, EXIT_FAIL, SpecError
from ..report.compare import compare_files, regressions
from ..report.markdown import report_all
from ..report.progress import finished_under, progress_table, training_progress
from ..specs.spec import TIERS, find_spec, load_spec
from ..store import read as store_read
from ..store.read import load_tier_results


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
    stores = (store_read.REFERENCE, store_read.LOCAL)
    have = {name: [t for t in TIERS if load_tier_results(spec.id, t, store_read.store_root(name))]
            for name in stores}
    tiers = [tier] if tier else [t for t in reversed(TIERS) if all(t in have[s] for s in stores)][:1]
    missing = [s for s in stores if (tier not in have[s] if tier else not have[s])]
    if missing or not tiers:
        held = "; ".join(f"{s} ({store_read.store_root(s)}/{spec.id}/): {', '.join(have[s]) or 'none'}"
                         for s in stores)
        if missing:
            raise SpecError(f"compare {spec.id}" + (f" --tier {tier}" if tier else "") + ": no " +
                            (f"{tier} " if tier else "") + f"results in the {' and '.join(missing)} "
                            f"store{'s' * (len(missing) > 1)}; tiers with results: {held}")
        raise SpecError(f"compare {spec.id}: no tier has results in both stores; tiers with results: {held}; "
                        f"run the spec at one of the reference store's tiers (or name one with --tier)")
    newest = [load_tier_results(spec.id, tiers[0], store_read.store_root(s))[0][0] for s in stores]
    return newest[0], newest[1]


def cmd_report(args: argparse.Namespace) -> int:
    """Reports of the results read (see :func:`use_results_dir`) to local/tables/, or tables/ for the reference
    store alone (``--results reference``)."""
    print(f"wrote {report_all()}")
    return 0


def cmd_progress(args: argparse.Namespace) -> int:
    """``progress``: the training cells with a checkpoint under runs/ (``--runs DIR``), where each stands; exit 2
    when a checkpoint cannot be read (named in its row)."""
    runs = Path(args.runs) if args.runs else layout.RUNS_DIR
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
        return 0 if done else (EXIT_FAIL if done is False else EXIT_BAD_INPUT)
    ids = [load_spec(find_spec(s)).id for s in args.spec]  # an unknown spec: SpecError naming the known ones
    cells = training_progress(runs, layout.RESULTS_DIR, ids)
    if not cells:
        print(f"no training checkpoint under {runs}/<spec>/<tier>/<cell>/" + (f" for {', '.join(args.spec)}"
                                                                              if args.spec else ""))
        return 0
    print(progress_table(cells))
    return EXIT_BAD_INPUT if any(c.problem for c in cells) else 0
