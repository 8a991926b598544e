"""GPU: training steps per second of one full-tier cell's model, and the GPU time its whole schedule needs.

    python -m benchmarks.diagnostics.full_step_rate s4-table-4 Path-X S4 --n-train 160000 --batches 32,8

Builds the cell's model exactly as the training table does (model_defaults, the task's and the row's model
settings) on random inputs of the task's shape (length, input size, vocabulary or real values, classes), and
times optimizer steps (forward, backward, AdamW with the spec's settings) at each batch size after warm-up steps.
The schedule's GPU time = epochs x (n_train / batch) steps at the measured rate; with the batch split over k GPUs
(data parallel) each GPU runs batch / k per step, so the rate at batch / k with k GPUs is a lower bound on their
time (gradient all-reduce not counted). Prints one line per batch size.
The task shapes below are LRA's (ListOps padded to 2048 tokens; images as one value per pixel).
"""
from __future__ import annotations

import argparse
import time

import torch

from runners.data.base import TaskData
from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.config import TrainConfig
from runners.train.table import build_model
from ssm_core.optim import build_optimizer

#: (length, input size, vocabulary (None: real values), classes) of the LRA tasks
SHAPES = {"ListOps": (2048, 1, 20, 10), "Text": (4096, 1, 256, 2), "Image": (1024, 1, None, 10),
          "Pathfinder": (1024, 1, None, 2), "Path-X": (16384, 1, None, 2)}


def cell_setup(spec_id: str, task_name: str, row: str, tier: str = "full"):
    """(model_fn, the cell's training settings as a dict, the model's settings) of one cell of a training table,
    built as the table builds them, for a task of SHAPES' shape."""
    spec = load_spec(find_spec(spec_id))
    cfg = tier_config(spec, tier)
    if row not in cfg.models or task_name not in cfg.tasks:
        raise SystemExit(f"{spec_id} {tier}: no cell {row!r} / {task_name!r}; rows: {sorted(cfg.models)}, "
                         f"tasks: {sorted(cfg.tasks)}")
    arch, kwargs = cfg.models[row]["arch"], cfg.cell_model(row, task_name)
    length, d_input, vocab, classes = SHAPES[task_name]
    task = TaskData(name=task_name, train=[], val=[], test=[], seq_len=length, d_output=classes, d_input=d_input,
                    vocab_size=vocab)
    return (lambda: build_model(arch, kwargs, task)), {"seed": 0, **cfg.cell_train(row, task_name)}, \
        {"arch": arch, **kwargs}


def add_cell_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments naming one cell: spec, task (one of SHAPES), row, --tier."""
    parser.add_argument("spec")
    parser.add_argument("task", choices=sorted(SHAPES))
    parser.add_argument("row")
    parser.add_argument("--tier", default="full")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cell_arguments(parser)
    parser.add_argument("--n-train", type=int, required=True, help="training examples per epoch")
    parser.add_argument("--batches", default="", help="batch sizes to time (default: the spec's)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a check of the script)")
    args = parser.parse_args()
    model_fn, train_dict, _ = cell_setup(args.spec, args.task, args.row, args.tier)
    train = TrainConfig.from_dict({"seed": 0, **train_dict})
    spec_id = load_spec(find_spec(args.spec)).id
    length, d_input, vocab, classes = SHAPES[args.task]
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    model = model_fn().to(dev)
    opt = build_optimizer(model, train.optimizer, train.lr, train.weight_decay, train.betas)
    n_params = sum(p.numel() for p in model.parameters())
    for batch in [int(b) for b in args.batches.split(",") if b] or [train.batch_size]:
        x = (torch.randint(0, vocab, (batch, length), device=dev) if vocab
             else torch.randn(batch, length, d_input, device=dev))
        y = torch.randint(0, classes, (batch,), device=dev)

        def step() -> None:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for _ in range(args.warmup):
            step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        if cuda:
            torch.cuda.synchronize()
        rate = args.steps / (time.perf_counter() - t0)
        steps = train.epochs * (args.n_train // train.batch_size)
        k = train.batch_size / batch  # GPUs sharing the batch
        wall = steps / rate / 3600
        where = torch.cuda.get_device_name() if cuda else "cpu"
        peak = f", peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if cuda else ""
        print(f"{spec_id} {args.tier} {args.row} / {args.task} on {where}: {n_params} parameters, batch {batch}: "
              f"{rate:.2f} steps/s{peak}; schedule {train.epochs} epochs x {args.n_train // train.batch_size} steps "
              f"of batch {train.batch_size}: " + (f"{wall:.1f} h on one GPU" if k == 1 else
                                                  f"{wall:.1f} h on {k:g} GPUs ({k * wall:.1f} GPU-hours; gradient "
                                                  f"all-reduce not counted)"), flush=True)


if __name__ == "__main__":
    main()
