"""Learning curves of a training table (training loss and validation metric per epoch of every cell), with the
paper's value of each cell as a horizontal line where the expected file has one; one row of panels per task."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")  # files, no display

import matplotlib.pyplot as plt  # noqa: E402

from ..specs.expected import series_cell
from ..specs.registry import register_plot


def metric_label(series: dict[str, Any], cells: list[Optional[dict]]) -> str:
    """The validation metric with its unit: accuracy in % (classification) or RMSE (regression)."""
    units = {str(c.get("unit", "")) for c in cells if c}
    monitors = {s.get("monitor") for s in series.values()}
    if any(u.startswith("%") for u in units) or monitors == {"val_acc"}:
        return "validation accuracy (%)"
    if any("RMSE" in u.upper() for u in units) or monitors == {"val_rmse"}:
        return "validation RMSE"
    return "validation metric (accuracy in %, or RMSE for regression)"


def _task_of(name: str) -> str:
    """The task of a series "<row> / <task>" (the whole name if it has no task)."""
    return name.rpartition(" / ")[2]


@register_plot("learning_curves")
def plot_learning_curves(result: dict, path: Path, expected: Optional[dict] = None) -> None:
    """One row of panels per task (training loss, validation metric), every cell of that task in it."""
    series = result["series"]
    tasks = list(dict.fromkeys(_task_of(name) for name in series))
    fig, axes = plt.subplots(len(tasks), 2, figsize=(13, 4 * len(tasks)), squeeze=False)
    for (loss_ax, val_ax), task in zip(axes, tasks):
        found, drawn = [], False
        of_task = {name: s for name, s in series.items() if _task_of(name) == task}
        for name, s in of_task.items():
            hist = [h for h in s["history"] if h.get("val_metric") is not None]
            epochs = [h["epoch"] for h in hist]
            loss_ax.plot(epochs, [h["train_loss"] for h in hist], marker=".", label=name)
            line, = val_ax.plot(epochs, [h["val_metric"] for h in hist], marker=".", label=name)
            row, _, cell_task = name.rpartition(" / ")
            cell = series_cell(expected, row, cell_task)
            found.append(cell)
            paper = cell.get("paper") if cell else None
            if isinstance(paper, (int, float)) and not isinstance(paper, bool):
                val_ax.axhline(paper, color=line.get_color(), linestyle="--", linewidth=1,
                               label=f"{name}: paper {paper:g} (test)")
                drawn = True
        suffix = f": {task}" if len(tasks) > 1 else ""
        loss_ax.set(xlabel="epoch", ylabel="training loss (cross-entropy or MSE)", title="training loss" + suffix)
        val_ax.set(xlabel="epoch", ylabel=metric_label(of_task, found),
                   title="validation" + suffix + (" (dashed: the paper's test value)" if drawn else ""))
        val_ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(f"{result.get('spec_id', '?')} ({result.get('tier', '?')} tier)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends sit right of their panels
    plt.close(fig)
