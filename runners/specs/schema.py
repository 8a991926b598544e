"""Range and choice checks for runner configs: each raises ValueError naming the key and what is allowed.

The runners' config dataclasses call these in ``__post_init__``, so a spec is checked when it is loaded
(``runners validate`` and the start of ``runners run``), before any data is read or anything is computed.
The spec loader prefixes the message with the file and the tier (runners/specs/spec.py, ``build_config``).

Upper bounds are generous (far above any paper setting) and exist to turn a typo such as ``grid: 1e12`` into
an error instead of an allocation of terabytes.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: points of a time grid (the papers' figures use ~1000-2000)
MAX_GRID = 1_000_000
#: state size N of one SSM (the papers use <= 2048)
MAX_STATE = 65_536
#: sequence length (Path-X is 16384)
MAX_LENGTH = 1 << 20
#: model width H
MAX_WIDTH = 65_536


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num_text(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num_text(lo)}, {_num_text(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num_text(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_num_text(hi)}"
    return "finite"


def check_int(key: str, value: Any, lo: int | None = None, hi: int | None = None, *, even: bool = False) -> None:
    """``value`` is an integer in [lo, hi] (and even if asked)."""
    ok = is_int(value) and (lo is None or value >= lo) and (hi is None or value <= hi) and not (even and value % 2)
    if not ok:
        raise ValueError(f"{key}: {value!r} not allowed; expected {'an even' if even else 'an'} integer "
                         f"{_range_text(lo, hi)}")


def check_num(key: str, value: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
              hi_open: bool = False) -> None:
    """``value`` is a finite number in the range (open ends where asked)."""
    ok = is_num(value) and (lo is None or (value > lo if lo_open else value >= lo)) \
        and (hi is None or (value < hi if hi_open else value <= hi))
    if not ok:
        raise ValueError(f"{key}: {value!r} not allowed; expected a finite number "
                         f"{_range_text(lo, hi, lo_open, hi_open)}")


def check_ints(key: str, values: Any, lo: int | None = None, hi: int | None = None, *, even: bool = False,
               increasing: bool = False, nonempty: bool = True, distinct: bool = True) -> None:
    """``values`` is a list of integers, each in [lo, hi] (strictly increasing, non-empty where asked), none given
    twice unless ``distinct=False`` (such lists name cells or columns -- ``state_sizes: [16, 16]`` would measure the
    cell N=16 twice and write a results file that reports it twice)."""
    what = (f"a {'non-empty ' if nonempty else ''}{'strictly increasing ' if increasing else ''}list of "
            f"{'distinct ' if distinct and not increasing else ''}{'even ' if even else ''}integers "
            f"{_range_text(lo, hi)}")
    if not isinstance(values, (list, tuple)) or (nonempty and not values):
        raise ValueError(f"{key}: {values!r} not allowed; expected {what}")
    for i, v in enumerate(values):
        try:
            check_int(f"{key}[{i}]", v, lo, hi, even=even)
        except ValueError:
            raise ValueError(f"{key}: {list(values)!r} not allowed; expected {what}") from None
    if increasing and list(values) != sorted(set(values)):
        raise ValueError(f"{key}: {list(values)!r} not allowed; expected {what}")
    if distinct and len(set(values)) != len(values):
        twice = next(v for i, v in enumerate(values) if v in values[:i])
        raise ValueError(f"{key}: {list(values)!r} not allowed; expected {what} ({twice} is given twice)")


def check_choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{key}: {value!r} not allowed; choose one of {choices}")


def check_choices(key: str, values: Any, choices: Sequence[Any], *, nonempty: bool = True) -> None:
    """``values`` is a list (non-empty where asked) of distinct entries of ``choices``."""
    ok = isinstance(values, (list, tuple)) and (values or not nonempty) and all(v in choices for v in values) \
        and len(set(values)) == len(values)
    if not ok:
        raise ValueError(f"{key}: {values!r} not allowed; expected a {'non-empty ' if nonempty else ''}list of "
                         f"distinct entries of {list(choices)}")


def check_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: {value!r} not allowed; expected true or false")
