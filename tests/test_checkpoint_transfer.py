"""runners.execute.transfer: checkpoints moved through a flat folder of plainly named files and back."""
from __future__ import annotations

import json
import re

import pytest

from test_files_and_runs import train_project  # noqa: F401 (the fixture)

from runners.execute.transfer import MANIFEST, TransferError, main, pack, unpack

CELLS = ["s4d-table-5/full/S4-LegS (suite data)__Pathfinder", "s4d-table-5/full/S4D-Lin (suite data)__Pathfinder",
         "s4d-table-6/full/S4D__Path-X"]


def _runs(root):
    for i, cell in enumerate(CELLS):
        folder = root / cell
        folder.mkdir(parents=True)
        (folder / "checkpoint.pt").write_bytes(bytes([i]) * (1000 + i))
        (folder / "metrics.jsonl").write_text("{}\n")
    return root


def test_pack_then_unpack_restores_every_checkpoint(tmp_path):
    runs = _runs(tmp_path / "runs")
    files = pack(runs, tmp_path / "out")
    assert len(files) == len(CELLS) + 1 and files[-1] == MANIFEST
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(files)  # no temporary file left
    written = unpack(tmp_path / "out", tmp_path / "back")
    assert sorted(written) == sorted(f"{c}/checkpoint.pt" for c in CELLS)
    for cell in CELLS:
        assert (tmp_path / "back" / cell / "checkpoint.pt").read_bytes() == (runs / cell / "checkpoint.pt").read_bytes()
    assert (runs / CELLS[0] / "checkpoint.pt").exists()  # copied, not moved


def test_pack_selects_cells_and_refuses_an_empty_selection(tmp_path):
    runs = _runs(tmp_path / "runs")
    files = pack(runs, tmp_path / "out", ["*/*/*Pathfinder"])
    assert len(files) == 3
    with pytest.raises(TransferError, match="no checkpoint.pt under .* matching"):
        pack(runs, tmp_path / "out2", ["nothing/*"])
    assert main(["pack", str(tmp_path / "empty"), str(tmp_path / "out3")]) == 2


@pytest.mark.parametrize("edit, message", [
    (lambda m, out: m[next(iter(m))].update(path="../../etc/checkpoint.pt"), "is not <spec>/<tier>/<cell>"),
    (lambda m, out: m[next(iter(m))].update(path="/abs/s/t/checkpoint.pt"), "is not <spec>/<tier>/<cell>"),
    (lambda m, out: m[next(iter(m))].update(path="s/t/c/other.pt"), "is not <spec>/<tier>/<cell>"),
    (lambda m, out: m[next(iter(m))].pop("path"), "has no 'path'"),
    (lambda m, out: (out / next(iter(m))).write_bytes(b"x"), "size or SHA-256 differs"),
    (lambda m, out: (out / next(iter(m))).unlink(), "not a regular file here"),
])
def test_unpack_refuses_a_bad_manifest_or_file(tmp_path, edit, message):
    runs = _runs(tmp_path / "runs")
    out = tmp_path / "out"
    pack(runs, out)
    manifest = json.loads((out / MANIFEST).read_text())
    edit(manifest, out)
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(TransferError, match=message):
        unpack(out, tmp_path / "back")
    assert not (tmp_path / "etc").exists()


def test_unpack_without_a_manifest_is_one_line(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert main(["unpack", str(tmp_path / "out"), str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "transfer_manifest.json does not exist" in err
    (tmp_path / "out" / MANIFEST).write_bytes(b"\xff\xfe")
    assert main(["unpack", str(tmp_path / "out"), str(tmp_path / "runs")]) == 2
    assert "is not a JSON manifest" in capsys.readouterr().err



def test_pack_unfinished_only_leaves_out_the_runs_at_the_end_of_their_schedules(train_project, capsys):
    """A tiny training table trained for real (its run finished), a copy of its checkpoint edited to stand
    mid-schedule, and a file that is no checkpoint: --unfinished-only packs the one mid-schedule and the unreadable
    one (not judged finished), not the finished one; with only the finished one selected, the error says so."""
    from pathlib import Path

    import torch

    from runners.cli.main import main as cli

    assert cli(["run", "tiny-train", "--no-progress"]) == 0
    runs = Path("runs")
    done = runs / "tiny-train" / "smoke" / "S4__sCIFAR" / "checkpoint.pt"
    ckpt = torch.load(done, weights_only=True)
    ckpt["config"]["epochs"], ckpt["epoch"], ckpt["step"] = 3, 1, 7
    going = runs / "tiny-train" / "smoke-set-0123456789ab" / "S4__sCIFAR" / "checkpoint.pt"
    broken = runs / "tiny-train" / "budget" / "S4__sCIFAR" / "checkpoint.pt"
    for path in (going, broken):
        path.parent.mkdir(parents=True)
    torch.save(ckpt, going)
    broken.write_bytes(b"not a checkpoint")
    capsys.readouterr()

    assert len(pack(runs, Path("all"))) == 4  # without the flag: every checkpoint
    assert main(["pack", "runs", "out", "--unfinished-only"]) == 0
    manifest = json.loads((Path("out") / MANIFEST).read_text())
    assert sorted(entry["path"] for entry in manifest.values()) == [
        "tiny-train/budget/S4__sCIFAR/checkpoint.pt", "tiny-train/smoke-set-0123456789ab/S4__sCIFAR/checkpoint.pt"]
    capsys.readouterr()
    assert main(["pack", "runs", "none", "--cells", "*/smoke/*", "--unfinished-only"]) == 2
    assert "that has not finished its schedule (1 finished)" in capsys.readouterr().err
