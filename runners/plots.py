"""Plot registry: a spec names plots; the report draws them from a results file's ``series``.

    @register_plot("theorem3_basis")
    def plot(result: dict, path: Path, expected: dict | None = None) -> None: ...

``result`` is the whole results JSON, ``expected`` the table's expected file (for the paper's values); the
function writes a PNG at ``path``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import matplotlib

matplotlib.use("Agg")

PlotFn = Callable[[dict, Path, Optional[dict]], None]
PLOTS: dict[str, PlotFn] = {}


def register_plot(name: str) -> Callable[[PlotFn], PlotFn]:
    def wrap(fn: PlotFn) -> PlotFn:
        if name in PLOTS:
            raise ValueError(f"plot {name!r} registered twice")
        PLOTS[name] = fn
        return fn

    return wrap
