"""CPU (Triton interpreter) or GPU: accuracy of the Cauchy product on nodes next to its poles.

Poles w = -0.5 U(0, 1) + 10i N(0, 1), nodes z = i linspace(0, 50, L), complex64 inputs; forward and gradients
(grad_v, grad_w) against complex128 on the same inputs, as max|err| / max|ref|, for the Triton kernels and for the
per-term float32 evaluation (the torch reference in complex64). Run from the repository root.
"""
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.getcwd())
from ssm_core.ops import cauchy  # noqa: E402
from ssm_core.ops.reference import cauchy_torch  # noqa: E402

B, N, L = 4, 32, 1024
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
z = (1j * torch.linspace(0, 50, L, dtype=torch.float64)).to(torch.complex64)
w = torch.complex(-0.5 * torch.rand(B, N, dtype=torch.float64), 10 * torch.randn(B, N, dtype=torch.float64)).to(
    torch.complex64)
v = torch.randn(B, N, dtype=torch.complex64)
g = torch.randn(B, L, dtype=torch.complex64)


def run(fn, dtype):
    vv, ww = v.to(dev, dtype).requires_grad_(), w.to(dev, dtype).requires_grad_()
    out = fn(vv, z.to(dev, dtype), ww)
    return [t.cpu().to(torch.complex128) for t in (out, *torch.autograd.grad(out, (vv, ww), g.to(dev, dtype)))]


ref = run(cauchy_torch, torch.complex128)
for name, fn in (("triton", lambda a, b, c: cauchy(a, b, c, backend="triton")), ("per-term float32", cauchy_torch)):
    errs = [((x - r).abs().max() / r.abs().max()).item() for x, r in zip(run(fn, torch.complex64), ref)]
    print(f"{name:17s} B {B} N/2 {N} L {L} on {dev}: out {errs[0]:.2e}  grad_v {errs[1]:.2e}  grad_w {errs[2]:.2e}")
