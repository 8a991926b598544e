"""The speech / pixel / BIDMC table specs and the resolution-change claim: train.table's ``extra_eval`` (extra test
sets at a step-size rate, evaluated at the best validation epoch), the stand-in writers read back by the real
loaders, the tone task, and the budget tier's NOT-RUN path when the papers' datasets are absent."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from runners.core import layout
from runners.core.errors import NotRunnable, SpecError
from runners.data import download as dl
from runners.data.base import DatasetError, TaskData
from runners.data.bidmc import load_bidmc
from runners.data.mnist import load_mnist, mnist_permutation
from runners.data.registry import LOADERS, PREPARERS
from runners.data.speech_commands import load_speech_commands
from runners.data.standins import BIDMC_RATE_HZ, speech_tone_frequencies
from runners.data.tones import class_frequencies, load_tones, write_tones
from runners.execute import run as run_mod
from runners.judge.verdicts import compare
from runners.specs.expected import expected_path, load_expected
from runners.specs.registry import RunContext
from runners.specs.spec import deep_merge, load_spec
from runners.store.read import load_result
from runners.train import TrainConfig, train
from runners.train.extra_eval import (
    AtRate,
    ExtraEval,
    ExtraEvaluator,
    parse_extra_evals,
)
from runners.train.loop import TrainResult
from runners.train.table import TrainTableConfig, build_model, run_train_table

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("s4-table-5", "s4-table-6", "s4d-table-4", "s4d-table-11", "resolution-change")
PAPER_DATA_SPECS = ("s4-table-5", "s4-table-6", "s4d-table-4", "s4d-table-11")


def _dominant_hz(x: np.ndarray, rate: float) -> float:
    spec = np.abs(np.fft.rfft(x - x.mean()))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[spec.argmax()])


# ---------------------------------------------------------------------------------------------- stand-ins


def test_speech_standin_read_back_by_loader(tmp_path: Path) -> None:
    PREPARERS["speech_commands_standin"](tmp_path, n_train=3, n_val=1, n_test=2, seed=3)
    task = load_speech_commands(tmp_path, subset="sc35", features="raw", cache=False)
    assert (task.d_output, task.seq_len) == (35, 16000)
    assert (len(task.train), len(task.val), len(task.test)) == (35 * 3, 35, 70)
    freqs = speech_tone_frequencies()
    assert len(set(np.round(list(freqs.values()), 3))) == 35 and max(freqs.values()) < 4000  # below 8 kHz Nyquist
    for split in (task.train, task.test):
        for i in range(0, len(split), 7):
            x, y = split[i]
            word = dl.SPEECH_COMMANDS_WORDS[int(y)]
            got = _dominant_hz(x[:, 0].numpy(), 16000)
            assert abs(got - freqs[word]) <= 2.0, (word, got, freqs[word])  # the label's tone, 1 Hz FFT bins
    sc10 = load_speech_commands(tmp_path, subset="sc10", cache=False)
    assert sc10.d_output == 10 and len(sc10.train) == 30
    sc10_f = sorted(freqs[w] for w in dl.SC10_WORDS)
    assert min(b / a for a, b in itertools.pairwise(sc10_f)) > 1.25 # SC10 tones spread over the whole range
    half = load_speech_commands(tmp_path, subset="sc10", test_decimation=2, cache=False)
    x_half, y_half = half.test[4]
    torch.testing.assert_close(x_half, sc10.test[4][0][::2])
    assert half.info["test_rate"] == 2.0
    assert abs(_dominant_hz(x_half[:, 0].numpy(), 8000) - freqs[dl.SC10_WORDS[int(y_half)]]) <= 2.0
    mfcc = load_speech_commands(tmp_path, subset="sc10", features="mfcc", cache=False)
    assert mfcc.train[0][0].shape == (161, 20)


def test_mnist_standin_read_back_by_loader(tmp_path: Path) -> None:
    PREPARERS["mnist_standin"](tmp_path, n_train=60, n_test=20, seed=1)
    assert all((tmp_path / "mnist" / f"{n}.gz").is_file() for n in dl.MNIST_FILES)
    s = load_mnist(tmp_path, cache=False)
    p = load_mnist(tmp_path, permute=True, perm_seed=5, cache=False)
    assert (len(s.train), len(s.val), len(s.test)) == (54, 6, 20)
    perm = mnist_permutation(5)
    for i in range(len(s.test)):
        (xs, ys), (xp, yp) = s.test[i], p.test[i]
        assert int(ys) == int(yp) and xs.shape == (784, 1)
        torch.testing.assert_close(xp, xs[perm])
        rows = xs[:, 0].reshape(28, 28).mean(1).numpy()  # row profile: (label + 1) cycles over 28 rows
        assert np.abs(np.fft.rfft(rows - rows.mean()))[1:].argmax() + 1 == int(ys) + 1


def test_bidmc_standin_read_back_by_loader(tmp_path: Path) -> None:
    PREPARERS["bidmc_standin"](tmp_path, n_train=12, n_test=6, seed=2)
    tasks = {t: load_bidmc(tmp_path, target=t, cache=False) for t in dl.BIDMC_TARGETS}
    ranges = {"HR": (60, 100), "RR": (10, 25), "SpO2": (90, 100)}
    for t, task in tasks.items():
        assert (task.seq_len, task.d_input, task.task_type) == (4000, 2, "regression")
        ys = torch.cat([task.test[i][1] for i in range(len(task.test))])
        assert ys.min() >= ranges[t][0] and ys.max() <= ranges[t][1]
    # the three problems share their series and differ in the target; HR is the PPG pulse rate
    for i in range(len(tasks["HR"].test)):
        x_hr, y_hr = tasks["HR"].test[i]
        torch.testing.assert_close(x_hr, tasks["SpO2"].test[i][0])
        beats_hz = _dominant_hz(x_hr[:, 0].numpy(), BIDMC_RATE_HZ)
        assert abs(beats_hz * 60 - float(y_hr)) < 2.5  # 1/32 Hz bins = 1.9 beats/min
    norm = load_bidmc(tmp_path, target="SpO2", normalize_targets=True, cache=False)
    ys = torch.cat([norm.train[i][1] for i in range(len(norm.train))])
    assert abs(ys.mean().item()) < 1e-5 and abs(ys.std().item() - 1) < 1e-5


def test_tones_task_and_decimated_test(tmp_path: Path) -> None:
    write_tones(tmp_path, n_train=40, n_val=8, n_test=12, n_classes=4, sample_rate=4000.0, length=512,
                f_min=62.5, f_max=250.0, noise=0.0, jitter=0.0, seed=0)
    full, half = load_tones(tmp_path), LOADERS["tones"](tmp_path, test_decimation=2)
    f = class_frequencies(4, 62.5, 250.0)
    np.testing.assert_allclose(f, [62.5, 62.5 * 4 ** (1 / 3), 62.5 * 4 ** (2 / 3), 250.0])
    assert half.info["test_rate"] == 2.0 and half.test[0][0].shape == (256, 1) and full.seq_len == 512
    for i in range(len(full.test)):
        (x, y), (xh, yh) = full.test[i], half.test[i]
        torch.testing.assert_close(xh, x[::2])
        assert int(y) == int(yh) == i % 4
        # jitter 0: the tone sits on an FFT bin (62.5 Hz * 512 / 4000 = 8 cycles)
        assert _dominant_hz(x[:, 0].numpy(), 4000) == pytest.approx(f[int(y)], rel=0.12)
    with pytest.raises(ValueError, match="Nyquist"):
        write_tones(tmp_path / "bad", sample_rate=1000.0, f_max=300.0)
    with pytest.raises(DatasetError, match="preparer: tones"):
        load_tones(tmp_path / "nothing")


# ---------------------------------------------------------------------------------------------- extra_eval


@pytest.mark.parametrize("raw, match", [
    ({"loader_args": {}}, "column"),
    ({"column": "x", "rate": 0}, "rate"),
    ({"column": "x", "rate": True}, "rate"),
    ({"column": "x", "loader_args": [1]}, "loader_args"),
    ({"column": "x", "speed": 2}, "unknown key"),
    ("0.5x", "mapping"),
])
def test_extra_eval_bad_input_names_the_key(raw, match) -> None:
    with pytest.raises(ValueError, match=match):
        parse_extra_evals(raw, "tasks.Raw.extra_eval")


def _table_cfg(**over) -> dict:
    cfg = {"tasks": {"1x": {"loader": "tones", "prepare": {"preparer": "tones", "n_train": 32, "n_val": 8,
                                                           "n_test": 8, "n_classes": 2, "sample_rate": 1000.0,
                                                           "length": 64, "f_min": 40.0, "f_max": 120.0},
                            "extra_eval": [{"column": "0.5x", "loader_args": {"test_decimation": 2}, "rate": 2.0}]}},
           "models": {"S4D": {"arch": "ssm"}, "T": {"arch": "transformer"}},
           "model_defaults": {"ssm": {"d_model": 8, "n_layers": 1, "layer": {"d_state": 4}},
                              "transformer": {"d_model": 8, "n_layers": 1, "n_heads": 2}},
           "train": {"lr": 0.01, "epochs": 2, "batch_size": 8, "scheduler": "constant"},
           "skip": [["T", "0.5x"]]}
    cfg.update(over)
    return cfg


def test_extra_eval_config_checks() -> None:
    TrainTableConfig(**_table_cfg())  # valid: the Transformer skips the rate-2 column
    with pytest.raises(ValueError, match=r"rate 2 needs a step size.*models\.T"):
        TrainTableConfig(**_table_cfg(skip=[]))
    cfg = _table_cfg()
    cfg["tasks"]["1x"]["extra_eval"].append({"column": "1x"})
    with pytest.raises(ValueError, match="already a column"):
        TrainTableConfig(**cfg)
    with pytest.raises(ValueError, match=r"skip\[1\]"):
        TrainTableConfig(**_table_cfg(skip=[["T", "0.5x"], ["T", "0.25x"]]))


class _RateProbe(nn.Module):
    """A model whose output records the rate it was run at and the length it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, rate: float = 1.0) -> torch.Tensor:  # (B, L, 1) -> (B, 2)
        return torch.stack([torch.full((x.shape[0],), rate), torch.full((x.shape[0],), float(x.shape[1]))], -1)


