"""benchmarks/campaign/longrange.sh end to end on a machine without GPUs (seconds): every run it starts stops at once
(no CUDA: exit 3), and the call still packs what it must bring back -- the checkpoints of the runs its runs file marks
"pack" that have not finished their schedules, each --set folder's overrides.json, the logs and `progress` -- into
15 MB tar parts; benchmarks/campaign/collect.py brings them home. The checkpoints are small stand-ins of the
checkpoint format (what `runners progress` and the packer read), in a checkpoints/ folder of the test's own."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from runners.train.checkpoint import FORMAT

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "campaign" / "longrange.sh"
TOOLS = ("bash", "tar", "split", "timeout", "find", "cp", "nice")
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")

INV = "s4d-table-5/full/S4D-Inv_suite_data__Pathfinder"  # two cells at the spec's setting share the tier's folder
LEGS = "s4d-table-5/full/S4D-LegS_suite_data__Pathfinder"
BIAS_SET = "+tasks.Pathfinder.model.ssm.encoder_bias=true"
X255_SET = "tasks.Pathfinder.loader_args.normalize=false"
RUNS_LINES = [
    "# a comment, then a blank line",
    "",
    "0|s4d-table-5|S4D-Inv (suite data)/Pathfinder||pack",
    "1|s4d-table-5|S4D-LegS (suite data)/Pathfinder||pack",
    f"3|s4d-table-5|S4-LegS (suite data)/Pathfinder|--set {BIAS_SET} --train-only|pack",
    f"2|s4d-table-5|S4D-Lin (suite data)/Pathfinder|--set {X255_SET}",  # not packed
]


@functools.lru_cache(maxsize=None)
def _folder_of(cells: str, *options: str) -> str:
    """The checkpoint folder `run --dry-run` names for one cell (relative to runs/), asked once per test session."""
    from runners.cli.main import main

    here, text = os.getcwd(), io.StringIO()
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(text):
            assert main(["run", "s4d-table-5", "--tier", "full", "--data", "suite", "--cells", cells, *options,
                         "--dry-run"]) == 0
    finally:
        os.chdir(here)
    line = next(x for x in text.getvalue().splitlines() if x.startswith("  checkpoint folder: runs/"))
    return line.removeprefix("  checkpoint folder: runs/").rstrip("/")


def _checkpoint(path: Path, epoch: int, epochs: int = 200) -> None:
    """A stand-in checkpoint: what `runners progress` and the packer read of one."""
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "history": [], "config": {"epochs": epochs}, "epoch": epoch, "step": 0},
               path / "checkpoint.pt")
    (path / "metrics.jsonl").write_text(json.dumps({"epoch": epoch}) + "\n")


def _collect():
    """benchmarks/campaign/collect.py: the module benchmarks.campaign.collect."""
    from benchmarks.campaign import collect

    return collect


def _workspace(tmp_path: Path, inv_epoch: int = 12) -> tuple[Path, dict[str, Path]]:
    """A repository root for the script (the specs and scripts linked; its own results/, runs/ and checkpoints/:
    S4D-Inv at ``inv_epoch`` of 200, the bias run's and the x / 255 run's --set folders mid-schedule, and a run the
    runs file does not name) and the runs file; returns the root and the committed cell folders by name."""
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("reproductions", "expected", "benchmarks", "pyproject.toml"):
        (work / name).symlink_to(ROOT / name)
    (work / "results").mkdir()  # nothing here may be written into the real results/
    bias = _folder_of("S4-LegS (suite data)/Pathfinder", "--set", BIAS_SET)
    x255 = _folder_of("S4D-Lin (suite data)/Pathfinder", "--set", X255_SET)
    cells = {"inv": INV, "bias": bias, "x255": x255, "unnamed": "s4d-table-5/full/S4-LegS_suite_data__ListOps"}
    for name, cell in cells.items():
        _checkpoint(work / "checkpoints" / cell, inv_epoch if name == "inv" else 5)
    for cell, text in ((bias, BIAS_SET), (x255, X255_SET)):
        (work / "checkpoints" / cell).parent.joinpath("overrides.json").write_text(json.dumps({"set": [text]}))
    (work / "runs.txt").write_text("\n".join(RUNS_LINES) + "\n")
    return work, cells


def _call(tmp_path: Path, work: Path, runs_file: str = "runs.txt") -> subprocess.CompletedProcess:
    """One call of the script for a minute on a machine without GPUs (nvidia-smi answers with none, python3 is this
    interpreter); its logs go to tmp_path/logs, its parts to tmp_path/out."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\necho 'index, name, memory.used [MiB]'\n")
    (bin_dir / "python3").write_text(f"#!/bin/bash\nexec {sys.executable} \"$@\"\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "",
           "CAMPAIGN_LOGS": str(tmp_path / "logs")}
    env.pop("SSM_RUNS_DIR", None)
    return subprocess.run(["bash", str(SCRIPT), "1", str(tmp_path / "out"), runs_file],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)


