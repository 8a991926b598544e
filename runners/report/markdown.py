"""Markdown reports: the paper's table and ours side by side, a verdict per cell, plots, an index.

Generated from results files only: by default from the reference results overlaid by the local ones, into
local/tables/ (each value names the store its results file lies in); from the reference store alone
(``report --results reference``) into tables/, the committed reports (:func:`reports_dir`).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..core import layout, textfmt
from ..core.atomic import write_text_atomic
from ..core.provenance import commit_known
from ..core.textfmt import column_label, fmt, md_code, md_inline
from ..judge.repeats import repeat_lines, repeated_cells
from ..judge.settings import Today
from ..judge.verdicts import (NOT_RUN_WHY, CellVerdict, compare, context_count, counts_text, judge_tier, not_run_why,
                              sanity_summary, summary, verdict_marks)
from ..specs.expected import expected_path, load_expected
from ..specs.overrides import apply_overrides
from ..specs.registry import PLOTS
from ..specs.selection import tier_config
from ..specs.spec import TIERS, Spec, command_for, load_spec, spec_paths
from ..store import read as result_files
from ..store.read import ResultsError, load_tier_results
from ..train.table import training_series
from .glance import glance_lines
from .projection import cell_projection, load_step_rates, measured_hours, projection_text, projections
from .shared_runs import newer_shared_run_lines

TABLES_DIR = Path("tables")
PAPER_NAMES = {"s4": "S4 (Gu, Goel, Re, ICLR 2022)", "s4d": "S4D (Gu, Gupta, Goel, Re, 2022)"}
MIB_NOTE = ("Memory columns hold MiB (2^20 bytes, as torch.cuda reports them); the papers' tables and the expected "
            "files call the column MB.")
Loaded = dict[str, list[tuple[Path, dict]]]  # tier -> results files (newest first)
PLOT_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError)


def reports_dir() -> Path:
    """Where ``report`` writes: tables/ when it reads the reference store alone (``--results reference``), else
    the local store's local/tables/ (the committed reports are never rewritten from local results)."""
    if result_files.READ_FROM == result_files.REFERENCE:
        return TABLES_DIR
    return layout.local_tables_dir()


def step_rates(results_root: Path | None) -> list[tuple[Path, dict]]:
    """The step-rate records of ``results_root``, or (None) of every folder the report reads, oldest first."""
    roots = [results_root] if results_root is not None else [folder for _, folder in result_files.read_roots()]
    records = [record for root in roots for record in load_step_rates(root)]
    return sorted(records, key=lambda pr: pr[1]["recorded"])


def _store(path: Path) -> str:
    """"local store" / "reference store" / "folder DIR": where a results file lies."""
    store = result_files.store_of(path)
    return f"{store} store" if store in result_files.STORES else store


def _table(rows: list[list[Any]], headers: list[str]) -> str:
    """A GitHub markdown table; a "|" inside a cell (e.g. a row named |Im(A)|) is escaped so it stays one cell."""
    def esc(x: Any) -> Any:
        return x.replace("|", "\\|") if isinstance(x, str) else x
    return tabulate([[esc(x) for x in r] for r in rows], headers=[esc(h) for h in headers], tablefmt="github")


def paper_text(v: CellVerdict) -> str:
    """The paper's value of a verdict, with its standard deviation where the paper gives one."""
    return textfmt.paper_text(v.paper, v.std)


def _grid_cell(v: CellVerdict, numbered: bool, files: list[tuple[Any, dict]] = ()) -> str:
    """One cell of the main table: paper / ours VERDICT (the check that judged it)."""
    if v.verdict == "CONTEXT":
        return f"{paper_text(v)} (context)"
    if v.verdict == "NOT-RUN":
        return f"{paper_text(v)} / {fmt(v.measured)} NOT-RUN"
    verdict = f"sanity {v.verdict}" if v.role == "sanity" else v.verdict
    source = f" [{v.result + 1}]" if numbered and v.result is not None else ""
    marks = verdict_marks(v, list(files))
    return f"{paper_text(v)} / {fmt(v.measured)} {verdict} ({v.check}){source}" + (
        f" · {', '.join(marks)}" if marks else "")


