"""Verdicts that survive tampering: a wrong result never passes, a real FAIL never hides.

One class of bad input per section, each with several cases; every bad input gives a one-line error naming the
file and the key (exit 2) or a FAIL verdict (exit 1), never a traceback and never a PASS:

1. a diverged training cell (every validation metric NaN: the value is null) is FAIL "diverged", not NOT-RUN;
2. results files are ordered by the time they record, and a file dated in the future, misplaced, without spec_id
   or tier, a symlink / FIFO / folder, with a key given twice or selecting cells the expected file lacks is refused;
3. a newer file that left a cell null (not measured) never hides an older measured value;
4. every check knows its unit's physical range, and one-sided bounds are capped by the plausible factor;
5. ``compare``: NaN, null or missing cells in B are regressions; a spec_id is never a path;
6. ``check`` says when a PASS rests on --set overrides; the report's glance lists sanity FAILs, every tier's FAILs,
   claims that passed only after earlier runs failed, and training on uncommitted code.

Every case runs in a temporary project or a temporary results folder (``--results``); the committed results are
only read (copied into a temporary folder) where a case replays a tampering of them.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_compare_verdicts import TOY_SETTING, cell  # also registers the toy runner 'test.verdicts'

from runners.cli.main import main
from runners.judge.repeats import repeated_cells
from runners.judge.settings import Today
from runners.judge.verdicts import judge, judge_tier
from runners.report.compare import judge_change
from runners.report.glance import glance_lines
from runners.specs.spec import find_spec, load_spec
from runners.store.read import load_tier_results

#: every case runs under a time and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")

REPO = Path(__file__).resolve().parent.parent
TIERS = ("smoke", "budget", "full")


# ------------------------------------------------------------------------------------------------------ helpers

def write_expected(root: Path, cells: list[dict], table: str = "toy") -> None:
    doc = {"table": table, "paper": "s4", "title": "toy", "source": "nowhere",
           "rows": sorted({c["row"] for c in cells}), "columns": sorted({c["column"] for c in cells}), "cells": cells}
    (root / "expected" / f"{table}.yaml").write_text(yaml.safe_dump(doc))


def iso(stamp: str) -> str:
    return datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc).isoformat()


def result_doc(values: dict, stamp: str = "20260101T000000", tier: str = "smoke", rows: dict | None = None,
               **extra: Any) -> dict:
    """A results file's contents: cells r / <column> (values: column -> value or (value, note)); started and
    finished at the stamp unless given."""
    cells = []
    for column, v in values.items():
        value, note = v if isinstance(v, tuple) else (v, None)
        cells.append({"row": (rows or {}).get(column, "r"), "column": column, "value": value, "note": note})
    doc = {"spec_id": "toy", "tier": tier, **TOY_SETTING, "started": iso(stamp), "finished": iso(stamp),
           "cells": cells}
    doc.update(extra)
    return {k: v for k, v in doc.items() if v is not _DROP}


_DROP = object()


def write_result(root: Path, values: dict, stamp: str = "20260101T000000", tier: str = "smoke",
                 name: str | None = None, **extra: Any) -> Path:
    path = root / "results" / "toy" / (name or f"{stamp}_{tier}.json")
    path.write_text(json.dumps(result_doc(values, stamp, tier, **extra)))
    return path


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def check(capsys: pytest.CaptureFixture, tier: str = "smoke") -> tuple[int, str, str]:
    return cli(capsys, "check", "toy", "--tier", tier)


def assert_one_line_error(rc: int, err: str, *must: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for text in must:
        assert text in lines[0], (text, lines[0])
    return lines[0]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one spec (id toy, an analytic runner) and its expected file: c = 1.0 ± 0.1, d > c."""
    root = tmp_path / "proj"
    (root / "reproductions").mkdir(parents=True)
    (root / "expected").mkdir()
    (root / "results" / "toy").mkdir(parents=True)
    monkeypatch.chdir(root)
    spec = {"id": "toy", "paper": "s4", "table": "Table 0", "title": "toy", "groups": ["analytic"],
            "runner": "test.verdicts", "make": "toy", "tiers": {t: {"device": "cpu", "seed": 0} for t in TIERS}}
    (root / "reproductions" / "toy.yaml").write_text(yaml.safe_dump(spec))
    write_expected(root, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
                          cell("d", None, {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}})])
    return root


def copy_results(tmp_path: Path, spec_id: str, names: list[str]) -> Path:
    """Copies of committed results files in a results folder of the test's own (the originals are only read)."""
    root = tmp_path / "results"
    (root / spec_id).mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(REPO / "results" / spec_id / name, root / spec_id / name)
    return root


def committed(spec_id: str, name: str) -> dict:
    return json.loads((REPO / "results" / spec_id / name).read_text())


def set_value(doc: dict, row: str, column: str, value: Any, note: Any = "keep") -> None:
    for c in doc["cells"]:
        if (c["row"], c["column"]) == (row, column):
            c["value"] = value
            if note != "keep":
                c["note"] = note
            return
    raise KeyError((row, column))


def later(doc: dict, minutes: int = 1) -> dict:
    """``doc`` as a newer run: its times moved on by ``minutes``."""
    for key in ("started", "finished"):
        doc[key] = (datetime.fromisoformat(doc[key]) + timedelta(minutes=minutes)).isoformat()
    return doc


# =============================================================================================================
# 1. a diverged training cell is FAIL "diverged", not NOT-RUN

NAN_HISTORY = [{"epoch": 1, "train_loss": math.nan, "val_loss": math.nan, "val_metric": math.nan,
                "test_metric": math.nan, "partial": False}]


