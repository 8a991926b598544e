"""GPU: time per training step of the S4 Table 4 budget ListOps model (S4, 6 x 128, bidirectional, GLU, BN, B 50),
with batches padded to the batch maximum (as run) and to 2048; plus a cProfile of the first mode."""
import os, sys, time, cProfile, pstats
from pathlib import Path
import torch
DEV = 'cuda' if torch.cuda.is_available() else 'cpu'
W, N = (10, 20) if DEV == 'cuda' else (1, 2)
from runners.data.registry import PREPARERS, LOADERS
from runners.train.table import build_model
from ssm_core.optim import build_optimizer

def main():
    root = Path("/tmp/listops_small")
    if not (root / ".complete").exists():
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        PREPARERS["listops"](root, n_train=int(os.environ.get("NTRAIN", 1500)), n_val=50, n_test=50, seed=0, workers=os.cpu_count())
        (root / ".complete").write_text("x")
        print(f"prepared in {time.time() - t0:.1f} s", flush=True)
    kw = dict(d_model=128, n_layers=6, norm="batch", prenorm=False, pool="mean",
              layer=dict(mode=sys.argv[1] if len(sys.argv) > 1 else "s4", init="legs", d_state=64, bidirectional=True, output="glu"))
    for pad_to_max in (False, True):
        task = LOADERS["listops"](root, pad_to_max=pad_to_max)
        torch.manual_seed(0)
        model = build_model("ssm", dict(kw), task).to(DEV)
        opt = build_optimizer(model, "adamw", 0.01, 0.05, (0.9, 0.999))
        loader = torch.utils.data.DataLoader(task.train, batch_size=50, shuffle=True, collate_fn=task.collate_fn, drop_last=True)
        def step(batch):
            x, y = batch[0].to(DEV, non_blocking=True), batch[-1].to(DEV, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss.item()
        batches = list(loader)
        lens = [b[0].shape[-1] for b in batches]
        for b in batches[:W]:
            step(b)
        torch.cuda.synchronize() if DEV == 'cuda' else None
        t0 = time.time(); n = 0
        for b in batches[W:W + N]:
            step(b); n += 1
        dt = (time.time() - t0) / n
        print(f"pad_to_max={pad_to_max}: {dt*1e3:.1f} ms/step over {n} steps; lengths {sorted(set(lens))[:8]}... ({len(set(lens))} distinct of {len(lens)})", flush=True)
        # GPU time alone: replay-free estimate via CUDA events around one step
        if not pad_to_max:
            pr = cProfile.Profile(); pr.enable()
            for b in batches[W:W + N // 2 + 1]:
                step(b)
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(18)

if __name__ == '__main__':
    main()
