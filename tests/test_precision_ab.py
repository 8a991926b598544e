"""benchmarks/diagnostics/precision_ab.py on made-up runs (the accuracy side of a training-step A/B): arms from the
--set folders' overrides, the test accuracy at each run's best validation epoch, the seed spread, bad input in one
line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.diagnostics import precision_ab

ROOT = Path(__file__).resolve().parent.parent
MARKER = "tasks.Pathfinder.train.epochs=3"


def _script():
    return precision_ab


def _run(runs: Path, key: str, texts: list[str] | None, epochs: list[tuple[float, float]]) -> None:
    """A --set folder with overrides ``texts`` (none: no record) and a cell whose epochs are (val, test) pairs."""
    folder = runs / "s4d-table-5" / f"full-set-{key}"
    (folder / "S4-LegS_suite_data__Pathfinder").mkdir(parents=True)
    if texts is not None:
        (folder / "overrides.json").write_text(json.dumps({"set": texts}))
    lines = [{"epoch": i + 1, "train_loss": 0.7 - 0.1 * i, "val_metric": v, "test_metric": t}
             for i, (v, t) in enumerate(epochs)]
    lines.append({**lines[-1], "epoch": len(lines) + 1, "val_metric": 99.0, "partial": True})  # a cut: not counted
    (folder / "S4-LegS_suite_data__Pathfinder" / "metrics.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines))


def test_arms_seeds_and_the_difference_from_the_spec_setting(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    fp32 = ["tasks.Pathfinder.train.amp=none", "tasks.Pathfinder.train.device_data=false"]
    _run(runs, "a", [MARKER, *fp32], [(60.0, 59.0), (70.0, 71.0), (65.0, 66.0)])  # best val: epoch 2, test 71
    _run(runs, "b", [MARKER, *fp32, "seed=1"], [(61.0, 60.0), (72.0, 73.0)])  # test 73
    _run(runs, "c", [MARKER], [(62.0, 61.0), (74.0, 75.0)])  # the spec's setting, seed 0: test 75
    _run(runs, "d", [MARKER, "seed=1"], [(63.0, 62.0), (70.0, 72.0)])  # seed 1: test 72
    _run(runs, "e", None, [(90.0, 90.0)])  # no record: not an A/B run
    _run(runs, "f", ["tasks.Pathfinder.train.epochs=5"], [(90.0, 90.0)])  # another marker
    script = _script()
    found = script.collect_runs(runs, "s4d-table-5", MARKER)
    assert sorted((r["arm"], r["seed"], r["best"]["test"]) for r in found) == [
        ("(the spec's setting)", 0, 75.0), ("(the spec's setting)", 1, 72.0), ("amp=none", 0, 71.0),
        ("amp=none", 1, 73.0)]  # device_data left out of the arm; the cut epoch's 99 never the best
    table, spread = script.summary(found, None)
    assert table == [["(the spec's setting)", 2, "73.50", "3.00", "+0.00"], ["amp=none", 2, "72.00", "2.00", "-1.50"]]
    assert spread == "3.00"
    assert script.main([str(runs), "--marker", MARKER]) == 0
    assert "its seed spread: 3.00" in capsys.readouterr().out


@pytest.mark.parametrize("setup, argv, message", [
    (lambda runs: None, [], "no such folder"),
    (lambda runs: _run(runs, "a", ["seed=1"], [(50.0, 50.0)]), [], "no --set folder whose overrides.json holds"),
    (lambda runs: _run(runs, "a", [MARKER, "seed=x"], [(50.0, 50.0)]), [], "seed='x' is not an integer"),
])
def test_bad_runs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, setup, argv, message: str) -> None:
    runs = tmp_path / "runs"
    setup(runs)
    assert _script().main([str(runs), "--marker", MARKER, *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_metrics_file_that_is_not_json_is_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    _run(runs, "a", [MARKER], [(50.0, 50.0)])
    bad = runs / "s4d-table-5" / "full-set-a" / "S4-LegS_suite_data__Pathfinder" / "metrics.jsonl"
    bad.write_text("{not json\n")
    assert _script().main([str(runs), "--marker", MARKER]) == 2
    assert f"{bad}: not a metrics.jsonl" in capsys.readouterr().err