@pytest.mark.parametrize("value, note, series, config, verdict, detail", [
    # the runner's own words for a cell whose every validation metric was NaN (train.lr=1e12, a NaN target)
    (None, "best val epoch None, stop: completed", {"r / c": {"history": NAN_HISTORY, "stop_reason": "completed"}},
     None, "FAIL", "diverged"),
    # the same series, whatever the note says: the file shows the training diverged
    (None, "not measured: no CUDA device", {"r / c": {"history": NAN_HISTORY * 3}}, None, "FAIL", "diverged"),
    # validation metrics written as null instead of NaN
    (None, "best val epoch None, stop: completed",
     {"r / c": {"history": [{"epoch": 1, "val_metric": None, "val_loss": None}]}}, None, "FAIL", "diverged"),
    # a column '<task> accuracy' and a picked column of the task (tasks.<task>.columns)
    (None, "x", {"r / T": {"history": NAN_HISTORY}}, {"tasks": {"T": {"columns": {"best_val": "c"}}}}, "FAIL",
     "diverged"),
    # one of several columns a metric is picked under (S4D Table 6's suite data: Path-X and Path-X solved)
    (None, "x", {"r / T": {"history": NAN_HISTORY}}, {"tasks": {"T": {"columns": {"test": ["T2", "c"]}}}},
     "FAIL", "diverged"),
    # trained without a value and no series at all: the note records the training's stop
    (None, "best val epoch None, stop: max_minutes", None, None, "FAIL", "trained this cell"),
    # declared unmeasurable here: NOT-RUN with the runner's reason
    (None, "not measured: no CUDA device (peak memory is read from torch.cuda)", None, None, "NOT-RUN", "no CUDA"),
    (None, "data missing: $DATA_PATH/bidmc not found", {"r / other": {"history": NAN_HISTORY}}, None, "NOT-RUN",
     "data missing"),
])
def test_a_null_value_is_fail_unless_the_runner_declared_why(value, note, series, config, verdict: str,
                                                             detail: str) -> None:
    c = cell("c", None, {"bound": {"max": 5.0}, "role": "sanity"}, "lower", unit="RMSE")
    result = {"cells": [{"row": "r", "column": "c", "value": value, "note": note}], "series": series or {},
              "config": config or {}}
    (v,) = judge_tier({"rows": ["r"], "columns": ["c"], "cells": [c]}, [result], "smoke")
    assert v.verdict == verdict and detail in v.detail, (v.verdict, v.detail)


def test_a_diverged_series_does_not_fail_a_declared_side_metric() -> None:
    """A memory cell not measured on a CPU stays NOT-RUN beside a diverged test cell of the same training."""
    cells = [cell("T", None, {"bound": {"min": 0}}), cell("T peak memory MB", None, {"bound": {"min": 0}},
                                                          "lower", unit="MB")]
    result = {"cells": [{"row": "r", "column": "T", "value": None, "note": "best val epoch None, stop: completed"},
                        {"row": "r", "column": "T peak memory MB", "value": None,
                         "note": "not measured: no CUDA device (peak memory is read from torch.cuda)"}],
              "series": {"r / T": {"history": NAN_HISTORY}}}
    by = {v.column: v for v in judge_tier({"rows": ["r"], "columns": ["T", "T peak memory MB"], "cells": cells},
                                          [result], "smoke")}
    assert by["T"].verdict == "FAIL" and "diverged" in by["T"].detail
    assert by["T peak memory MB"].verdict == "NOT-RUN"


def test_a_diverged_cell_fails_check(project: Path, capsys: pytest.CaptureFixture) -> None:
    write_result(project, {"c": (None, "best val epoch None, stop: completed"), "d": 2.0},
                 series={"r / c": {"history": NAN_HISTORY}})
    rc, out, err = check(capsys)
    assert rc == 1 and "diverged" in out and not err
    write_result(project, {"c": (None, "not measured: no CUDA device"), "d": 2.0}, stamp="20260102T000000")
    rc, out, _ = check(capsys)  # a later declared null does not hide the diverged run: it is not a measurement
    assert rc == 1 and "diverged" in out


# ---- the brief's command, end to end: a regression cell trained at lr 1e12, and a BIDMC .ts whose target is NaN

def _bidmc_project(root: Path, prepare: bool) -> None:
    (root / "reproductions").mkdir(parents=True)
    (root / "expected").mkdir()
    task: dict = {"loader": "bidmc", "loader_args": {"target": "SpO2", "normalize_targets": True}}
    if prepare:
        task["prepare"] = {"preparer": "bidmc_standin", "n_train": 12, "n_test": 4, "seed": 0}
    tier = {"tasks": {"BIDMC SpO2": task},
            "models": {"S4D-Lin (stand-in)": {"arch": "ssm", "model": {"d_model": 4, "n_layers": 1,
                                                                       "layer": {"mode": "s4d", "d_state": 4}}}},
            "train": {"lr": 0.01, "epochs": 1, "batch_size": 4, "max_steps_per_epoch": 2, "scheduler": "constant"}}
    spec = {"id": "tiny-bidmc", "paper": "s4d", "table": "Table 0", "title": "tiny", "groups": ["ablation"],
            "runner": "train.table", "make": "tiny", "tiers": {t: tier for t in TIERS}}
    (root / "reproductions" / "tiny_bidmc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    c = cell("BIDMC SpO2", None, {"bound": {"max": 2.0}, "role": "sanity"}, "lower", row="S4D-Lin (stand-in)",
             unit="RMSE (target std units)")
    c["checks"] = {"smoke": c["checks"]["smoke"], "budget": {"not_run": "smoke only"},
                   "full": {"not_run": "smoke only"}}
    write_expected(root, [c], table="tiny-bidmc")


