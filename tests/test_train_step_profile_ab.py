"""benchmarks/diagnostics/train_step_profile.py's same-process A/B with an environment variable for the candidate
(--candidate-env): the variable reaches the candidate's runs only and is put back after; a malformed item is
refused by name before anything is timed (CPU)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROFILE = "benchmarks/diagnostics/train_step_profile.py"


@pytest.mark.parametrize("before", [None, "0", "keep me"])
def test_the_environment_is_set_inside_and_put_back_after(monkeypatch, script, before) -> None:
    if before is None:
        monkeypatch.delenv("SSM_AB_PROBE", raising=False)
    else:
        monkeypatch.setenv("SSM_AB_PROBE", before)
    monkeypatch.setenv("SSM_AB_OTHER", "untouched")
    env = script(PROFILE).CandidateEnvironment(["SSM_AB_PROBE=1", "SSM_AB_EMPTY="])
    with env:
        assert os.environ["SSM_AB_PROBE"] == "1" and os.environ["SSM_AB_EMPTY"] == ""
    assert os.environ.get("SSM_AB_PROBE") == before and "SSM_AB_EMPTY" not in os.environ
    assert os.environ["SSM_AB_OTHER"] == "untouched"
    with pytest.raises(RuntimeError):  # put back when the run inside fails, too
        with env:
            raise RuntimeError("a failed run")
    assert os.environ.get("SSM_AB_PROBE") == before


@pytest.mark.parametrize("item", ["SSM_STEP_GRAPHS", "=1", "1ABC=1", "SSM STEP=1", "SSM-STEP=1"])
def test_a_malformed_item_is_refused_by_name(script, item) -> None:
    with pytest.raises(SystemExit, match=f"--candidate-env {item!r}: expected NAME=VALUE"):
        script(PROFILE).CandidateEnvironment([item])


def _run(*extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SSM_STEP_GRAPHS"}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "benchmarks.diagnostics.train_step_profile", "s4d-table-5", "Pathfinder", "S4D-Lin (suite data)", "--tier", "smoke",
           "--steps", "12", "--rounds", "1", *extra]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_the_candidate_alone_runs_with_the_variable() -> None:
    """On the CPU the graphed step is refused: the baseline trains (the variable unset), then the candidate stops
    with the loop's refusal, which it can only meet with SSM_STEP_GRAPHS=1 in its environment."""
    done = _run("--candidate-env", "SSM_STEP_GRAPHS=1")
    assert done.returncode != 0
    assert "baseline (round 1, amp none)" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "candidate (round 1" not in done.stdout
    assert "SSM_STEP_GRAPHS=1 asks for the training step from CUDA graphs, but it needs a CUDA device" in done.stderr


def test_a_bad_item_stops_before_anything_is_timed() -> None:
    done = _run("--candidate-env", "SSM_STEP_GRAPHS")
    assert done.returncode != 0 and "expected NAME=VALUE" in done.stderr
    assert "steps/s" not in done.stdout
    record = _run("--record", "--n-train", "640", "--candidate-env", "SSM_STEP_GRAPHS=1")
    assert record.returncode != 0 and "--candidate-env" in record.stderr and "steps/s" not in record.stdout
