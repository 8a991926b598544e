"""Bad input where it enters the command line, by class: folder variables set but empty, empty or missing folders
given as options, numbers that are no minutes, GPUs the machine does not have, --train-only where nothing trains,
a store behind a symbolic link. Each is one line naming the variable or the option (exit 2; 3 for a GPU this
machine lacks), and nothing is written or deleted."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from runners.cli.main import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("SSM_RUNS_DIR", str(tmp_path / "runs"))


def _err(capsys: pytest.CaptureFixture) -> str:
    return capsys.readouterr().err


@pytest.mark.parametrize("variable", ["SSM_LOCAL_DIR", "SSM_RESULTS_DIR", "SSM_RUNS_DIR", "DATA_PATH"])
@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("argv", [["check", "s4d-theorem-6"], ["run", "s4d-theorem-6", "--no-progress"],
                                  ["list"], ["report"]])
def test_a_folder_variable_set_but_empty_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                    tmp_path: Path, variable: str, value: str, argv: list) -> None:
    monkeypatch.setenv(variable, value)
    before = sorted(os.listdir(REPO))
    assert main(argv) == 2
    err = _err(capsys)
    assert f"${variable} is set but empty" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(REPO)) == before


@pytest.mark.parametrize("argv, message", [
    (["check", "--results", ""], "--results '': give reference, local or a folder"),
    (["check", "--results", "no/such/folder"], "--results no/such/folder: no such folder"),
    (["report", "--results", "README.md"], "--results README.md: no such folder"),
    (["list", "--results", " "], "--results '"),
])
def test_a_results_folder_that_is_not_one_is_refused(capsys: pytest.CaptureFixture, argv: list, message: str) -> None:
    assert main(argv) == 2 and message in _err(capsys)


@pytest.mark.parametrize("option, value", [("--output", ""), ("--output", " "), ("--stop-after-minutes", "nan"),
                                           ("--stop-after-minutes", "inf"), ("--stop-after-minutes", "-1"),
                                           ("--stop-after-minutes", "0"), ("--stop-after-minutes", "ten")])
def test_an_option_value_out_of_its_kind_is_refused(capsys: pytest.CaptureFixture, option: str, value: str) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "s4d-theorem-6", option, value])
    assert stop.value.code == 2 and f"argument {option}" in _err(capsys)


@pytest.mark.parametrize("gpus", ["²", "0,0", "-1", "a", "0,,1", "１"])
def test_gpus_not_written_as_indices_are_refused(capsys: pytest.CaptureFixture, gpus: str) -> None:
    assert main(["run", "s4d-table-5", "--tier", "full", "--data", "suite", "--gpus", gpus]) == 2
    assert f"--gpus {gpus!r} not allowed" in _err(capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_gpus_the_machine_lacks_delete_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--gpus 0 --restart without a GPU: NOT-RUN (exit 3) before anything is deleted; the checkpoint stays."""
    cell = tmp_path / "runs" / "s4d-table-5" / "full" / "S4D-Inv_suite_data__Pathfinder"
    cell.mkdir(parents=True)
    (cell / "checkpoint.pt").write_bytes(b"200 epochs of work")
    for extra in ([], ["--restart"]):
        assert main(["run", "s4d-table-5", "--tier", "full", "--data", "suite", "--cells",
                     "S4D-Inv (suite data)/Pathfinder", "--gpus", "0", *extra]) == 3
        assert "GPU 0 not on this machine (no CUDA device)" in _err(capsys)
        assert (cell / "checkpoint.pt").read_bytes() == b"200 epochs of work"


@pytest.mark.parametrize("spec", ["s4d-theorem-6", "s4-table-2", "s4d-proposition-1"])
def test_train_only_where_nothing_trains_is_refused(capsys: pytest.CaptureFixture, spec: str) -> None:
    assert main(["run", spec, "--train-only"]) == 2
    assert f"--train-only: {spec} train(s) nothing" in _err(capsys)


@pytest.mark.parametrize("linked", ["store", "spec folder"])
def test_a_store_behind_a_symbolic_link_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                  linked: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    if linked == "store":
        out.symlink_to(elsewhere)
    else:
        out.mkdir()
        (out / "s4d-theorem-6").symlink_to(elsewhere)
    assert main(["run", "s4d-theorem-6", "--output", str(out), "--no-progress"]) == 2
    assert "a symbolic link; results are written into real folders only" in _err(capsys)
    assert not any(elsewhere.iterdir())


def test_a_results_file_never_records_a_machines_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    """A custom $DATA_PATH whose data is missing: the results file's notes and problems name $DATA_PATH, never the
    absolute folder."""
    root = tmp_path / "project"
    (root / "reproductions").mkdir(parents=True)
    (root / "expected").mkdir()
    monkeypatch.chdir(root)
    data = tmp_path / "somewhere" / "my data"
    monkeypatch.setenv("DATA_PATH", str(data))
    tier = {"tasks": {"sCIFAR": {"loader": "scifar"}},
            "models": {"S4": {"arch": "ssm", "model": {"d_model": 4, "n_layers": 1,
                                                      "layer": {"mode": "s4d", "d_state": 4}}}},
            "train": {"lr": 0.01, "epochs": 1, "batch_size": 2, "max_steps_per_epoch": 1, "scheduler": "constant"}}
    import yaml as _yaml
    from test_files_and_runs import _expected_cell

    (root / "reproductions" / "tiny_train.yaml").write_text(_yaml.safe_dump(
        {"id": "tiny-train", "paper": "s4", "table": "Table 0", "title": "tiny", "groups": ["pixel"],
         "runner": "train.table", "make": "tiny", "tiers": {"smoke": tier, "budget": tier, "full": tier}}))
    (root / "expected" / "tiny-train.yaml").write_text(_yaml.safe_dump(
        {"table": "tiny-train", "paper": "s4", "title": "tiny", "source": "test", "rows": ["S4"],
         "columns": ["sCIFAR"], "cells": [_expected_cell("S4", "sCIFAR")]}))
    assert main(["run", "tiny-train", "--no-progress"]) == 3  # no CIFAR-10 under $DATA_PATH
    (path,) = (root / "local" / "results" / "tiny-train").glob("*.json")
    text = path.read_text()
    assert "$DATA_PATH" in text and str(data) not in text and str(tmp_path) not in text.replace("\\\\", "")
