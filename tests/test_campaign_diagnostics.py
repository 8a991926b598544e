"""The long-range campaign's CPU diagnostics: benchmarks/diagnostics/pathfinder_checkpoint_health.py on a small
Pathfinder checkpoint (eval vs train-mode accuracy, the norms' parameters, BatchNorm running vs batch statistics),
benchmarks/diagnostics/learning_curves.py and benchmarks/diagnostics/validation_dips.py on metrics.jsonl files, and
benchmarks/diagnostics/step_curves.py on step logs (seconds)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

from ssm_core import SequenceModel

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str):
    """A diagnostic of benchmarks/diagnostics/: the module benchmarks.diagnostics.<name>."""
    return importlib.import_module(f"benchmarks.diagnostics.{name}")


def _checkpoint(path: Path, task_name: str = "pathfinder32", values: str | None = None,
                seq_len: int = 1024) -> None:
    """A checkpoint as training writes it, of a small model on Pathfinder-32 (untrained weights), its first
    BatchNorm's running statistics set far from any input's."""
    config = {"arch": "ssm", "pool": "mean", "d_model": 8, "n_layers": 1, "norm": "batch", "prenorm": True,
              "layer": {"d_state": 4, "mode": "s4d", "init": "lin", "bidirectional": True, "output": "glu"}}
    model = SequenceModel(d_input=1, d_output=2, **{k: v for k, v in config.items() if k != "arch"})
    model.blocks[0].norm.running_mean.fill_(100.0)
    torch.save({"format": 1, "config": {"epochs": 3}, "model_config": config, "model": model.state_dict(),
                "task": {"name": task_name, "seq_len": seq_len, "d_output": 2,
                         **({"values": values} if values is not None else {})}, "epoch": 1, "step": 5,
                "global_step": 15, "partial": {"val_metric": 50.0, "train_metric": 61.0}}, path)


def test_checkpoint_health_reports_both_modes_and_the_running_statistics(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "checkpoint.pt"
    _checkpoint(path)
    assert _script("pathfinder_checkpoint_health").main([str(path), "--n", "16", "--stats-n", "16", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2 (as metrics.jsonl counts) at step 5" in out and "logged at this point: val 50.0" in out
    assert "eval  mode: accuracy" in out and "train mode: accuracy" in out
    assert "blocks.0.norm.weight" in out and "encoder.weight" in out
    first = next(line for line in out.splitlines() if line.strip().startswith("blocks.0.norm ") and "running" in line)
    shift = float(first.rsplit("max", 1)[1])  # |running mean - mean| / std: the set offset shows, far above 1
    assert shift > 10
    assert "eval mode, as stored: accuracy" in out
    assert "eval mode, blocks.0.norm running mean from the images: accuracy" in out
    assert "eval mode, every BatchNorm's running mean and variance from the images: accuracy" in out


@pytest.mark.parametrize("decay_1d", [False, True])
def test_checkpoint_health_reads_adams_state_by_parameter(tmp_path: Path, decay_1d: bool) -> None:
    """The optimizer is rebuilt as the loop builds it (its groups depend on weight_decay_1d) and given the saved
    state: the encoder bias's line is computed from that parameter's own moments; a state of another model is refused
    with the checkpoint's path."""
    from ssm_core.optim import build_optimizer
    script = _script("pathfinder_checkpoint_health")
    torch.manual_seed(0)
    model = SequenceModel(d_input=1, d_output=2, d_model=8, n_layers=1, norm="batch", prenorm=True,
                          layer={"d_state": 4, "mode": "s4d", "bidirectional": True, "output": "glu"})
    config = {"optimizer": "adamw", "lr": 0.004, "weight_decay": 0.03, "betas": [0.9, 0.999],
              "weight_decay_1d": decay_1d}
    optimizer = build_optimizer(model, "adamw", 0.004, 0.03, (0.9, 0.999), decay_1d=decay_1d)
    for seed in range(3):
        x = torch.rand(4, 16, 1, generator=torch.Generator().manual_seed(seed))
        torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 0, 1])).backward()
        optimizer.step()
        optimizer.zero_grad()
    state = optimizer.state[model.encoder.bias]
    size = state["exp_avg_sq"].double().sqrt()
    expected = (float(size.pow(2).mean().sqrt()), float((state["exp_avg"].double().abs() / (size + 1e-8)).mean()))
    ckpt = {"config": config, "optimizer": optimizer.state_dict()}
    lines = script.optimizer_lines(model, ckpt, tmp_path / "c.pt")
    bias_line = next(line for line in lines if line.strip().startswith("encoder.bias"))
    assert f"{expected[0]:.3g}" in bias_line and f"{expected[1]:.3g}" in bias_line
    assert any("median" in line for line in lines)
    no_state = script.optimizer_lines(model, {"config": config}, tmp_path / "c.pt")
    assert no_state == ["  (no Adam state in this checkpoint)"]
    other = SequenceModel(d_input=1, d_output=2, d_model=8, n_layers=2, norm="batch", prenorm=True,
                          layer={"d_state": 4, "mode": "s4d", "bidirectional": True, "output": "glu"})
    with pytest.raises(script.UsageError, match="c.pt: its optimizer state does not fit"):
        script.optimizer_lines(other, ckpt, tmp_path / "c.pt")


