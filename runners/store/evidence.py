"""A results file's values held to the evidence it records: each value computed again from its series.

A verdict vouches for a value only as far as the value follows from what the run recorded. For the training-table
runner every trained cell's value is a function of the series the file records
(:func:`runners.train.recorded.cells_from_series`: the test metric at the first best validation epoch, the step
rate, the parameter count, ...); a value that is not that function's, to the last bit, is an edited value, and the
file is refused (:func:`value_mismatches`, called where a results file is read). A file whose recorded configuration
is not a training table of today's code cannot be rebuilt here; its cells are then judged only if its configuration
is today's (:mod:`runners.judge.evidence`), which such a file's is not.
"""
from __future__ import annotations

import math
from typing import Any

from ..core.atomic import json_digest
from ..train.recorded import cells_from_series

TRAINING_RUNNER = "train.table"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def rebuilt_values(doc: dict[str, Any]) -> dict[tuple[str, str], Any] | None:
    """(row, column) -> the value the file's series give, for a training table's results file; None for another
    runner's file or a configuration that today's training table cannot read (nothing can be rebuilt)."""
    if doc.get("runner") != TRAINING_RUNNER or not isinstance(doc.get("series"), dict) \
            or not isinstance(doc.get("config"), dict):
        return None
    recorded = {(c["row"], c["column"]): (c["value"], c.get("unit")) for c in doc["cells"]}
    try:
        return cells_from_series(doc["config"], doc["series"], recorded)
    except (TypeError, ValueError, KeyError):
        return None


def value_mismatches(doc: dict[str, Any]) -> list[str]:
    """One line for each measured cell whose recorded value is not the value its series gives."""
    rebuilt = rebuilt_values(doc)
    if rebuilt is None:
        return []
    out = []
    for cell in doc["cells"]:
        key = (cell["row"], cell["column"])
        if key not in rebuilt or cell["value"] is None:
            continue
        if not _same(cell["value"], rebuilt[key]):
            out.append(f"cell ({key[0]}, {key[1]}): the file records {cell['value']!r}, but its series gives "
                       f"{rebuilt[key]!r} (a value edited after the run, or a series that is not the run's)")
    return out


def digest_mismatches(doc: dict[str, Any]) -> list[str]:
    """The digests a results file records that no longer match what it records beside them (its configuration and
    its resolved spec): one line each."""
    digests = doc.get("digests")
    if not isinstance(digests, dict):
        return []
    out = []
    for key, recorded in (("config", doc.get("config")), ("spec", doc.get("spec"))):
        if key in digests and json_digest(recorded) != digests[key]:
            out.append(f"'{key}': its digest {str(digests[key])[:12]}... is not that of the {key} the file records "
                       f"(the {key} edited after the run)")
    return out