@pytest.mark.parametrize("how", ["lr", "nan_target"])
def test_a_training_that_diverges_end_to_end_is_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture, how: str) -> None:
    from runners.data.standins import write_bidmc_standin

    root = tmp_path / "proj"
    _bidmc_project(root, prepare=how == "lr")
    monkeypatch.chdir(root)
    monkeypatch.setenv("DATA_PATH", str(tmp_path / "data"))
    if how == "nan_target":  # the archive's .ts files with every target NaN
        folder = write_bidmc_standin(tmp_path / "data", n_train=12, n_test=4, seed=0)
        for ts in folder.rglob("*.ts"):
            lines = ts.read_text().splitlines()
            start = lines.index("@data") + 1
            ts.write_text("\n".join(lines[:start] + [ln.rsplit(":", 1)[0] + ":nan" for ln in lines[start:]]) + "\n")
    extra = ["--set", "train.lr=1.0e+12"] if how == "lr" else []
    out_dir = tmp_path / "out"
    status = main(["run", "tiny-bidmc", "--no-progress", "--output", str(out_dir), *extra])
    run_err = capsys.readouterr().err
    # a NaN target is malformed data, refused where it enters: bad input (exit 2), the results file still written
    assert status == (2 if how == "nan_target" else 0), run_err
    rc, out, err = cli(capsys, "check", "tiny-bidmc", "--tier", "smoke", "--results", str(out_dir))
    assert "PASS 1" not in out and not err
    if how == "nan_target" and "not a finite number" in run_err:
        # the loader refuses the file where it enters (runners/data/bidmc.py): one line naming the file and what
        # is allowed, and the cell is not run, with that reason
        line = next(ln for ln in run_err.splitlines() if "BIDMC32SpO2_TRAIN.ts" in ln)
        assert "not a finite number" in line and "allowed" in line
        assert "NOT-RUN 1" in out
        return
    assert rc == 1 and "FAIL" in out and "diverged" in out and "NOT-RUN 1" not in out, (out, err)


# =============================================================================================================
# 2. results files: ordered by the time they record; misplaced, future-dated, malformed or special files refused

def test_files_are_ordered_by_the_time_they_record(project: Path, capsys: pytest.CaptureFixture) -> None:
    write_result(project, {"c": 1.0, "d": 2.0}, stamp="20260105T000000")  # PASS, run last
    # a failing copy whose name sorts after every other file but that records an earlier run
    write_result(project, {"c": 3.0, "d": 2.0}, stamp="20260103T000000", name="20260109T000000_smoke.json")
    rc, out, _ = check(capsys)
    assert rc == 0 and "PASS 2" in out and "20260105T000000_smoke.json" in out
    # a file without recorded times falls back to its name's stamp
    write_result(project, {"c": 3.0, "d": 2.0}, stamp="20260107T000000", started=_DROP, finished=_DROP)
    rc, out, _ = check(capsys)
    assert rc == 1 and "20260107T000000_smoke.json" in out
    # 'started' alone counts when 'finished' is missing
    write_result(project, {"c": 1.0, "d": 2.0}, stamp="20260108T000000", name="20260101T000001_smoke.json",
                 finished=_DROP)
    assert check(capsys)[0] == 0
    loaded = load_tier_results("toy", "smoke", project / "results")
    assert [p.name for p, _ in loaded] == ["20260101T000001_smoke.json",  # started 2026-01-08
                                           "20260107T000000_smoke.json",  # its name's stamp
                                           "20260105T000000_smoke.json",
                                           "20260109T000000_smoke.json"]  # finished 2026-01-03


def _future(days: int = 1) -> datetime:
    return datetime.now(timezone.utc) + timedelta(days=days)


@pytest.mark.parametrize("case, must", [
    ("future_name", ["20991231T000000_smoke.json", "dated in the future", "file name's stamp"]),
    ("future_finished", ["dated in the future", "'finished'"]),
    ("future_started", ["dated in the future", "'started'"]),
    ("finished_before_started", ["'finished'", "before 'started'"]),
    ("finished_not_a_time", ["'finished'", "ISO 8601"]),
    ("finished_not_a_string", ["'finished'", "ISO 8601"]),
    ("no_spec_id", ["'spec_id'"]),
    ("no_tier", ["'tier'"]),
    ("spec_id_elsewhere", ["'spec_id' is 'other'", "folder"]),
    ("spec_id_a_path", ["'spec_id'", "plain name"]),
    ("tier_elsewhere", ["'tier' is 'full'", "file name"]),
    ("tier_unknown", ["'tier' is 'huge'"]),
    ("duplicate_top_key", ["'cells' is given twice"]),
    ("duplicate_cell_key", ["'value' is given twice"]),
    ("selected_unknown_cell", ["'selected_cells'", "r / nonesuch", "expected"]),
    ("stamp_not_a_date", ["stamp", "not a date"]),
    ("overrides_not_strings", ["'overrides'"]),
])
def test_a_misplaced_or_malformed_results_file_is_one_line(project: Path, capsys: pytest.CaptureFixture,
                                                           case: str, must: list[str]) -> None:
    write_result(project, {"c": 1.0, "d": 2.0})  # a good file beside the bad one
    good = {"c": 3.0, "d": 2.0}
    base = project / "results" / "toy"
    if case == "future_name":
        bad = write_result(project, good, name="20991231T000000_smoke.json")
    elif case == "future_finished":
        bad = write_result(project, good, stamp="20260102T000000", finished=_future().isoformat())
    elif case == "future_started":
        bad = write_result(project, good, stamp="20260102T000000", started=_future(400).isoformat(),
                           finished=_DROP)
    elif case == "finished_before_started":
        bad = write_result(project, good, stamp="20260102T000000", started=iso("20260103T000000"))
    elif case == "finished_not_a_time":
        bad = write_result(project, good, stamp="20260102T000000", finished="now")
    elif case == "finished_not_a_string":
        bad = write_result(project, good, stamp="20260102T000000", finished=20260102)
    elif case == "no_spec_id":
        bad = write_result(project, good, stamp="20260102T000000", spec_id=_DROP)
    elif case == "no_tier":
        bad = base / "20260102T000000_smoke.json"
        doc = result_doc(good, "20260102T000000")
        del doc["tier"]
        bad.write_text(json.dumps(doc))
    elif case == "spec_id_elsewhere":
        bad = write_result(project, good, stamp="20260102T000000", spec_id="other")
    elif case == "spec_id_a_path":
        bad = write_result(project, good, stamp="20260102T000000", spec_id=str(project / "expected" / "toy"))
    elif case == "tier_elsewhere":
        bad = base / "20260102T000000_smoke.json"
        bad.write_text(json.dumps({**result_doc(good, "20260102T000000"), "tier": "full"}))
    elif case == "tier_unknown":
        bad = base / "20260102T000000_smoke.json"
        bad.write_text(json.dumps({**result_doc(good, "20260102T000000"), "tier": "huge"}))
    elif case == "duplicate_top_key":
        bad = base / "20260102T000000_smoke.json"
        text = json.dumps(result_doc(good, "20260102T000000"))
        bad.write_text(text[:-1] + ', "cells": [{"row": "r", "column": "c", "value": 1.0}]}')
    elif case == "duplicate_cell_key":
        bad = base / "20260102T000000_smoke.json"
        bad.write_text(json.dumps(result_doc(good, "20260102T000000")).replace('"value": 3.0',
                                                                               '"value": 3.0, "value": 1.0'))
    elif case == "selected_unknown_cell":
        bad = write_result(project, good, stamp="20260102T000000", selected_cells=[["r", "c"], ["r", "nonesuch"]])
    elif case == "stamp_not_a_date":
        bad = write_result(project, good, name="20261399T000000_smoke.json")
    elif case == "overrides_not_strings":
        bad = write_result(project, good, stamp="20260102T000000", overrides=[{"train.lr": 1}])
    rc, out, err = check(capsys)
    where = str(bad.relative_to(project))  # results/toy/<name>: the results folder as the command was given it
    assert_one_line_error(rc, err, where, *must)
    assert "PASS" not in out
    assert main(["report"]) == 2  # the report refuses it with the same line
    assert_one_line_error(2, capsys.readouterr().err, where, *must)


