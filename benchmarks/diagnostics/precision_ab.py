"""CPU: the accuracy side of a training-step A/B, from the runs' metrics (e.g. benchmarks/campaign/precision_ab.txt).

    python -m benchmarks.diagnostics.precision_ab RUNS --marker tasks.Pathfinder.train.epochs=3 [--spec s4d-table-5]

RUNS is a runs folder (``runs/``, ``checkpoints/`` or a campaign call's ``logs/runs/runs/``). Every ``--set`` folder of
the spec whose overrides.json holds ``--marker`` is one run: its arm is what else it sets (``seed=N`` and
``device_data`` left out: the seed is the run's, and where the batches are gathered does not change them), its seed
that of ``seed=N`` (else the tier's, 0). Printed: one row per run (epochs done, best validation, the test accuracy at
the best validation epoch as the papers report it, the last training loss), then per arm the mean test accuracy over
its seeds, their spread (largest minus smallest), and its difference from the reference arm (``--reference``, by
default the one that sets nothing else: the spec's own setting) beside the reference's seed spread.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean
from typing import Optional, Sequence

from tabulate import tabulate

from runners.report.progress import SET_MARK, read_overrides
from runners.train.loop import best_validation, read_metrics

IGNORED = ("seed=", "device_data=")  # keys that name a run rather than its arm


class UsageError(ValueError):
    """An argument or file this script cannot use; the message names it."""


def _short(text: str) -> str:
    """A --set text with its key's path left out: 'tasks.Pathfinder.train.amp=none' -> 'amp=none'."""
    key, _, value = text.partition("=")
    return f"{key.lstrip('+').rsplit('.', 1)[-1]}={value}"


def arm_of(texts: list[str], marker: str) -> tuple[str, int]:
    """(arm, seed) of a run's --set texts: the settings besides the marker, the seed and the data placement."""
    seeds = [t.split("=", 1)[1] for t in texts if t.startswith("seed=")]
    if seeds and not seeds[-1].lstrip("-").isdigit():
        raise UsageError(f"seed={seeds[-1]!r} is not an integer")
    seed = int(seeds[-1]) if seeds else 0
    rest = [_short(t) for t in texts if t != marker and not _short(t).startswith(IGNORED)]
    return (", ".join(rest) or "(the spec's setting)"), seed


def collect_runs(runs: Path, spec_id: str, marker: str) -> list[dict]:
    """One dict per run of ``spec_id`` under ``runs`` whose folder's overrides hold ``marker``."""
    if not (runs / spec_id).is_dir():
        raise UsageError(f"{runs / spec_id}: no such folder")
    found = []
    for folder in sorted(p for p in (runs / spec_id).iterdir() if p.is_dir() and SET_MARK in p.name):
        try:
            texts = read_overrides(folder)
        except ValueError:
            continue  # not a recorded configuration: not one of the A/B's runs
        if marker not in texts:
            continue
        try:
            arm, seed = arm_of(texts, marker)
        except UsageError as exc:
            raise UsageError(f"{folder}/overrides.json: {exc}") from None
        for metrics in sorted(folder.glob("*/metrics.jsonl")):
            try:
                lines = read_metrics(metrics)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            epochs = [line for line in lines if not line.get("partial")]
            best = best_validation(epochs, "val_acc") if epochs else {"epoch": None}
            found.append({"arm": arm, "seed": seed, "cell": metrics.parent.name, "folder": folder.name,
                          "best": best if best["epoch"] is not None else None, "epochs": len(epochs),
                          "last_train_loss": lines[-1].get("train_loss") if lines else None})
    if not found:
        raise UsageError(f"{runs / spec_id}: no --set folder whose overrides.json holds {marker!r}")
    return found


def summary(found: list[dict], reference: Optional[str]) -> tuple[list[list], str]:
    """Per arm: mean test at best validation over seeds, the seed spread, the difference from the reference arm."""
    by_arm: dict[str, list[float]] = {}
    for run in found:
        if run["best"] is not None and isinstance(run["best"].get("test"), (int, float)):
            by_arm.setdefault(run["arm"], []).append(float(run["best"]["test"]))
    ref = reference or "(the spec's setting)"
    base = mean(by_arm[ref]) if ref in by_arm else None
    rows = [[arm, len(v), f"{mean(v):.2f}", f"{max(v) - min(v):.2f}" if len(v) > 1 else "-",
             f"{mean(v) - base:+.2f}" if base is not None else "-"] for arm, v in sorted(by_arm.items())]
    spread = (f"{max(by_arm[ref]) - min(by_arm[ref]):.2f}" if ref in by_arm and len(by_arm[ref]) > 1 else "unknown "
              "(one seed)") if ref in by_arm else f"unknown (no run of the reference arm {ref!r})"
    return rows, spread


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--marker", required=True, help="the --set text every run of the A/B holds")
    parser.add_argument("--spec", default="s4d-table-5")
    parser.add_argument("--reference", help="the arm the others are compared with (default: the spec's setting)")
    args = parser.parse_args(argv)
    try:
        found = collect_runs(args.runs, args.spec, args.marker)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = [[r["arm"], r["seed"], r["cell"], r["epochs"],
             f"{r['best']['val']:.2f} (epoch {r['best']['epoch']})" if r["best"] else "-",
             f"{r['best']['test']:.2f}" if r["best"] and r["best"].get("test") is not None else "-",
             f"{r['last_train_loss']:.4f}" if isinstance(r["last_train_loss"], (int, float)) else "-"]
            for r in sorted(found, key=lambda r: (r["arm"], r["seed"]))]
    print(tabulate(rows, disable_numparse=True, headers=["arm", "seed", "cell", "epochs", "best validation",
                                                        "test at best validation", "last training loss"]))
    table, spread = summary(found, args.reference)
    print()
    print(tabulate(table, disable_numparse=True,
                   headers=["arm", "seeds", "mean test", "seed spread", "minus the reference"]))
    print(f"\nreference: {args.reference or 'the spec setting'}; its seed spread: {spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
