"""benchmarks/diagnostics/ddp_step_ab.py (one GPU against K at the same global batch) and train_step_profile.py under
torchrun (CPU): what runs in which order with which devices and options, the summary's arithmetic, the refusals, and
a real two-process launch in which only the first process reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DIAGNOSTICS = REPO / "benchmarks" / "diagnostics"
AB = "benchmarks/diagnostics/ddp_step_ab.py"
CELL = ["s4d-table-6", "Path-X", "S4D"]  # batch 32, 50 epochs at the full tier


def _fake(rates: dict[str, list[float]], calls: list, imported_from: Path | None = None):
    """A runner that records each launch and writes the rate the arm's next run 'measured', with the folder its code
    came from as train_step_profile records it ('.', the run's working folder, unless ``imported_from`` says
    otherwise)."""
    left = {arm: list(v) for arm, v in rates.items()}

    def run(env: dict, cmd: list[str], cwd: Path) -> None:
        arm = "many" if "torch.distributed.run" in cmd else "one"
        calls.append((arm, env, cmd, cwd))
        output = Path(cmd[cmd.index("--output") + 1])
        measured = {"steady_steps_per_second": left[arm].pop(0), "device": "NVIDIA H100",
                    "code_root": str(imported_from) if imported_from else "."}
        if "--profile-steps" in cmd:
            measured["profile"] = {"step_wall_ms": 9.0, "steps": int(cmd[cmd.index("--profile-steps") + 1])}
        output.write_text(json.dumps(measured))
    return run


def _checkout(folder: Path) -> Path:
    """A folder shaped like a checkout of the suite (its two packages)."""
    for name in ("ssm_core", "runners"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text("")
    return folder


def test_the_arms_alternate_with_their_devices_and_options(tmp_path, script) -> None:
    calls: list = []
    out = tmp_path / "ab.json"
    result = script(AB).main(CELL + ["--gpus", "4", "--rounds", "2", "--steps", "50", "--n-train", "160000",
                                    "--set", "amp=bf16", "--output", str(out)],
                            run=_fake({"one": [30.0, 32.0], "many": [80.0, 90.0]}, calls), device_count=lambda: 4)
    assert [c[0] for c in calls] == ["one", "many", "one", "many"]
    assert {c[3] for c in calls} == {Path.cwd()}
    for arm, env, cmd, _ in calls:
        assert cmd[cmd.index("--steps") + 1] == "50" and "amp=bf16" in cmd
        if arm == "one":
            assert env == {"CUDA_VISIBLE_DEVICES": "0"} and "sync_batchnorm=true" not in cmd
        else:
            assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"} and "--nproc_per_node=4" in cmd
            assert cmd[-2:] == ["--set", "sync_batchnorm=true"]
    assert result["medians"] == {"one": 31.0, "many": 85.0}
    assert result["speedup"] == pytest.approx(85 / 31)
    steps = 50 * (160000 // 32)
    assert result["wall_hours"]["one"] == pytest.approx(steps / 31 / 3600)
    assert result["gpu_hours"]["many"] == pytest.approx(4 * steps / 85 / 3600)
    saved = json.loads(out.read_text())
    assert saved["speedup"] == pytest.approx(85 / 31) and saved["device"] == "NVIDIA H100"


def test_the_profile_is_recorded_by_the_last_k_gpu_run_only(tmp_path, script) -> None:
    calls: list = []
    result = script(AB).main(CELL + ["--gpus", "2", "--rounds", "3", "--profile-steps", "6"],
                             run=_fake({"one": [30.0] * 3, "many": [50.0] * 3}, calls), device_count=lambda: 2)
    profiled = [i for i, c in enumerate(calls) if "--profile-steps" in c[2]]
    assert profiled == [5] and calls[5][0] == "many" and calls[5][2][-2:] == ["--profile-steps", "6"]
    assert result["profile_many"] == {"step_wall_ms": 9.0, "steps": 6}
    unprofiled = script(AB).main(CELL + ["--gpus", "2", "--rounds", "1"],
                                 run=_fake({"one": [30.0], "many": [50.0]}, []), device_count=lambda: 2)
    assert "profile_many" not in unprofiled


def test_a_baseline_tree_runs_the_one_gpu_arm_on_its_code(tmp_path, script, capsys) -> None:
    """Earlier code on one GPU against this code on K: the one-GPU runs work in the tree, the K-GPU runs here."""
    tree = _checkout(tmp_path / "main-253871e")
    calls: list = []
    result = script(AB).main(CELL + ["--gpus", "2", "--rounds", "2", "--baseline-tree", str(tree),
                                    "--baseline-name", "main at 253871e"],
                             run=_fake({"one": [24.0, 25.0], "many": [50.0, 52.0]}, calls), device_count=lambda: 2)
    assert [(c[0], c[3]) for c in calls] == [("one", tree), ("many", Path.cwd())] * 2
    assert all("sync_batchnorm=true" not in c[2] for c in calls if c[0] == "one")
    assert result["baseline_tree"] == "main-253871e" and result["baseline_name"] == "main at 253871e"
    assert result["code_roots"] == {"one": ["main-253871e"], "many": ["."]}  # no path of this machine
    assert result["speedup"] == pytest.approx(51 / 24.5)
    printed = capsys.readouterr().out
    assert "| 1 GPU, main at 253871e" in printed and "2.08x the steps per second of one running main at 253871e" \
        in printed


def test_a_baseline_run_that_imported_another_copy_is_refused(tmp_path, script) -> None:
    """An installed package shadows the tree's: the rate would be this code's, so nothing is reported."""
    tree = _checkout(tmp_path / "base")
    out = tmp_path / "ab.json"
    with pytest.raises(SystemExit, match="the one-GPU arm imported the suite from .*, not from --baseline-tree"):
        script(AB).main(CELL + ["--gpus", "2", "--baseline-tree", str(tree), "--output", str(out)],
                        run=_fake({"one": [24.0], "many": [50.0]}, [], imported_from=REPO), device_count=lambda: 2)
    assert not out.exists()


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "absent", "is not a folder"),
    (lambda d: d, "has no ssm_core or runners package"),
    (lambda d: (d / "runners").mkdir() or (d / "runners" / "__init__.py").write_text("") or d,
     "has no ssm_core package"),
    (lambda d: (d / "f.txt").write_text("") or d / "f.txt", "is not a folder"),
])
def test_a_baseline_tree_that_is_not_a_checkout_is_refused(tmp_path, script, make, words) -> None:
    calls: list = []
    with pytest.raises(SystemExit, match=f"--baseline-tree .*: {words}; expected a checkout of the suite"):
        script(AB).main(CELL + ["--gpus", "2", "--baseline-tree", str(make(tmp_path))],
                        run=_fake({"one": [], "many": []}, calls), device_count=lambda: 2)
    assert not calls


@pytest.mark.parametrize("argv, found, words", [
    (["--gpus", "2", "--baseline-name", "main"], 8, "--baseline-name names a --baseline-tree; give the tree too"),
    (["--gpus", "2", "--profile-steps", "-1"], 8, "--profile-steps -1: expected an integer >= 0"),
    (["--gpus", "4"], 1, "--gpus 4 needs 4 CUDA devices; this machine has 1"),
    (["--gpus", "2"], 0, "--gpus 2 needs 2 CUDA devices; this machine has 0"),
    (["--gpus", "1"], 8, "--gpus 1: expected an integer >= 2"),
    (["--gpus", "3"], 8, "the global batch 32 does not split over --gpus 3"),
    (["--gpus", "2", "--set", "batch_size=33"], 8, "the global batch 33 does not split over --gpus 2"),
    (["--gpus", "2", "--rounds", "0"], 8, "--rounds 0: expected an integer >= 1"),
    (["--gpus", "2", "--n-train", "0"], 8, "--n-train 0: expected an integer >= 1"),
])
def test_what_cannot_run_is_refused_before_anything_runs(script, argv, found, words) -> None:
    calls: list = []
    with pytest.raises(SystemExit, match=words):
        script(AB).main(CELL + argv, run=_fake({"one": [], "many": []}, calls), device_count=lambda: found)
    assert not calls


def test_train_step_profile_under_torchrun_reports_from_the_first_process_only(tmp_path) -> None:
    """Two gloo processes on the CPU (a smoke-tier cell): one line of rates, written once, with the world size."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "rate.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "benchmarks.diagnostics.train_step_profile", "s4d-table-5", "Pathfinder", "S4D-Lin (suite data)",
           "--tier", "smoke", "--steps", "12", "--output", str(out)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if "steps/s" in line]
    assert len(lines) == 1 and "over 2 processes" in lines[0], done.stdout
    saved = json.loads(out.read_text())
    assert saved["world_size"] == 2 and saved["steady_steps_per_second"] > 0 and saved["code_root"] == "."
    record = subprocess.run(cmd[:-2] + ["--record", "--n-train", "640"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert record.returncode != 0 and "--record measures one GPU (this launch has 2 processes)" in record.stderr


@pytest.mark.parametrize("names, part", [
    (["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl:all_reduce"],
     "communication (NCCL)"),
    (["ncclDevKernel_AllGather_RING_LL", "c10d::_allgather_base_", "aten::batch_norm"], "communication (NCCL)"),
    (["void at::native::batch_norm_collect_statistics_channels_last_kernel", "aten::batch_norm"], "norm"),
    (["void vector_fft<32768u>", "aten::_fft_r2c"], "FFT convolution: cuFFT"),
])
def test_the_profile_names_the_gpus_communication(script, names, part) -> None:
    """A data-parallel step's NCCL kernels (the gradients' all-reduce, synced BatchNorm's all-gather) count as
    communication, not as the op that called them; other kernels keep their parts."""
    assert script("benchmarks/diagnostics/train_step_profile.py")._part_of(names) == part


def test_folders_are_recorded_relative_to_the_checkout(tmp_path, script, monkeypatch) -> None:
    """What the JSON names: a folder inside the checkout relative to it, the checkout '.', one outside by its name;
    the profiler's code_root '.' where it imported the suite from its working folder, a full path only otherwise."""
    ab, profiler = script(AB), script("benchmarks/diagnostics/train_step_profile.py")
    monkeypatch.chdir(REPO)
    assert profiler.code_root() == "."  # the suite imported from the folder it runs in
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "checkout" / ".ab_base").mkdir(parents=True)
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path / "checkout")
    assert ab.shown(Path(".ab_base")) == ".ab_base" and ab.shown(tmp_path / "checkout" / ".ab_base") == ".ab_base"
    assert ab.shown(Path.cwd()) == "." and ab.shown(elsewhere) == "elsewhere"
    assert profiler.code_root() == str(REPO)  # imported from outside the working folder: named in full
