"""benchmarks/campaign/longrange.sh end to end on a machine without GPUs (seconds): every run it starts stops at once
(no CUDA: exit 3), and the call still packs what it must bring back -- the checkpoints of the main cells and of the
extra runs marked "pack" (here benchmarks/campaign/s4d_lin.txt's, one of them committed; a committed run the file
does not name stays behind), each --set folder's overrides.json, the logs and `progress` -- into 15 MB tar parts;
benchmarks/campaign/collect.py brings them home."""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "campaign" / "longrange.sh"
TOOLS = ("bash", "tar", "split", "timeout", "find", "cp", "nice")
RUNS_FILE = ROOT / "benchmarks" / "campaign" / "s4d_lin.txt"


def _packed_settings(runs_file: Path) -> set[tuple[str, ...]]:
    """The --set texts of each run the runs file marks "pack" (as its folder's overrides.json records them)."""
    wanted = set()
    for line in runs_file.read_text().splitlines():
        fields = line.split("|")
        if line.startswith("#") or len(fields) < 5 or fields[4].strip() != "pack":
            continue
        words = shlex.split(fields[3])
        wanted.add(tuple(words[i + 1] for i, word in enumerate(words) if word == "--set"))
    return wanted


def _expected_pack(runs_file: Path) -> list[str]:
    """The committed checkpoints a call with this runs file brings back: the main cells' (the tier's own folder)
    and those of the runs it marks "pack"."""
    wanted = _packed_settings(runs_file)
    expected = []
    for path in (ROOT / "checkpoints").glob("*/*/*/checkpoint.pt"):
        folder = path.parent.parent
        if folder.name == "full" or tuple(json.loads((folder / "overrides.json").read_text())["set"]) in wanted:
            expected.append(str(path.relative_to(ROOT / "checkpoints")))
    return sorted(expected)


