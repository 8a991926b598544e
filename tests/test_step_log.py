"""The step log (runners/train/step_log.py): windows of optimizer steps in steps.jsonl, their losses against the
epochs', their gradient norms against clip_grad_norm_'s, nothing computed changed, and a killed run's log resumed
from its checkpoint as if it had not been killed."""
from __future__ import annotations

import json
import math

import pytest
import torch

from runners.train import TrainConfig, train
from runners.train import loop as loop_module
from runners.train.step_log import STEPS_NAME
from test_train import CPU, PoolClassifier, majority_task, train_until_killed, without_time


def _lines(run_dir) -> list[dict]:
    return [json.loads(t) for t in (run_dir / STEPS_NAME).read_text().splitlines()]


def _epoch_means(lines: list[dict]) -> dict[int, float]:
    """Per epoch, the mean of the windows' losses weighted by their steps (batches of equal size)."""
    out: dict[int, list[float]] = {}
    for line in lines:
        acc = out.setdefault(line["epoch"], [0.0, 0])
        acc[0] += line["train_loss"] * line["steps"]
        acc[1] += line["steps"]
    return {e: s / n for e, (s, n) in out.items()}


def test_windows_follow_the_global_step_and_add_up_to_each_epoch(tmp_path) -> None:
    cfg = TrainConfig(lr=0.05, epochs=2, batch_size=32, log_every_steps=3)  # 8 steps per epoch
    res = train(lambda: PoolClassifier(), majority_task(), cfg, tmp_path / "r", CPU, progress=False)
    lines = _lines(tmp_path / "r")
    # windows close every 3 global steps and at each epoch's end, never spanning two epochs
    assert [(x["step"], x["epoch"], x["steps"]) for x in lines] == [
        (3, 1, 3), (6, 1, 3), (8, 1, 2), (9, 2, 1), (12, 2, 3), (15, 2, 3), (16, 2, 1)]
    means = _epoch_means(lines)
    for entry in res.history:
        assert means[entry["epoch"]] == pytest.approx(entry["train_loss"], rel=1e-12)
    # an epoch's last window ends at the epoch's last step: the learning rate metrics.jsonl records for it
    assert [x["lr"] for x in lines if x["step"] in (8, 16)] == [e["lr"] for e in res.history]
    assert all(math.isfinite(x["grad_norm_max"]) and x["grad_norm_max"] > 0 for x in lines)
    assert lines == torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)["steps_log"]


def test_logging_changes_nothing_that_is_computed(tmp_path) -> None:
    runs = {}
    for every in (0, 1, 5):
        cfg = TrainConfig(lr=0.05, epochs=2, batch_size=32, grad_accum=2, log_every_steps=every)
        make = lambda: PoolClassifier(dropout=0.2)  # noqa: E731 (dropout: the random stream must not move either)
        runs[every] = train(make, majority_task(), cfg, tmp_path / str(every), CPU, progress=False)
    assert without_time(runs[1].history) == without_time(runs[0].history) == without_time(runs[5].history)
    states = [torch.load(tmp_path / str(e) / "checkpoint.pt", weights_only=True)["model"] for e in (0, 1, 5)]
    assert all(torch.equal(s[k], states[0][k]) for s in states[1:] for k in states[0])
    assert not (tmp_path / "0" / STEPS_NAME).read_text()  # off: an empty log
    assert len(_lines(tmp_path / "1")) == 16


def test_the_largest_gradient_norm_is_the_one_clipping_measures(tmp_path, monkeypatch) -> None:
    seen: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        norm = clip(params, max_norm, *args, **kwargs)
        seen.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    cfg = TrainConfig(lr=0.05, epochs=1, batch_size=32, grad_clip=1e-3, log_every_steps=2)
    train(lambda: PoolClassifier(), majority_task(), cfg, tmp_path / "c", CPU, progress=False)
    assert len(seen) == 8
    assert [x["grad_norm_max"] for x in _lines(tmp_path / "c")] == pytest.approx(
        [max(seen[i:i + 2]) for i in range(0, 8, 2)], rel=1e-6)
    assert min(seen) > 1e-3  # before clipping: the clipped norm would be 1e-3