@pytest.mark.parametrize("kind", ["symlink", "dangling_symlink", "fifo", "fifo_other_name", "folder",
                                  "spec_folder_symlink"])
def test_a_results_entry_that_is_not_a_regular_file_is_one_line(project: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture, kind: str) -> None:
    """Never followed, never opened (a FIFO would block a reader forever): one line naming it."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(result_doc({"c": 1.0, "d": 2.0}, "20260102T000000")))
    base = project / "results" / "toy"
    write_result(project, {"c": 3.0, "d": 2.0})
    if kind == "symlink":
        bad = base / "20260102T000000_smoke.json"
        bad.symlink_to(elsewhere)
    elif kind == "dangling_symlink":
        bad = base / "20260102T000000_smoke.json"
        bad.symlink_to(tmp_path / "missing.json")
    elif kind == "fifo":
        bad = base / "20260102T000000_smoke.json"
        os.mkfifo(bad)
    elif kind == "fifo_other_name":
        bad = base / "pipe"
        os.mkfifo(bad)
    elif kind == "folder":
        bad = base / "20260102T000000_smoke.json"
        bad.mkdir()
    else:
        real = tmp_path / "real_toy"
        shutil.copytree(base, real)
        shutil.rmtree(base)
        base.symlink_to(real)
        bad = base
    rc, out, err = check(capsys)
    assert_one_line_error(rc, err, str(bad.relative_to(project)), "symlink" if "symlink" in kind else
                          "FIFO" if "fifo" in kind else "folder")


def test_a_results_file_given_to_compare_is_read_by_the_same_loader(project: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    good = write_result(project, {"c": 1.0, "d": 2.0})
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert_one_line_error(*cli(capsys, "compare", str(good), str(link))[::2], str(link), "symlink")
    dup = tmp_path / "dup.json"
    dup.write_text(good.read_text()[:-1] + ', "spec_id": "toy"}')
    assert_one_line_error(*cli(capsys, "compare", str(good), str(dup))[::2], str(dup), "given twice")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert_one_line_error(*cli(capsys, "compare", str(fifo), str(good))[::2], str(fifo), "FIFO")


# =============================================================================================================
# 3. a newer file that left a cell null (not measured) never hides an older measured value

@pytest.mark.parametrize("older, newer, rc, verdict_text", [
    ({"c": 3.0, "d": 4.0}, {"c": (None, "not measured: no CUDA device")}, 1, "FAIL"),  # the FAIL stays
    ({"c": 1.0, "d": 2.0}, {"c": (None, "data missing: not here")}, 0, "PASS 2"),  # the PASS stays too
    ({"c": 1.0, "d": 2.0}, {"c": (None, None)}, 1, "no value and no reason"),  # a null without a reason: FAIL
    ({"c": 1.0, "d": 2.0}, {"c": (None, "best val epoch None, stop: completed")}, 1, "no value although"),
])
def test_a_newer_null_never_hides_an_older_measurement(project: Path, capsys: pytest.CaptureFixture, older: dict,
                                                       newer: dict, rc: int, verdict_text: str) -> None:
    write_result(project, older)
    write_result(project, newer, stamp="20260102T000000", selected_cells=[["r", k] for k in newer])
    got, out, err = check(capsys)
    assert got == rc and verdict_text in out and not err, out
    if rc == 1 and newer["c"][1] and "not measured" in newer["c"][1]:
        assert "did not measure it" in out


def test_an_ordering_reads_an_older_measured_reference_over_a_newer_null(project: Path) -> None:
    expected = yaml.safe_load((project / "expected" / "toy.yaml").read_text())
    older = result_doc({"c": 5.0, "d": 2.0})
    newer = result_doc({"c": (None, "not measured: no CUDA device"), "d": 2.5}, "20260102T000000",
                       selected_cells=[["r", "d"]])
    by = {v.column: v for v in judge_tier(expected, [newer, older], "smoke")}
    assert by["d"].verdict == "FAIL" and "from results file 2" in by["d"].detail  # 2.5 > 5 does not hold


def test_s4d_table5_pathfinder_fails_stay_after_a_newer_null_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """The committed full tier of S4D Table 5 (ListOps and Pathfinder measured at earlier settings, STALE),
    plus a newer file that reports the four Pathfinder cells as null: they stay judged by the older file (STALE,
    not NOT-RUN)."""
    monkeypatch.chdir(REPO)
    names = ["20261127T030148_full.json", "20261127T013850_full.json"]
    root = copy_results(tmp_path, "s4d-table-5", names)
    doc = later(committed("s4d-table-5", names[0]), 30)
    rows = ["S4-LegS (suite data)", "S4D-LegS (suite data)", "S4D-Inv (suite data)", "S4D-Lin (suite data)"]
    doc["cells"] = [{"row": r, "column": "Pathfinder", "value": None, "note": "not measured: data missing"}
                    for r in rows]
    doc["selected_cells"] = [[r, "Pathfinder"] for r in rows]
    doc["series"] = {}
    (root / "s4d-table-5" / "20261127T060000_full.json").write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", "s4d-table-5", "--tier", "full", "--results", str(root))
    assert rc == 0 and not err  # the 20-epoch runs pooled the mean: today's spec pools the last position;
    assert "PASS 0, FAIL 0, IMPROVED 0, STALE 8" in out  # ListOps warmed up for an epoch: today's spec for steps


# =============================================================================================================
# 4. every check knows its unit's physical range; one-sided bounds are capped by the plausible factor

@pytest.mark.parametrize("c, value, verdict, detail", [
    # % in [0, 100]
    (cell("c", 59.6, {"bound": {"min": 37.27}}, unit="% acc"), 381.0, "FAIL", "physical range"),
    (cell("c", 59.6, {"bound": {"min": 37.27}}, unit="% acc"), -5.0, "FAIL", "physical range"),
    (cell("c", 59.6, {"bound": {"min": 37.27}}, unit="% acc"), 59.0, "PASS", ""),
    (cell("c", 90.0, {"tolerance": {"abs": 20}}, unit="%"), 100.5, "FAIL", "physical range"),
    # times, memory, rates, speed-ups > 0
    (cell("c", 4.75, {"within_factor": 2}, "lower", unit="ms"), -1.0, "FAIL", "physical range"),
    (cell("c", 4.75, {"within_factor": 2}, "lower", unit="ms"), 0.0, "FAIL", "physical range"),
    (cell("c", 13140, {"tolerance": {"rel": 0.5}}, "lower", unit="MB"), -13140.0, "FAIL", "physical range"),
    (cell("c", None, {"bound": {"min": 0.001}}, unit="steps/s"), -3.0, "FAIL", "physical range"),
    (cell("c", None, {"bound": {"min": 10}}, unit="ratio"), 0.0, "FAIL", "physical range"),
    (cell("c", None, {"bound": {"max": 200000}}, "lower", unit="parameters"), -1.0, "FAIL", "physical range"),
    (cell("c", None, {"bound": {"min": 1}}, unit="1 = ran, X = out of memory"), 2.0, "FAIL", "physical range"),
    (cell("c", 0.09, {"bound": {"max": 0.869}}, "lower", unit="RMSE"), -0.05, "FAIL", "physical range"),
    # units without a range: a delta may be negative
    (cell("c", -7.27, {"bound": {"max": 0.0}}, unit="delta"), -6.0, "PASS", ""),
    # one-sided bounds capped at the default plausible factor 2 of the paper value
    (cell("c", 60, {"bound": {"min": 10}}, unit="ratio"), 1010.0, "FAIL", "implausible"),  # 1010x speed-up
    (cell("c", 60, {"bound": {"min": 10}}, unit="ratio"), 101.0, "PASS", ""),
    (cell("c", 65.1, {"bound": {"min": 10}}, unit="ratio"), 400.7, "FAIL", "implausible"),  # 10x the throughput
    (cell("c", 0.09, {"bound": {"max": 0.869}}, "lower", unit="RMSE"), 0.01, "FAIL", "implausible"),
    (cell("c", 0.09, {"bound": {"max": 0.869}}, "lower", unit="RMSE"), 0.3, "PASS", ""),
    (cell("c", 0.0, {"bound": {"max": 1e-6}}, "lower", unit="rel"), 3e-12, "PASS", ""),  # an error near 0
    # an accuracy written as a fraction where the paper gives a percentage
    (cell("c", 60.18, {"bound": {"max": 99}}, unit="% acc"), 0.1715, "FAIL", "fraction"),
    (cell("c", 60.18, {"tolerance": {"abs": 1.5}}, unit="% acc"), 0.6018, "FAIL", "fraction"),
    # ... but a measured 0.1 % where the cell has no paper value is a measurement (resolution change, step x1)
    (cell("c", None, {"bound": {"max": 50}}, unit="% acc"), 0.1, "PASS", ""),
])
def test_every_check_knows_its_units_range(c: dict, value: float, verdict: str, detail: str) -> None:
    v = judge(c, "smoke", {("r", "c"): value})
    assert v.verdict == verdict and detail in v.detail, (v.verdict, v.detail)


@pytest.mark.parametrize("ref_value, ref_paper, significance, detail", [
    (100.3, None, {"n": 1000, "z": 2}, "physical range"),  # 100.3 % flips a significance test today
    (-1.0, None, None, "physical range"),
    (0.1715, 60.18, None, "fraction"),  # the reference written as a fraction
])
def test_an_ordering_reference_outside_its_range_fails(ref_value: float, ref_paper, significance,
                                                       detail: str) -> None:
    check = {"ordering": {"less_than": [{"row": "r", "column": "d"}]}}
    if significance:
        check["significance"] = significance
    c = cell("c", None, check, unit="%")
    d = cell("d", ref_paper, {"not_run": "reported"}, unit="%")
    v = judge(c, "smoke", {("r", "c"): 100.0 if significance else 50.0, ("r", "d"): ref_value},
              table={("r", "c"): c, ("r", "d"): d})
    assert v.verdict == "FAIL" and detail in v.detail, v.detail
    # and as the cell of a greater_than ordering whose own paper value is a percentage
    g = cell("c", 60.18, {"ordering": {"greater_than": [{"row": "r", "column": "d"}]}}, unit="% acc")
    assert judge(g, "smoke", {("r", "c"): 0.1715, ("r", "d"): 0.1}).verdict == "FAIL"


@pytest.mark.parametrize("spec_id, name, row, column, factor, must", [
    ("s4-generation", "20261127T014311_budget.json", "S4", "Speedup (Table 8)", 10.0, "implausible"),  # 1010x
    ("s4-generation", "20261127T014311_budget.json", "S4", "Speedup (Table 7)", 10.0, "implausible"),
])
def test_tampered_committed_values_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture, spec_id: str, name: str, row: str,
                                        column: str, factor: float, must: str) -> None:
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, spec_id, [])
    doc = committed(spec_id, name)
    value = next(c["value"] for c in doc["cells"] if (c["row"], c["column"]) == (row, column))
    set_value(doc, row, column, value * factor)
    if column.startswith("Speedup"):  # the throughput the speed-up comes from, times the same factor
        throughput = "Images/s (Table 7)" if "7" in column else "Tokens/s (Table 8)"
        set_value(doc, row, throughput, next(c["value"] for c in doc["cells"]
                                             if (c["row"], c["column"]) == (row, throughput)) * factor)
    (root / spec_id / name).write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", spec_id, "--tier", "budget", "--results", str(root))
    assert rc == 1 and not err
    line = next(ln for ln in out.splitlines() if must in ln)
    assert "FAIL" in line


@pytest.mark.parametrize("spec_id, name, row, column, factor", [
    ("s4d-table-5", "20261126T083735_budget.json", "S4D-Inv (suite data)", "ListOps", 381.0 / 17.15),  # 381 %
    ("init-ablation", "20261126T083734_budget.json", "S4D-Lin", "Sequential Shapes (suite data)", 1.003),
    ("s4d-table-5", "20261128T093417_full.json", "S4-LegS (suite data)", "Pathfinder", 1.0005),  # inside +-1.5
    ("s4d-table-6", "20261128T094040_full.json", "Path-X", "S4D (suite data)", 1.02),  # a transposed table
    ("s4d-table-6", "20261128T094040_full.json", "Trainable parameters", "S4D (suite data)", 0.5),
])
def test_an_edited_training_value_is_an_error_naming_the_file_and_the_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, spec_id: str, name: str,
        row: str, column: str, factor: float) -> None:
    """A trained cell's value is computed again from the series its file records: any edit, even one inside the
    check's tolerance, is one line naming the file and the cell (exit 2), never a verdict."""
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, spec_id, [])
    doc = committed(spec_id, name)
    value = next(c["value"] for c in doc["cells"] if (c["row"], c["column"]) == (row, column))
    set_value(doc, row, column, value * factor)
    (root / spec_id / name).write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", spec_id, "--results", str(root))
    assert_one_line_error(rc, err, name, f"cell ({row}, {column})", "its series gives")
    assert "PASS" not in out


