"""Warmup and cosine length counted in optimizer steps (as the authors' configurations count them), and the LRA full
tier's values, each the v3.0.0 configuration's that the spec cites."""
from __future__ import annotations

import math

import pytest

from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.config import TrainConfig
from runners.train.schedule import LRSchedule


def test_steps_set_the_warmup_and_the_cosines_end() -> None:
    cfg = TrainConfig(lr=0.01, epochs=40, batch_size=50, warmup_steps=1000, schedule_steps=80000)
    s = LRSchedule(cfg, steps_per_epoch=1920)
    assert (s.warmup_steps, s.total_steps) == (1000, 80000)
    assert s.factor(0) == pytest.approx(1 / 1000) and s.factor(999) == 1.0
    # the cosine ends at step 80,000, beyond the 76,800 steps of 40 epochs: not yet 0 at the last step
    last = 0.5 * (1 + math.cos(math.pi * (76799 - 1000) / (80000 - 1000)))
    assert s.factor(76799) == pytest.approx(last) and s.factor(76799) > 0.004
    assert s.factor(80000) == pytest.approx(0.0)


def test_epochs_still_set_them_where_no_steps_are_given() -> None:
    s = LRSchedule(TrainConfig(lr=0.01, epochs=200, batch_size=64, warmup_epochs=1), steps_per_epoch=2500)
    assert (s.warmup_steps, s.total_steps) == (2500, 500000)


@pytest.mark.parametrize("fields, message", [
    ({"warmup_steps": 10, "warmup_epochs": 1}, "give the warmup in one of them"),
    ({"schedule_steps": 100, "scheduler": "plateau"}, "unless the scheduler is 'cosine'"),
    ({"warmup_steps": -1}, "warmup_steps"),
    ({"schedule_steps": 0}, "schedule_steps"),
])
def test_step_counts_are_checked(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(lr=0.01, epochs=4, batch_size=2, **fields)


#: (task) -> (warmup_steps or None, warmup_epochs, schedule_steps or None): v3.0.0's configs/experiment/lra/
#: s4-lra-<task>.yaml (num_warmup_steps, default 1,000; num_training_steps), Pathfinder and Path-X in epochs
CITED = {"ListOps": (1000, 0, 80000), "Text": (1000, 0, 50000), "Retrieval": (2500, 0, 50000),
         "Image": (1000, 0, 200000), "Pathfinder": (None, 1, None), "Path-X": (None, 1, None)}


@pytest.mark.parametrize("spec_id, row", [("s4d-table-5", "S4D-Inv"), ("s4-table-4", "S4")])
def test_the_lra_full_tier_takes_the_cited_schedule(spec_id: str, row: str) -> None:
    cfg = tier_config(load_spec(find_spec(spec_id)), "full")
    for task, (steps, epochs, length) in CITED.items():
        train = TrainConfig.from_dict(cfg.cell_train(row, task))
        assert (train.warmup_steps, train.warmup_epochs, train.schedule_steps) == (steps, epochs, length), task


def test_s4_original_keeps_no_warmup() -> None:
    cfg = tier_config(load_spec(find_spec("s4-table-4")), "full")
    for task in CITED:
        train = TrainConfig.from_dict(cfg.cell_train("S4 (original)", task))
        assert (train.scheduler, train.warmup_steps, train.warmup_epochs, train.schedule_steps) == \
            ("plateau", None, 0, None), task
