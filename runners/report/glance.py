"""The report's first lines: what the most faithful tier run reproduced, on which data, schedule and card.

One bullet per column (a task or a measured quantity) and results file: the verdicts of the paper's claims measured
there, each cell's value beside the paper's, the data (the suite's or not), the training schedule in epochs and the
cards the cells trained on. Then what a reader must not miss: the tier's sanity FAILs, every other tier's FAILs,
the claims that passed only after earlier runs failed (and whether those ran another configuration), the cells
trained partly on uncommitted code, and the PASSes that rest on ``--set`` overrides. Built from the results files
and the verdicts only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.textfmt import column_label, fmt, md_inline, paper_text
from ..judge.repeats import Repeat, provenance
from ..judge.settings import Today
from ..judge.verdicts import CellVerdict, judge_tier, verdict_marks
from ..specs.expected import expected_path, load_expected
from ..specs.spec import TIERS, find_spec, load_spec
from ..store.read import load_tier_results

JUDGED = ("PASS", "IMPROVED", "FAIL", "STALE")
LISTED_CELLS = 6  # a bullet names each cell's value up to this many cells; beyond, counts only


def _mapping(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def cell_cards(result: dict, row: str, column: str) -> list[str]:
    """The cards a cell was measured on, in order: each training segment's card (a run resumed on another card
    names both), else the device of the call that wrote the results file."""
    series = _mapping(_mapping(result.get("series")).get(f"{row} / {column}"))
    segments = series.get("segments")
    cards: list[str] = []
    for seg in segments if isinstance(segments, list) else []:
        card = _mapping(seg).get("device")
        if isinstance(card, str) and card and md_inline(card) not in cards:
            cards.append(md_inline(card))
    if cards:
        return cards
    device = _mapping(result.get("environment")).get("device_name")
    return [md_inline(device)] if isinstance(device, str) and device else []


def cell_epochs(result: dict, row: str, column: str) -> Any:
    """The configured number of epochs of a trained cell (its task's, else the run's), None for a cell that did
    not train (a benchmark, an analytic check)."""
    series = _mapping(_mapping(result.get("series")).get(f"{row} / {column}"))
    if not isinstance(series.get("history"), list):
        return None
    config = _mapping(result.get("config"))
    task_train = _mapping(_mapping(_mapping(config.get("tasks")).get(column)).get("train"))
    epochs = task_train.get("epochs", _mapping(config.get("train")).get("epochs"))
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None


def _counts(cells: list[CellVerdict]) -> str:
    counts = {k: sum(v.verdict == k for v in cells) for k in JUDGED}
    return ", ".join(f"{k} {n}" for k, n in counts.items() if n) + f" of {len(cells)}"


def _cell_text(v: CellVerdict, files: list[tuple[Any, dict]] = ()) -> str:
    """"S4 59 PASS (59.6 ± 1.5; paper 59.6 ± 0.07; 1 seed; -8.6 paper std)": ours, the verdict, the check, the
    paper's value and the verdict's marks (:func:`runners.judge.verdicts.verdict_marks`)."""
    paper = f"; paper {paper_text(v.paper, v.std)}" if v.paper is not None and v.check != paper_text(v.paper) else ""
    marks = "".join(f"; {m}" for m in verdict_marks(v, list(files)))
    return f"{v.row} {fmt(v.measured)} {v.verdict} ({v.check}{paper}{marks})"


def _repeat_text(r: Repeat) -> str:
    """"S4 / Speedup (Table 7) 6 runs, 57.45 to 69.83": the runs' count and the range of their values."""
    nums = r.numbers
    spread = f", {fmt(min(nums))} to {fmt(max(nums))}" if len(nums) == len(r.runs) else ""
    return f"{r.row} / {column_label(r.column)} {len(r.runs)} runs{spread}"


def _verdict_text(v: CellVerdict) -> str:
    """"Transformer (fused SDPA) / Speed L=1024 0.7487 FAIL (> Transformer)"."""
    known = " (known)" if v.known_fail else ""
    return f"{v.row} / {column_label(v.column)} {fmt(v.measured)} {v.verdict}{known} ({v.check})"


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:LISTED_CELLS])
    return shown + (f"; and {len(items) - LISTED_CELLS} more" if len(items) > LISTED_CELLS else "")


def _config_key(result: dict) -> str:
    """A results file's configuration as it recorded it (resolved settings, ``--set`` overrides, data variant)."""
    return json.dumps([result.get("config"), result.get("overrides") or [], result.get("data")], sort_keys=True,
                      default=str)