def test_a_series_copied_from_another_run_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    """A Path-X cell that never ran, with another run's series copied under its name: the value does not follow
    from the copied series (or, copied with it, the setting is not today's): never a PASS."""
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, "s4d-table-5", [])
    doc = committed("s4d-table-5", "20261128T093417_full.json")
    pathx = committed("s4d-table-6", "20261128T094040_full.json")["series"]["S4D (suite data) / Path-X"]
    doc["series"]["S4-LegS (suite data) / Path-X"] = pathx
    doc["cells"].append({"row": "S4-LegS (suite data)", "column": "Path-X", "value": 96.0, "unit": "% acc",
                         "note": "best val epoch 49, stop: completed"})
    doc["selected_cells"].append(["S4-LegS (suite data)", "Path-X"])
    path = root / "s4d-table-5" / "20261128T093417_full.json"
    path.write_text(json.dumps(doc))  # the configuration the file records has no Path-X: STALE
    rc, out, err = cli(capsys, "check", "s4d-table-5", "--tier", "full", "--results", str(root), "-v")
    line = next(x for x in out.splitlines() if x.startswith("S4-LegS (suite data)") and "Path-X" in x)
    assert rc == 0 and "STALE" in line and "does not produce this cell" in line, line
    from runners.judge.settings import today_settings
    from runners.specs.spec import find_spec, load_spec

    doc["config"] = today_settings(load_spec(find_spec("s4d-table-5")), "full")("suite")  # today's, forged too
    path.write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", "s4d-table-5", "--tier", "full", "--results", str(root))
    assert_one_line_error(rc, err, "cell (S4-LegS (suite data), Path-X)", "its series gives 90.12")
    doc["cells"][-1]["value"] = 90.12  # the copied series' own value, judged at today's setting: 96.35 +- 3
    path.write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", "s4d-table-5", "--tier", "full", "--results", str(root), "-v")
    line = next(x for x in out.splitlines() if x.startswith("S4-LegS (suite data)") and "Path-X" in x)
    assert rc == 1 and "FAIL" in line, line


