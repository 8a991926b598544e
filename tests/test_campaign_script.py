"""benchmarks/campaign/longrange.sh end to end on a machine without GPUs (seconds): every run it starts stops at once
(no CUDA: exit 3), and the call still packs what it must bring back -- the checkpoints of the main cells and of the
extra runs marked "pack" (here the committed x / 255 variants), each --set folder's overrides.json, the logs and
`progress` -- into 15 MB tar parts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "campaign" / "longrange.sh"
TOOLS = ("bash", "tar", "split", "timeout", "find", "cp")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)}")
def test_a_call_packs_the_main_cells_and_the_runs_marked_pack(tmp_path: Path) -> None:
    work = tmp_path / "repo"  # the script runs from a repository root: the specs, checkpoints and scripts
    work.mkdir()
    for name in ("reproductions", "expected", "checkpoints", "benchmarks", "pyproject.toml"):
        (work / name).symlink_to(ROOT / name)
    (work / "results").mkdir()  # nothing here may be written into the real results/
    bin_dir = tmp_path / "bin"  # no GPU: nvidia-smi answers with none, python3 is this interpreter
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\necho 'index, name, memory.used [MiB]'\n")
    (bin_dir / "python3").write_text(f"#!/bin/bash\nexec {sys.executable} \"$@\"\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    out, logs = tmp_path / "out", tmp_path / "logs"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "",
           "CAMPAIGN_LOGS": str(logs)}
    env.pop("SSM_RUNS_DIR", None)
    done = subprocess.run(["bash", str(SCRIPT), "1", str(out), str(ROOT / "benchmarks/campaign/variants.txt")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    parts = sorted(out.glob("campaign.tar.part*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    joined = tmp_path / "campaign.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(joined) as tar:
        tar.extractall(unpacked, filter="data")
    manifest = json.loads((unpacked / "ckpt" / "transfer_manifest.json").read_text())
    packed = sorted(entry["path"] for entry in manifest.values())
    committed = sorted(str(p.relative_to(ROOT / "checkpoints")) for p in (ROOT / "checkpoints").glob("*/*/*/checkpoint.pt"))
    assert packed == committed  # the variants marked "pack" (no main cell has a checkpoint yet)
    for folder in {Path(p).parent.parent for p in committed}:
        record = unpacked / "logs" / "runs" / "runs" / folder / "overrides.json"
        assert json.loads(record.read_text())["set"], record
    assert list((unpacked / "logs").glob("progress_*.txt"))
    assert "extra run on GPU 3" in (unpacked / "logs" / "extra_runs.log").read_text()
