"""Results files under concurrency, run locks, restarts after a spec edit, loader errors on the console and in the
report, a batch larger than the dataset, and the provenance (commit, uncommitted diff) of results."""
from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing as mp
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from runners.cli.main import main
from runners.core.provenance import git_provenance
from runners.store.write import new_result_path, write_new_result

REPO = Path(__file__).resolve().parent.parent
N_WRITERS = 12


def _writer(root: str, i: int, barrier) -> str:
    barrier.wait()  # every writer starts in the same instant (and so the same second)
    return str(write_new_result("race", "smoke", {"writer": i, "pad": "x" * 20000}, Path(root)))


def _reserver(root: str, barrier) -> str:
    barrier.wait()
    return str(new_result_path("race", "gpu", Path(root)))


def test_concurrent_writers_never_lose_a_result(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(N_WRITERS)
        with ctx.Pool(N_WRITERS) as pool:
            paths = pool.starmap(_writer, [(str(tmp_path), i, barrier) for i in range(N_WRITERS)])
    assert len(set(paths)) == N_WRITERS
    files = sorted((tmp_path / "race").iterdir())
    assert [f.name for f in files if f.name.startswith(".")] == []  # no temp file left
    assert sorted(json.loads(f.read_text())["writer"] for f in files) == list(range(N_WRITERS))
    stamps = {f.name[:15] for f in files}
    assert len(stamps) <= 2  # they really did collide on a name (one or two seconds)


def test_concurrent_reservations_get_distinct_files(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(N_WRITERS)
        with ctx.Pool(N_WRITERS) as pool:
            paths = pool.starmap(_reserver, [(str(tmp_path), barrier)] * N_WRITERS)
    assert len(set(paths)) == N_WRITERS and all(Path(p).exists() for p in paths)


def _try_lock(path: str, queue) -> None:
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            queue.put("acquired")
        except BlockingIOError:
            queue.put("blocked")


@pytest.mark.parametrize("kind", ["analytic", "benchmark"])
def test_analytic_and_benchmark_runs_are_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    import torch

    from runners.core import layout
    from runners.execute import run as run_mod

    monkeypatch.setattr(layout, "RUNS_DIR", tmp_path / "runs")
    work = tmp_path / "runs" / "spec" / "smoke"
    before = set(tmp_path.rglob("*.lock"))
    ctx = mp.get_context("fork")
    with run_mod.run_lock(kind, work, torch.device("cpu")):
        (lock,) = set(tmp_path.rglob("*.lock")) - before
        queue = ctx.Queue()
        proc = ctx.Process(target=_try_lock, args=(str(lock), queue))
        proc.start()
        proc.join(30)
        assert queue.get(timeout=5) == "blocked"
    proc = ctx.Process(target=_try_lock, args=(str(lock), queue))
    proc.start()
    proc.join(30)
    assert queue.get(timeout=5) == "acquired"


def test_benchmark_lock_is_per_physical_card(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes given different cards (CUDA_VISIBLE_DEVICES) both see cuda:0: their benchmark locks must
    differ, or the second waits for the first although their timings cannot disturb each other; one card seen
    by two processes is one lock."""
    import types

    import torch

    from runners.core import provenance

    uuids = {"first": "GPU-aaaa", "second": "GPU-bbbb"}
    seen = {"card": "first"}
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(uuid=uuids[seen["card"]]))
    first = provenance.physical_device_key(torch.device("cuda", 0))
    seen["card"] = "second"
    second = provenance.physical_device_key(torch.device("cuda", 0))
    again = provenance.physical_device_key(torch.device("cuda", 0))
    assert first != second and second == again
    assert provenance.physical_device_key(torch.device("cpu")) == "cpu"


# --------------------------------------------------------------------------------------------------------------
# a tiny training table in a project of its own
def _expected_cell(row: str, column: str) -> dict:
    return {"row": row, "column": column, "paper": 50.0, "std": None, "unit": "% acc", "better": "higher",
            "source": "test", "note": None,
            "checks": {"smoke": {"bound": {"min": 0}}, "budget": {"not_run": "x"}, "full": {"not_run": "x"}}}


@pytest.fixture
def train_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "reproductions").mkdir(parents=True)
    (root / "expected").mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("DATA_PATH", str(tmp_path / "data"))
    tier = {"tasks": {"sCIFAR": {"loader": "scifar", "prepare": {"preparer": "cifar_standin", "n_per_batch": 4}}},
            "models": {"S4": {"arch": "ssm", "model": {"d_model": 4, "n_layers": 1,
                                                      "layer": {"mode": "s4d", "d_state": 4}}}},
            "train": {"lr": 0.01, "epochs": 1, "batch_size": 2, "max_steps_per_epoch": 1, "scheduler": "constant"}}
    spec = {"id": "tiny-train", "paper": "s4", "table": "Table 0", "title": "tiny", "groups": ["pixel"],
            "runner": "train.table", "make": "tiny", "tiers": {"smoke": tier, "budget": tier, "full": tier}}
    (root / "reproductions" / "tiny_train.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    expected = {"table": "tiny-train", "paper": "s4", "title": "tiny", "source": "test", "rows": ["S4"],
                "columns": ["sCIFAR"], "cells": [_expected_cell("S4", "sCIFAR")]}
    (root / "expected" / "tiny-train.yaml").write_text(yaml.safe_dump(expected, sort_keys=False))
    return root


def _edit_spec(edit) -> None:
    path = Path("reproductions/tiny_train.yaml")
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_edited_spec_with_a_checkpoint_is_one_line_and_restart_starts_over(train_project: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    checkpoint = train_project / "runs" / "tiny-train" / "smoke" / "S4__sCIFAR" / "checkpoint.pt"
    assert checkpoint.exists()
    capsys.readouterr()
    _edit_spec(lambda d: d["tiers"]["smoke"]["train"].update(lr=0.02))
    assert main(["run", "tiny-train", "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "config.lr" in err[0] and "--restart" in err[0] and "tiny_train.yaml" in err[0]
    assert main(["run", "tiny-train", "--no-progress", "--restart"]) == 0
    assert (train_project / "runs" / "tiny-train" / "smoke" / "data").is_dir()  # prepared data kept
    assert len(list((train_project / "local" / "results" / "tiny-train").glob("*_smoke*.json"))) == 2


def test_batch_larger_than_the_training_set_is_one_line(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    _edit_spec(lambda d: d["tiers"]["smoke"]["train"].update(batch_size=64))
    assert main(["run", "tiny-train", "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "tiny_train.yaml" in err[0] and "batch_size: 64" in err[0] and "training set" in err[0]
    assert not (train_project / "results").exists() and not (train_project / "local" / "results").exists()


def test_loader_error_reaches_console_and_report(train_project: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    from runners.data.standins import write_cifar_standin
    from runners.report.markdown import report_all

    folder = write_cifar_standin(tmp_path / "data", n_per_batch=4)
    (folder / "data_batch_3").write_bytes(b"\x80\x02garbage")
    _edit_spec(lambda d: d["tiers"]["smoke"]["tasks"]["sCIFAR"].pop("prepare"))
    main(["run", "tiny-train", "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if "data_batch_3" in line]
    assert len(err) == 1 and "sCIFAR" in err[0], err
    report = (Path(report_all(out_dir=train_project / "tables")).parent / "tiny-train.md").read_text()
    assert "data_batch_3" in report and "Not run" in report


# --------------------------------------------------------------------------------------------------------------
# provenance
def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_dirty_tree_records_clean_commit_and_diff_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSM_GIT_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = _git(tmp_path, "rev-parse", "HEAD").strip()
    monkeypatch.chdir(tmp_path)
    assert git_provenance() == {"git_commit": head, "git_dirty": False}
    (tmp_path / "a.py").write_text("x = 2\n")
    record = git_provenance()
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], capture_output=True, check=True).stdout
    assert record == {"git_commit": head, "git_dirty": True,
                      "git_dirty_diff_sha256": hashlib.sha256(diff).hexdigest()}


def _commit_records(obj, found: list) -> list:
    if isinstance(obj, dict):
        if "git_commit" in obj:
            found.append(obj)
        for value in obj.values():
            _commit_records(value, found)
    elif isinstance(obj, list):
        for value in obj:
            _commit_records(value, found)
    return found


@pytest.mark.parametrize("path", sorted((REPO / "results").rglob("*.json")), ids=lambda p: p.name)
def test_committed_results_name_a_clean_commit_or_a_diff_hash(path: Path) -> None:
    """A result names the clean commit it ran, plus the hash of uncommitted changes if there were any; results
    written before the suite recorded that hash say so in a provenance note."""
    records = _commit_records(json.loads(path.read_text()), [])
    assert records, f"{path}: no git_commit recorded"
    for env in records:
        commit = env["git_commit"]
        clean = isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)
        hashed = env.get("git_dirty") is False or re.fullmatch(r"[0-9a-f]{64}", str(env.get("git_dirty_diff_sha256")))
        noted = bool(env.get("provenance_note") or env.get("git_commit_note"))
        assert (clean and (hashed or "git_dirty" not in env)) or noted, f"{path}: commit {commit!r} without a diff " \
                                                                        f"hash or a provenance note"


def test_restart_with_cells_deletes_only_the_selected_cells(train_project: Path) -> None:
    def two_rows(d: dict) -> None:
        d["tiers"]["smoke"]["models"]["S4D"] = dict(d["tiers"]["smoke"]["models"]["S4"])
    _edit_spec(two_rows)
    doc = yaml.safe_load(Path("expected/tiny-train.yaml").read_text())
    doc["rows"].append("S4D")
    doc["cells"].append(_expected_cell("S4D", "sCIFAR"))
    Path("expected/tiny-train.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    tier_dir = train_project / "runs" / "tiny-train" / "smoke"
    kept = (tier_dir / "S4D__sCIFAR" / "checkpoint.pt").stat().st_mtime_ns
    marker = tier_dir / "S4__sCIFAR" / "stale"
    marker.write_text("left by the earlier run")
    assert main(["run", "tiny-train", "--no-progress", "--cells", "S4/*", "--restart"]) == 0
    assert not marker.exists() and (tier_dir / "S4__sCIFAR" / "checkpoint.pt").exists()
    assert (tier_dir / "S4D__sCIFAR" / "checkpoint.pt").stat().st_mtime_ns == kept


def test_report_shows_dirty_diff_hash_and_provenance_note() -> None:
    from runners.report.markdown import _commit_text

    dirty = _commit_text({"git_commit": "a" * 40, "git_dirty": True, "git_dirty_diff_sha256": "b" * 64})
    assert "a" * 40 in dirty and "b" * 64 in dirty and "uncommitted" in dirty
    noted = _commit_text({"git_commit": "c" * 40 + "-dirty", "provenance_note": "the diff was not recorded"})
    assert "the diff was not recorded" in noted


@pytest.mark.parametrize("folder, pattern", [("results", "*.json"), ("tables", "*.md")])
def test_committed_results_and_reports_name_no_machine_path(folder: str, pattern: str) -> None:
    """A results file or a report names the checkouts and files it used relative to the repository (or by name),
    never by a path of the machine that ran it."""
    machine = re.compile(r"(?<![\w.])/(?:work|root|home|tmp|opt|mnt|scratch)/[\w.-]")
    found = [(p.relative_to(REPO), m.group(0)) for p in sorted((REPO / folder).rglob(pattern))
             for m in [machine.search(p.read_text(encoding="utf-8"))] if m]
    assert not found, found


def test_a_run_with_set_trains_in_its_own_folder_and_leaves_the_specs_checkpoints(train_project: Path) -> None:
    """The researcher's loop: train a cell, rerun it with one setting changed (--set): both finish, the changed run
    trains in its own folder keyed by its configuration, the spec's checkpoint is untouched, the same --set
    resumes its own run, and --restart with it starts only that configuration over."""
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    base = train_project / "runs" / "tiny-train" / "smoke" / "S4__sCIFAR" / "checkpoint.pt"
    before = base.read_bytes()
    assert main(["run", "tiny-train", "--no-progress", "--set", "train.lr=0.02"]) == 0
    changed = sorted((train_project / "runs" / "tiny-train").glob("smoke-set-*/S4__sCIFAR/checkpoint.pt"))
    assert len(changed) == 1 and base.read_bytes() == before
    assert main(["run", "tiny-train", "--no-progress", "--set", "train.lr=0.03"]) == 0  # another key, another folder
    assert len(list((train_project / "runs" / "tiny-train").glob("smoke-set-*/S4__sCIFAR/checkpoint.pt"))) == 2
    assert main(["run", "tiny-train", "--no-progress", "--set", "train.lr=0.02"]) == 0  # resumes its own run
    assert main(["run", "tiny-train", "--no-progress", "--set", "train.lr=0.02", "--restart"]) == 0
    assert base.read_bytes() == before and changed[0].exists()
    results = sorted((train_project / "local" / "results" / "tiny-train").glob("*_smoke*.json"))
    assert len(results) == 5
    assert [json.loads(p.read_text())["overrides"] for p in results].count(["train.lr=0.02"]) == 3