def _grid(expected: dict, verdicts: list[CellVerdict], numbered: bool = False,
          files: list[tuple[Any, dict]] = ()) -> str:
    by_key = {(v.row, v.column): v for v in verdicts}
    rows = []
    for row in expected["rows"]:
        line = [row]
        for col in expected["columns"]:
            v = by_key.get((row, col))
            line.append("" if v is None else _grid_cell(v, numbered, files))
        rows.append(line)
    return _table(rows, ["paper / ours", *map(column_label, expected["columns"])])


def _details(verdicts: list[CellVerdict], numbered: bool = False,
             files: list[tuple[Path, dict]] | None = None) -> str:
    """The details table: every cell with its check and reason; with ``files``, the store its value came from."""
    def store(v: CellVerdict) -> list[str]:
        if files is None:
            return []
        return [result_files.store_of(files[v.result][0]) if v.result is not None else "-"]
    rows = [[v.row, column_label(v.column), paper_text(v), fmt(v.measured), v.check, v.role, v.verdict,
             md_inline(v.detail) + (f" Known discrepancy: {v.known_fail}" if v.known_fail and v.verdict == "FAIL"
                                    else "")]
            + ([v.result + 1 if v.result is not None else "-"] if numbered else []) + store(v)
            for v in verdicts]
    headers = (["row", "column", "paper", "ours", "check", "role", "verdict", "detail"] + (["file"] if numbered else [])
               + (["store"] if files is not None else []))
    return _table(rows, headers)


def _sanity(verdicts: list[CellVerdict]) -> list[str]:
    """The "Sanity checks" section: checks that guard the machinery, not claims of the paper."""
    shown = [v for v in verdicts if v.role == "sanity"]
    if not shown:
        return []
    rows = [[v.row, column_label(v.column), fmt(v.measured), v.check, v.verdict, md_inline(v.detail)] for v in shown]
    return ["### Sanity checks", "", "These guard the machinery (a loss falls, a kernel equals its reference); they "
            "are not claims of the paper and are counted apart. A sanity FAIL still fails `runners check`.", "",
            _table(rows, ["row", "column", "ours", "check", "verdict", "detail"]), ""]


def _commit_text(env: dict) -> str:
    """The commit a result was measured at, with its uncommitted changes' hash and any provenance note."""
    text = f"commit `{md_code(env.get('git_commit'))}`"
    known = commit_known(env.get("git_commit"))
    if known is False:
        text += " (not in this repository's history: the code it names cannot be verified)"
    elif known is None:
        text += " (this checkout has no history to verify it against)"
    if env.get("git_dirty"):
        text += f" plus uncommitted changes (diff SHA-256 `{env.get('git_dirty_diff_sha256')}`)"
    if env.get("git_commit_note"):
        text += f" ({md_inline(env['git_commit_note'])}; recorded: `{md_code(env.get('git_commit_recorded'))}`)"
    if env.get("provenance_note"):
        text += f" (provenance: {env['provenance_note']})"
    return text


def _env_line(result: dict) -> str:
    env = result.get("environment") or {}
    wall = result.get("wall_time_s")
    trained = any(isinstance(s, dict) and s.get("elapsed_seconds") for s in (result.get("series") or {}).values())
    wall_text = (f"wall time of the call that wrote it {fmt(wall)} s (each cell's training time is in its line below, "
                 "and a cell trained over several calls names each call's commit and card there)"
                 if trained else f"wall time {fmt(wall)} s")
    return (f"device **{md_inline(env.get('device_name', '?'))}**, torch {md_inline(env.get('torch', '?'))}, "
            f"triton {md_inline(env.get('triton'))}, "
            f"{_commit_text(env)}"
            + f", finished {md_inline(result.get('finished', '?'))}, {wall_text}, "
              f"seed {md_inline(result.get('seed', '?'))}")


def overrides_lines(result: dict) -> list[str]:
    """What a run changed from its spec's tier as report lines: the data variant (``run --data suite``), the cells it
    was limited to (``--cells``) and the settings it overrode (``--set``); none for a run as specified."""
    lines = []
    if result.get("data") == "suite":
        note = md_inline(result.get("data_note") or "see the spec")
        lines += [f"**Data made by the suite** (`--data suite`): {note}", ""]
    if result.get("cell_patterns"):
        lines += [f"Cells selected (`--cells`): {', '.join(f'`{md_code(p)}`' for p in result['cell_patterns'])}.", ""]
    given = result.get("overrides") or []
    if given:
        lines += [f"Settings changed from the spec (`--set`): {', '.join(f'`{md_code(o)}`' for o in given)}.", ""]
    return lines


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b[0].c': leaf} of nested mappings and lists (an empty one is a leaf)."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list) and value:
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix[:-1]}[{i}]."))
        return out
    return {prefix[:-1]: value}


