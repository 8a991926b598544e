"""Numbers as the reports and the console print them: plain decimals, exponents only for tiny or huge values."""
from __future__ import annotations

import math
import re
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


def column_label(column: str) -> str:
    """A column name as reports print it: memory read from torch.cuda is in MiB, which the papers call MB."""
    return re.sub(r"\bMB\b", "MiB", column)


def paper_text(paper: Any, std: Any = None) -> str:
    """The paper's value with its standard deviation where it gives one: "88.65 ± 0.23"."""
    has_std = isinstance(std, (int, float)) and not isinstance(std, bool) and std > 0
    return f"{fmt(paper)} ± {fmt(std)}" if has_std and paper is not None else fmt(paper)


def md_inline(text: Any) -> str:
    """Free text from a results file (a note, a device name, a problem) as one line of markdown that renders as
    text: newlines and runs of blanks become one space (a row of a table stays one row; the report's tables escape
    ``|`` themselves), and the characters that would make it HTML, a code span or a heading are escaped (``&``,
    ``<``, ``>``, a backtick, a leading ``#``)."""
    flat = " ".join(str(text).split())
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "\\`")
    return "\\" + flat if flat.startswith("#") else flat


def md_code(text: Any) -> str:
    """Free text for a markdown code span (`` `...` ``): one line, no backtick that would end the span."""
    return " ".join(str(text).split()).replace("`", "'")