def _collect():
    """benchmarks/campaign/collect.py as a module."""
    if "campaign_collect" not in sys.modules:
        spec = importlib.util.spec_from_file_location("campaign_collect", ROOT / "benchmarks/campaign/collect.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["campaign_collect"] = module
        spec.loader.exec_module(module)
    return sys.modules["campaign_collect"]


def _workspace(tmp_path: Path) -> Path:
    """A repository root for the script (the specs, checkpoints and scripts linked, its own results/ and runs/)."""
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("reproductions", "expected", "checkpoints", "benchmarks", "pyproject.toml"):
        (work / name).symlink_to(ROOT / name)
    (work / "results").mkdir()  # nothing here may be written into the real results/
    return work


def _call(tmp_path: Path, work: Path) -> Path:
    """One call of the script for a minute on a machine without GPUs (nvidia-smi answers with none, python3 is this
    interpreter); its logs go to tmp_path/logs, its parts to the folder returned."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\necho 'index, name, memory.used [MiB]'\n")
    (bin_dir / "python3").write_text(f"#!/bin/bash\nexec {sys.executable} \"$@\"\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "",
           "CAMPAIGN_LOGS": str(tmp_path / "logs")}
    env.pop("SSM_RUNS_DIR", None)
    done = subprocess.run(["bash", str(SCRIPT), "1", str(out), str(RUNS_FILE)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")
def test_a_call_packs_the_main_cells_and_the_runs_marked_pack(tmp_path: Path, capsys) -> None:
    out = _call(tmp_path, _workspace(tmp_path))
    parts = sorted(out.glob("campaign.tar.part*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    joined = tmp_path / "campaign.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(joined) as tar:
        tar.extractall(unpacked, filter="data")
    manifest = json.loads((unpacked / "ckpt" / "transfer_manifest.json").read_text())
    packed = sorted(entry["path"] for entry in manifest.values())
    expected = _expected_pack(RUNS_FILE)
    assert packed == expected
    assert any("-set-" in path for path in packed)  # a run marked "pack" came back beside the main cells
    for folder in {Path(p).parent.parent for p in expected if "-set-" in p}:
        record = unpacked / "logs" / "runs" / "runs" / folder / "overrides.json"
        assert json.loads(record.read_text())["set"], record
    assert list((unpacked / "logs").glob("progress_*.txt"))
    assert "extra run on GPU 3" in (unpacked / "logs" / "extra_runs.log").read_text()
    gpu0 = [line for line in (unpacked / "logs" / "pathfinder.log").read_text().splitlines() if "GPU 0:" in line]
    assert len(gpu0) == 1 and gpu0[0].startswith("GPU 0: S4-LegS (suite data) / Pathfinder"), gpu0  # and no other

    # home again: each checkpoint as committed, with its metrics and its folder's overrides
    home, results = tmp_path / "home", tmp_path / "results"
    assert _collect().main([str(out), "--checkpoints", str(home), "--results", str(results),
                            "--logs", str(tmp_path / "logs_kept")]) == 0
    for relative in expected:
        assert (home / relative).read_bytes() == (ROOT / "checkpoints" / relative).read_bytes()
        assert (home / relative).with_name("metrics.jsonl").is_file()
        if "-set-" in relative:
            assert json.loads((home / relative).parent.parent.joinpath("overrides.json").read_text())["set"]
    assert "paper (test)" in capsys.readouterr().out  # where each run stands
    assert (tmp_path / "logs_kept" / "calls.txt").is_file()

    # a part missing or cut short is one line naming the parts, and nothing is written
    parts[-1].write_bytes(parts[-1].read_bytes()[:1000])
    assert _collect().main([str(out), "--checkpoints", str(tmp_path / "none")]) == 2
    assert "do not make a complete tar" in capsys.readouterr().err and not (tmp_path / "none").exists()


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")
def test_a_run_that_finished_its_schedule_is_not_started_again(tmp_path: Path) -> None:
    """The first run of the runs file, its checkpoint at the end of its schedule: the call says so and does not
    start it (resumed, it would train nothing and write its results file again); the other runs start, and the
    finished one does not come back in the pack (its training is over), while its metrics come back with the logs."""
    import torch

    work = _workspace(tmp_path)
    first = next(line for line in RUNS_FILE.read_text().splitlines() if line[:1].isdigit())
    words = shlex.split(first.split("|")[3])
    settings = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    folder = next(f for f in (ROOT / "checkpoints").glob("*/*-set-*")
                  if json.loads((f / "overrides.json").read_text())["set"] == settings)
    copy = work / "runs" / folder.relative_to(ROOT / "checkpoints")
    shutil.copytree(folder, copy)
    ckpt_path = next(copy.glob("*/checkpoint.pt"))
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    ckpt["epoch"], ckpt["step"] = ckpt["config"]["epochs"], 0
    torch.save(ckpt, ckpt_path)
    out = _call(tmp_path, work)
    extra = (tmp_path / "logs" / "extra_runs.log").read_text()
    gpu = first.split("|")[0]
    assert f"extra run on GPU {gpu}: runs/{copy.relative_to(work / 'runs')} has finished its schedule; not " \
        "started" in extra
    others = sum(line[:1].isdigit() for line in RUNS_FILE.read_text().splitlines()) - 1
    assert extra.count("NOT-RUN: s4d-table-5 tier 'full' needs a CUDA GPU") == others, extra  # only the others started
    assert "finished: 1 checkpoint(s) under runs/" in (tmp_path / "logs" / "calls.txt").read_text()
    joined = tmp_path / "campaign.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in sorted(out.glob("campaign.tar.part*"))))
    relative = ckpt_path.relative_to(work / "runs")
    with tarfile.open(joined) as tar:
        manifest = json.load(tar.extractfile("ckpt/transfer_manifest.json"))
        assert tar.extractfile(f"logs/runs/runs/{relative.parent}/metrics.jsonl").read()
    packed = {entry["path"] for entry in manifest.values()}
    assert str(relative) not in packed
    assert packed == set(_expected_pack(RUNS_FILE)) - {str(relative)}  # the others as always


def test_collect_without_parts_names_the_folder(tmp_path: Path, capsys) -> None:
    assert _collect().main([str(tmp_path)]) == 2
    assert f"{tmp_path}: no campaign.tar.part* files" in capsys.readouterr().err


def test_collect_puts_a_runs_logs_beside_its_checkpoint(tmp_path: Path) -> None:
    """A pack made by hand (one checkpoint, its run's metrics.jsonl and steps.jsonl in the call's logs): home, both
    logs lie beside the checkpoint; a run whose logs did not come back gets none."""
    from runners.train.transfer import pack

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


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")
def test_gpu_0_goes_on_to_the_next_pathfinder_row_once_s4_legs_has_finished(tmp_path: Path) -> None:
    """S4-LegS's checkpoint at the end of its schedule: GPU 0 does not start it again and starts S4D-Inv, the next
    of S4D Table 5's rows; that one does not finish (no CUDA here), so S4D-LegS, the one after, does not start."""
    import torch

    work = _workspace(tmp_path)
    source = next(iter(sorted((ROOT / "checkpoints").glob("*/*/*/checkpoint.pt"))))  # any run's checkpoint
    ckpt = torch.load(source, map_location="cpu", weights_only=True)
    ckpt["epoch"], ckpt["step"] = ckpt["config"]["epochs"], 0
    done = work / "runs" / "s4d-table-5" / "full" / "S4-LegS_suite_data__Pathfinder" / "checkpoint.pt"
    done.parent.mkdir(parents=True)
    torch.save(ckpt, done)
    _call(tmp_path, work)
    log = (tmp_path / "logs" / "pathfinder.log").read_text()
    gpu0 = [line for line in log.splitlines() if "GPU 0:" in line]
    assert len(gpu0) == 1 and gpu0[0].startswith("GPU 0: S4D-Inv (suite data) / Pathfinder"), log
    assert "NOT-RUN: s4d-table-5 tier 'full' needs a CUDA GPU" in log
    assert "finished: 1 checkpoint(s) under runs/s4d-table-5/full/S4-LegS_suite_data__Pathfinder" in \
        (tmp_path / "logs" / "calls.txt").read_text()