def config_drift(spec: Spec, tier: str, result: dict) -> list[str]:
    """The settings of ``tier`` whose value in the configuration a results file recorded differs from the spec's
    configuration now (the file's data variant and ``--set`` overrides applied to both), as "`key` (then X, now Y)".
    For a training table only the tasks and rows the file measured count. [] when nothing changed."""
    def plain(x: Any) -> Any:  # tuples as lists, as the results file holds them
        return json.loads(json.dumps(x, default=str))

    try:
        now_spec = apply_overrides(spec, tier, result.get("overrides") or [])
        now = _flatten(plain(dataclasses.asdict(tier_config(now_spec, tier, result.get("data") or "release"))))
    except Exception as exc:  # noqa: BLE001 - e.g. an override the spec no longer has: said, not hidden
        return [f"(not comparable with the spec now: {' '.join(str(exc).split())[:200]})"]
    then = _flatten(plain(result.get("config") or {}))
    cells = [tuple(c) for c in result.get("selected_cells") or []] or [
        (c.get("row"), c.get("column")) for c in result.get("cells") or []]
    rows, columns = {r for r, _ in cells}, {c for _, c in cells}

    def measured(key: str) -> bool:
        part = key.split(".")
        if part[0] == "tasks" and len(part) > 1:
            return any(c == part[1] or str(c).startswith(part[1] + " ") for c in columns)
        if part[0] == "models" and len(part) > 1:
            return part[1] in rows
        named = re.fullmatch(r"settings\[(\d+)\]", part[0])  # a benchmark setting: its columns end "(<name>)"
        if named and len(part) > 1:
            name = then.get(f"{part[0]}.name", now.get(f"{part[0]}.name"))
            return not isinstance(name, str) or any(str(c).endswith(f"({name})") for c in columns)
        return True

    def shown(v: Any) -> str:
        if v is _UNSET:
            return "not set"
        return fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else json.dumps(v)[:60]

    return [f"`{k}` (then {shown(then.get(k, _UNSET))}, now {shown(now.get(k, _UNSET))})"
            for k in sorted(set(then) | set(now))
            if measured(k) and then.get(k, _UNSET) != now.get(k, _UNSET)]


_UNSET = object()


def drift_lines(spec: Spec, tier: str, result: dict, limit: int = 8) -> list[str]:
    """A report line naming what changed in the spec since the results file was written (none when nothing did)."""
    changed = config_drift(spec, tier, result)
    if not changed:
        return []
    more = f"; and {len(changed) - limit} more" if len(changed) > limit else ""
    return [f"**Configuration changed since this run:** {'; '.join(changed[:limit])}{more}. Its verdicts are for the "
            f"configuration the results file recorded.", ""]


#: plots with one series per cell ("<row> / <task>"): drawn from every results file that judges a cell of the tier,
#: each series from the newest file that has it (the file that judges its cell); other plots read the newest file
PER_CELL_SERIES_PLOTS = frozenset({"learning_curves"})


def per_cell_series(loaded: list[tuple[Path, dict]]) -> tuple[dict, list[Path]]:
    """The newest results file with series, its series joined by those of the older files (``loaded`` is newest
    first) for cells it lacks; and the files the joined series came from."""
    newest = next(r for _, r in loaded if r.get("series"))
    merged: dict[str, Any] = {}
    sources: list[Path] = []
    for path, result in loaded:
        added = [k for k in (result.get("series") or {}) if k not in merged]
        for key in added:
            merged[key] = result["series"][key]
        if added:
            sources.append(path)
    return {**newest, "series": merged}, sources


