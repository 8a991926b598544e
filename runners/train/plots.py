"""Learning curves of a training table (validation and test metric per epoch of every cell)."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from ..plots import register_plot


@register_plot("learning_curves")
def plot_learning_curves(result: dict, path: Path) -> None:
    cells = result["series"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, s in cells.items():
        hist = [h for h in s["history"] if h.get("val_metric") is not None]
        epochs = [h["epoch"] for h in hist]
        axes[0].plot(epochs, [h["train_loss"] for h in hist], marker=".", label=name)
        axes[1].plot(epochs, [h["val_metric"] for h in hist], marker=".", label=name)
    axes[0].set(xlabel="epoch", ylabel="train loss", title="training loss")
    axes[1].set(xlabel="epoch", ylabel="validation metric", title="validation")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{result['spec_id']} ({result['tier']} tier)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
