"""GPU check: training with the kernel generation replayed from CUDA graphs gives the same losses as eager.

Two-layer SSM models (S4 and S4D, several lengths, eval under no_grad in between, AdamW, grad clipping),
same seed, SSM_KERNEL_GRAPHS=0 vs 1; also DSS and a bidirectional S4D. Prints max relative loss difference.
"""
import os, sys, warnings, time, json
import torch
from torch import nn
sys.path.insert(0, os.getcwd())
from ssm_core import SSMLayer
from ssm_core.kernels.graphs import captured

warnings.simplefilter("error", RuntimeWarning)

def model(mode, **kw):
    torch.manual_seed(0)
    return nn.Sequential(SSMLayer(32, 64, mode=mode, **kw), SSMLayer(32, 64, mode=mode, **kw)).cuda()

def train(mode, graphs, steps=24, lengths=None, sgd=False, perturb=False, **kw):
    os.environ["SSM_KERNEL_GRAPHS"] = "1" if graphs else "0"
    m = model(mode, **kw)
    if perturb:  # one float32 ulp on one parameter: how far does an eager run drift from that alone?
        with torch.no_grad():
            m[0].d.mul_(1 + 2 ** -23)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) if sgd else \
        torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
    gen = torch.Generator(device="cuda").manual_seed(1)
    lengths = lengths or [256, 300, 256, 512, 256, 300]
    losses, evals = [], []
    for step in range(steps):
        L = lengths[step % len(lengths)]
        x = torch.randn(4, L, 32, device="cuda", generator=gen)
        y = torch.randn(4, L, 32, device="cuda", generator=gen)
        loss = ((m(x) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 5 == 4:
            m.eval()
            with torch.no_grad():
                evals.append(((m(x) - y) ** 2).mean().item())
            m.train()
    n_graphs = captured(m)
    return losses, evals, n_graphs

def rel(a, b):
    return [abs(x - y) / abs(y) for x, y in zip(a[0] + a[1], b[0] + b[1])]

out = {}
cases = (("s4d", {}, None), ("s4", {}, None), ("dss", {}, None), ("s4d", {"bidirectional": True}, None),
         ("s4", {"init": "legs/fout"}, None), ("s4", {"init": "legs/fout"}, [256]), ("s4", {"init": "fout"}, [256]))
for mode, kw, lengths in cases + tuple((m, dict(k, sgd=True), l) for m, k, l in cases if m == "s4"):
    t0 = time.time()
    eager = train(mode, False, lengths=lengths, **kw)
    eager2 = train(mode, False, lengths=lengths, **kw)
    eager_ulp = train(mode, False, lengths=lengths, perturb=True, **kw)
    t1 = time.time()
    graphed = train(mode, True, lengths=lengths, **kw)
    t2 = time.time()
    r = rel(graphed, eager)
    name = ("sgd-" if kw.get("sgd") else "") + mode + ("-bidir" if kw.get("bidirectional") else "") + ("-" + kw["init"] if "init" in kw else "") + \
        ("-fixedL" if lengths else "")
    out[name] = {"max_rel_loss_diff": max(r), "eager_vs_eager": max(rel(eager2, eager)),
                 "eager_1ulp_vs_eager": max(rel(eager_ulp, eager)),
                 "first_steps_rel": [f"{x:.1e}" for x in r[:8]], "graphs_captured": graphed[2],
                 "graphs_s": round(t2 - t1, 2), "final_loss": graphed[0][-1]}
    print(name, out[name], flush=True)
ok = all(v["max_rel_loss_diff"] < 1e-4 and v["graphs_captured"] > 0 for v in out.values())
print("GRAPHS_TRAIN_CHECK", "OK" if ok else "FAIL")
