"""Tests of the training machinery: optimizer groups, schedules, loop, checkpoints and resume, DDP."""
from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from runners.data.base import TaskData
from runners.train import CheckpointMismatch, LRSchedule, TrainConfig, train
from runners.train import checkpoint as ckpt_io
from ssm_core.optim import build_optimizer, param_groups

VOCAB, SEQ = 8, 15


# ---------------------------------------------------------------------------------------------- fixtures


class PoolClassifier(nn.Module):
    """Embedding -> dropout -> mean over the sequence -> linear."""

    def __init__(self, d: int = 16, n_classes: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(d, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, L) -> (B, C)
        return self.head(self.drop(self.emb(x)).mean(dim=1))


class PairClassifier(nn.Module):
    """Two-tower model of a dual task: features [h1, h2, h1 - h2, h1 * h2] -> linear."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.head = nn.Linear(4 * d, 2)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        h1, h2 = self.emb(x1).mean(1), self.emb(x2).mean(1)  # (B, d)
        return self.head(torch.cat([h1, h2, h1 - h2, h1 * h2], dim=-1))


class PoolRegressor(nn.Module):
    def __init__(self, d_in: int = 2, d_out: int = 3) -> None:
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, L, d_in) -> (B, d_out)
        return self.lin(x.mean(dim=1))


def majority_task(n_train: int = 256, n_eval: int = 64, seed: int = 0, noisy_val: bool = False) -> TaskData:
    """Label 1 when most tokens are < VOCAB / 2: learnable by mean pooling, chance is ~50%.

    ``noisy_val``: validation labels are random, so validation accuracy stalls (plateau schedule).
    """
    g = torch.Generator().manual_seed(seed)

    def split(n: int, noisy: bool = False) -> TensorDataset:
        x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        y = ((x < VOCAB // 2).sum(dim=1) > SEQ // 2).long()
        if noisy:
            y = torch.randint(0, 2, (n,), generator=g)
        return TensorDataset(x, y)

    return TaskData(name="majority", train=split(n_train), val=split(n_eval, noisy_val), test=split(n_eval),
                    seq_len=SEQ, d_output=2, vocab_size=VOCAB)


class PairDataset(Dataset):
    def __init__(self, n: int, g: torch.Generator) -> None:
        self.x1 = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        self.x2 = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        self.y = ((self.x1 < VOCAB // 2).sum(1) > (self.x2 < VOCAB // 2).sum(1)).long()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return (self.x1[i], self.x2[i]), self.y[i]


def pair_task() -> TaskData:
    g = torch.Generator().manual_seed(1)
    return TaskData(name="pairs", train=PairDataset(128, g), val=PairDataset(32, g), test=PairDataset(32, g),
                    seq_len=SEQ, d_output=2, vocab_size=VOCAB, dual=True)


def regression_task() -> TaskData:
    g = torch.Generator().manual_seed(2)
    w = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.0, 1.0]])

    def split(n: int) -> TensorDataset:
        x = torch.randn(n, SEQ, 2, generator=g)
        return TensorDataset(x, x.mean(1) @ w)  # (n, 3)

    return TaskData(name="linreg", train=split(128), val=split(32), test=split(32), seq_len=SEQ, d_output=3,
                    d_input=2, task_type="regression")


def without_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "seconds"} for e in history]


CPU = torch.device("cpu")


# ---------------------------------------------------------------------------------------------- optimizer groups


def test_param_groups_marked_parameters_get_their_own_group():
    model = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 2))
    ssm_a = nn.Parameter(torch.randn(3, 4))
    ssm_a._optim = {"lr": 0.001, "weight_decay": 0.0}
    ssm_dt = nn.Parameter(torch.randn(3))
    ssm_dt._optim = {"lr": 0.001, "weight_decay": 0.0}
    ssm_b = nn.Parameter(torch.randn(2, 2))
    ssm_b._optim = {"lr": 0.002}  # weight decay falls back to the global value
    model.register_parameter("A", ssm_a)
    model.register_parameter("log_dt", ssm_dt)
    model.register_parameter("B", ssm_b)
    frozen = nn.Parameter(torch.randn(5, 5), requires_grad=False)
    model.register_parameter("frozen", frozen)

    groups = {g["name"]: g for g in param_groups(model, lr=0.01, weight_decay=0.05)}
    ids = {name: {id(p) for p in g["params"]} for name, g in groups.items()}
    assert ids["decay"] == {id(model[0].weight), id(model[2].weight)}
    assert groups["decay"]["weight_decay"] == 0.05 and groups["decay"]["lr"] == 0.01
    assert ids["no_decay"] == {id(model[0].bias), id(model[1].weight), id(model[1].bias), id(model[2].bias)}
    assert groups["no_decay"]["weight_decay"] == 0.0
    ssm = [g for g in groups.values() if id(ssm_a) in {id(p) for p in g["params"]}]
    assert len(ssm) == 1 and {id(p) for p in ssm[0]["params"]} == {id(ssm_a), id(ssm_dt)}
    assert ssm[0]["lr"] == 0.001 and ssm[0]["weight_decay"] == 0.0
    other = [g for g in groups.values() if id(ssm_b) in {id(p) for p in g["params"]}][0]
    assert other["lr"] == 0.002 and other["weight_decay"] == 0.05
    assert all(id(frozen) not in s for s in ids.values())
    assert sum(len(g["params"]) for g in groups.values()) == 9  # every trainable parameter exactly once

    opt = build_optimizer(model, "adamw", 0.01, 0.05, (0.9, 0.98))
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["betas"] == (0.9, 0.98)
    # the schedule scales every group by the same factor: the SSM group keeps its ratio 0.001 / 0.01
    cfg = TrainConfig(lr=0.01, epochs=4, batch_size=8, scheduler="cosine", warmup_epochs=1)
    sched = LRSchedule(cfg, steps_per_epoch=10)
    LRSchedule.init_groups(opt)
    f = sched.apply(opt, 25)
    by_name = {g["name"]: g["lr"] for g in opt.param_groups}
    assert 0 < f < 1
    assert by_name["decay"] == pytest.approx(0.01 * f) and by_name[ssm[0]["name"]] == pytest.approx(0.001 * f)


def test_weight_decay_on_1d_parameters_as_the_authors_code_applies_it():
    model = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6))
    ssm_dt = nn.Parameter(torch.randn(3))
    ssm_dt._optim = {"weight_decay": 0.0}  # marked SSM parameters keep their own settings
    model.register_parameter("log_dt", ssm_dt)
    groups = {g["name"]: g for g in param_groups(model, lr=0.01, weight_decay=0.05, decay_1d=True)}
    assert "no_decay" not in groups
    assert {id(p) for p in groups["decay"]["params"]} == {id(p) for n, p in model.named_parameters() if n != "log_dt"}
    marked = [g for g in groups.values() if any(p is ssm_dt for p in g["params"])]
    assert len(marked) == 1 and (marked[0]["lr"], marked[0]["weight_decay"]) == (0.01, 0.0)
    opt = build_optimizer(model, "adamw", 0.01, 0.05, decay_1d=True)
    assert sum(len(g["params"]) for g in opt.param_groups if g["weight_decay"] == 0.05) == 4
    with pytest.raises(ValueError, match="weight_decay_1d"):
        TrainConfig(lr=0.01, epochs=1, batch_size=8, weight_decay_1d="yes")


def test_checkpoint_from_before_a_config_field_resumes_at_its_default(tmp_path):
    """A checkpoint whose config lacks a field added later reads as that field's default: the run resumes with
    the default and is refused (naming the field) with another value."""
    task = majority_task()
    cfg = dict(lr=0.05, batch_size=32, scheduler="constant", weight_decay=0.05)
    make = lambda: PoolClassifier()  # noqa: E731
    train(make, task, TrainConfig(**cfg, epochs=1), tmp_path / "r", CPU, progress=False)
    path = tmp_path / "r" / "checkpoint.pt"
    ck = torch.load(path, weights_only=True)
    del ck["config"]["weight_decay_1d"]  # as written before the field existed
    ckpt_io.save_atomic(ck, path)
    resumed = train(make, task, TrainConfig(**cfg, epochs=2), tmp_path / "r", CPU, progress=False)
    assert len(resumed.history) == 2
    with pytest.raises(CheckpointMismatch, match=r"config.weight_decay_1d: checkpoint False, now True"):
        train(make, task, TrainConfig(**cfg, epochs=3, weight_decay_1d=True), tmp_path / "r", CPU, progress=False)


def test_build_optimizer_names_and_bad_markings():
    model = nn.Linear(3, 3)
    assert isinstance(build_optimizer(model, "adam", 0.1, 0.0, (0.9, 0.999)), torch.optim.Adam)
    sgd = build_optimizer(model, "sgd", 0.1, 0.0, (0.8, 0.999))
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.8
    with pytest.raises(ValueError, match=r"lamb.*adamw.*adam.*sgd"):
        build_optimizer(model, "lamb", 0.1, 0.0, (0.9, 0.999))
    model.weight._optim = {"lr": 0.001, "momentum": 0.5}
    with pytest.raises(ValueError, match=r"'weight'.*momentum"):
        param_groups(model, 0.1, 0.0)


# ---------------------------------------------------------------------------------------------- schedules


def test_cosine_schedule_warmup_peak_and_end():
    cfg = TrainConfig(lr=0.004, epochs=10, batch_size=8, scheduler="cosine", warmup_epochs=2)
    s = LRSchedule(cfg, steps_per_epoch=5)  # warmup W = 10 steps, total T = 50
    assert s.factor(0) == pytest.approx(0.1)
    assert s.factor(4) == pytest.approx(0.5)
    assert s.factor(9) == pytest.approx(1.0)  # peak at the end of warmup
    assert s.factor(10) == pytest.approx(1.0)
    assert s.factor(30) == pytest.approx(0.5)  # half way through the decay
    assert s.factor(49) == pytest.approx(0.5 * (1 + math.cos(math.pi * 39 / 40)))
    assert s.factor(50) == pytest.approx(0.0, abs=1e-12)  # decays to 0 (S4D Appendix B)
    curve = [s.factor(t) for t in range(50)]
    assert all(a < b for a, b in zip(curve[:9], curve[1:10]))  # rising warmup
    assert all(a > b for a, b in zip(curve[10:-1], curve[11:]))  # falling cosine


def test_plateau_schedule_decays_after_patience():
    cfg = TrainConfig(lr=0.01, epochs=20, batch_size=8, scheduler="plateau", patience=2, plateau_factor=0.2)
    s = LRSchedule(cfg, steps_per_epoch=3, monitor="val_acc")
    factors = []
    for acc in [50, 60, 59, 58, 60, 55, 61, 61, 61, 61]:
        s.epoch_end(acc)
        factors.append(s.factor(0))
    # 60 at epoch 2; then 59, 58, 60 (not strictly better) are 3 bad epochs > patience 2 -> decay;
    # 55 is bad (1), 61 improves, then three equal epochs -> second decay
    assert factors == pytest.approx([1, 1, 1, 1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.04])
    low = LRSchedule(TrainConfig(lr=0.01, epochs=5, batch_size=8, scheduler="plateau", patience=0), 3,
                     monitor="val_rmse")
    for rmse in [1.0, 0.5, 0.6]:
        low.epoch_end(rmse)
    assert low.factor(0) == pytest.approx(0.2)  # lower is better for rmse


def test_step_and_constant_schedules():
    cfg = TrainConfig(lr=0.01, epochs=10, batch_size=8, scheduler="step", step_epochs=3, step_gamma=0.5)
    s = LRSchedule(cfg, steps_per_epoch=4)
    got = []
    for _ in range(7):
        got.append(s.factor(0))
        s.epoch_end(None)
    assert got == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    c = LRSchedule(TrainConfig(lr=0.01, epochs=3, batch_size=8, scheduler="constant", warmup_epochs=1), 4)
    assert [c.factor(t) for t in range(6)] == pytest.approx([0.25, 0.5, 0.75, 1, 1, 1])


# ---------------------------------------------------------------------------------------------- the loop


def test_classification_learns_and_writes_logs(tmp_path):
    task = majority_task()
    cfg = TrainConfig(lr=0.05, epochs=6, batch_size=32, weight_decay=0.01, scheduler="cosine", warmup_epochs=1)
    res = train(lambda: PoolClassifier(), task, cfg, tmp_path, CPU, progress=False)
    h = res.history
    assert [e["epoch"] for e in h] == [1, 2, 3, 4, 5, 6] and all(e["steps"] == 8 for e in h)
    assert h[-1]["train_loss"] < 0.7 * h[0]["train_loss"]
    assert h[-1]["val_metric"] > 85 and h[-1]["val_metric"] > h[0]["val_metric"]
    # lr logged is the schedule at each epoch's last step (W = 8 steps, T = 48)
    sched = LRSchedule(cfg, steps_per_epoch=8)
    assert [e["lr"] for e in h] == pytest.approx([0.05 * sched.factor(8 * k + 7) for k in range(6)])
    # best epoch by validation accuracy; the reported number is the test metric of that epoch
    best = max(h, key=lambda e: e["val_metric"])
    assert res.best_val == best["val_metric"] and res.test_at_best_val == best["test_metric"]
    assert res.best_epoch == best["epoch"] and res.n_params == VOCAB * 16 + 16 * 2 + 2
    assert res.steps_per_second > 0 and res.peak_memory_mb is None
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == h
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["test_at_best_val"] == res.test_at_best_val and summary["config"]["lr"] == 0.05
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ck["epoch"] == 6 and ck["step"] == 0 and len(ck["history"]) == 6
    # a finished run called again does not train and returns the same numbers (the speed measured by the
    # call that trained, kept in the checkpoint)
    again = train(lambda: PoolClassifier(), task, cfg, tmp_path, CPU, progress=False)
    assert again.history == res.history and again.steps_per_second == res.steps_per_second


def test_regression_dual_and_amp(tmp_path):
    reg = train(lambda: PoolRegressor(), regression_task(),
                TrainConfig(lr=0.05, epochs=4, batch_size=16, scheduler="constant"), tmp_path / "reg", CPU,
                progress=False)
    assert reg.monitor == "val_rmse"
    assert reg.history[-1]["val_metric"] < 0.5 * reg.history[0]["val_metric"]
    assert reg.history[-1]["val_loss"] == pytest.approx(reg.history[-1]["val_metric"] ** 2, rel=1e-6)
    assert reg.best_val == min(e["val_metric"] for e in reg.history)

    pair = train(lambda: PairClassifier(), pair_task(),
                 TrainConfig(lr=0.05, epochs=3, batch_size=16, scheduler="constant"), tmp_path / "pair", CPU,
                 progress=True)  # the bar and the per-epoch lines must not break anything
    assert pair.history[-1]["train_loss"] < pair.history[0]["train_loss"]

    for amp in ("bf16", "fp16"):
        res = train(lambda: PoolClassifier(), majority_task(), TrainConfig(lr=0.05, epochs=2, batch_size=32,
                    amp=amp, grad_clip=1.0, grad_accum=2), tmp_path / amp, CPU, progress=False)
        assert all(math.isfinite(e["train_loss"]) for e in res.history)
        assert res.history[-1]["train_loss"] < res.history[0]["train_loss"]


def test_max_steps_per_epoch_caps_epochs_and_schedule(tmp_path):
    cfg = TrainConfig(lr=0.05, epochs=2, batch_size=32, max_steps_per_epoch=3, scheduler="cosine")
    res = train(lambda: PoolClassifier(), majority_task(), cfg, tmp_path, CPU, progress=False)
    assert [e["steps"] for e in res.history] == [3, 3]
    assert res.history[-1]["lr"] == pytest.approx(0.05 * 0.5 * (1 + math.cos(math.pi * 5 / 6)))  # step 5 of T=6


def test_grad_accum_matches_one_big_batch(tmp_path):
    """batch_size is the step's batch: splitting it into micro-batches changes only summation order
    (float32 gradients, ~1e-7 relative per step), so the losses agree to 1e-5."""
    task = majority_task()
    base = dict(lr=0.05, epochs=2, batch_size=32, scheduler="constant")
    one = train(lambda: PoolClassifier(), task, TrainConfig(**base), tmp_path / "a", CPU, progress=False)
    four = train(lambda: PoolClassifier(), task, TrainConfig(**base, grad_accum=4, num_workers=2), tmp_path / "b",
                 CPU, progress=False)  # loader worker processes must not change the data either
    for e1, e4 in zip(one.history, four.history):
        for k in ("train_loss", "val_loss", "test_loss"):
            assert e4[k] == pytest.approx(e1[k], rel=1e-5)


def test_resume_extends_run_with_identical_history(tmp_path):
    """2 epochs, then the same config to 4 epochs from the checkpoint == 4 epochs at once.

    The model has dropout, so this also checks that random states are restored; the plateau schedule
    (patience 0, random validation labels) checks that the schedule state is restored.
    """
    task = majority_task(noisy_val=True)
    cfg = dict(lr=0.05, batch_size=32, scheduler="plateau", patience=0, plateau_factor=0.5, weight_decay=0.01)
    make = lambda: PoolClassifier(dropout=0.3)  # noqa: E731
    first = train(make, task, TrainConfig(**cfg, epochs=2), tmp_path / "resumed", CPU, progress=False)
    assert len(first.history) == 2
    resumed = train(make, task, TrainConfig(**cfg, epochs=4), tmp_path / "resumed", CPU, progress=False)
    straight = train(make, task, TrainConfig(**cfg, epochs=4), tmp_path / "straight", CPU, progress=False)
    assert without_time(resumed.history) == without_time(straight.history)
    assert len({e["lr"] for e in straight.history}) > 1  # the plateau decay did happen
    a = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3, 4]


def test_resume_at_another_commit_records_both(tmp_path, monkeypatch):
    """A run resumed by other code names both commits and the step each took over (result, checkpoint, note)."""
    from runners.train.table import segments_note

    task = majority_task()
    cfg = dict(lr=0.05, batch_size=32, scheduler="constant")
    make = lambda: PoolClassifier()  # noqa: E731
    monkeypatch.setenv("SSM_GIT_COMMIT", "a" * 40)
    first = train(make, task, TrainConfig(**cfg, epochs=2), tmp_path / "r", CPU, progress=False)
    assert [s["git_commit"] for s in first.segments] == ["a" * 40]
    assert segments_note(first.segments) == ""
    again = train(make, task, TrainConfig(**cfg, epochs=2), tmp_path / "r", CPU, progress=False)  # no step
    assert again.segments == first.segments
    monkeypatch.setenv("SSM_GIT_COMMIT", "b" * 40)
    resumed = train(make, task, TrainConfig(**cfg, epochs=3), tmp_path / "r", CPU, progress=False)
    steps = sum(e["steps"] for e in first.history)
    assert [(s["git_commit"], s["from_global_step"]) for s in resumed.segments] == [("a" * 40, 0), ("b" * 40, steps)]
    ck = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert ck["segments"] == resumed.segments
    cpu = resumed.segments[0]["device"]
    assert cpu.startswith("CPU") and resumed.segments[1]["device"] == cpu
    expected = f"; trained at commit {'a' * 12} on {cpu} from step 0, {'b' * 12} on {cpu} from step {steps}"
    assert segments_note(resumed.segments) == expected
    legacy = [{"git_commit": None, "from_global_step": 0}, {"git_commit": "c" * 40, "from_global_step": 7}]
    assert "an unrecorded commit from step 0" in segments_note(legacy)


def test_resume_on_another_card_records_both(tmp_path, monkeypatch):
    """Same commit, another card: a new segment names the card each call trained on (result and note)."""
    from runners.train import loop
    from runners.train.table import segments_note

    task = majority_task()
    cfg = dict(lr=0.05, batch_size=32, scheduler="constant")
    make = lambda: PoolClassifier()  # noqa: E731
    monkeypatch.setenv("SSM_GIT_COMMIT", "a" * 40)
    monkeypatch.setattr(loop, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    first = train(make, task, TrainConfig(**cfg, epochs=1), tmp_path / "r", CPU, progress=False)
    monkeypatch.setattr(loop, "device_name", lambda device: "NVIDIA H200")
    resumed = train(make, task, TrainConfig(**cfg, epochs=2), tmp_path / "r", CPU, progress=False)
    steps = first.history[0]["steps"]
    assert [(s["device"], s["from_global_step"]) for s in resumed.segments] == [
        ("NVIDIA H100 80GB HBM3", 0), ("NVIDIA H200", steps)]
    assert segments_note(resumed.segments) == (f"; trained at commit {'a' * 12} on NVIDIA H100 80GB HBM3 from step 0, "
                                               f"{'a' * 12} on NVIDIA H200 from step {steps}")


class Killed(RuntimeError):
    pass


def train_until_killed(make, task: TaskData, cfg: TrainConfig, run_dir: Path, at: tuple[int, int]) -> None:
    """Train until the step ``at`` = (epoch index, steps done in it), where the run dies as if killed."""
    def kill(epoch: int, step: int) -> None:
        if (epoch, step) == at:
            raise Killed

    with pytest.raises(Killed):
        train(make, task, cfg, run_dir, CPU, progress=False, on_step=kill)


def test_kill_mid_epoch_resumes_without_losing_an_epoch(tmp_path):
    task = majority_task()
    cfg = TrainConfig(lr=0.05, epochs=3, batch_size=32, grad_accum=2, checkpoint_every_steps=3,
                      scheduler="cosine", warmup_epochs=1)
    make = lambda: PoolClassifier(dropout=0.2)  # noqa: E731
    train_until_killed(make, task, cfg, tmp_path / "killed", at=(1, 5))
    ck = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert (ck["epoch"], ck["step"], ck["global_step"]) == (1, 3, 11)  # last checkpoint: step 3 of epoch 2
    assert len(ck["history"]) == 1  # the finished first epoch is kept
    assert len((tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()) == 1
    resumed = train(make, task, cfg, tmp_path / "killed", CPU, progress=False)
    straight = train(make, task, cfg, tmp_path / "straight", CPU, progress=False)
    assert without_time(resumed.history) == without_time(straight.history)
    assert [e["steps"] for e in resumed.history] == [8, 8, 8]


def test_time_budget_stops_evaluates_and_continues(tmp_path):
    task = majority_task()
    base = dict(lr=0.05, epochs=2, batch_size=32, scheduler="cosine")
    # a budget of 0.3 s, and 0.6 s spent after the second step (none after the first): the clock starts after the
    # first step (start-up costs), so the budget runs out at the second, whatever the machine's speed
    budget = TrainConfig(**base, max_minutes=0.005)
    res = train(lambda: PoolClassifier(), task, budget, tmp_path / "b", CPU, progress=False,
                on_step=lambda epoch, step: time.sleep(0.6) if step == 2 else None)
    assert res.stop_reason == "max_minutes"
    assert len(res.history) == 1 and res.history[0]["partial"] and res.history[0]["steps"] == 2
    assert res.best_epoch == 1 and res.test_at_best_val == res.history[0]["test_metric"]
    again = train(lambda: PoolClassifier(), task, budget, tmp_path / "b", CPU, progress=False)
    # budget spent: no more steps; the speed reported is the one the training call measured (from the checkpoint)
    assert again.history == res.history and again.steps_per_second == res.steps_per_second is not None
    more = train(lambda: PoolClassifier(), task, TrainConfig(**base), tmp_path / "b", CPU, progress=False)
    straight = train(lambda: PoolClassifier(), task, TrainConfig(**base), tmp_path / "s", CPU, progress=False)
    assert more.stop_reason == "completed"
    assert without_time(more.history) == without_time(straight.history)


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("kwargs, field", [
    (dict(optimizer="lamb"), "optimizer"),
    (dict(scheduler="linear"), "scheduler"),
    (dict(amp="fp8"), "amp"),
    (dict(scheduler="step"), "step_epochs"),
    (dict(scheduler="step", step_epochs=2), "step_gamma"),
    (dict(grad_accum=3), "grad_accum"),
    (dict(lr=-1.0), "lr"),
    (dict(epochs=0), "epochs"),
    (dict(betas=(0.9,)), "betas"),
    (dict(warmup_epochs=4), "warmup_epochs"),
    (dict(monitor="val_f1"), "monitor"),
    (dict(max_minutes=0), "max_minutes"),
    (dict(checkpoint_every_steps=True), "checkpoint_every_steps"),
])
def test_config_errors_name_the_field(kwargs, field):
    base = dict(lr=0.01, epochs=4, batch_size=8)
    with pytest.raises(ValueError, match=rf"TrainConfig\.{field}\b"):
        TrainConfig(**{**base, **kwargs})


def test_config_from_dict_and_task_mismatch(tmp_path):
    cfg = TrainConfig.from_dict({"lr": 0.01, "epochs": 2, "batch_size": 8, "betas": [0.9, 0.95]}, where="lra.yaml")
    assert cfg.betas == (0.9, 0.95)
    with pytest.raises(ValueError, match=r"lra.yaml.*unknown.*'lrate'"):
        TrainConfig.from_dict({"lrate": 0.01, "epochs": 2, "batch_size": 8}, where="lra.yaml")
    with pytest.raises(ValueError, match=r"missing.*'batch_size'"):
        TrainConfig.from_dict({"lr": 0.01, "epochs": 2})
    with pytest.raises(ValueError, match=r"TrainConfig\.monitor.*regression"):
        train(lambda: PoolRegressor(), regression_task(), TrainConfig(lr=0.01, epochs=1, batch_size=8,
              monitor="val_acc"), tmp_path / "m", CPU, progress=False)
    with pytest.raises(ValueError, match=r"TrainConfig\.batch_size = 512.*256"):
        train(lambda: PoolClassifier(), majority_task(), TrainConfig(lr=0.01, epochs=1, batch_size=512),
              tmp_path / "b", CPU, progress=False)
    with pytest.raises(ValueError, match=r"model returned shape \(32, 3\)"):
        train(lambda: PoolClassifier(n_classes=3), majority_task(), TrainConfig(lr=0.01, epochs=1, batch_size=32),
              tmp_path / "s", CPU, progress=False)
    assert not (tmp_path / "m").exists() and not (tmp_path / "b").exists()  # nothing ran


def test_checkpoint_of_another_config_is_refused(tmp_path):
    task = majority_task()
    cfg = TrainConfig(lr=0.05, epochs=1, batch_size=32, scheduler="cosine")
    train(lambda: PoolClassifier(d=8), task, cfg, tmp_path, CPU, progress=False, model_config={"d": 8})
    with pytest.raises(CheckpointMismatch, match=r"model_config\.d: checkpoint 8, now 16.*model\.emb\.weight"):
        train(lambda: PoolClassifier(d=16), task, cfg, tmp_path, CPU, progress=False, model_config={"d": 16})
    with pytest.raises(CheckpointMismatch, match=r"config\.lr: checkpoint 0\.05, now 0\.01"):
        train(lambda: PoolClassifier(d=8), task, TrainConfig(lr=0.01, epochs=1, batch_size=32), tmp_path, CPU,
              progress=False, model_config={"d": 8})
    with pytest.raises(CheckpointMismatch, match=r"config\.epochs.*cosine"):
        train(lambda: PoolClassifier(d=8), task, TrainConfig(lr=0.05, epochs=3, batch_size=32), tmp_path, CPU,
              progress=False, model_config={"d": 8})
    with pytest.raises(CheckpointMismatch, match=r"task\.n_train: checkpoint 256, now 128"):
        train(lambda: PoolClassifier(d=8), majority_task(n_train=128), cfg, tmp_path, CPU, progress=False,
              model_config={"d": 8})
    regenerated = majority_task()  # the same task made by a newer version of its generator
    regenerated.info["data_version"] = "pathfinder v2"
    with pytest.raises(CheckpointMismatch, match=r"task\.data_version: checkpoint None, now 'pathfinder v2'"):
        train(lambda: PoolClassifier(d=8), regenerated, cfg, tmp_path, CPU, progress=False, model_config={"d": 8})
    rescaled = majority_task()  # the same examples with its inputs scaled another way (a loader's normalize)
    rescaled.info["values"] = "(x - 127.5) / 127.5 in [-1, 1]"
    with pytest.raises(CheckpointMismatch, match=r"task\.values: checkpoint None, now '\(x - 127\.5\)"):
        train(lambda: PoolClassifier(d=8), rescaled, cfg, tmp_path, CPU, progress=False, model_config={"d": 8})
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointMismatch, match="cannot be read"):
        train(lambda: PoolClassifier(d=8), task, cfg, tmp_path, CPU, progress=False, model_config={"d": 8})


def test_checkpoint_holds_only_safe_types(tmp_path):
    """Everything loads with weights_only=True, including RNG states that round-trip exactly."""
    import numpy as np
    import random
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    state = ckpt_io.rng_state()
    ckpt_io.save_atomic({"format": ckpt_io.FORMAT, "rng": [state]}, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)["rng"][0]
    expect = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    ckpt_io.set_rng_state(loaded)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expect[0], got[0]) and np.array_equal(expect[1], got[1]) and expect[2] == got[2]
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind


# ---------------------------------------------------------------------------------------------- two processes


def _spawn(fn, args: tuple, nprocs: int = 2, timeout_s: float = 120.0) -> None:
    """torch.multiprocessing spawn that fails the test instead of hanging if a collective deadlocks."""
    ctx = torch.multiprocessing.start_processes(fn, args=args, nprocs=nprocs, start_method="spawn", join=False)
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{fn.__name__}: {nprocs} processes did not finish within {timeout_s} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, run_dir: str, cfg_dict: dict) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    train(lambda: PoolClassifier(), majority_task(n_train=250, n_eval=63), TrainConfig.from_dict(cfg_dict),
          Path(run_dir), CPU, progress=False)


def test_two_processes_match_one_at_the_same_global_batch(tmp_path):
    """gloo, 2 processes x 16 examples (2 micro-batches of 8) == 1 process x 32 examples.

    The data order is identical by construction (see runners.train.loop._train_loader) and the
    model has no dropout or batch norm, so the only difference is float32 summation order in the
    gradient all-reduce (mean of two half-batch means vs one mean) and in the metric sums: about
    1e-7 relative per step. Losses must agree to 1e-5 relative and weights to 1e-5 absolute;
    accuracies to one example in 63 (a near-tie logit flipping).
    n_train = 250 and n_eval = 63 are not multiples of the batch or of 2: dropping the last partial
    batch and splitting evaluation unevenly must still agree.
    """
    cfg = dict(lr=0.05, epochs=2, batch_size=32, grad_accum=2, scheduler="cosine", warmup_epochs=1)
    port = _free_port()
    _spawn(_ddp_worker, (2, port, str(tmp_path / "ddp"), cfg))
    ddp = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    single = train(lambda: PoolClassifier(), majority_task(n_train=250, n_eval=63), TrainConfig.from_dict(cfg),
                   tmp_path / "one", CPU, progress=False)
    assert ddp["world_size"] == 2 and single.world_size == 1
    assert [e["steps"] for e in ddp["history"]] == [7, 7]
    for e2, e1 in zip(ddp["history"], single.history):
        for k in ("train_loss", "val_loss", "test_loss"):
            assert e2[k] == pytest.approx(e1[k], rel=1e-5), k
        for k in ("train_metric", "val_metric", "test_metric"):
            assert abs(e2[k] - e1[k]) <= 100 / 63 + 1e-9, k
        assert e2["lr"] == pytest.approx(e1["lr"])
    w2 = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)["model"]
    w1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5)


def _ddp_resume_worker(rank: int, world: int, port: int, root: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    task = majority_task()
    make = lambda: PoolClassifier(dropout=0.3)  # noqa: E731
    for sub, epochs in (("resumed", 2), ("resumed", 3), ("straight", 3)):
        cfg = TrainConfig(lr=0.05, epochs=epochs, batch_size=32, scheduler="constant", checkpoint_every_steps=3)
        train(make, task, cfg, Path(root) / sub, CPU, progress=False)
        assert torch.distributed.is_initialized()  # made once by the first call, reused by the others


def test_two_processes_resume_with_per_rank_random_states(tmp_path):
    """Under DDP each process has its own dropout stream; a resumed 2-process run restores each one."""
    _spawn(_ddp_resume_worker, (2, _free_port(), str(tmp_path)))
    resumed = json.loads((tmp_path / "resumed" / "summary.json").read_text())["history"]
    straight = json.loads((tmp_path / "straight" / "summary.json").read_text())["history"]
    assert len(straight) == 3 and without_time(resumed) == without_time(straight)
    ck = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)
    assert ck["world_size"] == 2 and len(ck["rng"]) == 2
    assert not torch.equal(ck["rng"][0]["torch"], ck["rng"][1]["torch"])


# ---------------------------------------------------------------------------------------------- two GPUs (NCCL)

needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")


class SSMClassifier(nn.Module):
    """Embedding -> S4D layer -> S4 layer -> mean pool -> linear: the SSM kernels' CUDA paths (Triton products,
    kernel generation replayed from CUDA graphs, fused FFT convolution) under DDP."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        from ssm_core import SSMLayer

        self.emb = nn.Embedding(VOCAB, d)
        self.layers = nn.Sequential(SSMLayer(d, 16, mode="s4d"), SSMLayer(d, 16, mode="s4"))
        self.head = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, L) -> (B, C)
        return self.head(self.layers(self.emb(x)).mean(dim=1))