def test_at_rate_passes_the_rate_and_refuses_models_without_one() -> None:
    out = AtRate(_RateProbe(), 2.0)(torch.zeros(3, 10, 1))
    assert out[:, 0].eq(2.0).all() and out[:, 1].eq(10).all()
    with pytest.raises(ValueError, match="no step size"):
        AtRate(nn.Linear(1, 2), 2.0)


def _tones_task(root: Path, decimation: int = 1) -> TaskData:
    if not (root / "tones").exists():
        write_tones(root, n_train=48, n_val=16, n_test=16, n_classes=2, sample_rate=1000.0, length=64,
                    f_min=40.0, f_max=120.0, seed=0)
    return load_tones(root, test_decimation=decimation)


def test_extra_eval_is_taken_on_the_weights_of_the_best_epoch(tmp_path: Path) -> None:
    from ssm_core import SequenceModel

    task, half = _tones_task(tmp_path), _tones_task(tmp_path, 2)
    cfg = TrainConfig(lr=0.02, epochs=4, batch_size=8, scheduler="constant", eval_batch_size=16)
    evals = [(ExtraEval("same", {}, 1.0), task), (ExtraEval("0.5x", {"test_decimation": 2}, 2.0), half)]
    ev = ExtraEvaluator(evals, task, cfg, tmp_path / "run", torch.device("cpu"))
    snapshots: dict[int, dict] = {}

    def on_step(epoch: int, step: int) -> None:
        ev.on_step(epoch, step)
        if step == ev.steps_per_epoch:  # the weights the loop is about to evaluate
            snapshots[epoch + 1] = {k: v.clone() for k, v in ev.model.state_dict().items()}

    make = ev.wrap(lambda: SequenceModel(d_input=1, d_output=2, d_model=8, n_layers=1, layer={"d_state": 4}))
    result = train(make, task, cfg, tmp_path / "run", torch.device("cpu"), progress=False, on_step=on_step)
    assert sorted(ev.by_epoch) == ["1", "2", "3", "4"]
    # the loop's own test metric of every epoch equals the extra evaluation of the same test set at rate 1
    for h in result.history:
        assert ev.by_epoch[str(h["epoch"])]["same"] == pytest.approx(h["test_metric"], abs=1e-9)
    out = ev.results(result)
    assert out["same"][0] == pytest.approx(result.test_at_best_val, abs=1e-9)
    assert f"best val epoch {result.best_epoch}" in out["0.5x"][1]
    # the 0.5x value is the best epoch's weights run on the decimated test set with dt x 2, recomputed here
    model = make()
    model.load_state_dict(snapshots[result.best_epoch])
    model.eval()
    x = torch.stack([half.test[i][0] for i in range(len(half.test))])
    y = torch.stack([half.test[i][1] for i in range(len(half.test))])
    with torch.no_grad():
        acc = 100.0 * (model(x, rate=2.0).argmax(-1) == y).double().mean().item()
    assert out["0.5x"][0] == pytest.approx(acc, abs=1e-9)
    # a resumed (already finished) run reads the per-epoch values back; other evals discard them
    again = ExtraEvaluator(evals, task, cfg, tmp_path / "run", torch.device("cpu"))
    assert again.by_epoch == json.loads((tmp_path / "run" / "extra_eval.json").read_text())["epochs"]
    assert ExtraEvaluator(evals[:1], task, cfg, tmp_path / "run", torch.device("cpu")).by_epoch == {}


