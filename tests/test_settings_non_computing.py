"""Every key that runners/judge/settings.py declares unable to change what is computed, changed in a real training
run: the same history to the last bit (a Pathfinder cell of the suite's own data, 2 epochs on the CPU)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from runners.cli.main import main
from runners.judge.settings import NON_COMPUTING

TIER = {"device": "cpu", "seed": 0,
        "tasks": {"Pathfinder": {"loader": "pathfinder", "loader_args": {"resolution": 32, "workers": 1},
                                 "prepare": {"preparer": "pathfinder", "resolution": 32, "n": 48, "per_batch": 16,
                                             "seed": 0, "workers": 1}}},
        "models": {"S4D": {"arch": "ssm", "model": {"d_model": 4, "n_layers": 1, "pool": "mean",
                                                     "layer": {"mode": "s4d", "d_state": 4}}}},
        "train": {"lr": 0.01, "epochs": 2, "batch_size": 4, "scheduler": "constant", "log_every_steps": 50}}
#: each declared key and a value other than the base tier's
CHANGED = {"train.checkpoint_every_steps": 3, "train.log_every_steps": 1, "train.num_workers": 2,
           "train.device_data": True, "task.loader_args.workers": 2, "task.prepare.workers": 2,
           "train.chance_stop_epoch": 1}


def _history(root: Path, setting: str | None, value) -> list[dict]:
    tier = json.loads(json.dumps(TIER))
    if setting is not None:
        part, *keys = setting.split(".")
        node = tier["train"] if part == "train" else tier["tasks"]["Pathfinder"]
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    spec = {"id": "tiny-pf", "paper": "s4", "table": "Table 0", "title": "tiny", "groups": ["lra"],
            "runner": "train.table", "make": "tiny", "tiers": {"smoke": tier, "budget": tier, "full": tier}}
    (root / "reproductions").mkdir(parents=True, exist_ok=True)
    (root / "reproductions" / "tiny_pf.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "tiny-pf", "--no-progress", "--output", str(root / "out"), "--restart"]) == 0
    newest = max((root / "out" / "tiny-pf").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    series = json.loads(newest.read_text())["series"]["S4D / Pathfinder"]
    return [{k: v for k, v in e.items() if k != "seconds"} for e in series["history"]]


def test_every_declared_key_has_a_case() -> None:
    assert set(CHANGED) == set(NON_COMPUTING)


def test_a_key_that_cannot_change_what_is_computed_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_PATH", str(tmp_path / "data"))
    monkeypatch.setenv("SSM_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "expected").mkdir()
    (tmp_path / "expected" / "tiny-pf.yaml").write_text(yaml.safe_dump({
        "table": "tiny-pf", "paper": "s4", "title": "tiny", "source": "test", "rows": ["S4D"],
        "columns": ["Pathfinder"], "cells": [{"row": "S4D", "column": "Pathfinder", "paper": None, "std": None,
                                              "unit": "% acc", "better": "higher", "source": "test", "note": "a test cell",
                                              "checks": {t: {"bound": {"min": 0}, "role": "sanity"}
                                                         for t in ("smoke", "budget", "full")}}]}))
    base = _history(tmp_path, None, None)
    assert len(base) == 2
    for setting, value in CHANGED.items():
        shutil.rmtree(tmp_path / "data", ignore_errors=True)  # the data made again, with the setting
        assert _history(tmp_path, setting, value) == base, setting
