"""The command line: console script, --set / --seed / --show-config / --dry-run / --output, per-cell lines,
compare, --log tensorboard, and a table added outside the shipped ones, run end to end."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import TensorDataset

from runners.cli.main import build_parser, main
from runners.core.errors import SpecError
from runners.data.base import TaskData
from runners.data.progress_bar import LineProgress
from runners.report.compare import judge_change
from runners.specs import registry
from runners.specs.overrides import apply_overrides, parse_override, resolved_config
from runners.specs.spec import load_spec, spec_paths
from runners.train import TrainConfig, tb_log, train

ROOT = Path(__file__).resolve().parents[1]
THEOREM6 = ROOT / "reproductions" / "s4d-theorem-6.yaml"


def _latest(root: Path, spec_id: str) -> dict:
    files = sorted((root / spec_id).glob("*.json"))
    assert files, f"no results under {root / spec_id}"
    return json.loads(files[-1].read_text())


# ------------------------------------------------------------------------------------------ console script, help


def test_console_script_is_declared_and_callable() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    scripts = re.search(r"\[project\.scripts\]\n((?:[^\[\n].*\n)+)", text)
    assert scripts and re.search(r'^ssm-repro = "runners\.__main__:main"$', scripts.group(1), re.M)
    assert "librosa" not in text


def test_every_option_of_every_subcommand_has_help() -> None:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) >= {"run", "check", "report", "list", "validate", "compare"}
    for name, sub in subs.choices.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest}: no help text"


def test_run_help_explains_each_flag(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for flag in ("--set KEY=VALUE", "--seed N", "--show-config", "--dry-run", "--output DIR", "--log",
                 "--no-progress", "--tier"):
        assert flag in out


# ------------------------------------------------------------------------------------------ --set


def test_set_overrides_the_tier_only_and_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = apply_overrides(load_spec(THEOREM6), "smoke", ["t_max=4.0", "state_sizes=[16, 64]", "state_sizes.1=32"])
    assert spec.tiers["smoke"].config.t_max == 4.0 and spec.tiers["smoke"].config.state_sizes == [16, 32]
    assert spec.tiers["budget"].config.t_max == 5.0 and spec.overrides == ["t_max=4.0", "state_sizes=[16, 64]",
                                                                           "state_sizes.1=32"]
    assert main(["run", str(THEOREM6), "--set", "t_max=4.0", "--set", "state_sizes=[16]", "--seed", "7",
                 "--output", str(tmp_path), "--no-progress"]) == 0
    result = _latest(tmp_path, "s4d-theorem-6")
    assert result["overrides"] == ["t_max=4.0", "state_sizes=[16]", "seed=7"]
    assert result["config"]["t_max"] == 4.0 and result["seed"] == 7
    assert [c["column"] for c in result["cells"]] == ["N=16"]
    out = capsys.readouterr().out
    assert "[s4d-theorem-6 smoke] N=16: started" in out and re.search(r"N=16: done in \d+\.\d s: .*=", out)


def test_set_reaches_nested_and_default_settings_without_touching_shared_anchors() -> None:
    spec = load_spec(ROOT / "reproductions" / "s4d-table-2.yaml")
    before = json.dumps(resolved_config(spec, "budget"), sort_keys=True)
    row = "Frozen B, Softmax"
    done = apply_overrides(spec, "full", ["train.lr=0.004", "model_defaults.ssm.d_model=256",
                                          f"models.{row}.model.layer.trainable_b=true",
                                          "tasks.sCIFAR.train.grad_clip=1.0"])
    full = done.tiers["full"].config
    assert full.train["lr"] == 0.004 and full.model_defaults["ssm"]["d_model"] == 256
    assert full.models[row]["model"]["layer"]["trainable_b"] is True
    assert full.tasks["sCIFAR"]["train"]["grad_clip"] == 1.0  # a TrainConfig field the spec leaves at its default
    row_lr = apply_overrides(spec, "full", [f"models.{row}.train.lr=0.1"]).tiers["full"].config  # no train: yet
    assert row_lr.cell_train(row, "sCIFAR")["lr"] == 0.1 and row_lr.cell_train("ZOH, Re(A) exp", "sCIFAR") == \
        spec.tiers["full"].config.cell_train("ZOH, Re(A) exp", "sCIFAR")
    # budget's models are the same YAML anchor as full's: unchanged
    assert json.dumps(resolved_config(done, "budget"), sort_keys=True) == before


def test_set_matches_keys_that_hold_dots() -> None:
    spec = load_spec(ROOT / "reproductions" / "s4d-table-2.yaml")
    doc = spec.resolved
    doc["tiers"]["smoke"]["models"]["S4 v1.5"] = {"arch": "ssm"}
    with_dot = load_spec(spec.path, doc=doc)
    done = apply_overrides(with_dot, "smoke", ["models.S4 v1.5.arch=transformer"])
    assert done.tiers["smoke"].config.models["S4 v1.5"]["arch"] == "transformer"


@pytest.mark.parametrize("texts, message", [
    (["t_maxx=4"], "unknown key 't_maxx'; closest known keys: t_max"),
    (["plot_point=4"], "closest known keys: plot_points"),
    (["t_max"], "expected KEY=VALUE"),
    (["=4"], "expected KEY=VALUE"),
    (["t_max=[1,"], "not valid YAML"),
    (["t_max=abc"], "tiers.smoke.t_max: expected float, got 'abc'"),
    (["+t_max=4"], "'t_max' is already set"),
    (["+colour=red"], "unknown key(s) ['colour']"),
    (["state_sizes.7=4"], "unknown key 'state_sizes.7'"),
    (["device=tpu"], "device: 'tpu' not allowed"),
])
def test_bad_set_is_one_line_naming_the_key(texts: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SpecError) as err:
        apply_overrides(load_spec(THEOREM6), "smoke", texts)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert main(["run", str(THEOREM6), "--dry-run", *[w for t in texts for w in ("--set", t)]]) == 2
    assert message in capsys.readouterr().err


def test_parse_override_reads_values_as_yaml() -> None:
    assert parse_override("a.b=0.004").value == 0.004
    assert parse_override("a=[16, 64]").value == [16, 64]
    assert parse_override("a=null").value is None and parse_override("a='4'").value == "4"
    assert parse_override("+a.b=x").add and parse_override("+a.b=x").key == "a.b"


# ------------------------------------------------------------------------------------------ --show-config, --dry-run


@pytest.mark.parametrize("path", spec_paths(ROOT / "reproductions"), ids=lambda p: p.stem)
def test_show_config_and_dry_run_on_every_spec(path: Path, capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    spec = load_spec(path)
    for tier in ("smoke", "budget", "full"):
        assert main(["run", str(path), "--tier", tier, "--show-config"]) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"# {spec.id}, tier {tier}")
        assert yaml.safe_load(text) == resolved_config(spec, tier)
        assert main(["run", str(path), "--tier", tier, "--dry-run", "--output", "nowhere"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{spec.id} [{tier}]: valid") and "ssm-repro run" in out
        if spec.tiers[tier].suite_data is not None:  # the variant on suite-made data
            assert main(["run", str(path), "--tier", tier, "--data", "suite", "--show-config"]) == 0
            assert yaml.safe_load(capsys.readouterr().out) == resolved_config(spec, tier, "suite")
            assert main(["run", str(path), "--tier", tier, "--data", "suite", "--dry-run"]) == 0
            assert "--data suite" in capsys.readouterr().out
    assert not Path("nowhere").exists()


def test_dry_run_lists_cells_and_commands_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["run", str(THEOREM6), "--dry-run", "--set", "t_max=4.0", "--output", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "max error/N=64" in out
    assert "ssm-repro run s4d-theorem-6 --tier smoke --cells 'max error/N=64' --set t_max=4.0" in out
    assert "trains in runs/s4d-theorem-6/smoke-set-" in out  # where the changed configuration runs
    assert not (tmp_path / "r").exists()
    assert main(["run", "s4-table-2", "--tier", "budget", "--dry-run"]) == 0
    assert "NOT-RUN here: this tier needs a CUDA GPU" in capsys.readouterr().out


def test_dry_run_names_each_training_cells_checkpoint_folder(capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder where each selected training cell keeps its checkpoint, as `run` and `restart_cells` use it: the
    tier's folder, a --set folder, or for a row that trains in another spec's run (``train_in``) that spec's."""
    from runners.specs.selection import tier_config
    from runners.execute.run import training_folders
    from runners.specs.spec import work_dir_for
    from runners.specs.spec import load_spec as load

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.chdir(ROOT)

    def folders(*args: str) -> list[str]:
        assert main(["run", *args, "--dry-run"]) == 0
        return [x.removeprefix("  checkpoint folder: ") for x in capsys.readouterr().out.splitlines()
                if x.startswith("  checkpoint folder: ")]

    base = ["--tier", "full", "--data", "suite"]
    assert folders("s4d-table-5", *base, "--cells", "S4D-Inv (suite data)/Pathfinder", "--cells",
                   "S4D-LegS (suite data)/ListOps") == [
        "runs/s4d-table-5/full/S4D-LegS_suite_data__ListOps/", "runs/s4d-table-5/full/S4D-Inv_suite_data__Pathfinder/"]
    changed = folders("s4d-table-5", *base, "--cells", "S4-LegS (suite data)/Pathfinder", "--set",
                      "tasks.Pathfinder.train.epochs=3")
    assert len(changed) == 1 and changed[0].startswith("runs/s4d-table-5/full-set-") and \
        changed[0].endswith("/S4-LegS_suite_data__Pathfinder/")
    assert folders("s4-table-4", *base, "--cells", "S4 (suite data)/Pathfinder") == [
        "runs/s4d-table-5/full/S4-LegS_suite_data__Pathfinder/"]  # S4 Table 4's S4 row trains in S4D Table 5's run
    assert folders("s4d-theorem-6") == []  # not a training table
    spec = load(ROOT / "reproductions" / "s4d-table-6.yaml")
    every = training_folders(spec, "smoke", tier_config(spec, "smoke"))  # no selection: every (row, task) pair
    assert len(every) == 7 and all(f.parent == work_dir_for(spec, "smoke") for f in every)


