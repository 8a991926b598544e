"""Projected GPU time of training cells from measured step rates (runners/report/projection.py): the record written by
train_step_profile.py --record, the dry-run's column, the report's table, and bad records."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.cli.main import main
from runners.judge.verdicts import CellVerdict
from runners.report.projection import (
    STEP_RATES, cell_projection, load_step_rates, measured_hours, projection_text, projections)
from runners.report.markdown import gpu_time_lines
from runners.specs.spec import load_spec
from runners.train.table import training_series

REPO = Path(__file__).resolve().parents[1]


def _record(root: Path, name: str, rate: float, recorded: str, **extra) -> Path:
    doc = {"spec_id": "s4d-table-6", "tier": "full", "row": "S4D", "task": "Path-X", "batch": 32, "n_train": 160000,
           "steps_per_second": rate, "device": "NVIDIA H100 80GB HBM3", "recorded": recorded,
           "cells": [{"cell": "Path-X/S4D", "data": "release", "series": "S4D / Path-X", "epochs": 50,
                      "projected_gpu_hours": 50 * 5000 / rate / 3600}],
           "git_commit": "0" * 40, "git_dirty": False, **extra}
    path = root / STEP_RATES / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_the_newest_record_gives_the_dry_runs_projection(tmp_path, capsys):
    """Records are ordered by the time they record, not by file name; the dry run prints the newest's projection
    for its cell and '-' for cells without a record."""
    _record(tmp_path, "b_old.json", 24.5, "2026-11-27T10:00:00+00:00")
    _record(tmp_path, "a_new.json", 32.9, "2026-11-27T12:00:00+00:00")
    assert main(["run", "s4d-table-6", "--tier", "full", "--dry-run", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("Path-X/S4D "))
    assert "2.1 GPU-h (32.9 steps/s at batch 32, NVIDIA H100 80GB HBM3, 2026-11-27)" in line
    other = next(ln for ln in out.splitlines() if ln.startswith("Path-X/DSS "))
    assert " - " in other
    p = projections(load_step_rates(tmp_path), "s4d-table-6", "full")["Path-X/S4D"]
    assert p["steps_per_second"] == 32.9 and p["file"].endswith("a_new.json")
    assert projection_text(None) == "-"


def test_a_cell_the_record_does_not_list_takes_its_training_series_projection(tmp_path, capsys):
    """A column added to a training unit after its step rate was recorded (S4D Table 6's "Path-X solved" on suite
    data) is projected from the newest record of the same series; a cell of another series is not."""
    suite = {"cell": "Path-X/S4D (suite data)", "data": "suite", "series": "S4D (suite data) / Path-X", "epochs": 50}
    _record(tmp_path, "old.json", 24.5, "2026-11-27T10:00:00+00:00",
            cells=[{**suite, "projected_gpu_hours": 2.8}])
    _record(tmp_path, "new.json", 32.9, "2026-11-27T12:00:00+00:00",
            cells=[{**suite, "projected_gpu_hours": 2.1}])
    projected = projections(load_step_rates(tmp_path), "s4d-table-6", "full")
    series = training_series(load_spec(REPO / "reproductions" / "s4d-table-6.yaml"), "full")
    assert series["Path-X solved/S4D (suite data)"] == "S4D (suite data) / Path-X"
    assert series["Path-X/DSS"] == "DSS / Path-X" and series["Trainable parameters/S4D"] == "S4D / Path-X"
    p = cell_projection(projected, "Path-X solved/S4D (suite data)", series["Path-X solved/S4D (suite data)"])
    assert p["steps_per_second"] == 32.9 and p["file"].endswith("new.json")
    assert cell_projection(projected, "Path-X/DSS", series["Path-X/DSS"]) is None
    assert cell_projection(projected, "Path-X solved/S4D (suite data)") is None  # no series given: no fallback
    assert main(["run", "s4d-table-6", "--tier", "full", "--data", "suite", "--dry-run", "--output",
                 str(tmp_path)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Path-X solved/S4D (suite data)"))
    assert "2.1 GPU-h (32.9 steps/s at batch 32" in line
    verdicts = [CellVerdict("Path-X solved", "S4D (suite data)", 92.12, 85.0, "x", "PASS", result=0)]
    result = {"series": {"S4D (suite data) / Path-X": {"history": [{"seconds": 3600.0}]}}}
    table = "\n".join(gpu_time_lines("s4d-table-6", "full", [(Path("f.json"), result)], verdicts,
                                     load_step_rates(tmp_path), series))
    assert "| Path-X solved/S4D (suite data)" in table and "1.00 GPU-h" in table


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("steps_per_second"), "steps_per_second"),
    (lambda d: d.update(steps_per_second=-3.0), "steps_per_second"),
    (lambda d: d.update(steps_per_second=True), "steps_per_second"),
    (lambda d: d.update(batch="32"), "batch"),
    (lambda d: d.update(cells=[{"cell": "Path-X/S4D", "projected_gpu_hours": float("nan")}]), "projected_gpu_hours"),
    (lambda d: d.update(cells=["Path-X/S4D"]), "cells[0]"),
    (lambda d: d.pop("recorded"), "recorded"),
])
def test_a_bad_record_is_one_line_naming_the_file_and_key(tmp_path, capsys, edit, key):
    path = _record(tmp_path, "r.json", 30.0, "2026-11-27T12:00:00+00:00")
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    assert main(["run", "s4d-table-6", "--tier", "full", "--dry-run", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and key in err


def test_a_record_that_is_not_a_plain_json_file_is_refused(tmp_path, capsys):
    target = _record(tmp_path, "real.json", 30.0, "2026-11-27T12:00:00+00:00")
    (tmp_path / STEP_RATES / "link.json").symlink_to(target)
    assert main(["run", "s4d-table-6", "--tier", "full", "--dry-run", "--output", str(tmp_path)]) == 2
    assert "link.json: is a symlink" in capsys.readouterr().err
    (tmp_path / STEP_RATES / "link.json").unlink()
    (tmp_path / STEP_RATES / "twice.json").write_text('{"spec_id": "a", "spec_id": "b"}')
    assert main(["run", "s4d-table-6", "--tier", "full", "--dry-run", "--output", str(tmp_path)]) == 2
    assert "twice.json" in capsys.readouterr().err
    (tmp_path / STEP_RATES / "twice.json").unlink()
    (tmp_path / STEP_RATES / "broken.json").write_bytes(b"{\xff")
    assert main(["run", "s4d-table-6", "--tier", "full", "--dry-run", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "broken.json" in err


def test_the_report_table_puts_the_measured_hours_beside_the_projection(tmp_path):
    _record(tmp_path, "r.json", 30.0, "2026-11-27T12:00:00+00:00")
    records = load_step_rates(tmp_path)
    result = {"series": {"S4D / Path-X": {"history": [{"seconds": 1800.0}, {"seconds": 1800.0}]}}}
    assert measured_hours(result, "S4D / Path-X") == pytest.approx(1.0)
    assert measured_hours(result, "DSS / Path-X") is None
    verdicts = [CellVerdict("Path-X", "S4D", 92.12, 91.0, "x", "PASS", result=0),
                CellVerdict("Path-X", "DSS", 90.0, None, "x", "NOT-RUN")]
    lines = gpu_time_lines("s4d-table-6", "full", [(Path("f.json"), result)], verdicts, records)
    table = "\n".join(lines)
    assert "| Path-X/S4D" in table and "2.3 GPU-h (30.0 steps/s" in table and "1.00 GPU-h" in table
    assert "Path-X/DSS" not in table
    assert gpu_time_lines("s4d-table-5", "full", [], verdicts, records) == []


def test_train_step_profile_writes_a_record_the_dry_run_reads(tmp_path):
    """The script's --record (CPU, smoke tier, a few steps): the record loads and serves the cell it measured."""
    env = {**os.environ, "SSM_RESULTS_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "benchmarks.diagnostics.train_step_profile", "s4d-table-5", "Pathfinder",
           "S4D-Lin (suite data)", "--tier", "smoke", "--steps", "12", "--record", "--n-train", "640"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (path, doc), = load_step_rates(tmp_path)
    assert doc["batch"] == 16 and doc["n_train"] == 640 and doc["device"] == "cpu"
    cell = doc["cells"][0]
    assert cell["cell"] == "S4D-Lin (suite data)/Pathfinder" and cell["epochs"] == 3
    assert cell["projected_gpu_hours"] == pytest.approx(3 * 40 / doc["steps_per_second"] / 3600)
    bad = subprocess.run(cmd + ["--set", "amp=bf16"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "--record measures the cell as configured" in bad.stderr
