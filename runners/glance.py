"""The report's first lines: what the most faithful tier run reproduced, on which data, schedule and card.

One bullet per column (a task or a measured quantity) and results file: the verdicts of the paper's claims measured
there, each cell's value beside the paper's, the data (the suite's or not), the training schedule in epochs and the
cards the cells trained on. Built from the results files and the verdicts only.
"""
from __future__ import annotations

from typing import Any

from .compare import CellVerdict
from .repeats import Repeat, provenance
from .textfmt import column_label, fmt, paper_text

JUDGED = ("PASS", "IMPROVED", "FAIL")
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
        if isinstance(card, str) and card and card not in cards:
            cards.append(card)
    if cards:
        return cards
    device = _mapping(result.get("environment")).get("device_name")
    return [device] if isinstance(device, str) and device else []


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


def _cell_text(v: CellVerdict) -> str:
    """"S4 59 PASS (59.6 ± 1.5; paper 59.6 ± 0.07)": ours, the verdict, the check and the paper's value."""
    paper = f"; paper {paper_text(v.paper, v.std)}" if v.paper is not None and v.check != paper_text(v.paper) else ""
    return f"{v.row} {fmt(v.measured)} {v.verdict} ({v.check}{paper})"


def _repeat_text(r: Repeat) -> str:
    """"S4 / Speedup (Table 7) 6 runs, 57.45 to 69.83": the runs' count and the range of their values."""
    nums = r.numbers
    spread = f", {fmt(min(nums))} to {fmt(max(nums))}" if len(nums) == len(r.runs) else ""
    return f"{r.row} / {column_label(r.column)} {len(r.runs)} runs{spread}"


def glance_lines(tier: str, files: list[tuple[Any, dict]], verdicts: list[CellVerdict],
                 repeats: list[Repeat] = ()) -> list[str]:
    """Markdown lines for the top of a report: the measured claims of ``tier`` grouped by column and results file,
    then the claims measured in more than one run (``repeats``, :func:`runners.repeats.repeated_cells`) with the
    spread of their values and whether an earlier run's verdict differs.

    ``files`` are the tier's results files, newest first, as the verdicts' ``result`` indices name them."""
    groups: dict[tuple, list[CellVerdict]] = {}
    for v in verdicts:
        if v.role != "claim" or v.verdict not in JUDGED or v.result is None:
            continue
        result = files[v.result][1]
        key = (v.column, v.result, cell_epochs(result, v.row, v.column), tuple(cell_cards(result, v.row, v.column)))
        groups.setdefault(key, []).append(v)
    if not groups:
        return []
    lines = [f"**At a glance ({tier} tier):** the paper's claims measured so far, by column; each cell reads "
             "ours, the verdict (the check; the paper's value). Details below.", ""]
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
            text += ": " + "; ".join(_cell_text(v) for v in cells)
        lines.append(text)
    if repeats:
        differ = sum(r.differs for r in repeats)
        text = (f"- measured in more than one run: {len(repeats)} claim{'s' if len(repeats) > 1 else ''}"
                + ((f", {differ} of them" if len(repeats) > 1 else ",") + " judged differently by an earlier run"
                   if differ else ", every earlier run judged the same"))
        if len(repeats) <= LISTED_CELLS:
            text += ": " + "; ".join(_repeat_text(r) for r in repeats)
        spans = provenance(repeats, files)
        lines.append(text + (f"; the runs span {spans}" if spans else "") + " (every run in the tier's section).")
    not_run = sum(v.role == "claim" and v.verdict == "NOT-RUN" for v in verdicts)
    if not_run:
        lines.append(f"- not run at this tier: {not_run} claim{'s' if not_run > 1 else ''} (reasons in the details).")
    return lines + [""]
