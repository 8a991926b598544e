"""Numbers as the reports and the console print them: plain decimals, exponents only for tiny or huge values."""
from __future__ import annotations

import math
from typing import Any


def fmt(x: Any) -> str:
    """A value for a table: 4 significant digits below 1000, whole numbers from 1000 to 1e12 (13964, not
    1.396e+04), scientific notation only below 1e-4 (analytic errors such as 3.1e-12) or from 1e12 on."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)  # nan, inf, -inf
    mag = abs(x)
    if mag == 0:
        return "0"
    if mag < 1e-4:
        return f"{x:.3g}"
    if mag < 1000:
        return f"{x:.4g}"
    if mag < 1e12:
        return f"{x:.0f}"
    return f"{x:.3e}"
