"""The two result stores: a researcher's runs and reports go to the local store (local/results/, local/tables/:
git-ignored) and never touch the committed reference results (results/) and reports (tables/); check, report and
list read the reference overlaid by the local store and name each value's store; compare SPEC shows local against
reference; a fresh copy of the repository stays byte-identical through run, report and check."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runners.cli.main import main
from runners.judge.settings import today_settings
from runners.specs.spec import find_spec, load_spec
from test_files_and_runs import _edit_spec, _expected_cell, train_project  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parent.parent


def _hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` by its relative path ({} when there is no folder)."""
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _two_rows(project: Path) -> None:
    """tiny-train with rows S4 and S4D (one sCIFAR cell each, bound >= 0, higher is better)."""
    _edit_spec(lambda d: d["tiers"]["smoke"]["models"].update(S4D=dict(d["tiers"]["smoke"]["models"]["S4"])))
    path = project / "expected" / "tiny-train.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["rows"].append("S4D")
    doc["cells"].append(_expected_cell("S4D", "sCIFAR"))
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _result(folder: Path, values: dict[str, float], finished: str) -> Path:
    """A smoke results file of tiny-train under ``folder``/tiny-train/ measuring (and selecting) ``values``."""
    stamp = finished.replace("-", "").replace(":", "")[:15]
    path = folder / "tiny-train" / f"{stamp}_smoke.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"spec_id": "tiny-train", "tier": "smoke", "started": finished, "finished": finished,
           "selected_cells": [[row, "sCIFAR"] for row in values],
           "environment": {"device_name": "cpu", "git_commit": "a" * 40, "git_dirty": False},
           "cells": [{"row": row, "column": "sCIFAR", "value": v, "note": None} for row, v in values.items()]}
    spec = load_spec(find_spec("tiny-train"))  # the setting it records: the spec's own today
    doc.update(runner=spec.runner, config=today_settings(spec, "smoke")("release"), seed=spec.tiers["smoke"].seed)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def stores(train_project: Path) -> Path:
    """tiny-train (rows S4, S4D) with a committed reference file (both 50) and committed reports."""
    _two_rows(train_project)
    _result(train_project / "results", {"S4": 50.0, "S4D": 50.0}, "2026-11-01T00:00:00+00:00")
    (train_project / "tables").mkdir()
    (train_project / "tables" / "tiny-train.md").write_text("the committed report\n")
    return train_project


# ---- (a) run writes the local store


def test_run_writes_the_local_store_and_leaves_the_reference(stores: Path, capsys: pytest.CaptureFixture) -> None:
    before = _hashes(stores / "results")
    assert main(["run", "tiny-train", "--no-progress", "--cells", "S4/*"]) == 0
    assert "wrote local/results/tiny-train/" in capsys.readouterr().out
    assert len(list((stores / "local" / "results" / "tiny-train").glob("*_smoke*.json"))) == 1
    assert _hashes(stores / "results") == before
    assert main(["run", "tiny-train", "--no-progress", "--cells", "S4/*", "--reference"]) == 0  # a maintainer's
    assert len([k for k in _hashes(stores / "results") if k.endswith(".json")]) == 2  # and its ledger line
    assert "ledger.jsonl" in _hashes(stores / "results")
    assert main(["run", "tiny-train", "--reference", "--output", "elsewhere"]) == 2
    assert "--reference and --output" in capsys.readouterr().err


def test_run_help_says_where_results_go(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "local/results/" in out and "--reference" in out and "results/<spec id>/" in out


# ---- (b) check: the reference overlaid by the local store, each verdict naming its store


def test_check_judges_the_newer_local_file_and_keeps_the_reference_for_the_rest(
        stores: Path, capsys: pytest.CaptureFixture) -> None:
    _result(stores / "local" / "results", {"S4": -1.0}, "2026-11-02T00:00:00+00:00")  # a newer local run of S4
    assert main(["check", "tiny-train", "--tier", "smoke", "-v"]) == 1  # S4 now FAIL, from the local file
    out = capsys.readouterr().out
    assert "local: local/results/tiny-train/" in out and "reference: results/tiny-train/" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("S4 ", "S4D "))}
    assert "FAIL" in rows["S4"] and " local " in f"{rows['S4']} "
    assert "PASS" in rows["S4D"] and " reference " in f"{rows['S4D']} "
    assert main(["check", "tiny-train", "--tier", "smoke", "--results", "reference"]) == 0
    out = capsys.readouterr().out
    assert "PASS 2" in out and "local" not in out
    assert main(["check", "tiny-train", "--tier", "smoke", "--results", "local", "-v"]) == 1
    out = capsys.readouterr().out
    assert "FAIL 1" in out and "NOT-RUN 1" in out and "reference" not in out