# ------------------------------------------------------------------------------------------ --output / --results


def test_output_dir_and_results_option(tmp_path: Path, capsys: pytest.CaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "elsewhere"
    # two cells of the grid: --cells says which, and check judges those
    assert main(["run", str(THEOREM6), "--cells", "*/N=16", "--cells", "*/N=64",
                 "--output", str(out), "--no-progress"]) == 0
    assert len(list((out / "s4d-theorem-6").glob("*_smoke.json"))) == 1
    capsys.readouterr()
    monkeypatch.setattr("runners.core.layout.RESULTS_DIR", tmp_path / "empty")
    assert main(["check", "s4d-theorem-6", "--tier", "smoke", "--results", str(out)]) == 0
    assert "PASS 2" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ compare


def _result(values: dict, spec_id: str = "s4-table-2", tier: str = "budget") -> dict:
    return {"spec_id": spec_id, "tier": tier, "finished": "now", "environment": {"device_name": "x"},
            "overrides": [], "cells": [{"row": r, "column": c, "value": v} for (r, c), v in values.items()]}


@pytest.mark.parametrize("a, b, better, status", [
    (10.0, 9.0, "higher", "regressed"),
    (10.0, 9.6, "higher", "within"),
    (10.0, 11.0, "higher", "improved"),
    (10.0, 11.0, "lower", "regressed"),
    (10.0, "X", "lower", "failed now"),
    ("X", 3.0, "lower", "fixed"),
    (10.0, None, "lower", "only in A"),
    (10.0, 1.0, None, "not judged"),
])
def test_judge_change(a, b, better, status) -> None:
    assert judge_change(a, b, better, 0.05)[1] == status


def test_compare_side_by_side_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # expected/s4-table-2.yaml gives each cell's 'better'
    step, ratio = ("S4", "Step ms H=256"), ("Ratio", "Step ms H=256")  # ms: lower is better; ratio: higher
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_result({step: 10.0, ratio: 2.0})))
    b.write_text(json.dumps(_result({step: 10.3, ratio: 2.2})))
    c.write_text(json.dumps(_result({step: 12.0, ratio: 2.0})))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "+3.00%" in out and "+10.00%" in out and "within 1" in out and "improved 1" in out
    assert main(["compare", str(a), str(c)]) == 1
    assert "regressed" in capsys.readouterr().out
    assert main(["compare", str(a), str(c), "--threshold", "0.25"]) == 0
    capsys.readouterr()
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_result({step: 1.0}, spec_id="s4-table-3")))
    assert main(["compare", str(a), str(other)]) == 2
    assert "different specs" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: file not found" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--threshold", "-1"]) == 2