def test_extra_eval_picks_the_best_epoch_and_falls_back_to_final_weights(tmp_path: Path) -> None:
    task = _tones_task(tmp_path)
    cfg = TrainConfig(lr=0.01, epochs=3, batch_size=8)
    ev = ExtraEvaluator([(ExtraEval("x", {}, 1.0), task)], task, cfg, tmp_path / "r", torch.device("cpu"))
    ev.by_epoch = {"1": {"x": 11.0}, "2": {"x": 22.0}, "3": {"x": 33.0}}
    hist = [{"epoch": e, "partial": False} for e in (1, 2, 3)]
    res = TrainResult(best_epoch=2, best_val=1.0, test_at_best_val=0.0, history=hist, steps_per_second=None,
                      peak_memory_mb=None, n_params=1)
    assert ev.results(res)["x"][0] == 22.0
    ev.model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))  # final weights, evaluated when the epoch is missing
    res.best_epoch, res.history = 4, hist + [{"epoch": 4, "partial": True}]
    value, note = ev.results(res)["x"]
    assert 0.0 <= value <= 100.0 and note.endswith("on the final weights (epoch 4, partial)")
    res.best_epoch = 3
    ev.by_epoch.pop("3")
    assert "not those of the best val epoch 3" in ev.results(res)["x"][1]
    res.best_epoch = None
    assert ev.results(res)["x"] == (None, "no valid validation epoch")