def passed_after_failures(repeats: list[Repeat], files: list[tuple[Any, dict]]) -> list[str]:
    """The claims whose judged run passes while an earlier run of them failed, each as "<row> / <column> (N runs,
    K configurations: FAIL, FAIL, then PASS)", saying when the failed runs had another configuration."""
    out = []
    for r in repeats:
        judged_index, _, judged_verdict = r.runs[0]
        failed = [(i, verdict) for i, _, verdict in r.runs[1:] if verdict == "FAIL"]
        if judged_verdict not in ("PASS", "IMPROVED") or not failed:
            continue
        mine = _config_key(files[judged_index][1])
        other = sum(_config_key(files[i][1]) != mine for i, _ in failed)
        configs = len({_config_key(files[i][1]) for i, _, _ in r.runs})
        order = sorted(r.runs, key=lambda run: -run[0])  # oldest first (files are newest first)
        how = ", ".join(verdict for _, _, verdict in order[:-1]) + f", then {order[-1][2]}" \
            if order[-1][0] == judged_index else ", ".join(verdict for _, _, verdict in order)
        which = ("with another configuration" if other == len(failed) else
                 f"{other} of them with another configuration" if other else "with the same configuration")
        out.append(f"{r.row} / {column_label(r.column)}: {len(failed)} earlier run{'s' * (len(failed) > 1)} "
                   f"failed {which} ({len(r.runs)} runs, {configs} configuration{'s' * (configs > 1)}: {how})")
    return out


def dirty_training(verdicts: list[CellVerdict], files: list[tuple[Any, dict]]) -> list[str]:
    """The judged cells whose results file shows training on uncommitted code: a training segment with
    ``git_dirty`` (or, for a cell that did not train, the file's environment), as "<row> / <column> (steps from
    N at <commit> plus uncommitted changes)"."""
    out = []
    for v in verdicts:
        if v.result is None or v.verdict not in JUDGED:
            continue
        result = files[v.result][1]
        series = _mapping(_mapping(result.get("series")).get(f"{v.row} / {v.column}"))
        segments = [s for s in series.get("segments") or [] if isinstance(s, dict)] \
            if isinstance(series.get("segments"), list) else []
        dirty = [s for s in segments if s.get("git_dirty")]
        if dirty:
            parts = [f"from step {s.get('from_global_step', '?')} at "
                     f"{str(s.get('git_commit') or 'an unrecorded commit')[:7]} plus uncommitted changes"
                     for s in dirty]
            out.append(f"{v.row} / {column_label(v.column)} ({len(dirty)} of {len(segments)} training segments: "
                       f"{', '.join(parts)})")
        elif not segments and _mapping(result.get("environment")).get("git_dirty"):
            out.append(f"{v.row} / {column_label(v.column)} (its results file was written from a tree with "
                       f"uncommitted changes)")
    return out


def other_tiers(tier: str, files: list[tuple[Any, dict]]) -> dict[str, list[CellVerdict]]:
    """The verdicts of the spec's other tiers, read from the results folder ``files`` come from (the report's
    glance names their FAILs; files from both stores: the stores read now, overlaid); {} where that cannot be told
    (no files, or files not under results/<spec id>/)."""
    if not files or not isinstance(files[0][0], Path) or not isinstance(files[0][1].get("spec_id"), str):
        return {}
    spec_id = files[0][1]["spec_id"]
    if files[0][0].parent.name != spec_id or not expected_path(spec_id).exists():
        return {}
    roots = {path.parent.parent for path, _ in files if isinstance(path, Path)}
    root = roots.pop() if len(roots) == 1 else None  # several folders: the stores read now, overlaid
    expected = load_expected(expected_path(spec_id))
    out = {}
    for other in reversed(TIERS):  # the most faithful tier first
        if other == tier:
            continue
        loaded = load_tier_results(spec_id, other, root, expected)
        if loaded:
            out[other] = judge_tier(expected, [doc for _, doc in loaded], other,
                                    Today.of_spec(load_spec(find_spec(spec_id)), other))
    return out


