"""GPU: host time of an SSMLayer step with the kernel and the FFT convolution in one autograd node or in two.

1. The autograd engine runs a CUDA backward on its own device thread. The time spent inside the convolution's
   backward (the Python of the node, timed by a wrapper) with the engine's threads on (PyTorch's default) and off
   (the backward on the calling thread), and the whole forward+backward, for the FFT convolution alone and a
   trivial custom node.
2. The S4D / S4 layer (N = 64, output 'none', transposed, graph replay on) with the one-node path (the default) and
   with the two-node path (the kernel's own graph node, then fft_conv): host ms per forward+backward at a size
   where the GPU work is negligible (H 128, B 2, L 64), then triton's do_bench medians at H, B, L = 128, 32, 1024;
   128, 8, 16384; 256, 32, 4096, in interleaved rounds.

Run from the repository root: python -m benchmarks.diagnostics.backward_thread_host
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from ssm_core import SSMLayer
from ssm_core import fftconv

DEVICE = torch.device("cuda")
ONE_NODE = SSMLayer._replayed_conv


def TWO_NODES(self: SSMLayer, u: torch.Tensor, rate: float, layout: str) -> None:
    """SSMLayer._replayed_conv declining every call: the layer takes the two-node path."""
    return None


def host_us(fn: Callable[[], object], n: int = 500) -> float:
    """Best of three means of n calls, us (the GPU work is negligible: this is the host's)."""
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return min(best)


class _Nothing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a.view_as(a)

    @staticmethod
    def backward(ctx, grad):
        return grad


def engine_threads() -> None:
    h, b, length = 128, 2, 64
    u = torch.randn(b, h, length, device=DEVICE, requires_grad=True)
    k = torch.randn(1, h, length, device=DEVICE, requires_grad=True)
    d = torch.randn(1, h, device=DEVICE, requires_grad=True)
    g = torch.randn(b, 1, h, length, device=DEVICE)
    a = torch.randn(4, device=DEVICE, requires_grad=True)
    inside = [0.0, 0]
    original = fftconv._FFTConv.backward

    def timed(ctx, grad):
        t0 = time.perf_counter()
        out = original(ctx, grad)
        inside[0] += time.perf_counter() - t0
        inside[1] += 1
        return out

    fftconv._FFTConv.backward = staticmethod(timed)
    try:
        for threads in (True, False):
            torch.autograd.set_multithreading_enabled(threads)
            nothing = host_us(lambda: _Nothing.apply(a).backward(torch.ones_like(a)))
            step = lambda: fftconv.fft_conv(u, k, d, "gelu").backward(g)  # noqa: E731
            for _ in range(30):  # compiles the Triton passes on the first call: not counted below
                step()
            torch.cuda.synchronize()
            inside[0], inside[1] = 0.0, 0
            whole = host_us(step)
            in_node = inside[0] / inside[1] * 1e6
            print(f"engine threads {'on ' if threads else 'off'}: FFT convolution (H {h}, B {b}, L {length}) "
                  f"forward+backward {whole:.1f} us, of which inside its backward node {in_node:.1f} us; a custom "
                  f"node doing nothing, forward+backward {nothing:.1f} us", flush=True)
    finally:
        fftconv._FFTConv.backward = original
        torch.autograd.set_multithreading_enabled(True)


def layer(mode: str, h: int) -> SSMLayer:
    torch.manual_seed(0)
    return SSMLayer(h, 64, mode=mode, output="none", transposed=True).to(DEVICE)


def one_or_two_nodes(rounds: int = 6) -> None:
    from triton.testing import do_bench

    paths = {"one node": ONE_NODE, "two nodes": TWO_NODES}
    for mode in ("s4d", "s4"):
        hosts = {}
        for name, impl in paths.items():
            SSMLayer._replayed_conv = impl
            lay = layer(mode, 128)
            x = torch.randn(2, 128, 64, device=DEVICE, requires_grad=True)
            g = torch.randn(2, 128, 64, device=DEVICE)
            hosts[name] = host_us(lambda: lay(x).backward(g), n=300) / 1e3
        print(f"{mode} host ms per forward+backward (H 128, B 2, L 64): "
              + ", ".join(f"{k} {v:.3f}" for k, v in hosts.items()), flush=True)
        for h, b, length in ((128, 32, 1024), (128, 8, 16384), (256, 32, 4096)):
            ms: dict[str, list[float]] = {name: [] for name in paths}
            for r in range(rounds):
                for name in (list(paths) if r % 2 == 0 else list(paths)[::-1]):
                    SSMLayer._replayed_conv = paths[name]
                    lay = layer(mode, h)
                    x = torch.randn(b, h, length, device=DEVICE, requires_grad=True)
                    g = torch.randn(b, h, length, device=DEVICE)
                    grads = [x, *lay.parameters()]
                    ms[name].append(do_bench(lambda: lay(x).backward(g), warmup=25, rep=100, grad_to_none=grads,
                                             return_mode="median"))
            print(f"{mode} H {h} B {b} L {length}: do_bench ms, median of {rounds} rounds: "
                  + "; ".join(f"{k} {statistics.median(v):.3f} (rounds {', '.join(f'{t:.3f}' for t in v)})"
                              for k, v in ms.items()), flush=True)
    SSMLayer._replayed_conv = ONE_NODE


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    engine_threads()
    one_or_two_nodes()