def test_an_older_local_file_does_not_outrank_the_reference(stores: Path, capsys: pytest.CaptureFixture) -> None:
    _result(stores / "local" / "results", {"S4": -1.0}, "2026-10-01T00:00:00+00:00")
    assert main(["check", "tiny-train", "--tier", "smoke"]) == 0
    assert "PASS 2" in capsys.readouterr().out
    assert main(["list"]) == 0
    assert "smoke (reference)" in capsys.readouterr().out


# ---- (c) report: local/tables by default, tables/ only for the reference store alone


def test_report_writes_local_tables_and_leaves_the_committed_reports(stores: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    _result(stores / "local" / "results", {"S4": 60.0}, "2026-11-02T00:00:00+00:00")
    before = _hashes(stores / "tables")
    assert main(["report"]) == 0
    assert "local/tables/README.md" in capsys.readouterr().out
    assert _hashes(stores / "tables") == before
    text = (stores / "local" / "tables" / "tiny-train.md").read_text()
    assert "(local store)" in text and "(reference store)" in text
    index = (stores / "local" / "tables" / "README.md").read_text()
    assert "[local + reference]" in index
    assert main(["report", "--results", "reference"]) == 0  # the maintainer's report: tables/
    text = (stores / "tables" / "tiny-train.md").read_text()
    assert "(reference store)" in text and "local" not in text.split("## Tier: smoke")[1].split("<details>")[0]


# ---- (d) compare SPEC: the newest reference against the newest local file


def test_compare_spec_shows_local_against_reference(stores: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["compare", "tiny-train"]) == 2  # no local results yet
    assert "no results in the local store" in capsys.readouterr().err
    _result(stores / "local" / "results", {"S4": 50.0, "S4D": 50.5}, "2026-11-02T00:00:00+00:00")
    assert main(["compare", "tiny-train", "--tier", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("reference (A) against local (B): results/tiny-train/") and "local/results/" in out
    _result(stores / "local" / "results", {"S4": 40.0, "S4D": 50.0}, "2026-11-03T00:00:00+00:00")
    assert main(["compare", "tiny-train"]) == 1  # S4 fell from 50 to 40: a regression
    assert "regressions: 1" in capsys.readouterr().out
    assert main(["compare", "tiny-train", "--tier", "full"]) == 2
    assert "no full results" in capsys.readouterr().err


# ---- (e) a fresh copy of the repository: run, report and check leave every tracked file as it was


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_a_fresh_clone_stays_unchanged_through_the_smoke_tier_report_and_check(tmp_path: Path) -> None:
    """The smoke tier on a fresh clone, then the reports and the verdicts, leaves every tracked file as it was and
    `git status` clean. One spec of each runner family runs (an analytic result, a benchmark, a training table):
    what a run writes goes through one store and one report whatever the spec; every spec's smoke tier runs in
    reproductions/test_specs.py."""
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    clone = tmp_path / "clone"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fresh clone")
    tracked = [name for name in _git(clone, "ls-files", "-z").split("\0") if name]
    before = {name: hashlib.sha256((clone / name).read_bytes()).hexdigest() for name in tracked}
    env = {**os.environ, "PYTHONPATH": str(clone), "MPLBACKEND": "Agg", "SSM_GIT_COMMIT": "b" * 40}
    for key in ("SSM_RESULTS_DIR", "SSM_LOCAL_DIR", "SSM_RUNS_DIR"):
        env.pop(key, None)
    for argv in (["run", "s4d-theorem-3", "s4-table-2", "s4d-table-6", "--tier", "smoke", "--no-progress"],
                 ["report"], ["check", "--tier", "smoke"]):
        done = subprocess.run([sys.executable, "-m", "runners", *argv], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    assert "s4d-theorem-3 [smoke] (local: local/results/s4d-theorem-3/" in done.stdout
    assert list((clone / "local" / "results" / "s4d-theorem-3").glob("*_smoke.json"))
    assert (clone / "local" / "tables" / "s4d-theorem-3.md").is_file()
    after = {name: hashlib.sha256((clone / name).read_bytes()).hexdigest() for name in tracked}
    assert [name for name in tracked if before[name] != after[name]] == []
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""  # nothing new outside ignored paths