def test_an_edited_configuration_is_stale_with_the_keys_that_differ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """The recorded configuration of a passing run edited (20 epochs, H 128): STALE, naming the keys."""
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, "s4d-table-6", [])
    doc = committed("s4d-table-6", "20261128T094040_full.json")
    doc["config"]["train"]["epochs"] = 20
    doc["config"]["model_defaults"]["ssm"]["d_model"] = 64
    (root / "s4d-table-6" / "20261128T094040_full.json").write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "check", "s4d-table-6", "--tier", "full", "--results", str(root), "-v")
    assert rc == 0 and not err
    assert "PASS 0," in out and "STALE 2" in out
    assert "train.epochs: 20 -> 50" in out and "model.d_model: 64 -> 128" in out


def test_a_run_duplicated_as_a_second_seed_is_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    """A copy of a run relabelled seed 1 records the same series: one run, not two seeds; a genuine second seed
    (another series) is judged with the first as their mean."""
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, "s4d-table-6", ["20261128T094040_full.json"])
    from runners.store.evidence import rebuilt_values

    doc = later(committed("s4d-table-6", "20261128T094040_full.json"), 60)
    doc["seed"], doc["overrides"] = 1, ["seed=1"]
    (root / "s4d-table-6" / "20261128T104040_full.json").write_text(json.dumps(doc))
    rc, out, _ = cli(capsys, "check", "s4d-table-6", "--tier", "full", "--results", str(root), "-v")
    assert rc == 0 and "mean of" not in out
    history = doc["series"]["S4D (suite data) / Path-X"]["history"]
    for entry in history:  # another run: every test accuracy 2 points lower
        entry["test_metric"] -= 2.0
    for (row, column), value in rebuilt_values(doc).items():  # its cells as its series give them
        set_value(doc, row, column, value)
    (root / "s4d-table-6" / "20261128T104040_full.json").write_text(json.dumps(doc))
    rc, out, _ = cli(capsys, "check", "s4d-table-6", "--tier", "full", "--results", str(root), "-v")
    line = next(x for x in out.splitlines() if x.startswith("Path-X ") and "solved" not in x and "(suite" in x)
    assert "mean of 2 seeds 89.12" in line and "seed 0: 90.12" in line and "seed 1: 88.12" in line, line


