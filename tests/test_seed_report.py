"""The ``gen`` fixture's seed: named in a failing test's report, replayed with SSM_TEST_SEED, and a bad value of that
variable refused by name."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DRAWING_TEST = '''
import torch

def test_draws(gen):
    value = torch.rand(1, generator=gen).item()
    assert value < 0, f"drew {value!r}"
'''


def _run(folder: Path, seed: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SSM_TEST_SEED"}
    if seed is not None:
        env["SSM_TEST_SEED"] = seed
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_draws.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_a_failure_names_its_seed_and_the_seed_replays_it(tmp_path: Path) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_draws.py").write_text(DRAWING_TEST)
    first = _run(tmp_path, None)
    assert first.returncode == 1, first.stdout + first.stderr
    named = re.search(r"gen seed (\d+): replay with SSM_TEST_SEED=(\d+) pytest 'test_draws.py::test_draws'",
                      first.stdout)
    assert named and named[1] == named[2], first.stdout
    drew = re.search(r"drew ([0-9.e-]+)", first.stdout)[1]
    again = _run(tmp_path, named[1])
    assert re.search(r"drew ([0-9.e-]+)", again.stdout)[1] == drew
    assert f"gen seed {named[1]}:" in again.stdout


def test_a_bad_seed_stops_the_session_before_any_test(tmp_path: Path) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_draws.py").write_text(DRAWING_TEST)
    done = _run(tmp_path, "twelve")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "SSM_TEST_SEED='twelve': not an integer" in done.stderr and "drew" not in done.stdout


@pytest.mark.parametrize("value", ["abc", "1.5", "-3", str(2 ** 64), "0x"])
def test_a_bad_seed_is_refused_by_name(value: str, script, monkeypatch) -> None:
    conftest = script("conftest.py")
    monkeypatch.setenv("SSM_TEST_SEED", value)
    refusal = rf"SSM_TEST_SEED={re.escape(repr(value))}: .*allowed: 0 to 2\*\*64 - 1"
    with pytest.raises(pytest.UsageError, match=refusal):
        conftest._seed_from_environment()


@pytest.mark.parametrize("value,seed", [("", None), ("  ", None), ("7", 7), ("0x10", 16),
                                        (str(2 ** 64 - 1), 2 ** 64 - 1)])
def test_a_good_seed_is_read(value: str, seed: int | None, script, monkeypatch) -> None:
    monkeypatch.setenv("SSM_TEST_SEED", value)
    assert script("conftest.py")._seed_from_environment() == seed