def test_without_clipping_the_norm_is_the_gradients_own(tmp_path, monkeypatch) -> None:
    """Every step's logged norm against the float64 norm of the gradients the optimizer is about to use."""
    seen: list[float] = []
    step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        grads = [p.grad.double().flatten() for g in self.param_groups for p in g["params"] if p.grad is not None]
        seen.append(float(torch.cat(grads).norm()))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    cfg = TrainConfig(lr=0.05, epochs=1, batch_size=32, log_every_steps=1)
    train(lambda: PoolClassifier(), majority_task(), cfg, tmp_path / "n", CPU, progress=False)
    assert [x["grad_norm_max"] for x in _lines(tmp_path / "n")] == pytest.approx(seen, rel=1e-5)


def test_a_killed_run_resumes_its_step_log_from_the_checkpoint(tmp_path) -> None:
    task = majority_task()
    cfg = TrainConfig(lr=0.05, epochs=3, batch_size=32, grad_accum=2, checkpoint_every_steps=3, log_every_steps=3)
    make = lambda: PoolClassifier(dropout=0.2)  # noqa: E731
    train_until_killed(make, task, cfg, tmp_path / "killed", at=(1, 5))
    # the killed run wrote the window that closed at global step 12, after its last checkpoint (step 11)
    assert _lines(tmp_path / "killed")[-1]["step"] == 12
    resumed = train(make, task, cfg, tmp_path / "killed", CPU, progress=False)
    straight = train(make, task, cfg, tmp_path / "straight", CPU, progress=False)
    lines, plain = _lines(tmp_path / "killed"), _lines(tmp_path / "straight")
    # a window closes at every checkpoint, so the resumed run's windows are the uninterrupted run's, none lost or
    # written twice: ..., 9, 11 (the checkpoint), 12, ...
    assert [x["step"] for x in lines][:6] == [3, 6, 8, 9, 11, 12]
    assert lines == plain and sum(x["steps"] for x in lines) == 24
    assert _epoch_means(lines) == pytest.approx({e["epoch"]: e["train_loss"] for e in resumed.history}, rel=1e-12)
    assert without_time(resumed.history) == without_time(straight.history)


def test_a_checkpoint_from_before_the_step_log_resumes(tmp_path) -> None:
    cfg = TrainConfig(lr=0.05, epochs=2, batch_size=32, log_every_steps=4)
    one = TrainConfig(lr=0.05, epochs=2, batch_size=32, max_minutes=1e-9)  # stops after its first step
    train(lambda: PoolClassifier(), majority_task(), one, tmp_path / "old", CPU, progress=False)
    path = tmp_path / "old" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=True)
    del ckpt["steps_log"], ckpt["config"]["log_every_steps"]  # as written before the step log existed
    torch.save(ckpt, path)
    train(lambda: PoolClassifier(), majority_task(), cfg, tmp_path / "old", CPU, progress=False)
    lines = _lines(tmp_path / "old")
    assert [x["step"] for x in lines] == [4, 8, 12, 16] and lines[0]["steps"] == 3  # from the checkpoint's step 1


@pytest.mark.parametrize("value", [-1, 1.5, True, "50", None])
def test_log_every_steps_takes_a_count(value) -> None:
    with pytest.raises(ValueError, match=r"TrainConfig.log_every_steps = .* an integer >= 0"):
        TrainConfig(lr=0.05, epochs=1, batch_size=32, log_every_steps=value)


def test_the_loop_reads_the_gradients_only_when_it_logs(tmp_path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(loop_module, "gradient_norm", lambda params: calls.append(1))
    train(lambda: PoolClassifier(), majority_task(), TrainConfig(lr=0.05, epochs=1, batch_size=32, log_every_steps=0),
          tmp_path / "off", CPU, progress=False)
    assert not calls