# ------------------------------------------------------------------------------------------ --log tensorboard


def _tiny_task() -> TaskData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x.sum(-1) > 0).long()
    ds = TensorDataset(x, y)
    return TaskData(name="tiny", train=ds, val=ds, test=ds, seq_len=8, d_output=2, d_input=1)


def test_log_tensorboard_without_the_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    assert main(["run", str(THEOREM6), "--log", "tensorboard", "--dry-run"]) == 2
    assert "--log tensorboard needs the tensorboard package" in capsys.readouterr().err
    with pytest.raises(tb_log.LogUnavailable):
        tb_log.EpochLog(Path("."), ("tensorboard",), "classification", next_epoch=1)


def test_epoch_log_writes_each_epoch_beside_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[tuple[str, float, int]] = []

    class Writer:  # the SummaryWriter interface the log uses
        def __init__(self, log_dir: str, *, purge_step: int) -> None:
            assert Path(log_dir) == tmp_path and purge_step == 1

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            written.append((tag, value, step))

        def flush(self) -> None: ...

        def close(self) -> None: ...

    monkeypatch.setattr(tb_log, "summary_writer_class", lambda: Writer)
    cfg = TrainConfig(lr=0.01, epochs=2, batch_size=16, max_steps_per_epoch=2)
    train(lambda: nn.Sequential(nn.Flatten(), nn.Linear(8, 2)), _tiny_task(), cfg, tmp_path, torch.device("cpu"),
          progress=False, logs=("tensorboard",))
    history = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {(t, s) for t, _, s in written} == {(t, e) for e in (1, 2) for t in (
        "loss/train", "loss/val", "loss/test", "acc/train", "acc/val", "acc/test", "lr", "epoch_seconds")}
    assert ("acc/val", history[1]["val_metric"], 2) in written


