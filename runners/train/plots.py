"""Learning curves of a training table (training loss and validation metric per epoch of every cell), with the
paper's value of each cell as a horizontal line where the expected file has one."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import matplotlib.pyplot as plt

from ..plots import register_plot


def _expected_cell(expected: Optional[dict], row: str, task: str) -> Optional[dict]:
    """The expected cell of a series "<row> / <task>": its test column (<task>, "<task> accuracy" or
    "<task> rmse"), also in a transposed table (row and column swapped)."""
    if not expected:
        return None
    cells = {(c["row"], c["column"]): c for c in expected["cells"]}
    for key in ((row, task), (row, f"{task} accuracy"), (row, f"{task} rmse"), (task, row)):
        if key in cells:
            return cells[key]
    return None


def metric_label(series: dict[str, Any], cells: list[Optional[dict]]) -> str:
    """The validation metric with its unit: accuracy in % (classification) or RMSE (regression)."""
    units = {str(c.get("unit", "")) for c in cells if c}
    monitors = {s.get("monitor") for s in series.values()}
    if any(u.startswith("%") for u in units) or monitors == {"val_acc"}:
        return "validation accuracy (%)"
    if any("RMSE" in u.upper() for u in units) or monitors == {"val_rmse"}:
        return "validation RMSE"
    return "validation metric (accuracy in %, or RMSE for regression)"


@register_plot("learning_curves")
def plot_learning_curves(result: dict, path: Path, expected: Optional[dict] = None) -> None:
    series = result["series"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    found, drawn = [], False
    for name, s in series.items():
        hist = [h for h in s["history"] if h.get("val_metric") is not None]
        epochs = [h["epoch"] for h in hist]
        axes[0].plot(epochs, [h["train_loss"] for h in hist], marker=".", label=name)
        line, = axes[1].plot(epochs, [h["val_metric"] for h in hist], marker=".", label=name)
        row, _, task = name.rpartition(" / ")
        cell = _expected_cell(expected, row, task)
        found.append(cell)
        paper = cell.get("paper") if cell else None
        if isinstance(paper, (int, float)) and not isinstance(paper, bool):
            axes[1].axhline(paper, color=line.get_color(), linestyle="--", linewidth=1,
                            label=f"{name}: paper {paper:g} (test)")
            drawn = True
    axes[0].set(xlabel="epoch", ylabel="training loss (cross-entropy or MSE)", title="training loss")
    axes[1].set(xlabel="epoch", ylabel=metric_label(series, found),
                title="validation" + (" (dashed: the paper's test value)" if drawn else ""))
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{result.get('spec_id', '?')} ({result.get('tier', '?')} tier)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