def _draw(spec: Spec, expected: dict, tier: str, loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    """The spec's plots from the tier's results files that have series; a malformed one is one line."""
    path, result = next(((p, r) for p, r in loaded if r.get("series")), loaded[0])
    lines = []
    for name in spec.plots:
        png = out_dir / f"{spec.id}_{name}.png"
        data, sources = per_cell_series(loaded) if name in PER_CELL_SERIES_PLOTS and result.get("series") \
            else (result, [path])
        try:
            PLOTS[name](data, png, expected)
        except PLOT_ERRORS as exc:
            raise ResultsError(f"{', '.join(map(str, sources))}: cannot draw plot {name!r} from its series "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
        lines += [f"![{name} ({tier} tier)]({png.name})", ""]
        if len(sources) > 1:
            lines += [f"The curves come from {len(sources)} results files (each cell's from the file that judges "
                      f"it): {', '.join(f'`{p.name}`' for p in sources)}.", ""]
    return lines


def gpu_time_lines(spec_id: str, tier: str, files: list[tuple[Path, dict]], verdicts: list[CellVerdict],
                   records: list[tuple[Path, dict]], series: dict[str, str] | None = None) -> list[str]:
    """A table of the tier's cells that have a projected GPU time (runners/report/projection.py): the projection and
    the GPU-hours the cell's training took in the results file that judged it. ``series``: each cell's training
    series (``runners.train.table.training_series``), for the cells a step-rate record does not list by name."""
    projected = projections(records, spec_id, tier)
    rows = []
    for v in verdicts:
        p = cell_projection(projected, f"{v.row}/{v.column}", (series or {}).get(f"{v.row}/{v.column}"))
        if p is None:
            continue
        hours = measured_hours(files[v.result][1], p["series"]) if v.result is not None else None
        rows.append([f"{v.row}/{v.column}", projection_text(p), "-" if hours is None else f"{hours:.2f} GPU-h",
                     f"`{p['file']}`"])
    if not rows:
        return []
    return ["GPU time of training cells: projected from the newest measured step rate (epochs x steps per epoch at "
            "that rate), and what the training took (its logged epochs, evaluations included):", "",
            _table(rows, ["cell", "projected", "measured", "step-rate record"]), ""]


def report_spec(spec: Spec, out_dir: Path, results_root: Path | None = None,
                loaded: Loaded | None = None) -> dict[str, list[CellVerdict] | None]:
    """Write <out_dir>/<id>.md (+ plots); return the verdicts per tier (None where not run).

    ``results_root``: the results folder to read (None: the folders :func:`runners.store.read.read_roots`
    names, by default the reference store overlaid by the local one); ``loaded``: the tier's results files as
    :func:`runners.store.read.load_tier_results` gives them (read here when not given).
    """
    expected = load_expected(expected_path(spec.id))
    loaded = loaded or {t: load_tier_results(spec.id, t, results_root) for t in TIERS}
    records = step_rates(results_root) if spec.runner.startswith("train.") else []
    lines = [f"# {spec.table}: {spec.title}", ""]
    judged = {}  # tier -> (verdicts, cells measured by more than one of its results files)
    for tier in TIERS:
        docs = [doc for _, doc in loaded[tier]]
        today = Today.of_spec(spec, tier)
        verdicts = judge_tier(expected, docs, tier, today)
        judged[tier] = (verdicts, repeated_cells(expected, docs, tier, verdicts, today))
    top = next((t for t in reversed(TIERS) if loaded[t]), None)  # the most faithful tier that has run
    if top is not None:
        lines += glance_lines(top, loaded[top], *judged[top], tiers={t: judged[t][0] for t in TIERS if loaded[t]})
    for tier in reversed(TIERS):  # what each run tier shows and does not show
        if spec.shown.get(tier) and loaded[tier]:
            lines += [f"**What the {tier} tier shows:** {spec.shown[tier].strip()}", ""]
    lines += [f"Paper: {PAPER_NAMES[spec.paper]}. Source of the expected values: {expected['source']}. "
             f"Spec: `{spec.path}`; expected values: `{expected_path(spec.id)}`.", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += ["Each cell reads `paper / ours VERDICT (check)`: the paper's value (± its standard deviation where "
              "it gives one), ours, the verdict and the check that gave it. Verdicts: PASS, FAIL, IMPROVED (better "
              "than the paper beyond the check, within a plausible factor: review), STALE (measured at another "
              "setting than the spec's today: not judged; the keys that differ in the details), NOT-RUN (reason in "
              "the details); `(context)` marks prior work's numbers the suite does not rerun. After `·`, a trained "
              "cell's seeds, its epochs where fewer than its setting plans, and the distance from the paper's mean "
              "in the paper's standard deviations. Counts are of the paper's claims; context rows and sanity "
              "checks are counted apart.", ""]
    if any(column_label(c) != c for c in expected["columns"]):
        lines += [MIB_NOTE, ""]
    out: dict[str, list[CellVerdict] | None] = {}
    plotted = False
    for tier in reversed(TIERS):  # full, budget, smoke: the most faithful tier first
        files = loaded[tier]
        verdicts, repeats = judged[tier]
        lines += [f"## Tier: {tier}", ""]
        if not files:
            out[tier] = None
            lines += [f"NOT-RUN: no results for this tier. To run it: `{command_for(spec, tier)}`", ""]
            lines += gpu_time_lines(spec.id, tier, [], verdicts, records, training_series(spec, tier))
            continue
        out[tier] = verdicts
        used = sorted({v.result for v in verdicts if v.result is not None}) or [0]
        numbered = len(used) > 1
        if numbered:
            lines += ["Results files (each cell is judged by the newest file that measured it; `[n]` in a cell "
                      "names its file):", ""]
            for i in used:
                lines += [f"{i + 1}. `{files[i][0]}` ({_store(files[i][0])}): measured on {_env_line(files[i][1])}."]
                lines += [f"   {line}" for line in overrides_lines(files[i][1]) + drift_lines(spec, tier, files[i][1])
                          if line]
            lines += [""]
        else:
            lines += [f"Measured on {_env_line(files[used[0]][1])}. Results file: `{files[used[0]][0]}` "
                      f"({_store(files[used[0]][0])}).", "",
                      *overrides_lines(files[used[0]][1]), *drift_lines(spec, tier, files[used[0]][1])]
        variants = [i for i, (_, doc) in enumerate(files) if i not in used and doc.get("overrides")]
        if variants:  # runs at another setting: shown beside the spec's own, never judging its cells
            lines += ["Also run, with `--set` overrides (no cell is judged from these: the verdicts are the spec's "
                      "setting's; each cell's line in the details says what differs where it is STALE):", ""]
            lines += [f"- `{files[i][0]}` ({_store(files[i][0])}): Settings changed from the spec (`--set`): "
                      + ", ".join(f"`{md_code(o)}`" for o in files[i][1]["overrides"]) + "." for i in variants] + [""]
        lines += [f"Verdicts: {counts_text(verdicts)}", "", _grid(expected, verdicts, numbered, files), ""]
        lines += gpu_time_lines(spec.id, tier, files, verdicts, records, training_series(spec, tier))
        lines += repeat_lines(repeats, files)
        lines += newer_shared_run_lines(spec, tier, files, verdicts, results_root)
        problems = [p for i in used for p in files[i][1].get("problems", [])]
        lines += [f"**Not run:** {md_inline(p)}" for p in problems] + ([""] if problems else [])
        known = {v.known_fail for v in verdicts if v.known_fail and v.verdict == "FAIL"}
        lines += [f"**FAIL, analysed:** {k}" for k in sorted(known)] + ([""] if known else [])
        for i in used:
            notes = files[i][1].get("notes") or []
            lines += [f"- {f'[{i + 1}] ' if numbered else ''}{md_inline(note)}" for note in notes]
            lines += [""] if notes else []
        lines += _sanity(verdicts)
        if spec.plots and not plotted:
            lines += _draw(spec, expected, tier, [files[i] for i in used], out_dir)
            plotted = True
        lines += ["<details><summary>Every cell with its check and the reason for its verdict</summary>", "",
                  _details(verdicts, numbered, files), "", "</details>", ""]
    write_text_atomic(out_dir / f"{spec.id}.md", "\n".join(lines))
    return out


def report_unrun_table(expected: dict, out_dir: Path) -> None:
    """A table whose runner does not exist yet: the paper's values, every cell NOT-RUN."""
    verdicts = compare(expected, None, "full")
    lines = [f"# {expected['title']}", "", f"Paper: {PAPER_NAMES[expected['paper']]}. Source: {expected['source']}.",
             "", "NOT-RUN at every tier: this table has no spec / runner yet. The paper's "
             "values, with their sources, are in " f"`{expected_path(expected['table'])}`.", "",
             _grid(expected, verdicts), ""]
    write_text_atomic(out_dir / f"{expected['table']}.md", "\n".join(lines))


def _index_marks(verdicts: list[CellVerdict], files: list[tuple[Path, dict]]) -> str:
    """The marks of a tier's judged claims for the index: seeds of the trained ones, shortened schedules, PASSes
    resting on --set overrides."""
    judged = [v for v in verdicts if v.role == "claim" and v.verdict in ("PASS", "FAIL", "IMPROVED")]
    marks = [verdict_marks(v, files) for v in judged]
    seeds = sorted({int(m.split()[0]) for ms in marks for m in ms if m.endswith(("seed", "seeds"))})
    short = sum(any(m.endswith(" epochs") for m in ms) for ms in marks)
    resting = sum("rests on --set" in ms for ms in marks)
    parts = []
    if seeds:
        parts.append(f"{seeds[0]} seed{'s' * (seeds[0] > 1)} each" if len(seeds) == 1
                     else f"{seeds[0]}-{seeds[-1]} seeds")
    if short:
        parts.append(f"{short} on a shortened schedule")
    if resting:
        parts.append(f"{resting} resting on --set")
    return f" [{'; '.join(parts)}]" if parts else ""


def _index_counts(verdicts: list[CellVerdict] | None, files: list[tuple[Path, dict]] = (),
                  unrun: list[CellVerdict] | None = None) -> str:
    """One tier's counts for the index: the claims' nonzero verdicts (NOT-RUN by why: :func:`not_run_why`), then
    context and sanity counts, then the judged claims' marks (:func:`_index_marks`). A tier without results reads
    NOT-RUN with its claims by why (``unrun``: its verdicts without results)."""
    if verdicts is None:
        claims = [v for v in unrun or [] if v.role == "claim"]
        why = {w: sum(not_run_why(v) == w for v in claims) for w in NOT_RUN_WHY}
        return "NOT-RUN" + (f" ({', '.join(f'{w} {m}' for w, m in why.items() if m)})" if claims else "")
    claims = [v for v in verdicts if v.role == "claim"]
    why = {w: sum(not_run_why(v) == w for v in claims) for w in NOT_RUN_WHY}
    counts = " ".join(f"{k} {n}" + (f" ({', '.join(f'{w} {m}' for w, m in why.items() if m)})"
                                    if k == "NOT-RUN" else "") for k, n in summary(verdicts).items() if n)
    parts = [counts + _index_marks(verdicts, list(files))]
    if context_count(verdicts):
        parts.append(f"context {context_count(verdicts)}")
    sanity = sanity_summary(verdicts)
    if any(sanity.values()):
        parts.append("sanity " + " ".join(f"{k} {n}" for k, n in sanity.items() if n))
    return "; ".join(p for p in parts if p)


def _index_source(spec: Spec, tier: str, files: list[tuple[Path, dict]], verdicts: list[CellVerdict] | None) -> str:
    """' (data: ...; on: ...)' for the index: for a training table the data of the results files that gave the
    tier's verdicts ('suite': the configuration on data the suite makes, run --data suite; 'release': the full tier
    on the dataset's release; "tier's own": a smoke or budget tier's fixtures, stand-ins or generated data), and
    the devices that measured them; '' where no file gave a verdict."""
    used = sorted({v.result for v in verdicts or [] if v.result is not None})
    if not used:
        return ""
    docs = [files[i][1] for i in used]
    cards = sorted({md_inline((d.get("environment") or {}).get("device_name") or "?").replace("NVIDIA ", "")
                    for d in docs})
    if not spec.runner.startswith("train."):
        return f" (on: {', '.join(cards)})"
    data = sorted({"suite" if d.get("data") == "suite" else "release" if tier == "full" else "tier's own"
                   for d in docs})
    return f" (data: {', '.join(data)}; on: {', '.join(cards)})"


def _sources_text(results_root: Path | None) -> str:
    """Which results a report read, for the index: the stores (or the folder) and their folders."""
    if results_root is not None:
        return f"{result_files.store_of_folder(results_root)}: `{Path(results_root).as_posix()}/`"
    roots = result_files.read_roots()
    if len(roots) > 1:
        return "the reference results overlaid by the local ones: " + ", ".join(
            f"{name} `{folder.as_posix()}/`" for name, folder in roots) + "; each cell judged by the newest file"
    (name, folder), = roots
    return f"{name}: `{folder.as_posix()}/`"


def _index_stores(files: list[tuple[Path, dict]], verdicts: list[CellVerdict] | None) -> str:
    """' [local]', ' [reference]' or ' [local + reference]' for the index: the stores of the results files that
    gave the tier's verdicts ('' where none did)."""
    used = sorted({v.result for v in verdicts or [] if v.result is not None})
    stores = sorted({result_files.store_of(files[i][0]) for i in used})
    return f" [{' + '.join(stores)}]" if stores else ""


def report_all(out_dir: Path | None = None, results_root: Path | None = None) -> Path:
    """Reports for every spec and the index <out_dir>/README.md; returns the index path.

    ``out_dir``: default :func:`reports_dir` (local/tables/, or tables/ for the reference store alone);
    ``results_root``: one results folder to read, default the folders of :func:`runners.store.read.read_roots`.
    Every results file is read and checked before anything is written: a corrupt one stops the report with a
    one-line :class:`ResultsError` naming it.
    """
    out_dir = out_dir or reports_dir()
    specs = [load_spec(path) for path in spec_paths()]
    loaded = {spec.id: {t: load_tier_results(spec.id, t, results_root) for t in TIERS} for spec in specs}
    rows = []
    for spec in specs:
        verdicts = report_spec(spec, out_dir, results_root, loaded[spec.id])
        rows.append([f"[{spec.id}]({spec.id}.md)", f"{spec.paper.upper()} {spec.table}", spec.title,
                     f"`make {spec.make}`" if spec.make else f"`ssm-repro run {spec.path}`",
                     *[_index_counts(verdicts[t], loaded[spec.id][t],
                                     compare(load_expected(expected_path(spec.id)), None, t))
                       + _index_source(spec, t, loaded[spec.id][t], verdicts[t])
                       + _index_stores(loaded[spec.id][t], verdicts[t]) for t in TIERS]])
    spec_ids = {spec.id for spec in specs}
    for path in sorted(Path("expected").glob("*.yaml")):
        if path.stem in spec_ids:
            continue
        expected = load_expected(path)
        report_unrun_table(expected, out_dir)
        rows.append([f"[{path.stem}]({path.stem}.md)", f"{expected['paper'].upper()} {path.stem}",
                     expected["title"], "no spec yet", *["NOT-RUN"] * len(TIERS)])
    index = ["# Reproduction reports", "",
             "One line per table; generated by `python -m runners report` from the results files only "
             f"({_sources_text(results_root)}). Counts "
             "per tier: the paper's claims by verdict (STALE: measured at another setting than the spec's today, "
             "not judged; NOT-RUN by why: not configured at this tier, not yet run, or no data here), with the "
             "judged claims' marks in square brackets (seeds of the trained ones, how many on a schedule shorter "
             "than their setting plans, how many resting on --set overrides), then context rows (prior work's "
             "numbers the suite does not rerun) and sanity checks (they guard the machinery), counted apart; then, "
             "for training tables, the "
             "data the verdicts were measured on (`release`: the full tier on the dataset's release; `suite`: the "
             "tier's configuration on data the suite makes by the dataset's own procedure; `tier's own`: a smoke or "
             "budget tier's fixtures, stand-ins or generated data) and the devices that measured them; in "
             "brackets, the store of the results files behind the verdicts (`reference`: committed under results/; "
             "`local`: a run of this checkout, under local/results/).", "",
             tabulate(rows, headers=["report", "table", "title", "command", *TIERS], tablefmt="github"), ""]
    extra = sorted(p for p in out_dir.glob("*.md") if p.name != "README.md"
                   and p.stem not in spec_ids | {p.stem for p in Path("expected").glob("*.yaml")})
    if extra:
        index += ["Other reports: " + ", ".join(f"[{p.stem}]({p.name})" for p in extra), ""]
    write_text_atomic(out_dir / "README.md", "\n".join(index))
    return out_dir / "README.md"