# =============================================================================================================
# 5. compare: NaN, null or missing cells in B are regressions; a spec_id is never a path

@pytest.mark.parametrize("a, b, status", [
    (10.0, math.nan, "not finite now"),
    (10.0, math.inf, "not finite now"),
    (10.0, None, "only in A"),
    ("X", None, "only in A"),
    (math.nan, 10.0, "fixed"),
    (None, 10.0, "only in B"),
])
def test_judge_change_keeps_what_b_lost(a, b, status: str) -> None:
    assert judge_change(a, b, "higher", 0.05)[1] == status


@pytest.mark.parametrize("b_values, b_extra, rc, status", [
    ({"c": 1.0, "d": math.nan}, {}, 1, "not finite now"),
    ({"c": 1.0, "d": None}, {}, 1, "only in A"),
    ({"c": 1.0}, {}, 1, "only in A"),  # the cell is missing from B
    ({"c": 1.0}, {"selected_cells": [["r", "c"]]}, 0, "not selected in B"),  # B was a narrower run
    ({"c": 1.0, "d": 2.0}, {}, 0, "within"),
])
def test_compare_counts_lost_cells_as_regressions(project: Path, capsys: pytest.CaptureFixture, b_values: dict,
                                                  b_extra: dict, rc: int, status: str) -> None:
    a = write_result(project, {"c": 1.0, "d": 2.0})
    b = write_result(project, b_values, stamp="20260102T000000", **b_extra)
    got, out, err = cli(capsys, "compare", str(a), str(b))
    assert got == rc and status in out and not err, out
    if rc == 1:
        assert "regressions: 1" in out


def test_compare_counts_a_lost_benchmark_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def bench(records: list[dict]) -> dict:
        return {"spec": "bench-layers", "created": "now", "environment": {}, "rows": records}
    rec = {"mode": "s4", "L": 4096, "ms": 2.0, "peak_mib": 900.0}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(bench([rec, {**rec, "L": 1024}])))
    b.write_text(json.dumps(bench([{**rec, "ms": math.nan}, {**rec, "L": 1024}])))
    c.write_text(json.dumps(bench([rec])))
    assert main(["compare", str(a), str(b)]) == 1 and "not finite now" in capsys.readouterr().out
    assert main(["compare", str(a), str(c)]) == 1 and "only in A" in capsys.readouterr().out
    assert main(["compare", str(a), str(a)]) == 0


@pytest.mark.parametrize("spec_id", ["ABS", "../expected/evil", "evil.yaml", "toy/../toy", "nonesuch", ""])
def test_compare_never_uses_a_spec_id_as_a_path(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                spec_id: str) -> None:
    """An expected file planted elsewhere, with 'better' reversed, would turn the regression into 'improved'."""
    planted = tmp_path / "evil.yaml"
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}, "lower"),
                             cell("d", None, {"not_run": "x"})], table="toy")
    shutil.copyfile(project / "expected" / "toy.yaml", planted)
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
                             cell("d", None, {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}})])
    spec_id = str(planted.with_suffix("")) if spec_id == "ABS" else spec_id
    a = write_result(project, {"c": 10.0}, spec_id=spec_id)
    b = write_result(project, {"c": 5.0}, stamp="20260102T000000", spec_id=spec_id)
    rc, out, err = cli(capsys, "compare", str(a), str(b))
    assert_one_line_error(rc, err, str(a), "'spec_id'")
    assert "improved" not in out
    # the same files with the plain id: a regression (higher is better in expected/toy.yaml)
    for path in (a, b):
        path.write_text(path.read_text().replace(json.dumps(spec_id), '"toy"'))
    rc, out, _ = cli(capsys, "compare", str(a), str(b))
    assert rc == 1 and "regressed" in out


# =============================================================================================================
# 6. check says what a PASS rests on; the glance lists what a reader must not miss

