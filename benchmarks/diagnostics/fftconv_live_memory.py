"""Any device: the peak of the memory held by tensors alive during one forward + backward of the FFT convolution at
batch 1 (S4 Table 2's case: one row, length 1024, H features, GELU, the (B, L, H) layout), for the two paths a
single row could take: the packed complex path of batch >= 2 (two real rows per complex FFT of length 2L; a
single row leaves the imaginary half empty) and the real-to-complex path that fft_conv takes for B = 1 (spectra
of L + 1 bins). No allocator is needed: a dispatch mode counts the storage of every tensor an operation returns
until the last tensor on it is freed, so the numbers are the tensors' bytes (no allocator rounding, no cuFFT work
areas) and do not depend on the device for the same code path (on a GPU the packed path runs the Triton passes,
whose intermediates differ from the torch passes a CPU runs). The input, kernel, D and upstream gradient exist before and are not
counted. Each path's median time of one forward + backward (triton's do_bench on a GPU, 3 calls on a CPU) and, on
a GPU, the allocator's peak above what was allocated before the call are printed beside it.

    python -m benchmarks.diagnostics.fftconv_live_memory [H ...]      (default: 128 256 512)
"""
from __future__ import annotations

import sys
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ssm_core import fftconv
from runners.benchmark.common import bench_ms, peak_mib as allocator_peak_mib

MIB = 2 ** 20


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of the storages that tensors returned by operations hold, and their peak; a storage counts until the
    last tensor returned on it (a view included) is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.refs: dict[int, list[int]] = {}  # storage data pointer -> [live tensors on it, bytes]

    def _release(self, key: int) -> None:
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self.refs[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().nbytes() == 0:
                continue
            key = t.untyped_storage().data_ptr()
            if key not in self.refs:
                self.refs[key] = [0, t.untyped_storage().nbytes()]
                self.live += self.refs[key][1]
                self.peak = max(self.peak, self.live)
            self.refs[key][0] += 1
            weakref.finalize(t, self._release, key)
        return out


def one_step(packed: bool, h: int, length: int, device: str):
    """A function running one forward + backward of act(u * k + D u) at batch 1 by the chosen path, and the
    leaves whose gradients it makes."""
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(1, length, h, generator=gen).to(device).transpose(-1, -2).requires_grad_()  # (1, H, L) view
    k = torch.randn(1, h, length, generator=gen).to(device).requires_grad_()
    d = torch.randn(1, h, generator=gen).to(device).requires_grad_()
    g = torch.randn(1, length, 1, h, generator=gen).to(device).permute(0, 2, 3, 1)  # (1, C, H, L) view
    impl = fftconv.resolve_impl(None, u.device)

    def step() -> None:
        if packed:  # the packed path's autograd Function, called directly (fft_conv sends B = 1 elsewhere)
            y = fftconv._FFTConv.apply(u, k, d, "gelu", "blch", impl, None, None)
        else:
            y = fftconv.fft_conv(u, k, d, "gelu", layout="blch")
        y.backward(g)

    return step, [u, k, d]


def peak_mib(packed: bool, h: int, length: int, device: str) -> float:
    """Peak MiB of tensors alive during one forward + backward of act(u * k + D u) at batch 1."""
    step, _ = one_step(packed, h, length, device)
    counter = LiveTensorBytes()
    with counter:
        step()
    return counter.peak / MIB


def main(dims: list[int]) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"packed path's passes: {fftconv.resolve_impl(None, torch.device(device))}; batch 1, length 1024, GELU; "
          "peak MiB of tensors alive during forward + backward")
    for h in dims:
        packed, one_row = peak_mib(True, h, 1024, device), peak_mib(False, h, 1024, device)
        spectrum = h * 2048 * 8 / MIB  # one packed (1, H, 2L) complex64 spectrum
        print(f"H={h}: packed path {packed:.2f} MiB, real-to-complex path {one_row:.2f} MiB "
              f"({one_row / packed:.2f}x); one packed spectrum is {spectrum:.2f} MiB")
        for name, is_packed in (("packed", True), ("real-to-complex", False)):
            step, leaves = one_step(is_packed, h, 1024, device)
            ms = bench_ms(step, torch.device(device), grads=leaves)
            alloc = allocator_peak_mib(step, torch.device(device), grads=leaves, prime=True)
            print(f"    {name}: {ms:.4f} ms per forward + backward"
                  + (f", allocator peak {alloc:.2f} MiB above the call's start" if alloc is not None else ""))


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [128, 256, 512])