def test_tensorboard_event_files_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    cfg = TrainConfig(lr=0.01, epochs=1, batch_size=16, max_steps_per_epoch=1)
    train(lambda: nn.Sequential(nn.Flatten(), nn.Linear(8, 2)), _tiny_task(), cfg, tmp_path, torch.device("cpu"),
          progress=False, logs=("tensorboard",))
    assert list(tmp_path.glob("events.out.tfevents.*")) and (tmp_path / "metrics.jsonl").exists()


# ------------------------------------------------------------------------------------------ a table of one's own


def _readme_spec() -> dict:
    """The example spec of README's "Add a table" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Add a table", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return yaml.safe_load("\n".join(line[3:] if line.startswith("   ") else line for line in block.splitlines()))


def test_add_a_table_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture) -> None:
    """README's recipe in an empty directory: a spec without make:, its expected file, then run / check / report."""
    monkeypatch.chdir(tmp_path)
    spec = _readme_spec()
    assert "make" not in spec
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "expected").mkdir()
    (tmp_path / "reproductions" / "my_theorem6.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    columns = ["N=16", "N=64", "N=256", "N=1024"]
    cell = {"row": "max error", "paper": 0.0, "std": None, "unit": "rel", "better": "lower",
            "source": "S4D Theorem 6 (Appendix A.1)", "note": "exact statement; 1e-8 allows expm round-off"}
    checks = {"smoke": {"bound": {"max": 1e-8}}, "budget": {"bound": {"max": 1e-8}}, "full": {"bound": {"max": 1e-8}}}
    expected = {"table": spec["id"], "paper": "s4d", "title": spec["title"], "source": "S4D paper, Theorem 6",
                "rows": ["max error"], "columns": columns,
                "cells": [{**cell, "column": c, "checks": {
                    **checks, **({} if c in ("N=16", "N=64") else {"smoke": {"not_run": "not in the smoke tier"}}),
                    **({} if c != "N=1024" else {"budget": {"not_run": "not in the budget tier"}})}}
                    for c in columns]}
    (tmp_path / "expected" / f"{spec['id']}.yaml").write_text(yaml.safe_dump(expected, sort_keys=False))

    assert main(["validate"]) == 0
    assert main(["run", spec["id"], "--dry-run"]) == 0
    assert "max error/N=64" in capsys.readouterr().out
    assert main(["run", spec["id"], "--no-progress"]) == 0
    assert main(["check", spec["id"], "--tier", "smoke"]) == 0
    assert "PASS 2" in capsys.readouterr().out
    assert main(["list"]) == 0
    assert main(["report"]) == 0  # a researcher's run and report: the local store
    report = (tmp_path / "local" / "tables" / f"{spec['id']}.md").read_text()
    assert "PASS" in report and "ssm-repro run" in report  # the command to run its other tiers
    assert "(local store)" in report and not (tmp_path / "results").exists() and not (tmp_path / "tables").exists()
    # the same spec anywhere on disk, run by path, with an override shown in the report
    elsewhere = tmp_path / "mine" / "theorem.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(yaml.safe_dump(spec))
    assert main(["run", str(elsewhere), "--set", "t_max=6.0", "--no-progress"]) == 0
    assert main(["report"]) == 0
    report = (tmp_path / "local" / "tables" / f"{spec['id']}.md").read_text()
    assert "Settings changed from the spec (`--set`): `t_max=6.0`" in report


def test_a_spec_without_make_needs_none_but_a_bad_make_is_named(tmp_path: Path) -> None:
    spec = _readme_spec()
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**spec, "make": ""}))
    with pytest.raises(SpecError, match="key 'make' must be a non-empty string"):
        load_spec(path)
    path.write_text(yaml.safe_dump(spec))
    assert load_spec(path).make is None


