"""CPU or GPU: is a Pathfinder / Path-X checkpoint's model healthy, and do its BatchNorm running statistics fit it?

    python benchmarks/diagnostics/pathfinder_checkpoint_health.py CHECKPOINT [CHECKPOINT ...] \
        [--n 960] [--seed 5] [--stats-n 256] [--batch 64] [--normalize] [--device cpu|cuda]

Each checkpoint (a training cell's ``checkpoint.pt``, loaded with ``weights_only=True``) is rebuilt as the training
table builds its model and scored on ``n`` fresh images that the suite's generator draws at the checkpoint's
resolution with ``--seed`` (a seed the specs do not train on; the images are written to a temporary folder and read
back by the suite's loader, pixels scaled as the checkpoint's task records they were in training: x / 255 or
(x - 127.5) / 127.5; ``--normalize`` gives the second for a checkpoint written before runs recorded it). Printed per
checkpoint:
  * the encoder's and the norms' parameters (mean, largest magnitude): norm weights start at 1, and a weight that
    no gradient reaches shrinks under AdamW's decay by lr * wd per step;
  * accuracy and the logits' spread in eval mode (BatchNorm's running statistics, what validation uses) and in
    train mode (each batch's own statistics): a model that scores in train mode and not in eval mode is sound, its
    running statistics are not; a model at chance in both is not learning;
  * for each BatchNorm, its running variance over the variance of its input on ``stats-n`` fresh images (median,
    min, max over features) and the running mean's distance from that input's mean in standard deviations.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

sys.path.insert(0, os.getcwd())

from runners.data.base import TaskData  # noqa: E402
from runners.data.lra.pathfinder import PIXEL_VALUES, load_pathfinder  # noqa: E402
from runners.data.lra.pathfinder_gen import generate_pathfinder  # noqa: E402
from runners.train.table import build_model  # noqa: E402


class UsageError(ValueError):
    """An argument or checkpoint this diagnosis cannot use; the message names it and what is allowed."""


def load_checkpoint(path: Path) -> dict:
    """The checkpoint's dict; UsageError unless it is a Pathfinder / Path-X cell's checkpoint."""
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - whatever torch.load refuses: name the file
        raise UsageError(f"{path}: cannot be read as a checkpoint ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
    task = ckpt.get("task", {}) if isinstance(ckpt, dict) else {}
    if not str(task.get("name", "")).startswith("pathfinder") or "model_config" not in ckpt:
        raise UsageError(f"{path}: not a Pathfinder / Path-X training checkpoint (task {task.get('name')!r}); "
                         f"allowed: a checkpoint.pt that a training cell on the pathfinder loader wrote")
    return ckpt


def pixel_normalize(path: Path, task_info: dict, flag: bool) -> bool:
    """Whether the checkpoint's model was fed pixels in [-1, 1] (the loader's ``normalize``), from the scaling its
    task records; ``flag`` (``--normalize``) decides only for a checkpoint that records none, and may not contradict
    one that does."""
    values = task_info.get("values")
    if values is None:
        return flag
    by_values = {text: normalize for normalize, text in PIXEL_VALUES.items()}
    if values not in by_values:
        raise UsageError(f"{path}: its task's pixels are {values!r}; allowed: {', '.join(map(repr, by_values))}")
    if flag and not by_values[values]:
        raise UsageError(f"{path}: trained on pixels {values!r}, so --normalize ([-1, 1]) would score it on inputs it "
                         f"never saw; leave --normalize out (the checkpoint's own scaling is used)")
    return by_values[values]


def fresh_images(resolution: int, n: int, seed: int, normalize: bool, folder: Path) -> TaskData:
    """``n`` new images of the suite's generator (seed ``seed``), read back by the loader (train split: 80 %)."""
    generate_pathfinder(folder, resolution=resolution, n=n, seed=seed, workers=min(8, os.cpu_count() or 1),
                        progress=False)
    return load_pathfinder(folder, resolution=resolution, normalize=normalize, use_cache=False)


