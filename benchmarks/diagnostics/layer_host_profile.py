"""GPU: where the host time of an SSMLayer forward+backward goes (graphs on, tiny sizes)."""
import os, sys, cProfile, pstats, time
import torch
sys.path.insert(0, os.getcwd())
from ssm_core import SSMLayer
for mode in ("s4d", "s4"):
    layer = SSMLayer(256, 64, mode=mode, output="none", transposed=True).cuda()
    x = torch.randn(2, 256, 64, device="cuda", requires_grad=True)
    g = torch.randn(2, 256, 64, device="cuda")
    for _ in range(10):
        layer(x).backward(g)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        layer(x).backward(g)
    print(mode, "host ms per fwd+bwd", (time.perf_counter() - t0) * 10, flush=True)
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(100):
        layer(x).backward(g)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)
