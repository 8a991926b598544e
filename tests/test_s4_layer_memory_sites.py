"""The S4 layer memory diagnostic's attribution (CPU): replaying allocator trace entries gives the bytes kept at the
end and live at the peak, summed by the line of our code that allocated them."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("s4_layer_memory_script",
                                                  ROOT / "benchmarks" / "diagnostics" / "s4_layer_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _frames(*names: str) -> list[dict]:  # innermost first, as the allocator records them
    return [{"filename": f"/x/{n.split(':')[0]}", "line": int(n.split(":")[1]), "name": "f"} for n in names]


def test_live_blocks_replays_allocations_and_frees_by_site():
    m = _script()
    fft = _frames("torch/functional.py:10", "ssm_core/fftconv.py:120", "benchmarks/bench.py:5")
    kern = _frames("ssm_core/kernels/dplr.py:200", "benchmarks/bench.py:5")
    trace = [
        {"action": "alloc", "addr": 1, "size": 4 << 20, "frames": fft},
        {"action": "alloc", "addr": 2, "size": 2 << 20, "frames": kern},
        {"action": "free_requested", "addr": 1, "size": 4 << 20},  # only free_completed frees
        {"action": "alloc", "addr": 3, "size": 1 << 20, "frames": kern},  # peak: 7 MiB live here
        {"action": "free_completed", "addr": 1, "size": 4 << 20},
        {"action": "free_completed", "addr": 99, "size": 8 << 20},  # allocated before the trace: ignored
        {"action": "free_completed", "addr": 3, "size": 1 << 20},
    ]
    total, sites = m.live_blocks(trace, at_peak=False)
    assert total == 2 << 20 and sites == {"kernels/dplr.py:200 f": 2 << 20}
    peak, sites = m.live_blocks(trace, at_peak=True)
    # the innermost frame of our code names the site, not torch's own frame above it
    assert peak == 7 << 20 and sites == {"ssm_core/fftconv.py:120 f": 4 << 20, "kernels/dplr.py:200 f": 3 << 20}


def test_allocation_site_without_our_frames_names_the_innermost():
    m = _script()
    assert m.allocation_site(_frames("torch/nn/functional.py:7", "lib/other.py:3")) == "nn/functional.py:7 f"
    assert m.allocation_site([]) == "?:? ?"