@pytest.mark.parametrize("n_layers, seed", [(1, 0), (2, 1), (3, 2)])
def test_running_statistics_from_the_inputs_make_eval_mode_train_mode(n_layers: int, seed: int) -> None:
    """Every BatchNorm given the statistics of the inputs it sees in train mode on the very batch scored: the
    eval-mode output is the train-mode output (float64), and input_statistics leaves the model as it found it."""
    script = _script("pathfinder_checkpoint_health")
    torch.manual_seed(seed)
    model = SequenceModel(d_input=1, d_output=2, d_model=8, n_layers=n_layers, norm="batch", prenorm=True,
                          layer={"d_state": 4, "mode": "s4d", "bidirectional": True, "output": "glu"}).double()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-3, 3)
    x = torch.rand(5, 32, 1, dtype=torch.float64) * 2 - 1  # (B, L, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = script.input_statistics(model, x, batch=5)
    assert not model.training and all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        model.train()
        trained = model(x)
        model.load_state_dict(before)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.copy_(stats[name][0])
                m.running_var.copy_(stats[name][1])
        model.eval()
        evaluated = model(x)
    assert torch.allclose(evaluated, trained, rtol=0, atol=1e-10)


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such checkpoint file"),
    (lambda p: p.write_bytes(b"not a checkpoint"), "cannot be read as a checkpoint"),
    (lambda p: _checkpoint(p, task_name="listops"), "not a Pathfinder / Path-X training checkpoint"),
    (lambda p: _checkpoint(p, values="x / 127 in [0, 2]"), "its task's pixels are 'x / 127 in [0, 2]'; allowed:"),
])
def test_checkpoint_health_refuses_what_it_cannot_diagnose(tmp_path: Path, capsys: pytest.CaptureFixture, make,
                                                           message: str) -> None:
    path = tmp_path / "checkpoint.pt"
    make(path)
    assert _script("pathfinder_checkpoint_health").main([str(path), "--n", "8"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("values, flag, shown", [
    ("x / 255 in [0, 1]", [], "pixels x / 255 in [0, 1]"),
    ("(x - 127.5) / 127.5 in [-1, 1]", [], "pixels (x - 127.5) / 127.5 in [-1, 1]"),
    ("(x - 127.5) / 127.5 in [-1, 1]", ["--normalize"], "pixels (x - 127.5) / 127.5 in [-1, 1]"),
    (None, [], "pixels x / 255 in [0, 1]"),  # written before checkpoints recorded it: the flag decides
    (None, ["--normalize"], "pixels (x - 127.5) / 127.5 in [-1, 1]"),
])
def test_checkpoint_health_scores_on_the_scaling_the_checkpoint_trained_on(tmp_path: Path, capsys, values, flag,
                                                                           shown: str) -> None:
    path = tmp_path / "checkpoint.pt"
    _checkpoint(path, values=values)
    assert _script("pathfinder_checkpoint_health").main([str(path), "--n", "8", "--stats-n", "8", *flag]) == 0
    assert shown in capsys.readouterr().out


def test_checkpoint_health_takes_a_path_x_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Path-X's task is named 'pathx' (Pathfinder at 128 x 128): its checkpoint is scored on 128-px images."""
    path = tmp_path / "checkpoint.pt"
    _checkpoint(path, task_name="pathx", values="(x - 127.5) / 127.5 in [-1, 1]", seq_len=128 * 128)
    assert _script("pathfinder_checkpoint_health").main([str(path), "--n", "2", "--stats-n", "2", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "pathx, epoch 2" in out and "eval mode, as stored: accuracy" in out


def test_checkpoint_health_refuses_a_scaling_the_checkpoint_contradicts(tmp_path: Path, capsys) -> None:
    path = tmp_path / "checkpoint.pt"
    _checkpoint(path, values="x / 255 in [0, 1]")
    assert _script("pathfinder_checkpoint_health").main([str(path), "--n", "8", "--normalize"]) == 2
    assert "would score it on inputs it never saw" in capsys.readouterr().err


def _metrics(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_learning_curves_draws_cells_in_progress(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = _script("learning_curves")
    epochs = [{"epoch": e, "train_loss": 0.7 - 0.1 * e, "val_metric": 50.0 + 10 * e} for e in (1, 2)]
    cut = {"epoch": 3, "train_loss": 0.4, "val_metric": 49.0, "partial": True}
    metrics = _metrics(tmp_path / "a.jsonl", [*epochs[:1], {**cut, "epoch": 2}, *epochs[1:], cut])
    assert [h["epoch"] for h in script.read_history(metrics)] == [1, 2]  # no cut epoch, mid-file or last
    assert [h["val_metric"] for h in script.read_history(metrics)] == [60.0, 70.0]
    out = tmp_path / "curves.png"
    assert script.main([f"{metrics}=s4d-table-5:S4D-Lin (suite data) / Pathfinder", "--out", str(out)]) == 0
    assert out.stat().st_size > 0


@pytest.mark.parametrize("entry, message", [
    ("just-a-path.jsonl", "expected METRICS=SPEC:ROW / TASK"),
    ("{missing}=s4d-table-5:S4D-Lin (suite data) / Pathfinder", "no such metrics file"),
    ("{bad}=s4d-table-5:S4D-Lin (suite data) / Pathfinder", "not a metrics.jsonl"),
    ("{good}=no-such-spec:A / B", "has no readable expected file"),
    ("{good}=s4d-table-5:S4D-Lin (suite data) / Pathfinder| ", "expected METRICS=SPEC:ROW / TASK"),
])
def test_learning_curves_bad_entries_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, entry: str,
                                                  message: str) -> None:
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    _metrics(tmp_path / "good.jsonl", [{"epoch": 1, "train_loss": 0.6, "val_metric": 55.0}])
    entry = entry.format(missing=tmp_path / "none.jsonl", bad=tmp_path / "bad.jsonl", good=tmp_path / "good.jsonl")
    assert _script("learning_curves").main([entry, "--out", str(tmp_path / "x.png")]) == 2
    assert message in capsys.readouterr().err


def test_learning_curves_labels_runs_of_one_cell_against_its_paper_value(tmp_path: Path, monkeypatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    script = _script("learning_curves")
    drawn = {}
    monkeypatch.setitem(script.PLOTS, "learning_curves", lambda result, out, expected: drawn.update(
        series=result["series"], cells=expected["cells"]))
    metrics = _metrics(tmp_path / "a.jsonl", [{"epoch": 1, "train_loss": 0.6, "val_metric": 55.0}])
    cell = "s4d-table-5:S4-LegS (suite data) / Pathfinder"
    assert script.main([f"{metrics}={cell}|float32", f"{metrics}={cell}|bf16", "--out", str(tmp_path / "c.png")]) == 0
    assert set(drawn["series"]) == {"S4-LegS (suite data), float32 / Pathfinder",
                                    "S4-LegS (suite data), bf16 / Pathfinder"}
    paper = {(c["row"], c["column"]): c.get("paper") for c in drawn["cells"]}
    assert paper[("S4-LegS (suite data), float32", "Pathfinder")] == paper[("S4-LegS (suite data)", "Pathfinder")]
    assert paper[("S4-LegS (suite data), bf16", "Pathfinder")] == 94.20  # S4D Table 5, S4-LegS row, Pathfinder
    pathx = "s4d-table-6:S4D (suite data) / Path-X"  # a transposed table: the row is the expected cell's column
    assert script.main([f"{metrics}={pathx}|x/255", "--out", str(tmp_path / "p.png")]) == 0
    paper = {(c["row"], c["column"]): c.get("paper") for c in drawn["cells"]}
    assert paper[("Path-X", "S4D (suite data), x/255")] == 92.12  # S4D Table 6, Path-X, S4D column
    assert script.main([f"{metrics}={cell}|bf16", f"{metrics}={cell}|bf16", "--out", str(tmp_path / "d.png")]) == 2
    assert "a second run named" in capsys.readouterr().err


def test_learning_curves_of_a_runs_folder_label_each_configuration(tmp_path: Path, monkeypatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    script = _script("learning_curves")
    drawn = {}
    monkeypatch.setitem(script.PLOTS, "learning_curves", lambda result, out, expected: drawn.update(
        series=result["series"]))
    epoch = [{"epoch": 1, "train_loss": 0.6, "val_metric": 55.0}]
    runs = tmp_path / "runs"
    for folder in ("full", "full-set-0123456789ab", "full-set-ba9876543210"):
        cell_dir = runs / "s4d-table-5" / folder / "S4-LegS_suite_data__Pathfinder"
        cell_dir.mkdir(parents=True)
        _metrics(cell_dir / "metrics.jsonl", epoch)
    (runs / "s4d-table-5" / "full-set-0123456789ab" / "overrides.json").write_text(
        json.dumps({"set": ["tasks.Pathfinder.train.amp=none", "seed=1"]}))
    (runs / "s4d-table-5" / "full" / "No_such_cell__Pathfinder").mkdir()  # a cell the spec does not name: left out
    _metrics(runs / "s4d-table-5" / "full" / "No_such_cell__Pathfinder" / "metrics.jsonl", epoch)
    assert script.main(["--runs", str(runs), "--out", str(tmp_path / "r.png")]) == 0
    assert set(drawn["series"]) == {"S4-LegS (suite data) / Pathfinder",
                                    "S4-LegS (suite data), train.amp=none, seed=1 / Pathfinder",
                                    "S4-LegS (suite data), full-set-ba9876543210 / Pathfinder"}  # not recorded
    assert script.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "n.png")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert script.main(["--runs", str(tmp_path / "empty"), "--out", str(tmp_path / "e.png")]) == 2
    assert "no <spec>/<folder>/<cell>/metrics.jsonl" in capsys.readouterr().err


def test_autocast_agreement_reports_the_output_and_the_gradients(capsys: pytest.CaptureFixture) -> None:
    script = _script("autocast_agreement")
    assert script.main(["--rows", "S4D-Lin (suite data)", "--batch", "2", "--length", "64", "--worst", "2"]) == 0
    out = capsys.readouterr().out
    rel = float(out.split("output rel. error ")[1].split(";")[0])
    assert 0 < rel < 0.1  # bf16 moves the output, by rounding only
    assert "median over 66 parameters" in out and len([ln for ln in out.splitlines() if "gradient norm" in ln]) == 2
    assert script.main(["--rows", "No Such Row"]) == 2
    assert "not a training cell" in capsys.readouterr().err


def test_step_curves_draws_each_runs_step_log(tmp_path, capsys) -> None:
    """benchmarks/diagnostics/step_curves.py on the steps.jsonl a short training writes; its errors name what is
    wrong."""
    from runners.train import TrainConfig, train
    from test_train import CPU, PoolClassifier, majority_task

    runs = tmp_path / "runs"
    cfg = TrainConfig(lr=0.05, epochs=2, batch_size=32, log_every_steps=2)
    train(lambda: PoolClassifier(), majority_task(), cfg, runs / "spec" / "full" / "A__Task", CPU, progress=False)
    main = _script("step_curves").main
    assert main(["--runs", str(runs), "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["--runs", str(runs), "--out", str(tmp_path / "t.png"), "--from-epoch", "3"]) == 2
    assert "no <spec>/<folder>/<cell>/steps.jsonl with windows from epoch 3" in capsys.readouterr().err
    assert main(["--runs", str(runs), "--out", str(tmp_path / "t.png"), "--from-epoch", "0"]) == 2
    assert "--from-epoch 0" in capsys.readouterr().err
    assert main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "t.png")]) == 2
    assert "no such folder" in capsys.readouterr().err
    log = runs / "spec" / "full" / "A__Task" / "steps.jsonl"
    log.write_text(log.read_text() + '{"step": 99}\n')
    assert main(["--runs", str(runs), "--out", str(tmp_path / "t.png")]) == 2
    assert f"{log}:9: a steps.jsonl line needs step, epoch, steps and train_loss" in capsys.readouterr().err
    log.write_text("not json\n")
    assert main(["--runs", str(runs), "--out", str(tmp_path / "t.png")]) == 2
    assert f"{log}:1: not a JSON object" in capsys.readouterr().err
    assert not (tmp_path / "t.png").exists()


def _dipping_run(n: int = 40, dips: dict[int, float] | None = None) -> list[dict]:
    """A run whose validation rises by 0.5 a point per epoch, less ``dips`` at their epochs, with a cosine learning
    rate from 4e-3 to about 0 over the ``n`` epochs."""
    import math
    dips = dips or {}
    return [{"epoch": e, "train_loss": 0.5, "val_metric": 70.0 + 0.5 * e - dips.get(e, 0.0),
             "lr": 4e-3 * 0.5 * (1 + math.cos(math.pi * (e - 1) / n))} for e in range(1, n + 1)]


def test_validation_dips_counts_each_dip_in_its_learning_rate_band() -> None:
    script = _script("validation_dips")
    assert all(d == 0.0 for _, _, d in script.drops(_dipping_run()))  # a steady rise: no drop anywhere
    rows = script.dip_rows("run", _dipping_run(dips={6: 8.0, 12: 3.0, 25: 2.5, 31: 1.0}), [2.0, 5.0])
    by_band = {r["lr / peak"]: r for r in rows}
    assert list(by_band) == ["1-0.75", "0.75-0.5", "0.5-0.25", "0.25-0"]
    assert sum(r["judged"] for r in rows) == 40 - 2 * script.NEIGHBOURS  # three neighbours on each side
    early = by_band["1-0.75"]  # epochs 4-14 (lr > 0.75 of its peak up to epoch 14 of 40)
    assert early["epochs"] == "4-14" and early["dips > 2"] == 2 and early["dips > 5"] == 1
    assert early["worst (epoch)"] == "8.0 (6)"
    assert by_band["0.5-0.25"]["dips > 2"] == 1 and by_band["0.5-0.25"]["dips > 5"] == 0
    assert by_band["0.25-0"]["dips > 2"] == 0  # a 1-point drop is not a dip at 2
    assert by_band["0.75-0.5"]["dips > 2"] == 0


def test_validation_dips_of_a_runs_folder_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = _script("validation_dips")
    cell_dir = tmp_path / "runs" / "s4d-table-5" / "full" / "S4-LegS_suite_data__Pathfinder"
    cell_dir.mkdir(parents=True)
    _metrics(cell_dir / "metrics.jsonl", _dipping_run(dips={20: 6.0}))
    out = tmp_path / "dips.json"
    assert script.main(["--runs", str(tmp_path / "runs"), "--below", "3", "--output", str(out)]) == 0
    assert "S4-LegS (suite data) / Pathfinder" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert sum(r["dips > 3"] for r in rows) == 1 and {r["run"] for r in rows} == {"S4-LegS (suite data) / Pathfinder"}
    assert script.main(["--runs", str(tmp_path / "runs"), "--below", "0"]) == 2
    assert "--below 0: expected thresholds > 0" in capsys.readouterr().err
    assert script.main(["--runs", str(tmp_path / "runs"), "--neighbours", "0"]) == 2
    assert "--neighbours 0" in capsys.readouterr().err
    no_lr = _metrics(tmp_path / "old.jsonl", [{"epoch": 1, "train_loss": 0.6, "val_metric": 55.0}])
    assert script.main([f"{no_lr}=s4d-table-5:S4-LegS (suite data) / Pathfinder"]) == 2
    assert f"{no_lr}: epoch 1 has no learning rate ('lr')" in capsys.readouterr().err
    no_val = _metrics(tmp_path / "odd.jsonl", [{"epoch": 1, "train_loss": 0.6, "lr": 0.1, "val_metric": None}])
    assert script.main([f"{no_val}=s4d-table-5:S4-LegS (suite data) / Pathfinder"]) == 2
    assert f"{no_val}: epoch 1 has no validation metric ('val_metric')" in capsys.readouterr().err


def _window(step: int, epoch: int, loss: float = 0.5, norm: float = 2.0, steps: int = 10) -> dict:
    return {"step": step, "epoch": epoch, "steps": steps, "train_loss": loss, "grad_norm_max": norm}


def test_step_curves_tables_the_windows_since_a_revision(tmp_path, capsys) -> None:
    """The summary table counts the windows drawn; --since REV keeps those after the revision's last window (a run
    the revision lacks whole), and names a revision git cannot read."""
    import subprocess
    main = _script("step_curves").main
    repo = tmp_path / "repo"
    cell = repo / "runs" / "spec" / "full" / "A__Task"
    cell.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    old = [_window(10 * i, 1 + (i - 1) // 3) for i in range(1, 7)]  # epochs 1-2, 30 steps each
    (cell / "steps.jsonl").write_text("".join(json.dumps(w) + "\n" for w in old))
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "before"], cwd=repo, check=True)
    new = [_window(70, 3, 0.4, 3.0), _window(80, 3, 0.3, 30.0), _window(90, 3, 0.2, float("nan")),
           _window(100, 4, 0.1, 2.5)]
    (cell / "steps.jsonl").write_text("".join(json.dumps(w) + "\n" for w in old + new))
    other = repo / "runs" / "spec" / "full" / "B__Task"  # not in the revision: drawn whole
    other.mkdir()
    (other / "steps.jsonl").write_text(json.dumps(_window(5, 1, steps=5)) + "\n")
    out = tmp_path / "since.png"
    assert main(["--runs", str(repo / "runs"), "--out", str(out), "--since", "HEAD"]) == 0
    table = capsys.readouterr().out
    row_a = next(line for line in table.splitlines() if "A__Task" in line)
    cells = [c.strip() for c in row_a.strip("|").split("|")]
    # windows, steps 60-100, 40 steps / 30 per epoch, loss 0.4 -> 0.1, median of 3, 30, 2.5 = 3, the largest 30 in
    # epoch 3, one window above 9, one not finite
    assert cells[1:] == ["4", "60-100", "1.3", "0.400 -> 0.100", "3", "30.0 (3)", "1", "1"]
    assert "B__Task" in table and out.read_bytes()[:4] == b"\x89PNG"
    assert main(["--runs", str(repo / "runs"), "--out", str(out), "--since", "no-such-rev"]) == 2
    assert "--since no-such-rev: not a git revision" in capsys.readouterr().err


def test_step_curves_reads_the_loss_of_full_windows(tmp_path, capsys) -> None:
    """A window cut short (a resume's first, a deadline's last) holds a few steps' loss: the table's first and last
    loss come from the first and last windows of the log's full size; everything else counts every window."""
    cell = tmp_path / "runs" / "spec" / "full" / "A__Task"
    cell.mkdir(parents=True)
    windows = [_window(4, 1, 0.9, steps=4), _window(14, 1, 0.6), _window(24, 1, 0.5), _window(34, 2, 0.4),
               _window(44, 2, 0.3), _window(45, 2, 0.01, 7.0, steps=1)]
    (cell / "steps.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    assert _script("step_curves").main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "s.png")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "A__Task" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["6", "0-45", "-", "0.600 -> 0.300", "2", "7.0 (2)", "1", "0"]


def test_one_node_float32_rounding_tabulates_every_gradient(script, capsys) -> None:
    """benchmarks/diagnostics/one_node_float32_rounding.py on two seeds: a row per gradient (the input, D and the
    S4 kernel's parameters), the two float32 outputs equal, and a bad count refused."""
    rounding = script("benchmarks/diagnostics/one_node_float32_rounding.py")
    assert rounding.main(["--seeds", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("input", "d", "kernel.log_dt", "kernel.a_real", "kernel.a_imag", "kernel.p", "kernel.b", "kernel.c"):
        assert f"| {name} " in out
    assert "outputs, one vs two node (max): 0.00e+00" in out
    with pytest.raises(SystemExit):
        rounding.main(["--seeds", "0"])
    assert "--seeds 0 and --channels 2: expected integers >= 1" in capsys.readouterr().err