def test_a_run_with_overrides_is_judged_by_its_setting(project: Path, capsys: pytest.CaptureFixture) -> None:
    """A run whose overrides changed the setting is STALE, never a PASS of the spec; a run at the spec's setting
    judges the cells (it says so where it ran with overrides that leave the setting as it is) and outranks a newer
    run at another setting."""
    variant = {"overrides": ["value=5.0"], "config": {"value": 5.0, "tasks": {}}}
    write_result(project, {"c": 1.0, "d": 2.0}, **variant)
    rc, out, _ = cli(capsys, "check", "toy", "--tier", "smoke", "-v")
    assert rc == 0 and "claims: PASS 0, FAIL 0, IMPROVED 0, STALE 2" in out
    assert "(--set value=5.0): config.value: 5.0 -> 1.0" in out
    write_result(project, {"c": 1.0, "d": 2.0}, stamp="20260102T000000", overrides=["value=1.0"])
    rc, out, _ = cli(capsys, "check", "toy", "--tier", "smoke", "-v")
    assert rc == 0 and "claims: PASS 2," in out
    assert out.count("ran with --set value=1.0, which today's spec sets the same") == 2
    write_result(project, {"c": 9.0, "d": 2.0}, stamp="20260103T000000", **variant)
    rc, out, _ = check(capsys)
    assert rc == 0 and "claims: PASS 2," in out and "20260102T000000" in out


def _glance(spec_id: str, tier: str, root: Path) -> str:
    from runners.specs.expected import expected_path, load_expected

    expected = load_expected(expected_path(spec_id))
    files = load_tier_results(spec_id, tier, root)
    docs = [doc for _, doc in files]
    today = Today.of_spec(load_spec(find_spec(spec_id)), tier)
    verdicts = judge_tier(expected, docs, tier, today)
    return "\n".join(glance_lines(tier, files, verdicts, repeated_cells(expected, docs, tier, verdicts, today)))


def test_the_glance_lists_sanity_fails_and_other_tiers_fails(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    root = copy_results(tmp_path, "s4-table-3", ["20261127T034354_full.json", "20261127T034315_budget.json"])
    text = _glance("s4-table-3", "full", root)  # both files ran with --set step_graph=true: STALE today
    stale = next(line for line in text.splitlines() if line.startswith("- STALE at this tier: 21"))
    assert "config.step_graph: true -> false" in stale
    assert "FAIL" not in text and "PASS" not in text


def test_the_glance_on_committed_runs_at_earlier_settings_and_on_uncommitted_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S4D Table 5's committed full tier: ListOps measured three times (FAIL, FAIL, then PASS when judged at their
    own settings), every run at a setting the spec no longer has: each run of the repeats reads STALE, so no claim
    'passed only after earlier runs failed'; the cells trained partly on uncommitted code are named."""
    monkeypatch.chdir(REPO)
    names = ["20261127T030148_full.json", "20261127T013850_full.json", "20261126T235013_full.json",
             "20261126T151807_full.json", "20261126T083735_budget.json"]
    root = copy_results(tmp_path, "s4d-table-5", names)
    text = _glance("s4d-table-5", "full", root)
    repeated = next(line for line in text.splitlines() if line.startswith("- measured in more than one run"))
    assert "4 claims, every earlier run judged the same" in repeated and "3 configurations" in repeated
    assert not any(line.startswith("- passed only after earlier runs failed") for line in text.splitlines())
    dirty = next(line for line in text.splitlines() if line.startswith("- trained partly on uncommitted code"))
    assert "4 cells" in dirty and "plus uncommitted changes" in dirty
    stale = next(line for line in text.splitlines() if line.startswith("- STALE at this tier: 8"))
    assert "S4D-Inv (suite data) / Pathfinder 90.75 (model.pool: \"mean\" -> \"last\"" in stale


def test_the_glance_on_a_toy_project(project: Path, capsys: pytest.CaptureFixture) -> None:
    """The same bullets from a project of its own: a sanity FAIL, a claim that passed after a run with another
    configuration failed, a cell trained partly on uncommitted code, a FAIL at another tier."""
    from runners.report.markdown import report_all

    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
                             cell("s", None, {"bound": {"min": 0}, "role": "sanity"})])
    segments = [{"git_commit": "abcdef1234", "git_dirty": True, "device": "CPU", "from_global_step": 0},
                {"git_commit": "abcdef1234", "git_dirty": False, "device": "CPU", "from_global_step": 5}]
    write_result(project, {"c": 3.0, "s": 1.0}, tier="budget", config={"value": 0.5, "tasks": {}})
    write_result(project, {"c": 1.0, "s": -1.0}, stamp="20260102T000000", tier="budget",
                 series={"r / c": {"history": [{"epoch": 1, "val_metric": 1.0}], "segments": segments}})
    write_result(project, {"c": 9.0, "s": 1.0}, stamp="20260103T000000", tier="smoke")
    report_all(project / "tables")
    head = (project / "tables" / "toy.md").read_text().split("Paper:")[0]
    assert "**At a glance (budget tier):**" in head
    assert "- sanity FAIL at this tier: 1" in head and "r / s -1 FAIL" in head
    assert ("- passed only after earlier runs failed: 1 claim: r / c: 1 earlier run failed with another "
            "configuration (2 runs, 2 configurations: FAIL, then PASS)") in head
    assert "- trained partly on uncommitted code" in head and "r / c (1 of 2 training segments: from step 0 at " \
        "abcdef1 plus uncommitted changes)" in head
    assert "- FAIL at the smoke tier: 1 (1 claim): r / c 9 FAIL" in head


def test_a_bad_entry_naming_no_tier_is_reported_once_by_check_of_every_tier(project: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    write_result(project, {"c": 3.0, "d": 2.0})
    bad = project / "results" / "toy" / "pipe"
    os.mkfifo(bad)
    assert_one_line_error(*cli(capsys, "check", "toy")[::2], str(bad.relative_to(project)), "FIFO")
