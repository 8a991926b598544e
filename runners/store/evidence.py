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
from ..core.provenance import card_peak
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


#: a training step does at least this many FLOPs per parameter and token (the forward and backward of its dense
#: layers: 2 + 4); a step rate whose FLOPs would beat the card's peak is not a measurement of that card
FLOPS_PER_PARAM_TOKEN = 6
#: the least share of a run's training time that its steps at the recorded rate can take: a run that records fewer
#: seconds than that did not train those steps (rates differ between the cards of a resumed run, not 4-fold)
MIN_TIME_SHARE = 0.25
#: the training clock starts after each call's first step (start-up excluded), so a run of a few steps may record
#: almost no time; the time check judges only runs whose remaining steps take at least this long at their rate
MIN_JUDGED_SECONDS = 60.0


def plausibility_problems(doc: dict[str, Any]) -> list[str]:
    """A training table's series held to physics: the step rate against the card's peak for the model's size (at
    least 6 FLOPs per parameter and token), and the training time against the steps at that rate. One line each;
    a card this suite does not know is not judged (the report says its rate cannot be verified)."""
    if doc.get("runner") != TRAINING_RUNNER or not isinstance(doc.get("series"), dict):
        return []
    env = doc.get("environment") if isinstance(doc.get("environment"), dict) else {}
    out = []
    for name, one in doc["series"].items():
        if not isinstance(one, dict):
            continue
        rate, params, length = one.get("steps_per_second"), one.get("n_params"), one.get("seq_len")
        history = one.get("history") if isinstance(one.get("history"), list) else []
        batch = _cell_batch(doc, name)
        cards = [s.get("device") for s in one.get("segments") or [] if isinstance(s, dict)] or [env.get("device_name")]
        peak = card_peak(cards[-1])
        if all(_positive(x) for x in (rate, params, length, batch)) and peak is not None:
            flops = FLOPS_PER_PARAM_TOKEN * params * batch * length * rate
            if flops > peak:
                out.append(f"series {name!r}: {rate:g} steps/s of a {params}-parameter model at batch {batch} and "
                           f"length {length} is {flops:.3g} FLOP/s, beyond the {peak:.3g} peak of {cards[-1]}")
        steps = sum(e.get("steps", 0) for e in history if isinstance(e, dict) and _positive(e.get("steps")))
        steps -= max(1, len(one.get("segments") or []))  # each call's first step is off the clock
        elapsed = one.get("elapsed_seconds")
        if (_positive(rate) and _positive(elapsed) and steps / rate >= MIN_JUDGED_SECONDS
                and elapsed < MIN_TIME_SHARE * steps / rate):
            out.append(f"series {name!r}: {steps} steps at {rate:g} steps/s take {steps / rate:.0f} s, but the run "
                       f"records {elapsed:.0f} s of training")
    return out


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _cell_batch(doc: dict[str, Any], name: str) -> Any:
    """The batch size the series ``"<row> / <task>"`` trained with, as its file's configuration gives it."""
    from ..train.table import TrainTableConfig

    row, _, task = name.partition(" / ")
    try:
        return TrainTableConfig(**doc["config"]).cell_train(row, task).get("batch_size")
    except (TypeError, ValueError, KeyError):
        return None