def test_train_table_reports_extra_columns(tmp_path: Path) -> None:
    cfg = TrainTableConfig(**_table_cfg())
    ctx = RunContext("t", "smoke", torch.device("cpu"), 0, tmp_path, tmp_path / "nodata", progress=False)
    out = run_train_table(cfg, ctx)
    cells = {(c.row, c.column): c for c in out.cells}
    assert set(cells) == {("S4D", "1x"), ("S4D", "0.5x"), ("T", "1x")}
    assert 0 <= cells[("S4D", "0.5x")].value <= 100 and "step size x2" in cells[("S4D", "0.5x")].note
    assert (tmp_path / "S4D__1x" / "extra_eval.json").is_file()


# ---------------------------------------------------------------------------------------------- specs


@pytest.mark.parametrize("name", SPECS)
def test_every_cell_of_every_tier_builds(name: str) -> None:
    """Each (row, task) of each tier builds its model for the task's shapes (bad model keys fail here, not on a
    GPU after the data is loaded); every produced cell is listed in expected/."""
    shapes = {"speech_commands": {"raw": (16000, 1, 35), "mfcc": (161, 20, 35)}, "mnist": (784, 1, 10),
              "scifar": (1024, 3, 10), "bidmc": (4000, 2, 1), "tones": None}
    spec = load_spec(ROOT / "reproductions" / f"{name}.yaml")
    listed = {(c["row"], c["column"]) for c in load_expected(ROOT / expected_path(spec.id))["cells"]}
    for tier, ts in spec.tiers.items():
        cfg = ts.config
        for col, t in cfg.tasks.items():
            args = t.get("loader_args", {})
            shape = shapes[t["loader"]]
            if t["loader"] == "speech_commands":
                shape = shape[args.get("features", "raw")]
                shape = shape[:2] + ((10,) if args.get("subset", "sc10") == "sc10" else (35,))
            elif t["loader"] == "tones":
                p = t["prepare"]
                shape = (p["length"], 1, p["n_classes"])
            task = TaskData(name=col, train=[], val=[], test=[], seq_len=shape[0], d_input=shape[1],
                            d_output=shape[2], task_type="regression" if t["loader"] == "bidmc" else "classification")
            for row, m in cfg.models.items():
                if [row, col] in cfg.skip:
                    continue
                assert (row, col) in listed, f"{name} {tier}: cell ({row}, {col}) is not in expected/"
                for ev in parse_extra_evals(t.get("extra_eval"), col):
                    assert (row, ev.column) in listed or [row, ev.column] in cfg.skip
                kw = deep_merge(deep_merge(cfg.model_defaults.get(m["arch"], {}),
                                             t.get("model", {}).get(m["arch"], {})), m.get("model", {}))
                if tier != "smoke":  # big models: build a 1-layer, 8-feature copy of the same configuration
                    kw = {**kw, "n_layers": 1, "d_model": 8}
                build_model(m["arch"], kw, task)


