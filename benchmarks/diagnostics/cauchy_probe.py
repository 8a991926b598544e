"""GPU: time the Cauchy forward / backward kernels under candidate configs (B = 1024, N/2 = 32), beside the autotuner's pick."""
import os, sys, math, itertools
import torch
sys.path.insert(0, os.getcwd())
from triton.testing import do_bench
from ssm_core.ops import cauchy_triton as ct

B, N = 1024, 32
fwd_jit = ct._cauchy_fwd_kernel.fn
bwd_jit = ct._cauchy_bwd_kernel.fn
for L in (4096, 16384):
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(B, N, dtype=torch.complex64).cuda()
    n = torch.arange(N, dtype=torch.float64)
    dt = 10 ** torch.empty(B, 1, dtype=torch.float64).uniform_(-3, -1)
    w = (dt * torch.complex(torch.full_like(n, -0.5), math.pi * n)).to(torch.complex64).cuda()
    om = torch.exp(-2j * math.pi * torch.arange(L, dtype=torch.float64) / L)
    z = (2 * (1 - om) / (1 + om + 1e-7)).to(torch.complex64).cuda()
    g = torch.randn(B, L, dtype=torch.complex64).cuda()
    out = torch.empty(B, L, dtype=torch.complex64, device="cuda")
    d = torch.empty(2, 1, B, N, dtype=torch.complex64, device="cuda")
    vr, wr, zr, gr, outr, dr = (torch.view_as_real(t) for t in (v, w, z, g, out, d))
    # the autotuned pick
    ct._forward(v, w, z); ct._backward(v, w, z, g); torch.cuda.synchronize()
    tf = do_bench(lambda: ct._forward(v, w, z), warmup=50, rep=200, return_mode="median")
    tb = do_bench(lambda: ct._backward(v, w, z, g), warmup=50, rep=200, return_mode="median")
    print(f"== L={L}: autotuned fwd {tf*1e3:.1f} us {ct._cauchy_fwd_kernel.best_config}; bwd {tb*1e3:.1f} us {ct._cauchy_bwd_kernel.best_config}", flush=True)
    ref = ct._forward(v, w, z).clone()
    fwd_cands = [(bn, bl, pf, nw, ns) for bn, bl, nw in [(1, 1024, 4), (1, 512, 4), (2, 512, 4), (2, 1024, 4), (4, 512, 4), (4, 256, 2),
                 (2, 256, 2), (4, 1024, 8), (8, 512, 8), (2, 2048, 8), (1, 2048, 8), (4, 256, 4)] for pf in (True,) for ns in (1, 3)]
    res = []
    for bn, bl, pf, nw, ns in fwd_cands:

        try:
            grid = (B * ((L + bl - 1) // bl),)
            f = lambda: fwd_jit[grid](vr, wr, zr, outr, N, L, L, BLOCK_N=bn, BLOCK_L=bl, PREFETCH=pf, FAST=True, num_warps=nw, num_stages=ns)
            f(); torch.cuda.synchronize()
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            t = do_bench(f, warmup=50, rep=200, return_mode="median") * 1e3
            res.append((t, f"fwd BN={bn} BL={bl} PF={pf} w={nw} s={ns}", err))
        except Exception as e:
            print("fwd fail", bn, bl, nw, ns, type(e).__name__, str(e)[:100])
    for t, name, err in sorted(res)[:8]:
        print(f"  {t:7.1f} us  {name}  err {err:.1e}", flush=True)
    dref = torch.stack(ct._backward(v, w, z, g)).clone()
    bwd_cands = [(bn, bl, nw, ns) for bn, bl, nw in [(8, 128, 4), (16, 128, 4), (16, 256, 8), (16, 64, 2), (32, 64, 4), (16, 64, 4),
                 (8, 64, 2), (8, 256, 4), (32, 128, 8), (8, 128, 2), (4, 128, 2), (16, 128, 8), (32, 32, 2), (8, 32, 1), (16, 32, 2)]
                 for ns in (1, 2, 3)]
    res = []
    for bn, bl, nw, ns in bwd_cands:
        try:
            grid = (B * ((N + bn - 1) // bn),)
            f = lambda: bwd_jit[grid](vr, wr, zr, gr, dr, B, N, L, L, 1, BLOCK_N=bn, BLOCK_L=bl, FAST=True, num_warps=nw, num_stages=ns)
            f(); torch.cuda.synchronize()
            err = ((d.view(2, B, N) - dref).abs().max() / dref.abs().max()).item()
            t = do_bench(f, warmup=50, rep=200, return_mode="median") * 1e3
            res.append((t, f"bwd BN={bn} BL={bl} w={nw} s={ns}", err))
        except Exception as e:
            print("bwd fail", bn, bl, nw, ns, type(e).__name__, str(e)[:100])
    for t, name, err in sorted(res)[:10]:
        print(f"  {t:7.1f} us  {name}  err {err:.1e}", flush=True)
