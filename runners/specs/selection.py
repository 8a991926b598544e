"""Which cells a run produces: the tier's claims, narrowed by ``--cells`` patterns and the data variant.

A cell is named "row/column" (the names in expected/<id>.yaml). Patterns are shell globs (fnmatch, case-sensitive)
on that name, e.g. ``'S4D-*/ListOps'`` or ``'*/N=64*'``; a run with several patterns takes the cells any of them
matches. The selection is recorded in the results file (``selected_cells``), and the comparison judges exactly
those cells of that file.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Iterable, Sequence

from ..core.errors import SpecError
from .spec import DATA_VARIANTS, Spec

#: check keys that mean "this tier measures nothing here"
UNMEASURED_CHECKS = ("not_run", "context")


def cell_name(row: str, column: str) -> str:
    return f"{row}/{column}"


def glob_escape(text: str) -> str:
    """``text`` as a glob that matches only itself (for cell names holding '*', '?' or '[')."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)


def check_data_variant(spec: Spec, tier: str, data: str) -> None:
    """Raise SpecError unless ``data`` is a variant this tier of ``spec`` has."""
    if data not in DATA_VARIANTS:
        raise SpecError(f"--data {data!r} not allowed; choose one of {list(DATA_VARIANTS)}")
    if data == "suite" and spec.tiers[tier].suite_data is None:
        with_variant = [t for t, ts in spec.tiers.items() if ts.suite_data is not None]
        raise SpecError(f"{spec.path}: tier '{tier}' has no suite-data variant (tiers.{tier}.suite_data); "
                        + (f"tiers that have one: {with_variant}" if with_variant else
                           "no tier of this spec has one"))


def variant_rows(spec: Spec, tier: str, data: str) -> tuple[set[str], set[str]]:
    """(rows this variant may produce -- empty set: any --, rows it never produces)."""
    variant = spec.tiers[tier].suite_data
    if variant is None:
        return set(), set()
    suite_rows = set(variant.rows.values())
    return (suite_rows, set()) if data == "suite" else (set(), suite_rows)


def select_cells(spec: Spec, tier: str, expected: dict, patterns: Sequence[str] = (),
                 data: str = "release") -> list[tuple[str, str]]:
    """The (row, column) cells a run of ``spec`` at ``tier`` should produce, in the expected file's order.

    These are the expected cells whose check at ``tier`` measures something (not ``not_run`` / ``context``), in the
    rows of the data variant, matching one of ``patterns`` (all when empty). A pattern that matches no cell of the
    table is an error naming the cells it could have matched.
    """
    check_data_variant(spec, tier, data)
    only, never = variant_rows(spec, tier, data)
    # a table whose runner reports its rows as columns (``transpose``) names the variant's rows in its columns
    side = "column" if getattr(spec.tiers[tier].config, "transpose", False) else "row"
    cells = [(c["row"], c["column"]) for c in expected["cells"]
             if not any(k in c["checks"][tier] for k in UNMEASURED_CHECKS)
             and (not only or c[side] in only) and c[side] not in never]
    if not patterns:
        return cells
    all_names = [cell_name(c["row"], c["column"]) for c in expected["cells"]]
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in all_names):
            raise SpecError(f"--cells {pattern!r} matches no cell of {spec.id}; cells are 'row/column', e.g. "
                            f"{', '.join(repr(n) for n in all_names[:4])}")
    return [c for c in cells if any(fnmatchcase(cell_name(*c), p) for p in patterns)]


def selected_set(cells: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((r, c) for r, c in cells)


def tier_config(spec: Spec, tier: str, data: str = "release") -> Any:
    """The runner config of ``tier`` for the data variant ``data`` (see runners/specs/spec.py, ``suite_data``)."""
    check_data_variant(spec, tier, data)
    tier_spec = spec.tiers[tier]
    return tier_spec.suite_data.config if data == "suite" else tier_spec.config