def _nccl_worker(rank: int, world: int, port: int, run_dir: str, cfg_dict: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    train(lambda: SSMClassifier(), majority_task(n_train=250, n_eval=63), TrainConfig.from_dict(cfg_dict),
          Path(run_dir), torch.device("cuda"), progress=False)


@needs_two_gpus
def test_two_gpus_nccl_match_one_gpu_at_the_same_global_batch(tmp_path):
    """NCCL, 2 GPUs x 16 examples (2 micro-batches of 8) == 1 GPU x 32 examples, with S4 and S4D layers.

    As the gloo test above: the data order is identical, the model has no dropout or batch norm, so only the
    float32 summation order differs (gradient all-reduce, metric sums). Tolerances: losses 1e-4 relative,
    weights 1e-4 absolute after 14 Adam steps; accuracies within one example in 63.
    """
    cfg = dict(lr=0.01, epochs=2, batch_size=32, grad_accum=2, scheduler="cosine", warmup_epochs=1)
    _spawn(_nccl_worker, (2, _free_port(), str(tmp_path / "ddp"), cfg), timeout_s=300.0)
    ddp = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    single = train(lambda: SSMClassifier(), majority_task(n_train=250, n_eval=63), TrainConfig.from_dict(cfg),
                   tmp_path / "one", torch.device("cuda", 0), progress=False)
    assert ddp["world_size"] == 2 and single.world_size == 1
    assert [e["steps"] for e in ddp["history"]] == [7, 7]
    for e2, e1 in zip(ddp["history"], single.history):
        for k in ("train_loss", "val_loss", "test_loss"):
            assert e2[k] == pytest.approx(e1[k], rel=1e-4), (k, e2[k], e1[k])
        for k in ("train_metric", "val_metric", "test_metric"):
            assert abs(e2[k] - e1[k]) <= 100 / 63 + 1e-9, k
    w2 = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)["model"]
    w1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    diffs = {k: float((w2[k] - w1[k]).abs().max()) for k in w1 if w1[k].is_floating_point() or w1[k].is_complex()}
    print("max |weight difference| per tensor:", diffs)
    assert max(diffs.values()) <= 1e-4, diffs


