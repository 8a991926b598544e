"""benchmarks/diagnostics/fftconv_live_memory.py: its live-tensor counter against allocations of known size, and
the one-row path's peak against the packed path's and its own bound on a small case (CPU, seconds)."""
from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
from benchmarks.diagnostics import fftconv_live_memory as live_memory


def test_counter_counts_each_storage_once_until_its_last_view_is_freed() -> None:
    counter = live_memory.LiveTensorBytes()
    with counter:
        a = torch.empty(1024, 256)  # 1 MiB
        view = a[:10].t()  # a view: no new storage
        del a
        assert counter.live == 2 ** 20  # the view keeps the storage alive
        b = torch.zeros(512, 256)  # 0.5 MiB
        del view
        assert counter.live == 2 ** 19
        del b
    assert counter.live == 0 and counter.peak == 2 ** 20 + 2 ** 19


def test_one_row_path_peaks_near_half_the_packed_path() -> None:
    packed = live_memory.peak_mib(True, 16, 1024, "cpu")
    one_row = live_memory.peak_mib(False, 16, 1024, "cpu")
    spectrum = 16 * 2048 * 8 / 2 ** 20  # one packed (1, H, 2L) complex64 spectrum
    half = 16 * 1025 * 8 / 2 ** 20  # one real-to-complex (1, H, L + 1) complex64 spectrum
    assert packed >= 5 * spectrum and one_row <= 0.45 * packed
    # the one-row peak: the kernel's spectrum, the upstream gradient's, the input's (multiplied in place), the
    # kernel gradient's length-2L transform, the saved pre-activation and the output (half a spectrum each)
    assert one_row <= 5 * half