def _unpacked(tmp_path: Path) -> Path:
    parts = sorted((tmp_path / "out").glob("campaign.tar.part*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    joined = tmp_path / "campaign.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(joined) as tar:
        tar.extractall(unpacked, filter="data")
    return unpacked


@needs_tools
def test_a_call_packs_the_unfinished_runs_marked_pack(tmp_path: Path, capsys) -> None:
    """The runs file ends its lines as two editors would, CRLF and LF alternately: a CRLF line reads as its LF
    twin (the bias run, packed from a folder of its own, is on a CRLF line)."""
    work, cells = _workspace(tmp_path)
    assert RUNS_LINES[4].startswith("3|") and RUNS_LINES[4].endswith("|pack")
    (work / "mixed.txt").write_bytes(b"".join((line + ("\n" if i % 2 else "\r\n")).encode()
                                              for i, line in enumerate(RUNS_LINES)))
    done = _call(tmp_path, work, "mixed.txt")
    assert done.returncode == 0, done.stderr[-2000:]
    unpacked = _unpacked(tmp_path)
    manifest = json.loads((unpacked / "ckpt" / "transfer_manifest.json").read_text())
    packed = sorted(str(Path(entry["path"]).parent) for entry in manifest.values())
    assert packed == sorted([cells["inv"], cells["bias"]])  # not the x / 255 run (no "pack") nor the unnamed one
    record = unpacked / "logs" / "runs" / "runs" / Path(cells["bias"]).parent / "overrides.json"
    assert json.loads(record.read_text())["set"] == [BIAS_SET]
    assert list((unpacked / "logs").glob("progress_*.txt"))
    log = (unpacked / "logs" / "runs.log").read_text()
    for gpu in (0, 1, 2, 3):  # every line started (and stopped at once: no CUDA here)
        assert f"run on GPU {gpu}: s4d-table-5" in log, log
    assert log.count("NOT-RUN: s4d-table-5 tier 'full' needs a CUDA GPU") == 4, log

    # home again: each checkpoint as committed, with its metrics and its folder's overrides
    home, results = tmp_path / "home", tmp_path / "results"
    assert _collect().main([str(tmp_path / "out"), "--checkpoints", str(home), "--results", str(results),
                            "--logs", str(tmp_path / "logs_kept")]) == 0
    for name in ("inv", "bias"):
        relative = Path(cells[name]) / "checkpoint.pt"
        assert (home / relative).read_bytes() == (work / "checkpoints" / relative).read_bytes()
        assert (home / relative).with_name("metrics.jsonl").is_file()
    assert json.loads((home / cells["bias"]).parent.joinpath("overrides.json").read_text())["set"] == [BIAS_SET]
    assert "paper (test)" in capsys.readouterr().out  # where each run stands
    assert (tmp_path / "logs_kept" / "calls.txt").is_file()

    # a part cut short (within a file, or at a block's edge, where tarfile alone would take it for the end) is one
    # line naming the parts, and nothing is written
    last = sorted((tmp_path / "out").glob("campaign.tar.part*"))[-1]
    whole = last.read_bytes()
    for cut in (1000, len(whole) // 2, len(whole) // 2 // 512 * 512):
        last.write_bytes(whole[:cut])
        assert _collect().main([str(tmp_path / "out"), "--checkpoints", str(tmp_path / "none")]) == 2, cut
        assert "do not make a complete tar" in capsys.readouterr().err and not (tmp_path / "none").exists(), cut


@needs_tools
def test_a_run_that_finished_its_schedule_is_not_started_again(tmp_path: Path) -> None:
    """S4D-Inv's checkpoint at the end of its schedule: the call says so and does not start it (resumed, it would
    train nothing and write its results file again), while S4D-LegS, in the same folder of the spec's setting,
    starts; the finished one does not come back in the pack (its training is over), its metrics come back with the
    logs."""
    work, cells = _workspace(tmp_path, inv_epoch=200)
    done = _call(tmp_path, work)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "logs" / "runs.log").read_text()
    assert f"run on GPU 0: runs/{INV} finished its schedule; not started" in log
    assert log.count("NOT-RUN: s4d-table-5 tier 'full' needs a CUDA GPU") == 3, log  # the other three started
    assert f"finished: 1 checkpoint(s) under runs/{INV}" in (tmp_path / "logs" / "calls.txt").read_text()
    unpacked = _unpacked(tmp_path)
    manifest = json.loads((unpacked / "ckpt" / "transfer_manifest.json").read_text())
    assert sorted(str(Path(e["path"]).parent) for e in manifest.values()) == [cells["bias"]]
    assert (unpacked / "logs" / "runs" / "runs" / INV / "metrics.jsonl").read_text()


@needs_tools
def test_a_call_without_a_runs_file_names_it(tmp_path: Path) -> None:
    work, _ = _workspace(tmp_path)
    for missing in ("", "no_such_runs.txt"):
        done = _call(tmp_path, work, missing)
        assert done.returncode == 2
        assert f"RUNS file '{missing}' not found; usage: longrange.sh MINUTES OUTDIR RUNS [--tests]" in done.stderr
    assert not (tmp_path / "out").exists() and not (work / "runs").exists()  # nothing started, nothing written


def test_the_committed_runs_files_name_runs_the_specs_have(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    """Each line of each runs file in benchmarks/campaign/ names a spec, cells and options that `run --dry-run`
    accepts, and a checkpoint folder (the options split at spaces, as the script splits them)."""
    from runners.cli.main import main

    monkeypatch.chdir(ROOT)
    for runs_file in sorted((ROOT / "benchmarks" / "campaign").glob("*.txt")):
        for line in runs_file.read_text().splitlines():
            if not line[:1].isdigit():
                continue
            gpu, spec, cells, options, *keep = line.split("|")
            assert gpu in {"0", "1", "2", "3"} and keep in ([], ["pack"]), (runs_file.name, line)
            rc = main(["run", spec, "--tier", "full", "--data", "suite", "--cells", cells, *options.split(),
                       "--dry-run"])
            out, err = capsys.readouterr()
            assert rc == 0 and "  checkpoint folder: runs/" in out, (runs_file.name, line, err[-500:])


def test_collect_without_parts_names_the_folder(tmp_path: Path, capsys) -> None:
    assert _collect().main([str(tmp_path)]) == 2
    assert f"{tmp_path}: no campaign.tar.part* files" in capsys.readouterr().err


def test_collect_puts_a_runs_logs_beside_its_checkpoint(tmp_path: Path) -> None:
    """A pack made by hand (one checkpoint, its run's metrics.jsonl and steps.jsonl in the call's logs): home, both
    logs lie beside the checkpoint; a run whose logs did not come back gets none."""
    from runners.execute.transfer import pack

    runs, stage = tmp_path / "runs", tmp_path / "stage"
    for cell in ("A__Pathfinder", "B__Pathfinder"):
        (runs / "spec" / "full" / cell).mkdir(parents=True)
        (runs / "spec" / "full" / cell / "checkpoint.pt").write_bytes(cell.encode())
    pack(runs, stage / "ckpt")
    logged = stage / "logs" / "runs" / "runs" / "spec" / "full" / "A__Pathfinder"
    logged.mkdir(parents=True)
    (logged / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (logged / "steps.jsonl").write_text('{"step": 50}\n')
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(out / "campaign.tar.part00", "w") as tar:
        for name in ("ckpt", "logs"):
            tar.add(stage / name, arcname=name)
    home = tmp_path / "home"
    assert _collect().main([str(out), "--checkpoints", str(home), "--results", str(tmp_path / "results")]) == 0
    cell = home / "spec" / "full" / "A__Pathfinder"
    assert (cell / "checkpoint.pt").read_bytes() == b"A__Pathfinder"
    assert (cell / "metrics.jsonl").read_text() == '{"epoch": 1}\n'
    assert (cell / "steps.jsonl").read_text() == '{"step": 50}\n'
    assert sorted(p.name for p in (home / "spec" / "full" / "B__Pathfinder").iterdir()) == ["checkpoint.pt"]




@needs_tools
@pytest.mark.parametrize("line, field", [
    ("0|s4d-table-5|S4D-Inv (suite data)/Pathfinder'; touch PWNED; '||pack", "CELLS"),
    ("0|s4d-table-5|S4D-Inv (suite data)/Pathfinder|--set x=$(touch PWNED)|pack", "RUN OPTIONS"),
    ("0|s4d-table-5|S4D-Inv (suite data)/Pathfinder|--set \"a b\"|pack", "RUN OPTIONS"),
    ("0`touch PWNED`|s4d-table-5|S4D-Inv (suite data)/Pathfinder||pack", "GPU"),
    ("0|s4d-table-5;touch PWNED|S4D-Inv (suite data)/Pathfinder||pack", "SPEC"),
    ("0|s4d-table-5|S4D-Inv (suite data)/Pathfinder||packed", "fifth field"),
    ("0|s4d-table-5|S4D-Inv (suite data)/Pathfinder||pack|more", "more than five"),
])
def test_a_runs_file_line_is_checked_before_anything_starts(tmp_path: Path, line: str, field: str) -> None:
    """A field outside its characters stops the call before anything starts, naming the file, the line and the
    field; nothing of the line reaches a shell."""
    work, _ = _workspace(tmp_path)
    (work / "bad.txt").write_text("# runs\n0|s4d-table-5|S4D-LegS (suite data)/Pathfinder||pack\n" + line + "\n")
    done = _call(tmp_path, work, "bad.txt")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "bad.txt line 3: " in done.stderr and field in done.stderr, done.stderr
    assert "nothing started" in done.stderr
    assert not (work / "PWNED").exists() and not (work / "runs").exists() and not (tmp_path / "out").exists()


@needs_tools
@pytest.mark.parametrize("argv, message", [
    (["0", "OUT", "runs.txt"], "MINUTES '0'"),
    (["nan", "OUT", "runs.txt"], "MINUTES 'nan'"),
    (["1", "OUT", "runs.txt", "--test"], "fourth argument is '--test'"),
])
def test_the_call_arguments_are_checked(tmp_path: Path, argv: list[str], message: str) -> None:
    work, _ = _workspace(tmp_path)
    done = subprocess.run(["bash", str(SCRIPT), *argv], cwd=work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (work / "runs").exists() and not (work / "OUT").exists()


def _hand_pack(tmp_path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A pack made by hand: one checkpoint and, under logs/results/, the files ``extra`` names."""
    from runners.execute.transfer import pack

    runs, stage = tmp_path / "runs", tmp_path / "stage"
    (runs / "spec" / "full" / "A__Pathfinder").mkdir(parents=True)
    (runs / "spec" / "full" / "A__Pathfinder" / "checkpoint.pt").write_bytes(b"A")
    pack(runs, stage / "ckpt")
    for name, data in (extra or {}).items():
        (stage / "logs" / "results" / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / "logs" / "results" / name).write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(out / "campaign.tar.part00", "w", format=tarfile.GNU_FORMAT) as tar:
        for name in ("ckpt", "logs"):
            if (stage / name).exists():
                tar.add(stage / name, arcname=name)
    return out


@pytest.mark.parametrize("stray", ["campaign.tar.part00~", "campaign.tar.part0", "campaign.tar.part01.orig",
                                   "campaign.tar.partXX"])
def test_collect_refuses_a_file_that_is_not_a_part(tmp_path: Path, capsys, stray: str) -> None:
    out = _hand_pack(tmp_path)
    (out / stray).write_bytes(b"garbage")
    assert _collect().main([str(out), "--checkpoints", str(tmp_path / "home"), "--results",
                            str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert stray in err and "not a part longrange.sh writes" in err, err
    assert not (tmp_path / "home").exists() and not (tmp_path / "results").exists()


def test_collect_refuses_a_missing_part_number(tmp_path: Path, capsys) -> None:
    out = _hand_pack(tmp_path)
    (out / "campaign.tar.part00").rename(out / "campaign.tar.part01")
    assert _collect().main([str(out), "--checkpoints", str(tmp_path / "home")]) == 2
    assert "leave a number out" in capsys.readouterr().err


def test_collect_copies_only_json_results(tmp_path: Path) -> None:
    """Only valid JSON files come into results/: a log, a binary and a broken JSON file are left out, each named."""
    out = _hand_pack(tmp_path, {"spec/20261201T000000_full.json": b'{"a": 1}', "spec/notes.txt": b"x",
                                "spec/blob.bin": b"\x00\x01", "spec/broken.json": b'{"a": '})
    results = tmp_path / "results"
    done = _collect().collect(out, tmp_path / "home", results)
    assert sorted(p.name for p in (results / "spec").iterdir()) == ["20261201T000000_full.json"]
    text = "\n".join(done)
    assert "notes.txt: not a results file (.json): left out" in text and "blob.bin: not a results file" in text
    assert "broken.json: not valid JSON" in text


def test_collect_refuses_a_member_larger_than_a_call_brings_back(tmp_path: Path) -> None:
    out = _hand_pack(tmp_path, {"spec/big.json": b"[" + b" " * ((64 << 20) + 1) + b"]"})
    with pytest.raises(_collect().CollectError, match="big.json.*over the"):
        _collect().collect(out, tmp_path / "home", tmp_path / "results")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("linked", ["results", "results/spec", "home", "home/spec"])
def test_collect_never_writes_through_a_symbolic_link(tmp_path: Path, linked: str) -> None:
    out = _hand_pack(tmp_path, {"spec/20261201T000000_full.json": b'{"a": 1}'})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / linked).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / linked).symlink_to(elsewhere)
    with pytest.raises(_collect().CollectError, match="is a symbolic link"):
        _collect().collect(out, tmp_path / "home", tmp_path / "results")
    assert not any(elsewhere.iterdir())


@pytest.mark.skipif(shutil.which("tar") is None or shutil.which("truncate") is None, reason="needs tar and truncate")
def test_collect_refuses_a_sparse_member(tmp_path: Path) -> None:
    """A 2 GiB sparse file packs into a few blocks; extracted, it would fill 2 GiB of the disk."""
    stage = tmp_path / "stage"
    (stage / "logs" / "results" / "spec").mkdir(parents=True)
    subprocess.run(["truncate", "-s", "2G", str(stage / "logs" / "results" / "spec" / "huge.json")], check=True)
    (tmp_path / "out").mkdir()
    subprocess.run(["tar", "-cSf", str(tmp_path / "out" / "campaign.tar.part00"), "-C", str(stage), "logs"],
                   check=True)
    assert (tmp_path / "out" / "campaign.tar.part00").stat().st_size < 1 << 20
    with pytest.raises(_collect().CollectError, match="huge.json' is a sparse file"):
        _collect().collect(tmp_path / "out", tmp_path / "home", tmp_path / "results")
    assert not (tmp_path / "results").exists()