def batches(task: TaskData, n: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The first ``n`` examples of all three splits stacked: x (n, L, 1), y (n,)."""
    items = [task.train[i] for i in range(len(task.train))] + [task.val[i] for i in range(len(task.val))] + \
        [task.test[i] for i in range(len(task.test))]
    items = items[:n]
    return torch.stack([x for x, _ in items]).to(device), torch.as_tensor([int(y) for _, y in items], device=device)


def parameter_lines(model: nn.Module) -> list[str]:
    """Mean and largest magnitude of the encoder's and every norm's parameters."""
    lines = []
    for name, p in model.named_parameters():
        if name.startswith("encoder") or ".norm." in name or name.startswith("final_norm"):
            lines.append(f"  {name:28s} {tuple(p.shape)!s:12s} mean {p.mean().item():+.4g}  max |.| "
                         f"{p.abs().max().item():.4g}")
    return lines


@torch.no_grad()
def accuracy_lines(model: nn.Module, x: Tensor, y: Tensor, batch: int) -> list[str]:
    """Accuracy and the logits' standard deviation over examples, in eval mode and in train mode (BatchNorm's
    batch statistics; the running statistics are restored afterwards)."""
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    lines = []
    for mode in ("eval", "train"):
        model.train(mode == "train")
        logits = torch.cat([model(x[i:i + batch]).float() for i in range(0, len(x), batch)])  # (n, 2)
        acc = 100.0 * (logits.argmax(-1) == y).float().mean().item()
        lines.append(f"  {mode:5s} mode: accuracy {acc:6.2f} %   logits' std over examples "
                     f"{logits.std(0).mean().item():.4g}")
    model.load_state_dict(saved)
    model.eval()
    return lines


@torch.no_grad()
def batchnorm_lines(model: nn.Module, x: Tensor, batch: int) -> list[str]:
    """Per BatchNorm: running variance / input variance and |running mean - input mean| / input std over features,
    the input statistics taken in train mode over ``x`` (the running statistics are restored afterwards)."""
    norms = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    sums: dict[str, list[Tensor]] = {name: [] for name, _ in norms}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: sums[name].append(
        inp[0].reshape(-1, inp[0].shape[-1]).double())) for name, m in norms]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    for i in range(0, len(x), batch):
        model(x[i:i + batch])
    for h in hooks:
        h.remove()
    model.load_state_dict(saved)
    model.eval()
    lines = []
    for name, m in norms:
        z = torch.cat(sums[name])  # (n L, H)
        mean, var = z.mean(0), z.var(0)
        ratio = m.running_var.double() / var
        shift = (m.running_mean.double() - mean).abs() / var.sqrt()
        lines.append(f"  {name:18s} running var / input var: median {ratio.median().item():.3g} min "
                     f"{ratio.min().item():.3g} max {ratio.max().item():.3g};  |running mean - mean| / std: median "
                     f"{shift.median().item():.3g} max {shift.max().item():.3g}")
    return lines


def diagnose(path: Path, args: argparse.Namespace, device: torch.device) -> list[str]:
    """Every line of one checkpoint's diagnosis."""
    ckpt = load_checkpoint(path)
    task_info = ckpt["task"]
    resolution = math.isqrt(int(task_info["seq_len"]))
    normalize = pixel_normalize(path, task_info, args.normalize)
    with tempfile.TemporaryDirectory() as tmp:
        task = fresh_images(resolution, max(args.n, args.stats_n), args.seed, normalize, Path(tmp))
        x, y = batches(task, max(args.n, args.stats_n), device)
    kwargs = {k: v for k, v in ckpt["model_config"].items() if k != "arch"}
    model = build_model(ckpt["model_config"].get("arch", "ssm"), kwargs, task).to(device)
    model.load_state_dict(ckpt["model"])
    model.eval()
    partial = ckpt.get("partial") or {}
    epoch = ckpt.get("epoch")  # 0-based index of the epoch in progress; metrics.jsonl counts from 1
    head = [f"{path}: {task_info['name']}, epoch {epoch + 1 if isinstance(epoch, int) else epoch} (as metrics.jsonl "
            f"counts) at step {ckpt.get('step')} (global step "
            f"{ckpt.get('global_step')}); logged at this point: val {partial.get('val_metric', '-')}, train "
            f"{partial.get('train_metric', '-')}",
            f"fresh images: {args.n} scored, {args.stats_n} for the statistics (generator seed {args.seed}, "
            f"pixels {PIXEL_VALUES[normalize]}, label 1 in "
            f"{100.0 * y[:args.n].float().mean().item():.1f} %)"]
    return head + ["parameters:"] + parameter_lines(model) + ["accuracy:"] + \
        accuracy_lines(model, x[:args.n], y[:args.n], args.batch) + ["BatchNorm statistics:"] + \
        batchnorm_lines(model, x[:args.stats_n], args.batch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--n", type=int, default=960, help="fresh images scored (default 960)")
    parser.add_argument("--stats-n", type=int, default=256, help="fresh images for the BatchNorm statistics")
    parser.add_argument("--seed", type=int, default=5, help="the generator's seed for the fresh images (default 5)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--normalize", action="store_true", help="pixels (x - 127.5) / 127.5 instead of x / 255, for a checkpoint that does not record its scaling")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    for name in ("n", "stats_n", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible here")
    torch.manual_seed(0)
    try:
        for path in args.checkpoints:
            print("\n".join(diagnose(path, args, torch.device(args.device))), flush=True)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
