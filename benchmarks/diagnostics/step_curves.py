"""CPU: the step-level learning curves of training runs, from their steps.jsonl (runners/train/step_log.py).

    python -m benchmarks.diagnostics.step_curves --runs checkpoints --out steps.png [--from-epoch 60] [--since REV]

One row of two panels per run that has a steps.jsonl under ``--runs`` (``<spec>/<folder>/<cell>/steps.jsonl``: a
runs folder, ``checkpoints/``, or a campaign call's ``logs/runs/runs/``): the training loss of each window of steps,
and the largest gradient norm of each window (log scale), both against the optimizer step (the window's last), with
the epochs' boundaries marked every tenth epoch. What an epoch's mean hides shows here: a loss that jumps within a
few steps, a gradient that blows up before it. ``--from-epoch E`` draws the windows of epoch E on only; ``--since REV``
the windows after the last one of the same steps.jsonl at git revision REV (e.g. the commit before a session's
checkpoints: what that session trained; a run the revision does not have is drawn whole).

It also prints, per run, a table of the windows drawn: how many, their optimizer steps, the epochs they cover in
steps (the windows' steps over the run's steps per epoch, from its complete epochs), the loss of the first and the
last full window (a window cut short by a deadline or a resume holds a few steps' loss), the median of the windows'
largest gradient norms, the largest (and its epoch), how many windows exceed three times the median, and how many
were not finite.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tabulate import tabulate

from runners.core.atomic import atomic_path
from runners.train.step_log import STEPS_NAME


class UsageError(ValueError):
    """An argument or a file this script cannot use; the message names it."""


def read_steps(path: Path, content: str | None = None) -> list[dict]:
    """The windows of a steps.jsonl (``content``: its text, if not read from ``path``); UsageError naming the file
    (and line) where it is not one."""
    lines = []
    content = path.read_text(encoding="utf-8") if content is None else content
    for number, text in enumerate(content.splitlines(), 1):
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


def repository_at(folder: Path, rev: str) -> Path:
    """The top of the git repository that holds ``folder``, checked to have revision ``rev``; UsageError naming the
    revision where git cannot read it."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True,
                             text=True, check=True).stdout.strip()
        subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=top,
                       capture_output=True, text=True, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise UsageError(f"--since {rev}: not a git revision of the repository that holds {folder}") from None
    return Path(top).resolve()


def last_step_at(path: Path, rev: str, top: Path) -> int:
    """The last window's optimizer step in ``path`` as revision ``rev`` of the repository at ``top`` has it (-1: the
    revision has no such file)."""
    relative = path.resolve().relative_to(top).as_posix()
    shown = subprocess.run(["git", "show", f"{rev}:{relative}"], cwd=top, capture_output=True, text=True)
    if shown.returncode != 0:
        return -1
    old = read_steps(Path(f"{rev}:{relative}"), shown.stdout)
    return old[-1]["step"] if old else -1


def summary_row(name: str, kept: list[dict], steps_per_epoch: int | None) -> dict:
    """The table's row for the windows ``kept`` of run ``name``."""
    norms = [line.get("grad_norm_max") for line in kept]
    finite = [v for v in norms if v is not None and math.isfinite(v)]
    bad = sum(1 for v, line in zip(norms, kept) if (v is not None and not math.isfinite(v))
              or not math.isfinite(line["train_loss"]))
    median = statistics.median(finite) if finite else math.nan
    largest = max(kept, key=lambda line: v if (v := line.get("grad_norm_max")) is not None and math.isfinite(v)
                  else -math.inf)
    steps = sum(line["steps"] for line in kept)
    size = max(line["steps"] for line in kept)
    full = [line for line in kept if line["steps"] == size]  # never empty: the largest window is full
    return {"run": name, "windows": len(kept), "optimizer steps": f"{kept[0]['step'] - kept[0]['steps']}-"
            f"{kept[-1]['step']}", "epochs": round(steps / steps_per_epoch, 1) if steps_per_epoch else "-",
            "loss, first -> last full window": f"{full[0]['train_loss']:.3f} -> {full[-1]['train_loss']:.3f}",
            "median largest gradient norm": round(median, 2),
            "largest (epoch)": f"{largest['grad_norm_max']:.1f} ({largest['epoch']})" if finite else "-",
            "windows > 3x median": sum(v > 3 * median for v in finite), "not finite": bad}


def steps_per_epoch(lines: list[dict]) -> int | None:
    """The most steps any epoch of the log holds (a complete epoch's count), None for a log of one epoch."""
    per_epoch: dict[int, int] = {}
    for line in lines:
        per_epoch[line["epoch"]] = per_epoch.get(line["epoch"], 0) + line["steps"]
    complete = [n for epoch, n in per_epoch.items() if epoch != max(per_epoch) and epoch != min(per_epoch)]
    return max(complete) if complete else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="a folder of <spec>/<folder>/<cell>/steps.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--from-epoch", type=int, default=1, help="draw the windows of this epoch on")
    parser.add_argument("--title", default="step-level learning curves", help="the figure's title")
    parser.add_argument("--since", metavar="REV", help="only the windows after those of git revision REV")
    args = parser.parse_args(argv)
    try:
        if not args.runs.is_dir():
            raise UsageError(f"--runs {args.runs}: no such folder")
        if args.from_epoch < 1:
            raise UsageError(f"--from-epoch {args.from_epoch}: an epoch is 1 or more")
        runs, rows = {}, []
        top = repository_at(args.runs, args.since) if args.since else None
        for path in sorted(args.runs.glob(f"*/*/*/{STEPS_NAME}")):
            lines = read_steps(path)
            after = last_step_at(path, args.since, top) if top is not None else -1
            kept = [line for line in lines if line["epoch"] >= args.from_epoch and line["step"] > after]
            if kept:
                name = "/".join(path.relative_to(args.runs).parts[:3])
                runs[name] = kept
                rows.append(summary_row(name, kept, steps_per_epoch(lines)))
        if not runs:
            raise UsageError(f"--runs {args.runs}: no <spec>/<folder>/<cell>/{STEPS_NAME} with windows from epoch "
                             f"{args.from_epoch}" + (f" after revision {args.since}" if args.since else ""))
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
    print(tabulate(rows, headers="keys", tablefmt="github"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
