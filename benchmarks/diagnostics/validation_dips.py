"""CPU: how often a run's validation falls below its neighbours, by how far its learning rate has come down.

    python -m benchmarks.diagnostics.validation_dips --runs checkpoints [--below 2 5] [--output dips.json]

For every complete epoch with NEIGHBOURS complete epochs on each side, its drop is the median validation of those
2 x NEIGHBOURS epochs minus its own (a steady rise or fall on both sides gives a drop near 0, so a run still
learning needs no warm-up cut). An epoch is a dip at B points when its drop exceeds B. The epochs are grouped by
their learning rate as a fraction of the run's largest (the cosine schedule's bands 1-0.75, 0.75-0.5, 0.5-0.25,
0.25-0): in the campaign's pre-norm BatchNorm models a dip is an evaluation reading a first-norm running mean that
trails an encoder bias moved by rounding in Adam-sized steps, which scale with the learning rate, so dips should
thin out as it falls. Runs are found as ``benchmarks/diagnostics/learning_curves.py --runs`` finds them (or given
as its METRICS=SPEC:ROW / TASK[|LABEL] entries). For classification runs: the validation metric is an accuracy
(a regression run's is an error, whose dips would be rises).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Sequence

from tabulate import tabulate

from runners.core.atomic import write_text_atomic

from .learning_curves import UsageError, labelled, parse_entry, read_history, runs_entries

NEIGHBOURS = 3
BANDS = ((0.75, "1-0.75"), (0.5, "0.75-0.5"), (0.25, "0.5-0.25"), (0.0, "0.25-0"))


def band_of(fraction: float) -> str:
    """The band of a learning rate at ``fraction`` of the run's largest (a band holds its upper end)."""
    return next(name for low, name in BANDS if fraction > low or low == 0.0)


def drops(history: list[dict], neighbours: int = NEIGHBOURS) -> list[tuple[int, float, float]]:
    """(epoch, learning-rate fraction, drop) of every complete epoch with ``neighbours`` on each side."""
    if neighbours < 1:
        raise UsageError(f"--neighbours {neighbours}: expected an integer >= 1")
    peak = max((h["lr"] for h in history), default=0.0)
    vals = [h["val_metric"] for h in history]
    out = []
    for i in range(neighbours, len(history) - neighbours):
        around = vals[i - neighbours:i] + vals[i + 1:i + 1 + neighbours]
        out.append((history[i]["epoch"], history[i]["lr"] / peak if peak > 0 else 0.0,
                    statistics.median(around) - vals[i]))
    return out


def dip_rows(name: str, history: list[dict], below: Sequence[float], neighbours: int = NEIGHBOURS) -> list[dict]:
    """One row per learning-rate band the run has reached: epochs judged, dips at each of ``below``, median drop."""
    by_band: dict[str, list[tuple[int, float]]] = {}
    for epoch, fraction, drop in drops(history, neighbours):
        by_band.setdefault(band_of(fraction), []).append((epoch, drop))
    rows = []
    for _, band in BANDS:
        if band not in by_band:
            continue
        items = by_band[band]
        row = {"run": name, "lr / peak": band, "epochs": f"{items[0][0]}-{items[-1][0]}", "judged": len(items)}
        for b in below:
            row[f"dips > {b:g}"] = sum(d > b for _, d in items)
        row["median drop"] = round(statistics.median(d for _, d in items), 2)
        row["worst (epoch)"] = "{:.1f} ({})".format(*max(((d, e) for e, d in items)))
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="*", help="METRICS=SPEC:ROW / TASK[|LABEL]")
    parser.add_argument("--runs", type=Path, help="also every run's metrics.jsonl under this folder")
    parser.add_argument("--below", type=float, nargs="+", default=[2.0, 5.0],
                        help="dip thresholds in points of validation accuracy (default 2 5)")
    parser.add_argument("--neighbours", type=int, default=NEIGHBOURS, help="complete epochs on each side")
    parser.add_argument("--output", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if not args.entries and args.runs is None:
        parser.error("give METRICS=SPEC:ROW / TASK entries, --runs DIR, or both")
    try:
        if any(b <= 0 for b in args.below):
            raise UsageError(f"--below {' '.join(f'{b:g}' for b in args.below)}: expected thresholds > 0")
        rows = []
        for text in args.entries + (runs_entries(args.runs) if args.runs is not None else []):
            path, _, cell, label = parse_entry(text)
            history = read_history(path)
            for key, what in (("val_metric", "validation metric"), ("lr", "learning rate")):
                if missing := [h["epoch"] for h in history if not isinstance(h.get(key), (int, float))]:
                    raise UsageError(f"{path}: epoch {missing[0]} has no {what} ({key!r}), which the dips need")
            rows += dip_rows(labelled(cell, label), history, args.below, args.neighbours)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(tabulate(rows, headers="keys", tablefmt="github"))
    if args.output:
        write_text_atomic(args.output, json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
