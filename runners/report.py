"""Markdown reports in tables/: the paper's table and ours side by side, a verdict per cell, plots, an index.

Generated from results files only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tabulate import tabulate

from . import results as results_mod
from .results import write_text_atomic
from .compare import CellVerdict, compare, latest_result, load_result, summary
from .expected import expected_path, load_expected
from .plots import PLOTS
from .run import command_for
from .spec import TIERS, Spec, load_spec, spec_paths

TABLES_DIR = Path("tables")
PAPER_NAMES = {"s4": "S4 (Gu, Goel, Re, ICLR 2022)", "s4d": "S4D (Gu, Gupta, Goel, Re, 2022)"}


def fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"
    return str(x)


def _grid(expected: dict, verdicts: list[CellVerdict]) -> str:
    by_key = {(v.row, v.column): v for v in verdicts}
    rows = []
    for row in expected["rows"]:
        line = [row]
        for col in expected["columns"]:
            v = by_key.get((row, col))
            line.append("" if v is None else f"{fmt(v.paper)} / {fmt(v.measured)} {v.verdict}")
        rows.append(line)
    return tabulate(rows, headers=["paper / ours", *expected["columns"]], tablefmt="github")


def _details(verdicts: list[CellVerdict]) -> str:
    rows = [[v.row, v.column, fmt(v.paper), fmt(v.measured), v.check, v.verdict,
             v.detail + (f" Known discrepancy: {v.known_fail}" if v.known_fail and v.verdict == "FAIL" else "")]
            for v in verdicts]
    return tabulate(rows, headers=["row", "column", "paper", "ours", "check", "verdict", "detail"], tablefmt="github")


def _env_line(result: dict) -> str:
    env = result["environment"]
    return (f"device **{env['device_name']}**, torch {env['torch']}, triton {env['triton']}, commit "
            f"`{env['git_commit']}`" + (f" ({env['git_commit_note']}; recorded: `{env['git_commit_recorded']}`)"
                                        if env.get("git_commit_note") else "")
            + f", finished {result['finished']}, wall time {result['wall_time_s']:.1f} s, seed {result['seed']}")


def overrides_lines(result: dict) -> list[str]:
    """The settings a run changed from its spec (``run --set``), as report lines; none for a run as specified."""
    given = result.get("overrides") or []
    return [f"Settings changed from the spec (`--set`): {', '.join(f'`{o}`' for o in given)}.", ""] if given else []


def report_spec(spec: Spec, out_dir: Path, results_root: Path) -> dict[str, dict[str, int] | None]:
    """Write tables/<id>.md (+ plots); return the verdict counts per tier (None where not run)."""
    expected = load_expected(expected_path(spec.id))
    lines = [f"# {spec.table}: {spec.title}", "",
             f"Paper: {PAPER_NAMES[spec.paper]}. Source of the expected values: {expected['source']}. "
             f"Spec: `{spec.path}`; expected values: `{expected_path(spec.id)}`.", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += ["Each cell reads `paper / ours VERDICT`. Verdicts: PASS, FAIL, IMPROVED (better than the paper by "
              "more than the tolerance: review), NOT-RUN (reason in the details).", ""]
    counts: dict[str, dict[str, int] | None] = {}
    plotted = False
    for tier in reversed(TIERS):  # full, budget, smoke: the most faithful tier first
        path = latest_result(spec.id, tier, results_root)
        result = load_result(path) if path else None
        verdicts = compare(expected, result, tier)
        lines.append(f"## Tier: {tier}")
        lines.append("")
        if result is None:
            counts[tier] = None
            lines += [f"NOT-RUN: no results for this tier. To run it: `{command_for(spec, tier)}`", ""]
            continue
        counts[tier] = summary(verdicts)
        lines += [f"Measured on {_env_line(result)}. Results file: `{path}`.", "", *overrides_lines(result),
                  "Verdicts: " + ", ".join(f"{k} {n}" for k, n in counts[tier].items()), "",
                  _grid(expected, verdicts), ""]
        known = {v.known_fail for v in verdicts if v.known_fail and v.verdict == "FAIL"}
        lines += [f"**FAIL, analysed:** {k}" for k in sorted(known)] + ([""] if known else [])
        for note in result.get("notes", []):
            lines.append(f"- {note}")
        if result.get("notes"):
            lines.append("")
        if spec.plots and not plotted:
            for name in spec.plots:
                png = out_dir / f"{spec.id}_{name}.png"
                PLOTS[name](result, png)
                lines += [f"![{name} ({tier} tier)]({png.name})", ""]
            plotted = True
        lines += ["<details><summary>Every cell with its check</summary>", "", _details(verdicts), "",
                  "</details>", ""]
    write_text_atomic(out_dir / f"{spec.id}.md", "\n".join(lines))
    return counts


def report_unrun_table(expected: dict, out_dir: Path) -> None:
    """A table whose runner does not exist yet: the paper's values, every cell NOT-RUN."""
    verdicts = compare(expected, None, "full")
    lines = [f"# {expected['title']}", "", f"Paper: {PAPER_NAMES[expected['paper']]}. Source: {expected['source']}.",
             "", "NOT-RUN at every tier: this table has no spec / runner yet (see the open issues). The paper's "
             "values, with their sources, are in " f"`{expected_path(expected['table'])}`.", "",
             _grid(expected, verdicts), ""]
    write_text_atomic(out_dir / f"{expected['table']}.md", "\n".join(lines))


def report_all(out_dir: Path | None = None, results_root: Path | None = None) -> Path:
    """Reports for every spec and the index tables/README.md; returns the index path."""
    out_dir = out_dir or TABLES_DIR
    results_root = results_root or results_mod.RESULTS_DIR
    rows = []
    for path in spec_paths():
        spec = load_spec(path)
        counts = report_spec(spec, out_dir, results_root)
        cells = []
        for tier in TIERS:
            c = counts[tier]
            cells.append("NOT-RUN" if c is None else " ".join(f"{k} {n}" for k, n in c.items() if n))
        rows.append([f"[{spec.id}]({spec.id}.md)", f"{spec.paper.upper()} {spec.table}", spec.title,
                     f"`make {spec.make}`" if spec.make else f"`ssm-repro run {spec.path}`", *cells])
    index = ["# Reproduction reports", "",
             "One line per table; generated by `python -m runners report` from the results files only.", "",
             tabulate(rows, headers=["report", "table", "title", "command", *TIERS], tablefmt="github"), ""]
    spec_ids = {load_spec(s).id for s in spec_paths()}
    for path in sorted(Path("expected").glob("*.yaml")):
        if path.stem in spec_ids:
            continue
        expected = load_expected(path)
        report_unrun_table(expected, out_dir)
        rows.append([f"[{path.stem}]({path.stem}.md)", f"{expected['paper'].upper()} {path.stem}",
                     expected["title"], "no spec yet", *["NOT-RUN"] * len(TIERS)])
    index[4] = tabulate(rows, headers=["report", "table", "title", "command", *TIERS], tablefmt="github")
    extra = sorted(p for p in out_dir.glob("*.md") if p.name != "README.md"
                   and p.stem not in spec_ids | {p.stem for p in Path("expected").glob("*.yaml")})
    if extra:
        index += ["Other reports: " + ", ".join(f"[{p.stem}]({p.name})" for p in extra), ""]
    write_text_atomic(out_dir / "README.md", "\n".join(index))
    return out_dir / "README.md"
