"""A classification run that has not started to learn: every complete epoch so far (at least
:data:`CHANCE_MIN_EPOCHS`) ended with the training loss of a constant output, within :data:`CHANCE_LOSS_FRACTION` of
ln C (C classes: the loss of a model that gives every input the same, uniform output). On labels far from balanced a
model at chance does better than ln C (the labels' entropy), so such a run is not marked.

``progress`` marks such a run "at chance"; the training loop stops one that is still at chance after a spec's
``chance_stop_epoch`` (the epoch by which the authors' runs have left chance: their experiments table), so that it is
diagnosed from its curve and reported rather than trained to the end of its schedule.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

CHANCE_MIN_EPOCHS = 3  # complete epochs before a run can be marked at chance
CHANCE_LOSS_FRACTION = 0.01  # a training loss within 1 % of ln C


def _number(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def epochs_at_chance(history: Sequence[dict], task_type: Any, classes: Any) -> Optional[int]:
    """The number of complete epochs in ``history`` if there are at least CHANCE_MIN_EPOCHS and every one ended
    with a training loss within CHANCE_LOSS_FRACTION of ln C (a classification task of C >= 2 classes); None
    otherwise (a run that learned at some point, too few epochs, another kind of task)."""
    if task_type != "classification" or not isinstance(classes, int) or isinstance(classes, bool) or classes < 2:
        return None
    losses = [_number(h.get("train_loss")) for h in history if isinstance(h, dict) and not h.get("partial")]
    if len(losses) < CHANCE_MIN_EPOCHS or any(v is None for v in losses):
        return None
    chance = math.log(classes)
    return len(losses) if all(abs(v - chance) <= CHANCE_LOSS_FRACTION * chance for v in losses) else None


def stops_at_chance(history: Sequence[dict], task_type: Any, classes: Any, stop_epoch: Optional[int]) -> bool:
    """A run to stop: ``stop_epoch`` set, at least that many complete epochs, every one of them at chance."""
    if stop_epoch is None:
        return False
    done = epochs_at_chance(history, task_type, classes)
    return done is not None and done >= stop_epoch