@pytest.mark.parametrize("name", PAPER_DATA_SPECS)
def test_budget_tier_without_the_data_is_not_run(name: str, tmp_path: Path, monkeypatch) -> None:
    """On a machine without the papers' datasets the budget tier ends in NOT-RUN cells naming what is missing
    and how to get it (here on the CPU; the tier itself asks for CUDA)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("DATA_PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(layout, "RUNS_DIR", tmp_path / "runs")
    spec = load_spec(ROOT / "reproductions" / f"{name}.yaml")
    spec.tiers["budget"].device = "cpu"
    with pytest.raises(NotRunnable, match="python -m runners.data.download") as stopped:  # exit 3
        run_mod.run_spec(spec, "budget", results_root=tmp_path / "results", progress=False)
    result = load_result(stopped.value.results_path)  # written before the run stopped
    assert result["cells"] and all(c["value"] is None for c in result["cells"])
    assert all("python -m runners.data.download" in c["note"] for c in result["cells"])
    assert any("NOT-RUN, data missing" in n for n in result["notes"])
    verdicts = compare(load_expected(expected_path(spec.id)), result, "budget")
    assert {v.verdict for v in verdicts} - {"CONTEXT"} == {"NOT-RUN"}  # context: prior work's rows, never run
    assert not list((tmp_path / "runs").rglob("checkpoint.pt"))  # nothing trained


def test_spec_errors_name_the_file_and_key(tmp_path: Path) -> None:
    text = (ROOT / "reproductions" / "resolution-change.yaml").read_text()
    bad = tmp_path / "resolution-change.yaml"  # the file name matches the spec's id
    (tmp_path / "_sequences.yaml").write_text((ROOT / "reproductions" / "_sequences.yaml").read_text())
    bad.write_text(text.replace("rate: 2.0}", "rate: -2.0}", 1))
    with pytest.raises(SpecError, match=r"resolution-change\.yaml: tiers\.smoke.*rate"):
        load_spec(bad)