def test_runner_cell_lines_use_the_context(capsys: pytest.CaptureFixture) -> None:
    ctx = registry.RunContext(spec_id="x", tier="smoke", device=torch.device("cpu"), seed=0, work_dir=Path("."),
                              data_dir=Path("."), progress=False)
    cells: list[registry.Cell] = []
    ctx.cell_started("S4 / ListOps", cells)
    cells.append(registry.Cell("S4", "ListOps", 37.25))
    ctx.cell_finished("S4 / ListOps", cells)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[x smoke] S4 / ListOps: started"
    assert re.fullmatch(r"\[x smoke\] S4 / ListOps: done in \d+\.\d s: 37\.25", out[1])


def test_long_work_without_a_terminal_prints_progress_and_an_estimate(capsys: pytest.CaptureFixture) -> None:
    with LineProgress(200, "listops", "expr", quiet_seconds=0.0) as bar:
        for _ in range(200):
            bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[0].startswith("listops: 10% (20/200 expr) in ")
    assert "left" in lines[0] and lines[-1].startswith("listops: 100% (200/200 expr)") and "left" not in lines[-1]
    with LineProgress(200, "short", "expr") as bar:  # done within the quiet seconds: silent
        bar.update(200)
    assert capsys.readouterr().err == ""
    with LineProgress(200, "batches", "img", quiet_seconds=0.0) as bar:  # a jump over several tenths: one line
        bar.update(50)
        bar.update(150)
    assert [line.split(" in ")[0] for line in capsys.readouterr().err.splitlines()] == [
        "batches: 25% (50/200 img)", "batches: 100% (200/200 img)"]


def test_one_cell_with_one_setting(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The command of the issue: only the selected cell runs, with the override recorded."""
    assert main(["run", "s4d-theorem-6", "--tier", "smoke", "--cells", "*/N=64*", "--set", "t_max=4.0",
                 "--output", str(tmp_path), "--no-progress"]) == 0
    result = _latest(tmp_path, "s4d-theorem-6")
    assert result["selected_cells"] == [["max error", "N=64"]] and result["overrides"] == ["t_max=4.0"]
    assert [c["column"] for c in result["cells"]] == ["N=64"] and result["config"]["t_max"] == 4.0
    out = capsys.readouterr().out
    assert "N=64: started" in out and "N=16" not in out and "N=256" not in out  # the others are not computed
    assert main(["run", "s4d-theorem-6", "--cells", "*/N=64*", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 of 4 cells selected" in out and "N=16" not in out


def test_gpu_children_get_the_parents_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from runners.cli.run import settings_args
    from runners.execute.scheduler import child_launcher

    args = build_parser().parse_args(["run", "x", "--set", "train.lr=0.004", "--seed", "3", "--log", "tensorboard"])
    extra = settings_args(args)
    assert extra == ["--set", "train.lr=0.004", "--seed", "3", "--log", "tensorboard"]
    seen = {}
    monkeypatch.setattr("subprocess.Popen", lambda cmd, **kw: seen.setdefault("cmd", cmd))
    child_launcher(Path("spec.yaml"), "full", "release", [], extra_args=extra)(("S4", "ListOps"), "0",
                                                                              tmp_path / "log", None)
    assert seen["cmd"][-6:] == extra


def test_compare_benchmark_records(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The kernel / layer benchmarks' files: records named by their descriptive fields, times lower-is-better."""
    def bench(ms: float, mib: float) -> dict:
        return {"spec": "bench-layers", "created": "now", "environment": {}, "notes": ["n"],
                "rows": [{"mode": "s4", "backend": "triton", "L": 4096, "official_ms": 9.0, "target_ms": 3.0,
                          "ms": ms, "peak_mib": mib, "meets_target": ms < 3.0}]}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(bench(2.0, 900.0)))
    b.write_text(json.dumps(bench(2.5, 880.0)))
    assert main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"rows: mode=s4 backend=triton L=4096 +ms +2 +2\.5 +\+25\.00% +lower +regressed", out)
    assert re.search(r"peak_mib .*-2\.22% +lower +within", out) and "official_ms" not in out
    assert main(["compare", str(b), str(a)]) == 0
