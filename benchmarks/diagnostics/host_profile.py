"""GPU: where the host time of a Cauchy / Vandermonde forward+backward goes (B = 8, tiny GPU work, and the target sizes)."""
import os, sys, time, math
import torch
sys.path.insert(0, os.getcwd())
from triton.testing import do_bench
from ssm_core.ops import vandermonde_triton as vt, cauchy_triton as ct

def host_us(fn, n=300):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        best = min(best, (time.perf_counter() - t0) / n)
        torch.cuda.synchronize()
    return best * 1e6

class Floor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v): return v * 2
    @staticmethod
    def backward(ctx, g): return g * 2

class Floor0(torch.autograd.Function):  # backward returns the incoming gradient: no op at all
    @staticmethod
    def forward(ctx, v): return v.view_as(v)
    @staticmethod
    def backward(ctx, g): return g

for B, N, L in ((8, 32, 64), (1024, 32, 4096)):
    n = torch.arange(N, dtype=torch.float64)
    dt = 10 ** torch.empty(B, 1, dtype=torch.float64).uniform_(-3, -1)
    x = (dt * torch.complex(torch.full_like(n, -0.5), math.pi * n)).to(torch.complex64).cuda()
    v = torch.randn(B, N, dtype=torch.complex64, device="cuda")
    vg, xg = v.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(B, L, device="cuda")
    out = torch.empty(B, L, device="cuda")
    z = torch.exp(2j * math.pi * torch.arange(L // 2 + 1, dtype=torch.float64) / L).to(torch.complex64).cuda()
    gc = torch.randn(B, L // 2 + 1, dtype=torch.complex64, device="cuda")
    xs = torch.randn(16, device="cuda"); xsg = xs.clone().requires_grad_(); gs = torch.randn(16, device="cuda")
    cases = {
        "torch.empty(B,L)": lambda: torch.empty((B, L), device="cuda"),
        "tiny op": lambda: xs.add_(1.0),
        "floor Function fwd+bwd (grad)": lambda: torch.autograd.grad(Floor.apply(xsg), [xsg], gs),
        "floor0 Function fwd+bwd (grad)": lambda: torch.autograd.grad(Floor0.apply(xsg), [xsg], gs),
        "floor Function two inputs": lambda: torch.autograd.grad(Floor.apply(xsg) , [xsg], gs),
        "vdm _forward": lambda: vt._forward(v, x, L),
        "vdm _backward": lambda: vt._backward(v, x, g),
        "vdm apply (fwd, grad on)": lambda: vt._LogVandermondeFunction.apply(vg, xg, L),
        "vdm public fwd no grad": lambda: vt.log_vandermonde_triton(v, x, L),
        "vdm fwd+bwd autograd.grad": lambda: torch.autograd.grad(vt.log_vandermonde_triton(vg, xg, L), [vg, xg], g),
        "vdm fwd+bwd .backward": lambda: vt.log_vandermonde_triton(vg, xg, L).backward(g),
        "cauchy public fwd no grad": lambda: ct.cauchy_triton(v, z, x),
        "cauchy fwd+bwd autograd.grad": lambda: torch.autograd.grad(ct.cauchy_triton(vg, z, xg), [vg, xg], gc),
    }
    print(f"== B={B} N/2={N} L={L}")
    for name, fn in cases.items():
        try:
            h = host_us(fn)
            vg.grad = xg.grad = None
            d = do_bench(fn, warmup=25, rep=100, return_mode="median", grad_to_none=[vg, xg]) * 1e3
            print(f"{name:40s} host {h:8.1f} us   do_bench {d:8.1f} us", flush=True)
        except Exception as e:
            print(f"{name:40s} ERROR {type(e).__name__}: {e}", flush=True)

# cProfile of the forward part (the backward runs on the autograd engine's device thread, not seen by cProfile)
import cProfile, pstats
B, N, L = 1024, 32, 4096
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    torch.autograd.grad(vt.log_vandermonde_triton(vg, xg, L), [vg, xg], g)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    vt._backward(v, x, g)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(20)
