"""Cell selection (--cells), the suite-data variant (--data suite), deadlines (--stop-after-minutes) and the
multi-GPU cell scheduler (--gpus), on CPU: fake cells for the scheduler, a tiny training table end to end."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from runners.cli.main import main
from runners.core import layout
from runners.core.errors import EXIT_PAUSED, Paused, SpecError
from runners.execute import run as run_mod
from runners.execute.scheduler import parse_gpus, schedule_units
from runners.specs.expected import expected_path, load_expected
from runners.specs.selection import glob_escape, select_cells
from runners.specs.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
TRAIN = {"lr": 0.01, "epochs": 2, "batch_size": 8}
TIER = {"device": "cpu",
        "tasks": {"Text": {"loader": "text", "loader_args": {"max_len": 48}}},
        "models": {"A": {"arch": "ssm"}, "B": {"arch": "ssm", "model": {"layer": {"mode": "s4d", "init": "lin"}}}},
        "model_defaults": {"ssm": {"d_model": 8, "n_layers": 1, "pool": "mean", "layer": {"d_state": 4}}},
        "train": TRAIN,
        "suite_data": {"rows": {"A": "A (suite data)", "B": "B (suite data)"}, "note": "toy",
                       "tasks": {"Text": {"prepare": {"preparer": "imdb_standin", "n_per_class": 12,
                                                      "length_words": 8, "seed": 0}}}}}


def _cell(row: str, checks: dict) -> dict:
    return {"row": row, "column": "Text", "paper": None, "std": None, "unit": "% acc", "better": "higher",
            "source": "toy", "note": "toy cell", "checks": checks}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one tiny training table whose tiers have a suite-data variant."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("DATA_PATH", str(tmp_path / "no-data"))
    monkeypatch.setattr(layout, "RUNS_DIR", Path("runs"))
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "expected").mkdir()
    spec = {"id": "toytrain", "paper": "s4", "table": "Table 0", "title": "toy training table", "groups": ["lra"],
            "runner": "train.table", "make": "toytrain", "tiers": {t: TIER for t in ("smoke", "budget", "full")}}
    (tmp_path / "reproductions" / "toytrain.yaml").write_text(yaml.safe_dump(spec))
    bound = {t: {"bound": {"min": 0}} for t in ("smoke", "budget", "full")}
    expected = {"table": "toytrain", "paper": "s4", "title": "toy", "source": "nowhere",
                "rows": ["A", "B", "A (suite data)", "B (suite data)"], "columns": ["Text"],
                "cells": [_cell(r, bound) for r in ("A", "B", "A (suite data)", "B (suite data)")]}
    (tmp_path / "expected" / "toytrain.yaml").write_text(yaml.safe_dump(expected))
    return tmp_path


def _results(project: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((project / "local" / "results" / "toytrain").glob("*.json"))]


# ---- selection and the suite-data variant


def test_suite_variant_renames_rows_and_overlays_tasks(project: Path) -> None:
    spec = load_spec("reproductions/toytrain.yaml")
    variant = spec.tiers["smoke"].suite_data
    assert list(variant.config.models) == ["A (suite data)", "B (suite data)"]
    assert variant.config.tasks["Text"]["prepare"]["preparer"] == "imdb_standin"
    assert "prepare" not in spec.tiers["smoke"].config.tasks["Text"]  # the release configuration is unchanged
    expected = load_expected(expected_path("toytrain"))
    assert select_cells(spec, "smoke", expected, (), "suite") == [("A (suite data)", "Text"), ("B (suite data)", "Text")]
    assert select_cells(spec, "smoke", expected, (), "release") == [("A", "Text"), ("B", "Text")]
    assert select_cells(spec, "smoke", expected, ["B*/Text"], "suite") == [("B (suite data)", "Text")]
    with pytest.raises(SpecError, match="matches no cell"):
        select_cells(spec, "smoke", expected, ["C/*"], "suite")
    assert glob_escape("a*[b]?") == "a[*][[]b][?]"


@pytest.mark.parametrize("variant, message", [
    ({"rows": {"Z": "Z (suite data)"}, "tasks": {"Text": {}}}, r"rows: \['Z'\] not among"),
    ({"rows": {"A": "B"}, "tasks": {"Text": {}}}, "must be new and distinct"),
    ({"rows": {"A": "A2"}, "tasks": {"Nope": {}}}, r"tasks: \['Nope'\] not among"),
    ({"rows": {"A": "A2"}, "tasks": {"Text": {}}, "extra": 1}, r"unknown key\(s\) \['extra'\]"),
    ("suite", "must be a mapping"),
])
def test_bad_suite_variant_is_a_one_line_error(project: Path, variant, message: str) -> None:
    path = project / "reproductions" / "toytrain.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["tiers"]["full"] = {**TIER, "suite_data": variant}
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=message) as err:
        load_spec(path)
    assert "tiers.full.suite_data" in str(err.value)


def test_data_suite_needs_a_variant(project: Path, capsys: pytest.CaptureFixture) -> None:
    path = project / "reproductions" / "toytrain.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["tiers"]["budget"] = {k: v for k, v in TIER.items() if k != "suite_data"}
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", "toytrain", "--tier", "budget", "--data", "suite"]) == 2
    assert "tier 'budget' has no suite-data variant" in capsys.readouterr().err


# ---- deadlines: a paused run resumes without losing an epoch


def test_deadline_pauses_and_the_same_command_resumes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from runners.train import table

    spec = load_spec("reproductions/toytrain.yaml")
    # the cell starts (the table's clock reads before the deadline), the loop's clock reads past it at step 1
    with monkeypatch.context() as patch, pytest.raises(Paused) as paused:
        patch.setattr(table, "time", types.SimpleNamespace(time=lambda: 0.0))
        run_mod.run_spec(spec, "smoke", progress=False, data="suite", cells=["A*"], deadline=time.time())
    assert "A (suite data) / Text: 0/2 epochs" in str(paused.value)
    assert not (project / "local" / "results").exists()  # nothing is judged before the cells finish
    metrics = (project / "runs/toytrain/smoke/A_suite_data__Text/metrics.jsonl").read_text().splitlines()
    assert json.loads(metrics[-1])["partial"] is True and json.loads(metrics[-1])["steps"] == 1
    assert main(["run", "toytrain", "--data", "suite", "--cells", "A*", "--no-progress"]) == 0
    (result,) = _results(project)
    assert result["data"] == "suite" and result["selected_cells"] == [["A (suite data)", "Text"]]
    assert [c["row"] for c in result["cells"]] == ["A (suite data)"]
    history = result["series"]["A (suite data) / Text"]["history"]
    assert [e["epoch"] for e in history] == [1, 2] and history[0]["steps"] == 3  # 24 examples / batch 8


# ---- the scheduler with fake cells


def _fake(codes: dict, seconds: float = 0.3, started: list | None = None):
    import subprocess

    def launch(unit, gpu, log, minutes_left):
        if started is not None:
            started.append((unit, gpu, time.time()))
        code = codes.get(unit, 0)
        return subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep({seconds}); sys.exit({code})"])

    return launch


def test_scheduler_runs_one_cell_per_gpu_and_classifies_outcomes(tmp_path: Path) -> None:
    units = [(f"r{i}", "t") for i in range(5)]
    started: list = []
    out = schedule_units(units, ["0", "1"], _fake({("r1", "t"): EXIT_PAUSED, ("r3", "t"): 7}, started=started),
                         tmp_path / "logs", poll_seconds=0.05, echo=lambda s: None)
    assert sorted(u for u, _, _ in started) == units  # every unit ran once
    assert {o.unit for o in out.finished} == {("r0", "t"), ("r2", "t"), ("r4", "t")}
    assert [o.unit for o in out.paused] == [("r1", "t")] and [o.unit for o in out.failed] == [("r3", "t")]
    assert not out.complete
    # never two units on one GPU at once: each GPU's units start at least one unit-duration apart
    for gpu in ("0", "1"):
        times = sorted(t for _, g, t in started if g == gpu)
        assert all(b - a >= 0.25 for a, b in zip(times, times[1:]))


def test_scheduler_runs_up_to_k_cells_per_gpu(tmp_path: Path) -> None:
    units = [(f"r{i}", "t") for i in range(5)]
    started: list = []
    out = schedule_units(units, ["0", "1"], _fake({}, seconds=0.4, started=started), tmp_path / "logs",
                         poll_seconds=0.05, echo=lambda s: None, per_gpu=2)
    assert len(out.finished) == 5 and out.complete
    first = sorted(started, key=lambda x: x[2])[:4]  # four slots: both GPUs take two cells at once
    assert sorted(g for _, g, _ in first) == ["0", "0", "1", "1"]
    assert max(t for _, _, t in first) - min(t for _, _, t in first) < 0.3
    with pytest.raises(ValueError, match="per_gpu must be >= 1"):
        schedule_units(units, ["0"], _fake({}), tmp_path / "logs", per_gpu=0)


def test_scheduler_starts_nothing_past_the_deadline(tmp_path: Path) -> None:
    units = [("a", "t"), ("b", "t"), ("c", "t")]
    out = schedule_units(units, ["0"], _fake({}, seconds=0.5), tmp_path / "logs", deadline=time.time() + 0.2,
                         poll_seconds=0.05, echo=lambda s: None)
    assert [o.unit for o in out.finished] == [("a", "t")] and out.not_started == [("b", "t"), ("c", "t")]
    assert not out.complete


@pytest.mark.parametrize("text", ["", "0,0", "a,1", "0;1", "-1"])
def test_bad_gpu_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--gpus"):
        parse_gpus(text)


# ---- end to end: two cells on two "GPUs" (child processes; CPU here), then one results file


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent process sees two CUDA devices (run --gpus checks the names against them); the children train on
    the CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_gpus_trains_each_cell_in_a_child_and_writes_one_result(project: Path, two_gpus: None, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "toytrain", "--data", "suite", "--gpus", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "2 cell(s) on GPU(s) 0, 1" in out and "wrote" in out
    (result,) = _results(project)
    assert {c["row"] for c in result["cells"]} == {"A (suite data)", "B (suite data)"}
    assert all(isinstance(c["value"], float) for c in result["cells"])
    for row in ("A_suite_data", "B_suite_data"):
        log = (project / f"runs/toytrain/smoke/logs/{row}__Text.log").read_text()
        assert "CUDA_VISIBLE_DEVICES=" in log and "--train-only" in log
    # the same command again: every cell resumes its finished checkpoint (no step), a second results file
    assert main(["run", "toytrain", "--data", "suite", "--gpus", "0,1"]) == 0
    first, second = _results(project)
    assert [c["value"] for c in first["cells"]] == [c["value"] for c in second["cells"]]
    from runners.report.markdown import report_all

    report_all(project / "tables", project / "local" / "results")
    report = (project / "tables" / "toytrain.md").read_text()
    assert "**Data made by the suite** (`--data suite`): toy" in report
    assert "wall time of the call that wrote it" in report and "training time is in its line below" in report


def test_cells_per_gpu_share_a_gpu_and_the_results_say_so(project: Path, two_gpus: None, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "toytrain", "--data", "suite", "--gpus", "0", "--cells-per-gpu", "2"]) == 0
    assert "2 cell(s) on GPU(s) 0, 2 per GPU" in capsys.readouterr().out
    (result,) = _results(project)
    assert all(s["cells_per_gpu"] == 2 for s in result["series"].values())
    speed_notes = [n for n in result["notes"] if "steps/s" in n]
    assert len(speed_notes) == 2 and all("(the GPU shared by 2 training cells)" in n for n in speed_notes)
    assert all(" min of training; " in n for n in speed_notes)
    assert all(s["elapsed_seconds"] > 0 for s in result["series"].values())
    for row in ("A_suite_data", "B_suite_data"):
        log = (project / f"runs/toytrain/smoke/logs/{row}__Text.log").read_text()
        assert "CUDA_VISIBLE_DEVICES=0 " in log
    assert main(["run", "toytrain", "--cells-per-gpu", "2"]) == 2
    assert "--cells-per-gpu applies with --gpus" in capsys.readouterr().err
    # refused before anything runs, also by --dry-run (which checks a command before a GPU call)
    for extra in ([], ["--dry-run"]):
        assert main(["run", "toytrain", "--data", "suite", "--gpus", "0", "--train-only", *extra]) == 2
        assert "--gpus trains with --train-only children" in capsys.readouterr().err


# ---- one configuration in two tables trains once (train_in)


def test_train_in_resumes_the_other_tables_run_and_refuses_another_configuration(project: Path) -> None:
    twin = {"id": "toytwin", "paper": "s4", "table": "Table 00", "title": "twin", "groups": ["lra"],
            "runner": "train.table", "make": "toytwin",
            "tiers": {t: {**TIER, "suite_data": {**TIER["suite_data"], "rows": {"A": "A (suite data)"},
                                                  "models": {"A (suite data)": {"train_in": {
                                                      "spec": "toytrain", "row": "A (suite data)"}}}}}
                      for t in ("smoke", "budget", "full")}}
    (project / "reproductions" / "toytwin.yaml").write_text(yaml.safe_dump(twin))
    expected = yaml.safe_load((project / "expected" / "toytrain.yaml").read_text())
    expected["table"] = "toytwin"
    (project / "expected" / "toytwin.yaml").write_text(yaml.safe_dump(expected))
    first = run_mod.run_spec(load_spec("reproductions/toytrain.yaml"), "smoke", progress=False, data="suite",
                             cells=["A*"])
    second = run_mod.run_spec(load_spec("reproductions/toytwin.yaml"), "smoke", progress=False, data="suite")
    a, b = (json.loads(p.read_text()) for p in (first, second))
    assert a["cells"] == b["cells"] and a["series"] == b["series"]  # the twin resumed the finished run
    assert not (project / "runs/toytwin/smoke/A_suite_data__Text").exists()
    assert not (project / "runs/toytwin/smoke/data").exists()  # evaluated on the data the twin trained on
    twin["tiers"]["smoke"]["train"] = {**TRAIN, "lr": 0.02}  # another configuration: refused, not reused
    (project / "reproductions" / "toytwin.yaml").write_text(yaml.safe_dump(twin))
    with pytest.raises(Exception, match="(?i)checkpoint"):
        run_mod.run_spec(load_spec("reproductions/toytwin.yaml"), "smoke", progress=False, data="suite")


def test_gpus_without_the_data_is_not_runnable(project: Path, two_gpus: None, capsys: pytest.CaptureFixture) -> None:
    """`run --gpus` on data that is not there ends as `run` does: the results file written with the cells not run,
    exit 3 (cannot run here), the message saying what is missing."""
    assert main(["run", "toytrain", "--gpus", "0"]) == 3
    err = capsys.readouterr().err
    assert "NOT-RUN" in err and "data missing" in err
    (result,) = _results(project)
    assert result["cells"] and all(c["value"] is None for c in result["cells"])
