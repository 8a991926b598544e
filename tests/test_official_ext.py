"""Side by side with the official extension: the checkout's checks, the interleaved timing sections of the kernel
and layer benchmarks and their tables (on the CPU with stand-ins for the official code: the reference products,
and a layer with the official FFTConv's interface)."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from runners.benchmark import official
from runners.benchmark.official_ext import (
    KERNEL_DIR, REQUIRED, OfficialExtensionError, check_checkout, checkout_commit, load_official)
from ssm_core.ops.reference import cauchy_terms, log_vandermonde_terms

#: where our Triton kernels run in these tests: compiled on a GPU, else under TRITON_INTERPRET=1 (root conftest)
KERNEL_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    """benchmarks/<name>.py: the module benchmarks.<name>."""
    return importlib.import_module(f"benchmarks.{name}")


def _bench():
    return _script("bench_kernels")


def _bench_layers():
    return _script("bench_layers")


class ReferenceAsOfficial:
    """The official products' calling conventions around the suite's float references."""

    def product(self, op: str, length: int):
        if op == "cauchy":
            return lambda v, w, z: cauchy_terms(v, z, w)
        return lambda v, w, z: log_vandermonde_terms(v, w, torch.arange(length, dtype=torch.float32, device=v.device))


def test_checkout_that_is_not_one_is_named_with_what_is_missing(tmp_path):
    with pytest.raises(OfficialExtensionError, match="not a directory"):
        check_checkout(tmp_path / "nowhere")
    (tmp_path / KERNEL_DIR).mkdir(parents=True)
    (tmp_path / KERNEL_DIR / "cauchy.cpp").write_text("")
    with pytest.raises(OfficialExtensionError) as err:
        check_checkout(tmp_path)
    for name in REQUIRED[1:]:
        assert str(KERNEL_DIR / name) in str(err.value)
    assert str(KERNEL_DIR / "cauchy.cpp") not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only refusal")
def test_official_extension_refuses_without_cuda(tmp_path):
    (tmp_path / KERNEL_DIR).mkdir(parents=True)
    for name in REQUIRED:
        (tmp_path / KERNEL_DIR / name).write_text("")
    with pytest.raises(OfficialExtensionError, match="CUDA only"):
        load_official(tmp_path, tmp_path / "build")


def test_command_line_stops_on_a_bad_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--quick", "--out-dir", str(tmp_path), "--official", str(tmp_path / "nowhere")])
    assert "not a directory" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json"))  # nothing written before the checkout is known to build


def test_side_by_side_section_times_both_on_the_same_inputs():
    bench = _bench()
    cfg = bench.BenchConfig(batches=[2], n_halves=[4], lengths=[16, 40], quick=True)
    rows = bench.side_by_side_section(cfg, KERNEL_DEVICE, ReferenceAsOfficial(), rounds=2)
    assert [(r["op"], r["length"]) for r in rows] == [("cauchy", 16), ("cauchy", 40), ("vandermonde", 16),
                                                      ("vandermonde", 40)]
    for r in rows:
        assert r["max_rel_diff"] < 1e-4  # the same function: the Triton kernel vs the reference
        assert len(r["times"]["ours"]["fwd_bwd"]) == len(r["times"]["official"]["fwd"]) == 2
        assert r["ratio_fwd_bwd"] == pytest.approx(r["ours_fwd_bwd_ms"] / r["official_fwd_bwd_ms"])


def test_side_by_side_table_judges_each_length_by_its_target():
    bench = _bench()

    def row(op, length, ours, off):
        return {"op": op, "batch": 1024, "n_half": 32, "length": length, "rounds": 5, "ours_fwd_ms": 0.1,
                "official_fwd_ms": 0.2, "ratio_fwd": 0.5, "ours_fwd_bwd_ms": ours, "official_fwd_bwd_ms": off,
                "ratio_fwd_bwd": ours / off, "max_rel_diff": 3e-7}

    rows = [row("cauchy", 1024, 0.30, 0.31), row("cauchy", 16384, 1.5, 2.5), row("vandermonde", 4096, 0.5, 0.4),
            row("vandermonde", 2048, 0.5, 0.4)]
    text = "\n".join(bench.side_by_side_markdown({"side_by_side": rows, "official": {"checkout": "/x/s4",
                                                                                        "commit": "abc"}}))
    assert text.startswith("## Side by side with the official extension (same process)")
    assert "`/x/s4` (commit abc)" in text and "medians of 5 interleaved rounds" in text
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
             if line.startswith(("| Cauchy", "| Vandermonde"))]
    assert [(c[3], c[9], c[10], c[11]) for c in cells] == [
        ("1024", "0.97", "<= 1.0", "yes"), ("16384", "0.60", "<= 0.5", "no"), ("4096", "1.25", "<= 1.0", "no"),
        ("2048", "1.25", "-", "-")]
    assert official.SIDE_BY_SIDE_TARGETS == {1024: 1.0, 4096: 1.0, 16384: 0.5}
    assert bench.side_by_side_markdown({"side_by_side": []}) == []


# ---------------------------------------------------------------------------------------------- layers

class TupleLayer(torch.nn.Module):
    """A stand-in with the official FFTConv's interface: (B, H, L) -> ((B, H, L), state)."""

    def __init__(self, mode: str, h: int):
        super().__init__()
        from ssm_core import SSMLayer

        self.layer = SSMLayer(h, 8, mode=mode, output="none", transposed=True, backend="torch")

    def forward(self, x):
        return self.layer(x), None


