"""The ledger of a store's results files: check names any listed file that is missing or changed and any file it
does not list; run adds its file's line; ledger add refuses what is not a results file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runners.cli.main import main
from runners.store import ledger

REPO = Path(__file__).resolve().parent.parent
FAILS_FILE = "s4d-table-5/20261126T083735_budget.json"  # the budget tier's two claims, committed


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the committed reference store of S4D Table 5 and S4D Table 6 with the committed ledger's lines for
    them."""
    monkeypatch.chdir(REPO)
    root = tmp_path / "results"
    for spec_id in ("s4d-table-5", "s4d-table-6"):
        shutil.copytree(REPO / "results" / spec_id, root / spec_id)
    lines = [line for line in (REPO / "results" / ledger.LEDGER_NAME).read_text().splitlines()
             if json.loads(line)["file"].split("/")[0] in ("s4d-table-5", "s4d-table-6")]
    (root / ledger.LEDGER_NAME).write_text("\n".join(lines) + "\n")
    return root


def _check(capsys: pytest.CaptureFixture, root: Path, *spec_ids: str) -> tuple[int, str, str]:
    rc = main(["check", *spec_ids, "--results", str(root)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_committed_store_agrees_with_its_ledger(capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert ledger.problems(REPO / "results") == []
    assert main(["ledger", "check", "--results", "reference"]) == 0


def test_a_deleted_file_is_named(store: Path, capsys: pytest.CaptureFixture) -> None:
    """The file holding S4D Table 5's two budget FAILs deleted: check names it (exit 2), never NOT-RUN and 0."""
    (store / FAILS_FILE).unlink()
    rc, _, err = _check(capsys, store, "s4d-table-5")
    assert rc == 2 and f"{store / FAILS_FILE}: listed in" in err and "missing" in err


@pytest.mark.parametrize("edit", [
    lambda d: d["notes"].append("an innocent note"),
    lambda d: d["environment"].update(device_name="Tesla K80"),
    lambda d: d.update(tier="full"),
])
def test_a_changed_file_is_named(store: Path, capsys: pytest.CaptureFixture, edit) -> None:
    path = store / "s4d-table-6" / "20261128T094040_full.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    rc, _, err = _check(capsys, store, "s4d-table-6")
    assert rc == 2 and f"{path}: its bytes differ" in err


def test_a_file_the_ledger_does_not_list_is_named(store: Path, capsys: pytest.CaptureFixture) -> None:
    copy = store / "s4d-table-6" / "20261128T104040_full.json"
    shutil.copyfile(store / "s4d-table-6" / "20261128T094040_full.json", copy)
    rc, _, err = _check(capsys, store, "s4d-table-6")
    assert rc == 2 and f"{copy}: not listed in" in err
    assert main(["ledger", "add", str(copy)]) == 0  # a maintainer lists it once it is checked
    assert ledger.problems(store) == []


@pytest.mark.parametrize("text, why", [
    ('{"file": "a/b.json"}\n', "'file' and 'sha256'"),
    ("not json\n", "line 1 is not JSON"),
    ('{"file": 1, "sha256": "x"}\n', "'file' and 'sha256'"),
])
def test_a_broken_ledger_is_one_line(store: Path, capsys: pytest.CaptureFixture, text: str, why: str) -> None:
    (store / ledger.LEDGER_NAME).write_text(text)
    rc, _, err = _check(capsys, store, "s4d-table-6")
    assert rc == 2 and why in err and str(store / ledger.LEDGER_NAME) in err


def test_run_lists_its_file_in_the_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "mine"
    assert main(["run", "s4d-theorem-6", "--cells", "*/N=16", "--output", str(out), "--no-progress"]) == 0
    (written,) = (out / "s4d-theorem-6").glob("*_smoke.json")
    entries = ledger.read(out)
    entry = entries[f"s4d-theorem-6/{written.name}"]
    assert entry["sha256"] == ledger.file_digest(written) and entry["verdicts"]["PASS"] >= 1
    assert ledger.problems(out) == []


@pytest.mark.parametrize("argv, message", [
    (["ledger", "add"], "name the results files"),
    (["ledger", "add", "README.md"], "not a results file"),
    (["ledger", "add", "results/no-such/x.json"], "not a results file"),
    (["ledger", "check", "results/ledger.jsonl"], "takes no files"),
])
def test_ledger_commands_refuse_bad_arguments(capsys: pytest.CaptureFixture, monkeypatch, argv, message) -> None:
    monkeypatch.chdir(REPO)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_results_file_records_digests_of_what_made_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """A training run records digests of its configuration, spec and expected file and a manifest of the data it
    loaded; a configuration edited after the run no longer matches its digest: one line naming the file."""
    from runners.core.atomic import json_digest

    monkeypatch.chdir(REPO)
    out = tmp_path / "mine"
    assert main(["run", "s4d-table-5", "--output", str(out), "--no-progress", "--cells", "S4D-Inv*/*"]) == 0
    (path,) = (out / "s4d-table-5").glob("*_smoke.json")
    doc = json.loads(path.read_text())
    digests = doc["digests"]
    assert digests["config"] == json_digest(doc["config"]) and digests["spec"] == json_digest(doc["spec"])
    assert len(digests["expected"]) == 64
    text = digests["data"]["Text"]
    assert (text["train"], text["val"], text["test"]) == (128, 128, 128) and text["files"] > 0 and text["digest"]
    doc["config"]["train"]["lr"] = 0.5
    path.write_text(json.dumps(doc))
    (out / ledger.LEDGER_NAME).unlink()  # a folder without a ledger: the digest alone finds the edit
    capsys.readouterr()
    assert main(["check", "s4d-table-5", "--results", str(out)]) == 2
    assert "'config': its digest" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(steps_per_second=4000.0), "beyond the"),
    (lambda s: s.update(segments=[{"device": "Tesla K80", "from_global_step": 0}]), "peak of Tesla K80"),
    (lambda s: s.update(elapsed_seconds=60.0), "records 60 s of training"),
])
def test_an_implausible_run_is_refused_by_name(store: Path, capsys: pytest.CaptureFixture, edit, message) -> None:
    """The step rate held to the card's peak for the model's size, the training time to the steps at that rate."""
    path = store / "s4d-table-5" / "20261128T093417_full.json"
    doc = json.loads(path.read_text())
    edit(doc["series"]["S4-LegS (suite data) / Pathfinder"])
    path.write_text(json.dumps(doc))
    (store / ledger.LEDGER_NAME).unlink()  # the physics alone
    rc, _, err = _check(capsys, store, "s4d-table-5")
    assert rc == 2 and message in err and "S4-LegS (suite data) / Pathfinder" in err


def test_a_commit_not_in_the_history_is_named_in_the_report(store: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runners.core.layout.LOCAL_DIR", tmp_path / "local")
    path = store / "s4d-table-6" / "20261128T094040_full.json"
    doc = json.loads(path.read_text())
    doc["environment"]["git_commit"] = "0123456789abcdef0123456789abcdef01234567"
    path.write_text(json.dumps(doc))
    (store / ledger.LEDGER_NAME).unlink()
    assert main(["report", "--results", str(store)]) == 0
    report = (tmp_path / "local" / "tables" / "s4d-table-6.md").read_text()
    assert "0123456789abcdef0123456789abcdef01234567` (not in this repository's history" in report