def glance_lines(tier: str, files: list[tuple[Any, dict]], verdicts: list[CellVerdict],
                 repeats: list[Repeat] = (), tiers: dict[str, list[CellVerdict]] | None = None) -> list[str]:
    """Markdown lines for the top of a report: the measured claims of ``tier`` grouped by column and results file,
    then the claims measured in more than one run (``repeats``, :func:`runners.judge.repeats.repeated_cells`) with the
    spread of their values and whether an earlier run's verdict differs; the tier's sanity FAILs; every other
    tier's FAILs (``tiers``: tier -> verdicts; read from the results folder of ``files`` when not given); the
    claims that passed only after earlier runs failed; the cells trained partly on uncommitted code; the PASSes
    that rest on ``--set`` overrides.

    ``files`` are the tier's results files, newest first, as the verdicts' ``result`` indices name them."""
    groups: dict[tuple, list[CellVerdict]] = {}
    for v in verdicts:
        if v.role != "claim" or v.verdict not in JUDGED or v.result is None:
            continue
        result = files[v.result][1]
        key = (v.column, v.result, cell_epochs(result, v.row, v.column), tuple(cell_cards(result, v.row, v.column)))
        groups.setdefault(key, []).append(v)
    bullets = []
    for (column, index, epochs, cards), cells in groups.items():
        result = files[index][1]
        where = [column_label(column)]
        if result.get("data") == "suite":
            where.append("data made by the suite")
        if epochs is not None:
            where.append(f"{epochs} epochs")
        if cards:
            where.append(" then ".join(cards))
        text = f"- {', '.join(where)}: {_counts(cells)}"
        if len(cells) <= LISTED_CELLS:
            text += ": " + "; ".join(_cell_text(v, files) for v in cells)
        bullets.append(text)
    stale = [v for v in verdicts if v.verdict == "STALE"]
    if stale:
        bullets.append(f"- STALE at this tier: {len(stale)} measured at another setting than the spec's today, so not "
                       f"judged (the keys that differ in the details): "
                       + _listed([f"{v.row} / {column_label(v.column)} {fmt(v.measured)} ({v.stale[0]}"
                                  + (f"; {len(v.stale) - 1} more" if len(v.stale) > 1 else "") + ")" for v in stale]))
    sanity = [v for v in verdicts if v.role == "sanity" and v.verdict == "FAIL"]
    if sanity:
        bullets.append(f"- sanity FAIL at this tier: {len(sanity)} (checks of the machinery, not claims; they fail "
                       f"`runners check` all the same): " + _listed([_verdict_text(v) for v in sanity]))
    if repeats:
        differ = sum(r.differs for r in repeats)
        text = (f"- measured in more than one run: {len(repeats)} claim{'s' if len(repeats) > 1 else ''}"
                + ((f", {differ} of them" if len(repeats) > 1 else ",") + " judged differently by an earlier run"
                   if differ else ", every earlier run judged the same"))
        if len(repeats) <= LISTED_CELLS:
            text += ": " + "; ".join(_repeat_text(r) for r in repeats)
        spans = provenance(repeats, files)
        bullets.append(text + (f"; the runs span {spans}" if spans else "") + " (every run in the tier's section).")
        after = passed_after_failures(repeats, files)
        if after:
            bullets.append(f"- passed only after earlier runs failed: {len(after)} claim{'s' * (len(after) > 1)}: "
                           + _listed(after))
    dirty = dirty_training(verdicts, files)
    if dirty:
        bullets.append(f"- trained partly on uncommitted code (the commit a segment records is not all of the code it "
                       f"ran): {len(dirty)} cell{'s' * (len(dirty) > 1)}: " + _listed(dirty))
    resting = [v for v in verdicts if v.overrides and v.verdict in ("PASS", "IMPROVED")]
    if resting:
        sets = sorted({" ".join(v.overrides) for v in resting})
        bullets.append(f"- {len(resting)} PASS/IMPROVED rest{'s' * (len(resting) == 1)} on settings changed from the "
                       f"spec ({'; '.join(f'`--set {s}`' for s in sets)})")
    for other, other_verdicts in (tiers if tiers is not None else other_tiers(tier, files)).items():
        if other == tier or not other_verdicts:
            continue
        failed = [v for v in other_verdicts if v.verdict == "FAIL"]
        if failed:
            n_claims, n_sanity = sum(v.role == "claim" for v in failed), sum(v.role == "sanity" for v in failed)
            roles = ", ".join(text for n, text in ((n_claims, f"{n_claims} claim{'s' * (n_claims != 1)}"),
                                                   (n_sanity, f"{n_sanity} sanity")) if n)
            bullets.append(f"- FAIL at the {other} tier: {len(failed)} ({roles}): "
                           + _listed([_verdict_text(v) for v in failed]))
    if not bullets:
        return []
    lines = [f"**At a glance ({tier} tier):** the paper's claims measured so far, by column; each cell reads "
             "ours, the verdict (the check; the paper's value). Details below.", ""] + bullets
    not_run = sum(v.role == "claim" and v.verdict == "NOT-RUN" for v in verdicts)
    if not_run:
        lines.append(f"- not run at this tier: {not_run} claim{'s' if not_run > 1 else ''} (reasons in the details).")
    return lines + [""]