def test_layer_side_by_side_rows_and_table():
    bench = _bench_layers()
    made = []

    def make_official(mode, h, length):
        made.append((mode, h, length))
        return TupleLayer(mode, h)

    # the harness is under test here, not the kernels: ours on the torch backend too (the interpreter is slow)
    bench.make_layer = lambda mode, h, backend, output, transposed, device: TupleLayer(mode, h).layer
    rows = bench.side_by_side_rows(make_official, torch.device("cpu"), [(8, 2, 32)], rounds=2)
    assert made == [("s4", 8, 32), ("s4d", 8, 32)]
    assert [(r["mode"], r["H"], r["B"], r["L"]) for r in rows] == [("s4", 8, 2, 32), ("s4d", 8, 2, 32)]
    for r in rows:
        assert "error" not in r, r
        assert len(r["times"]["ours"]) == len(r["times"]["official"]) == 2
        assert r["ratio"] == pytest.approx(r["ours_ms"] / r["official_ms"])
        assert r["ours_kernel_graphs"] == 0  # graph replay is for CUDA tensors only
    rows.append({"mode": "s4", "H": 512, "B": 8, "L": 16384, "rounds": 2, "error": "OutOfMemoryError: x"})
    text = "\n".join(bench.side_by_side_markdown({"side_by_side": rows, "official": {"checkout": "/x/s4"}}))
    assert text.startswith("## Side by side with the official extension (same process)")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| S4")]
    assert [c[6] for c in cells[:2]] == [f"{r['ratio']:.3f}" for r in rows[:2]]
    for r, c in zip(rows[:2], cells):  # the rounds' ratios: lowest-highest of the per-round pairs
        per_round = [a / b for a, b in zip(r["times"]["ours"], r["times"]["official"])]
        assert c[7] == f"{min(per_round):.2f}-{max(per_round):.2f}"
    assert cells[2][4] == "X" and "OutOfMemoryError" in cells[2][11]


def test_layer_side_by_side_graph_pass_and_its_table():
    """The graph pass's bookkeeping on the CPU, with a stand-in capture (warm-up, then the step itself as its
    'replay'): both sides timed in interleaved rounds, the two ratios, a failed capture recorded and tabled."""
    bench = _bench_layers()
    bench.make_layer = lambda mode, h, backend, output, transposed, device: TupleLayer(mode, h).layer
    make_official = lambda mode, h, length: TupleLayer(mode, h)  # noqa: E731
    rows = bench.side_by_side_rows(make_official, torch.device("cpu"), [(8, 2, 32)], rounds=2)
    captured = []

    def capture(step, device):
        step()  # the warm-up: the step must run as it is (gradients made inside)
        captured.append(device)
        return step

    bench.side_by_side_graph_pass(rows, make_official, torch.device("cpu"), capture=capture, rounds=3)
    assert len(captured) == 4  # two sides, two rows
    for r in rows:
        assert len(r["graph_times"]["ours"]) == len(r["graph_times"]["official"]) == 3
        assert r["graph_ratio"] == pytest.approx(r["ours_graph_ms"] / r["official_graph_ms"])
        assert r["graph_vs_eager_ratio"] == pytest.approx(r["ours_graph_ms"] / r["official_ms"])

    def failing(step, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    failed = bench.side_by_side_rows(make_official, torch.device("cpu"), [(8, 2, 32)], rounds=1)
    bench.side_by_side_graph_pass(failed, make_official, torch.device("cpu"), capture=failing, rounds=1)
    assert "not permitted" in failed[0]["ours_graph_error"] and "official_graph_error" not in failed[0]
    # after a failed capture that side is not tried again (the S4D row)
    assert failed[1]["ours_graph_error"] == "not tried: its capture failed at S4 H=8 B=2 L=32"
    failed = failed[:1]
    text = "\n".join(bench.side_by_side_markdown({"side_by_side": rows + failed, "official": {"checkout": "/x"}}))
    graph_section = text.split("whole forward+backward captured in one CUDA graph", 1)[1]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in graph_section.splitlines()
             if line.startswith("| S4")]
    assert len(cells) == 3
    assert cells[0][6] == f"{rows[0]['graph_ratio']:.3f}" and cells[0][7] == f"{rows[0]['graph_vs_eager_ratio']:.3f}"
    assert cells[0][8] == ("yes" if rows[0]["graph_ratio"] <= 0.5 else "no")
    assert cells[2][4] == "X" and cells[2][8] == "-" and "not permitted" in cells[2][9]

    # an official step that synchronizes with the host is refused before its capture: ours is still replayed in
    # every row, and judged against the official as it ships (eager)
    from runners.benchmark.common import StepNotCapturable

    def ours_only(step, device):
        if len(calls) % 2:  # the second capture of a row is the official's
            calls.append("official")
            raise StepNotCapturable("the step cannot be captured in a CUDA graph: it synchronizes with the host")
        calls.append("ours")
        step()
        return step

    calls: list[str] = []
    synced = bench.side_by_side_rows(make_official, torch.device("cpu"), [(8, 2, 32)], rounds=1)
    bench.side_by_side_graph_pass(synced, make_official, torch.device("cpu"), capture=ours_only, rounds=2)
    assert calls == ["ours", "official", "ours"]  # the official is not tried again in the S4D row
    assert all("ours_graph_ms" in r and "graph_ratio" not in r for r in synced)
    assert "StepNotCapturable" in synced[0]["official_graph_error"]
    assert synced[1]["official_graph_error"].startswith("not tried")
    text = "\n".join(bench.side_by_side_markdown({"side_by_side": synced, "official": {"checkout": "/x"}}))
    graph_section = text.split("whole forward+backward captured in one CUDA graph", 1)[1]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in graph_section.splitlines()
             if line.startswith("| S4")]
    for r, c in zip(synced, cells):
        assert c[5] == "X" and c[7] == f"{r['graph_vs_eager_ratio']:.3f}"
        assert c[8] == ("yes" if r["graph_vs_eager_ratio"] <= 0.5 else "no") + " (vs eager)"


