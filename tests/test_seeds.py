"""run --seeds: one run per seed (the tier's own seed as the spec's setting, the others in folders of their own),
judged together by check and report as the mean of the seeds; bad lists refused by name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_files_and_runs import train_project  # noqa: F401 (the fixture)

from runners.cli.main import main


def test_seeds_run_once_each_and_are_judged_together(train_project: Path,  # noqa: F811
                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--seeds", "0,1,2", "--no-progress"]) == 0
    files = sorted((train_project / "local" / "results" / "tiny-train").glob("*_smoke*.json"))
    docs = [json.loads(p.read_text()) for p in files]
    assert sorted(d["seed"] for d in docs) == [0, 1, 2]
    assert sorted(tuple(d["overrides"]) for d in docs) == [(), ("seed=1",), ("seed=2",)]  # seed 0: the spec's own
    runs = train_project / "runs" / "tiny-train"
    assert (runs / "smoke" / "S4__sCIFAR" / "checkpoint.pt").is_file()
    assert len([p for p in runs.iterdir() if p.name.startswith("smoke-set-")]) == 2
    capsys.readouterr()
    assert main(["check", "tiny-train", "--tier", "smoke", "-v"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("S4 "))
    assert "mean of 3 seeds" in line and "seed 0: " in line and "seed 1: " in line and "seed 2: " in line, line


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0,0"], "--seeds '0,0' not allowed"),
    (["--seeds", "1,²"], "not allowed"),
    (["--seeds", "-1"], "not allowed"),
    (["--seeds", "0,1", "--seed", "3"], "--seeds and --seed: give one of them"),
])
def test_a_bad_seed_list_is_refused(train_project: Path, capsys: pytest.CaptureFixture,  # noqa: F811
                                    argv: list, message: str) -> None:
    assert main(["run", "tiny-train", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (train_project / "runs").exists()
