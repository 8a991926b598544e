"""GPU: time of one recurrent step of an S4D (diagonal) and an S4 (rank-1 DPLR) kernel at the generation budget's
sizes, the fused Triton step under several block settings beside the torch step, and the state bandwidth it reaches.

    python -m benchmarks.diagnostics.step_kernel_rate
    TRITON_INTERPRET=1 python -m benchmarks.diagnostics.step_kernel_rate --device cpu   # a check of the script

Each row: the step of a batch of states in place (``step(u, x, out=x)``), timed with triton.testing.do_bench
(median of its repeats), and GB/s = bytes of the state read and written (2 x B x H x N/2 x 8) / time; the
Triton rows also give their largest relative difference from the torch step on the same inputs. The block
settings vary the timed step's entry of ssm_core.ops.step_triton.BLOCKS (features x modes per program, batch rows
each program steps in turn, warps, pipeline stages of its loop over the rows).
"""
from __future__ import annotations

import argparse

import torch

from ssm_core.kernels.diag import DiagKernel
from ssm_core.kernels.dplr import DPLRKernel
from ssm_core.ops import step_triton

#: (features x modes, rows, warps, stages) per program; each step's default (step_triton.BLOCKS) is timed too
SETTINGS = [(2048, 4, 4, 3), (2048, 8, 4, 3), (2048, 16, 4, 3), (2048, 4, 4, 1), (2048, 4, 4, 2), (2048, 1, 4, 1),
            (2048, 1, 8, 1), (1024, 1, 4, 1), (1024, 4, 4, 3), (2048, 4, 8, 3), (4096, 4, 8, 3)]
#: (batch, features, state size N): the generation budget's Table 7 and Table 8 settings, and the full tier's
#: Table 7 batch (as large as fits 16 GB)
SIZES = [(2048, 256, 64), (2048, 512, 64), (3584, 512, 64)]


def _time(fn, cuda: bool) -> float:
    """Milliseconds per call."""
    if cuda:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=200)
    import time

    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    sizes = SIZES if cuda else [(4, 8, 8)]
    defaults = dict(step_triton.BLOCKS)
    where = torch.cuda.get_device_name() if cuda else "cpu"
    torch.manual_seed(0)
    for batch, h, n in sizes:
        for name, cls, key in (("S4D diag", DiagKernel, "diag"), ("S4 DPLR rank 1", DPLRKernel, "dplr")):
            kernels = {b: cls(h, n, init="legs", backend=b).to(dev) for b in ("torch", "triton")}
            kernels["triton"].load_state_dict(kernels["torch"].state_dict())
            for k in kernels.values():
                k.setup_step()
            x0 = kernels["torch"].default_state(batch)
            x0 = torch.complex(torch.randn_like(x0.real), torch.randn_like(x0.real))
            u = torch.randn(batch, h, device=dev)
            gb = 2 * x0.numel() * x0.element_size() / 1e9
            y_ref, x_ref = kernels["torch"].step(u, x0.clone())
            x = x0.clone()
            ms = _time(lambda: kernels["torch"].step(u, x, out=x), cuda)
            print(f"{where} {name} B {batch} H {h} N/2 {n // 2}: torch step {ms * 1e3:8.1f} us "
                  f"{gb / ms * 1e3:7.0f} GB/s", flush=True)
            default = defaults[key]
            for setting in [default] + [st for st in SETTINGS if st != default]:
                step_triton.BLOCKS = {**defaults, key: setting}
                y, x1 = kernels["triton"].step(u, x0.clone())
                err = max(((y - y_ref).abs().max() / y_ref.abs().max()).item(),
                          ((x1 - x_ref).abs().max() / x_ref.abs().max()).item())
                x = x0.clone()
                ms = _time(lambda: kernels["triton"].step(u, x, out=x), cuda)
                print(f"{where} {name} B {batch} H {h} N/2 {n // 2}: triton {setting} {ms * 1e3:8.1f} us "
                      f"{gb / ms * 1e3:7.0f} GB/s  rel. diff {err:.1e}" + ("  (default)" if setting == default else ""),
                      flush=True)
            step_triton.BLOCKS = defaults


if __name__ == "__main__":
    main()