def _bn_model() -> nn.Module:
    """Tokens -> embedding -> two pre-norm BatchNorm S4D blocks -> mean pool -> linear (no dropout)."""
    from ssm_core import SequenceModel

    return SequenceModel(d_input=1, d_output=2, d_model=16, n_layers=2, norm="batch", prenorm=True, pool="mean",
                         vocab_size=VOCAB, layer={"mode": "s4d", "d_state": 8})


def _bn_worker(rank: int, world: int, port: int, run_dir: str, cfg_dict: dict, device_type: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    train(_bn_model, majority_task(n_train=256, n_eval=64), TrainConfig.from_dict(cfg_dict), Path(run_dir),
          torch.device(device_type), progress=False)


def test_synced_batchnorm_on_cpu_processes_is_refused_by_name(tmp_path):
    """torch synchronizes BatchNorm statistics between CUDA devices only: two gloo processes asking for it stop
    before anything is written, with a message naming the option."""
    cfg = dict(lr=0.01, epochs=1, batch_size=32, sync_batchnorm=True)
    with pytest.raises(Exception, match=r"TrainConfig\.sync_batchnorm = True needs CUDA devices .* cpu in 2 "
                                        r"processes\); set it to false"):
        _spawn(_bn_worker, (2, _free_port(), str(tmp_path / "ddp"), cfg, "cpu"))
    assert not (tmp_path / "ddp").exists()


@needs_two_gpus
def test_two_gpus_with_synced_batchnorm_match_one_gpu_at_the_same_global_batch(tmp_path):
    """NCCL, 2 GPUs x 16 examples == 1 GPU x 32 examples with BatchNorm blocks: with ``sync_batchnorm`` each block
    normalizes by the global batch's statistics, as one GPU does, so only float32 summation order differs (the
    statistics' reduction, the gradient all-reduce, the metric sums). Losses 1e-4 relative, every parameter and
    running statistic 1e-4 of its largest entry after 16 AdamW steps. Without the option each GPU normalizes by
    its own half batch, and the first block's running mean (rank 0's, which DDP broadcasts) must differ from one
    GPU's by more than 1e-3: the comparison sees the statistics."""
    base = dict(lr=0.01, epochs=2, batch_size=32, scheduler="cosine", warmup_epochs=1)
    single = train(_bn_model, majority_task(n_train=256, n_eval=64), TrainConfig.from_dict(base), tmp_path / "one",
                   torch.device("cuda", 0), progress=False)
    w1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    runs = {}
    for flag in (True, False):
        run_dir = tmp_path / f"ddp-{flag}"
        _spawn(_bn_worker, (2, _free_port(), str(run_dir), {**base, "sync_batchnorm": flag}, "cuda"),
               timeout_s=300.0)
        runs[flag] = (json.loads((run_dir / "summary.json").read_text()),
                      torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"])
    ddp, w2 = runs[True]
    assert ddp["world_size"] == 2 and [e["steps"] for e in ddp["history"]] == [8, 8]
    for e2, e1 in zip(ddp["history"], single.history):
        for k in ("train_loss", "val_loss", "test_loss"):
            assert e2[k] == pytest.approx(e1[k], rel=1e-4), (k, e2[k], e1[k])
    diffs = {k: float((w2[k].float() - w1[k].float()).abs().max() / w1[k].float().abs().max().clamp_min(1e-6))
             for k in w1}
    print("relative |difference| per tensor, synced:", diffs)
    assert max(diffs.values()) <= 1e-4, diffs
    unsynced = runs[False][1]["blocks.0.norm.running_mean"]
    reference = w1["blocks.0.norm.running_mean"]
    assert float((unsynced - reference).abs().max() / reference.abs().max()) > 1e-3
