"""Plot registry: a spec names plots; the report draws them from a results file's ``series``.

    @register_plot("theorem3_basis")
    def plot(result: dict, path: Path) -> None: ...   # result = the whole results JSON; write a PNG at path
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")

PlotFn = Callable[[dict, Path], None]
PLOTS: dict[str, PlotFn] = {}


def register_plot(name: str) -> Callable[[PlotFn], PlotFn]:
    def wrap(fn: PlotFn) -> PlotFn:
        if name in PLOTS:
            raise ValueError(f"plot {name!r} registered twice")
        PLOTS[name] = fn
        return fn

    return wrap
