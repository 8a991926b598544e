"""CPU or GPU: how far bf16 autocast moves the output and the gradients of an LRA model from float32's.

    python -m benchmarks.diagnostics.autocast_agreement [--spec s4d-table-5] [--task Pathfinder] \
        [--rows 'S4-LegS (suite data)' 'S4D-Lin (suite data)'] [--batch 8] [--seed 0] [--device cpu|cuda] [--worst 5]

Each row's model is built as the training table builds it at the full tier (``run --data suite``'s variant when the
row is one of its rows), seeded, and run once in float32 and once under bf16 autocast (what ``amp: bf16`` trains
with) on the same random input of the task's shape (uniform pixels in [0, 1], random labels); printed per row: the
output's relative error ||bf16 - fp32|| / ||fp32|| and the parameters whose gradients moved most (relative error,
with the float32 gradient's norm). On a CPU the convolution runs its eager path; on a GPU its Triton passes and the
kernel's CUDA graph.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

import torch

from runners.core.errors import SpecError
from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.table import TrainTableConfig


def build(spec_id: str, task: str, row: str) -> torch.nn.Module:
    """The row's model for ``task`` at the full tier, as the training table configures it."""
    spec = load_spec(find_spec(spec_id))
    for data in ("suite", "release"):
        if data == "suite" and spec.tiers["full"].suite_data is None:
            continue
        cfg = tier_config(spec, "full", data)
        if isinstance(cfg, TrainTableConfig) and row in cfg.models and task in cfg.tasks:
            kwargs = cfg.cell_model(row, task)
            break
    else:
        raise SpecError(f"--rows {row!r} / --task {task!r}: not a training cell of {spec_id} at the full tier")
    from ssm_core import SequenceModel

    layer = kwargs.get("layer", {})
    if layer.get("mode", "s4d") == "s4":
        kwargs = {**kwargs, "layer": {**layer, "l_max": 1024}}
    return SequenceModel(d_input=1, d_output=2, **kwargs)


def agreement(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> tuple[float, list]:
    """(output relative error, [(gradient relative error, parameter name, fp32 gradient norm), ...] worst first)."""
    runs = {}
    for amp in (False, True):
        model.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        runs[amp] = (out.float().detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (o32, g32), (o16, g16) = runs[False], runs[True]
    rel = ((o16 - o32).norm() / o32.norm()).item()
    grads = sorted((((g16[n] - g32[n]).norm() / (g32[n].norm() + 1e-30)).item(), n, g32[n].norm().item())
                   for n in g32)
    return rel, grads[::-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="s4d-table-5")
    parser.add_argument("--task", default="Pathfinder")
    parser.add_argument("--rows", nargs="+", default=["S4-LegS (suite data)", "S4D-Lin (suite data)"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024, help="sequence length (Pathfinder-32: 1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worst", type=int, default=5, help="parameters listed per row")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible here")
    device = torch.device(args.device)
    try:
        for row in args.rows:
            torch.manual_seed(args.seed)
            model = build(args.spec, args.task, row).to(device)
            x = torch.rand(args.batch, args.length, 1, device=device)
            y = torch.randint(0, 2, (args.batch,), device=device)
            rel, grads = agreement(model, x, y, device)
            print(f"{args.spec} {row} / {args.task}, batch {args.batch}, seed {args.seed}, {device}: output rel. error "
                  f"{rel:.4g}; gradients, worst first:")
            for err, name, norm in grads[:args.worst]:
                print(f"    {err:8.4f}  {name}  (fp32 gradient norm {norm:.3g})")
            print(f"    median over {len(grads)} parameters: {sorted(g[0] for g in grads)[len(grads) // 2]:.4f}")
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
