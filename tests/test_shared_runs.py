"""A cell that trains in another spec's run (``train_in``): S4 Table 4's S4 row trains in S4D Table 5's S4-LegS run.
When S4D Table 5's results hold a newer result of that run than the file judging the cell in S4 Table 4, the report
of S4 Table 4 says so, with the command that judges it there; otherwise it says nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from runners.judge.verdicts import judge_tier
from runners.report.shared_runs import newer_shared_run_lines, shared_cells
from runners.specs.expected import expected_path, load_expected
from runners.specs.spec import load_spec
from runners.store.read import load_tier_results

ROOT = Path(__file__).resolve().parent.parent
S4_TABLE4 = ROOT / "reproductions" / "s4-table-4.yaml"


def _result(root: Path, spec_id: str, row: str, task: str, value: float | None, finished: str) -> Path:
    """A full-tier results file of ``spec_id`` under ``root`` measuring one cell."""
    stamp = finished.replace("-", "").replace(":", "")[:15]
    path = root / spec_id / f"{stamp}_full.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"spec_id": spec_id, "tier": "full", "started": finished, "finished": finished, "data": "suite",
           "selected_cells": [[row, task]],
           "environment": {"device_name": "NVIDIA H200", "git_commit": "a" * 40, "git_dirty": False},
           "cells": [{"row": row, "column": task, "value": value, "unit": "% acc", "note": None}]}
    path.write_text(json.dumps(doc))
    return path


def _lines(root: Path) -> list[str]:
    spec = load_spec(S4_TABLE4)
    files = load_tier_results(spec.id, "full", root)
    verdicts = judge_tier(load_expected(expected_path(spec.id)), [doc for _, doc in files], "full")
    return newer_shared_run_lines(spec, "full", files, verdicts, root)


def test_s4_table_4s_suite_row_trains_in_s4d_table_5s_run() -> None:
    cells = shared_cells(load_spec(S4_TABLE4), "full")
    assert ("S4 (suite data)", "Pathfinder", "suite", "s4d-table-5", "S4-LegS (suite data)") in cells
    assert all(home == "s4d-table-5" for *_, home, _ in cells)
    assert shared_cells(load_spec(ROOT / "reproductions" / "s4d-theorem-6.yaml"), "smoke") == []  # not training


@pytest.mark.parametrize("home_finished, home_value, said", [
    ("2026-11-28T09:34:17+00:00", 94.2, True),  # the run finished later: said
    ("2026-11-26T09:00:00+00:00", 94.2, False),  # an older result of the run: this table's is the newer
    ("2026-11-28T09:34:17+00:00", None, False),  # the run measured nothing there (e.g. its data missing)
])
def test_a_newer_result_of_the_shared_run_is_said(tmp_path: Path, home_finished: str, home_value: float | None,
                                                  said: bool) -> None:
    here = _result(tmp_path, "s4-table-4", "S4 (suite data)", "Pathfinder", 90.77, "2026-11-27T01:39:02+00:00")
    home = _result(tmp_path, "s4d-table-5", "S4-LegS (suite data)", "Pathfinder", home_value, home_finished)
    text = "\n".join(_lines(tmp_path))
    assert bool(text) == said, text
    if said:
        assert "`S4 (suite data) / Pathfinder` trains in s4d-table-5's run of `S4-LegS (suite data)`" in text
        assert f"94.2 in `{home}`" in text and f"reads `{here}`" in text
        assert "`ssm-repro run s4-table-4 --tier full --cells 'S4 (suite data)/Pathfinder' --data suite`" in text


def test_a_shared_cell_never_judged_here_is_said(tmp_path: Path) -> None:
    _result(tmp_path, "s4-table-4", "S4 (suite data)", "ListOps", 59.0, "2026-11-27T03:01:58+00:00")
    _result(tmp_path, "s4d-table-5", "S4-LegS (suite data)", "Pathfinder", 94.2, "2026-11-28T09:34:17+00:00")
    _result(tmp_path, "s4d-table-5", "S4-LegS (suite data)", "ListOps", 59.0, "2026-11-27T03:01:48+00:00")
    text = "\n".join(_lines(tmp_path))
    assert "`S4 (suite data) / Pathfinder`" in text and "This table's verdict reads no results file" in text
    assert "ListOps" not in text  # judged here after the run's own file
