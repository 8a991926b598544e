"""A run whose results file cannot be written keeps its values in a recovery file in its working folder and says
where (one line, exit 2); nothing half-written is left in the results folder."""
from __future__ import annotations

import json
import os

import pytest

from runners.cli.main import main
from runners.core import layout

#: every case runs under a time and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")


@pytest.mark.parametrize("case", ["file_in_the_way", "read_only", "parent_is_a_file"])
def test_an_unwritable_results_folder_keeps_the_values(tmp_path, monkeypatch, capsys, case):
    if case == "read_only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    monkeypatch.setattr(layout, "RUNS_DIR", tmp_path / "runs")
    out = tmp_path / "out"
    if case == "file_in_the_way":
        out.mkdir()
        (out / "s4d-theorem-6").write_text("not a folder")
    elif case == "read_only":
        (out / "s4d-theorem-6").mkdir(parents=True)
        (out / "s4d-theorem-6").chmod(0o555)
    else:
        out.write_text("a file where the results folder should be")
    rc = main(["run", "s4d-theorem-6", "--tier", "smoke", "--no-progress", "--output", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert rc == 2 and len(err) == 1, err
    kept = sorted((tmp_path / "runs" / "s4d-theorem-6" / "smoke").glob("*_smoke.json"))
    assert len(kept) == 1 and str(kept[0]) in err[0] and "could not be written" in err[0]
    doc = json.loads(kept[0].read_text())
    assert doc["spec_id"] == "s4d-theorem-6" and doc["tier"] == "smoke" and doc["cells"]
    assert not list(tmp_path.rglob("*.ssm-partial"))


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    """A temp file older than STALE_TEMP_AGE_S (a writer killed mid-write) goes at the next results file or
    checkpoint written into its folder; a younger one (a writer still at work) stays, and so does any other file,
    a user's own old ``*.tmp`` files included (only the suite's ``.ssm-partial`` temp files are ever removed)."""
    from runners.core.atomic import STALE_TEMP_AGE_S, write_bytes_new
    from runners.train.checkpoint import save_atomic

    for write in (lambda: save_atomic({"step": 1}, tmp_path / "checkpoint.pt"),
                  lambda: write_bytes_new([tmp_path / "20260101T000000_smoke.json"], b"{}")):
        old = tmp_path / ".20260101T000000_smoke.json.abc123.ssm-partial"
        young = tmp_path / ".checkpoint.pt.def456.ssm-partial"
        others = [tmp_path / ".keep.tmp.txt", tmp_path / ".notes.tmp", tmp_path / ".draft.json.x1.tmp"]  # a user's
        for f in (old, young, *others):
            f.write_text("partial")
        for f in (old, *others):
            os.utime(f, (0, os.path.getmtime(f) - STALE_TEMP_AGE_S - 5))
        write()
        assert not old.exists() and young.exists() and all(f.exists() for f in others)
        for f in (young, *others):
            f.unlink()
