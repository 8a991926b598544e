"""CPU: the step-level learning curves of training runs, from their steps.jsonl (runners/train/step_log.py).

    python benchmarks/diagnostics/step_curves.py --runs checkpoints --out steps.png [--from-epoch 60]

One row of two panels per run that has a steps.jsonl under ``--runs`` (``<spec>/<folder>/<cell>/steps.jsonl``: a
runs folder, ``checkpoints/``, or a campaign call's ``logs/runs/runs/``): the training loss of each window of steps,
and the largest gradient norm of each window (log scale), both against the optimizer step (the window's last), with
the epochs' boundaries marked every tenth epoch. What an epoch's mean hides shows here: a loss that jumps within a
few steps, a gradient that blows up before it. ``--from-epoch E`` draws the windows of epoch E on only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, os.getcwd())

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from runners.atomic import atomic_path  # noqa: E402
from runners.train.step_log import STEPS_NAME  # noqa: E402


class UsageError(ValueError):
    """An argument or a file this script cannot use; the message names it."""


def read_steps(path: Path) -> list[dict]:
    """The windows of a steps.jsonl; UsageError naming the file (and line) where it is not one."""
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{number}: not a JSON object ({exc})") from None
        if not isinstance(line, dict) or not all(k in line for k in ("step", "epoch", "steps", "train_loss")):
            raise UsageError(f"{path}:{number}: a steps.jsonl line needs step, epoch, steps and train_loss")
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="a folder of <spec>/<folder>/<cell>/steps.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--from-epoch", type=int, default=1, help="draw the windows of this epoch on")
    parser.add_argument("--title", default="step-level learning curves", help="the figure's title")
    args = parser.parse_args(argv)
    try:
        if not args.runs.is_dir():
            raise UsageError(f"--runs {args.runs}: no such folder")
        if args.from_epoch < 1:
            raise UsageError(f"--from-epoch {args.from_epoch}: an epoch is 1 or more")
        runs = {}
        for path in sorted(args.runs.glob(f"*/*/*/{STEPS_NAME}")):
            kept = [line for line in read_steps(path) if line["epoch"] >= args.from_epoch]
            if kept:
                runs["/".join(path.relative_to(args.runs).parts[:3])] = kept
        if not runs:
            raise UsageError(f"--runs {args.runs}: no <spec>/<folder>/<cell>/{STEPS_NAME} with windows from epoch "
                             f"{args.from_epoch}")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 3.2 * len(runs)), squeeze=False)
    for (name, kept), (ax_loss, ax_norm) in zip(runs.items(), axes):
        steps = [line["step"] for line in kept]
        ax_loss.plot(steps, [line["train_loss"] for line in kept], lw=0.8)
        ax_loss.set(title=f"training loss per window: {name}", xlabel="optimizer step", ylabel="cross-entropy or MSE")
        norms = [(line["step"], line.get("grad_norm_max")) for line in kept]
        finite = [(s, v) for s, v in norms if v is not None and math.isfinite(v) and v > 0]
        if finite:
            ax_norm.semilogy(*zip(*finite), lw=0.8, color="tab:red")
        for s, v in norms:  # a window whose gradient was not finite
            if v is not None and not math.isfinite(v):
                ax_norm.axvline(s, color="black", lw=0.8, ls=":")
        ax_norm.set(title="largest gradient norm per window (dotted: not finite)", xlabel="optimizer step")
        ends = {}  # each epoch's last step in the log
        for line in kept:
            ends[line["epoch"]] = line["step"]
        for ax in (ax_loss, ax_norm):
            for epoch, end in ends.items():
                if epoch % 10 == 0:
                    ax.axvline(end, color="grey", lw=0.5, alpha=0.5)
                    ax.text(end, 1, f" {epoch}", transform=ax.get_xaxis_transform(), fontsize=7, color="grey",
                            va="top")
    fig.suptitle(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