def test_layer_side_by_side_records_a_failing_official_layer():
    bench = _bench_layers()

    def broken(mode, h, length):
        raise RuntimeError("kernel not registered")

    rows = bench.side_by_side_rows(broken, torch.device("cpu"), [(8, 2, 32)], rounds=1)
    assert all("RuntimeError: kernel not registered" in r["error"] for r in rows)


def test_official_layer_needs_the_layer_file(tmp_path):
    from runners.benchmark.official_ext import load_official_layer

    (tmp_path / KERNEL_DIR).mkdir(parents=True)
    for name in REQUIRED:
        (tmp_path / KERNEL_DIR / name).write_text("")
    with pytest.raises(OfficialExtensionError, match="missing models/s4/s4.py"):
        load_official_layer(tmp_path, tmp_path / "build")


def test_layer_command_line_stops_on_a_bad_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _bench_layers().main(["--quick", "--out-dir", str(tmp_path), "--official", str(tmp_path / "nowhere")])
    assert "not a directory" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json"))


def test_near_singular_case_measures_both_against_complex128():
    bench = _bench()
    (row,) = bench.near_singular_section(KERNEL_DEVICE, ReferenceAsOfficial(), (2, 5, 37))
    for name in ("ours", "official"):
        for what in ("out", "grad_v", "grad_w"):
            assert 0 < row[f"{name}_{what}"] < 1e-5, (name, what, row)  # complex64 next to the poles, vs complex128
    kinds = ("out", "grad_v", "grad_w")
    assert row["within_factor"] == all(row[f"ours_{w}"] <= 10 * row[f"official_{w}"] for w in kinds)
    side = [{"op": "cauchy", "batch": 2, "n_half": 5, "length": 37, "rounds": 1, "ours_fwd_ms": 1.0,
             "official_fwd_ms": 1.0, "ratio_fwd": 1.0, "ours_fwd_bwd_ms": 1.0, "official_fwd_bwd_ms": 1.0,
             "ratio_fwd_bwd": 1.0, "max_rel_diff": 0.0}]
    text = "\n".join(bench.side_by_side_markdown({"side_by_side": side, "near_singular": [row]}))
    assert "Next to the poles (Cauchy, batch 2, N/2 5, L 37" in text
    assert f"Within 10x: {'yes' if row['within_factor'] else 'no'}." in text


def test_checkout_commit_is_the_checkouts_own_not_an_enclosing_repositorys(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    outer = tmp_path / "outer"
    copy = outer / "exported-s4"
    copy.mkdir(parents=True)
    (copy / "f").write_text("x")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "outer"]):
        subprocess.run([git, "-C", str(outer), *args], check=True, env=env)
    assert checkout_commit(copy) is None  # files copied into another repository: their commit is unknown
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "own"]):
        subprocess.run([git, "-C", str(copy), *args], check=True, env=env)
    own = subprocess.run([git, "-C", str(copy), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert checkout_commit(copy) == own
    assert checkout_commit(tmp_path / "nowhere") is None
