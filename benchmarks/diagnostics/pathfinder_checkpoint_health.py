"""CPU or GPU: is a Pathfinder / Path-X checkpoint's model healthy, and do its BatchNorm running statistics fit it?

    python -m benchmarks.diagnostics.pathfinder_checkpoint_health CHECKPOINT [CHECKPOINT ...] \
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
  * for each BatchNorm, its running variance over the variance of its input on ``stats-n`` further fresh images
    (median, min, max over features) and the running mean's distance from that input's mean in standard deviations;
  * from the optimizer's state (Adam / AdamW), for the encoder's weight and bias and the median over all parameters:
    the root mean square of sqrt(second moment), the size of recent gradients, and the mean of |first moment| /
    sqrt(second moment), the step Adam takes in learning rates (before its bias correction);
  * the eval-mode accuracy again with running statistics taken from those ``stats-n`` images (the inputs each
    BatchNorm sees in train mode): the first BatchNorm's mean only (in a pre-norm BatchNorm backbone the training
    loss has no gradient along the encoder bias, so the bias drifts and that norm's running mean trails it), then
    every BatchNorm's mean and variance. Accuracy that comes back with them puts a low evaluation on the running
    statistics, not on the weights.
The ``stats-n`` images follow the ``n`` scored ones: the two sets are disjoint.
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

from runners.data.base import TaskData
from runners.data.lra.pathfinder import PIXEL_VALUES, load_pathfinder
from runners.data.lra.pathfinder_gen import generate_pathfinder
from runners.train.table import build_model
from ssm_core.optim import build_optimizer


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
    name = str(task.get("name", ""))
    if not (name.startswith("pathfinder") or name == "pathx") or "model_config" not in ckpt:
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


def optimizer_lines(model: nn.Module, ckpt: dict, path: Path) -> list[str]:
    """Adam's state for the encoder's parameters and the median over all parameters (see the module docstring); the
    optimizer is rebuilt as the training loop builds it and given the checkpoint's state, so torch maps the state to
    the parameters."""
    cfg = ckpt.get("config") or {}
    if cfg.get("optimizer", "adamw") not in ("adam", "adamw") or "optimizer" not in ckpt:
        return ["  (no Adam state in this checkpoint)"]
    optimizer = build_optimizer(model, cfg.get("optimizer", "adamw"), float(cfg.get("lr", 1e-3)),
                                float(cfg.get("weight_decay", 0.0)), tuple(cfg.get("betas", (0.9, 0.999))),
                                decay_1d=bool(cfg.get("weight_decay_1d", False)))
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
    except (ValueError, KeyError) as exc:
        raise UsageError(f"{path}: its optimizer state does not fit the model it describes ({exc})") from None
    rows = {}
    for name, param in model.named_parameters():
        state = optimizer.state.get(param, {})
        if "exp_avg_sq" in state:
            size = state["exp_avg_sq"].double().sqrt()  # sqrt(v), the parameter's shape
            step = state["exp_avg"].double().abs() / (size + 1e-8)  # |m| / sqrt(v), in learning rates
            rows[name] = (float(size.pow(2).mean().sqrt()), float(step.mean()))
    if not rows:
        return ["  (no Adam state in this checkpoint)"]
    lines = [f"  {name:28s} gradient size (rms sqrt(v)) {rows[name][0]:.3g}  step / lr (mean |m| / sqrt(v)) "
             f"{rows[name][1]:.3g}" for name in ("encoder.weight", "encoder.bias") if name in rows]
    sizes = torch.tensor([r[0] for r in rows.values()])
    steps = torch.tensor([r[1] for r in rows.values()])
    lines.append(f"  {'all ' + str(len(rows)) + ' parameters, median':28s} gradient size {sizes.median().item():.3g}  "
                 f"step / lr {steps.median().item():.3g}")
    return lines


def _batchnorms(model: nn.Module) -> list[tuple[str, nn.modules.batchnorm._BatchNorm]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@torch.no_grad()
def input_statistics(model: nn.Module, x: Tensor, batch: int) -> dict[str, tuple[Tensor, Tensor]]:
    """Per BatchNorm (by module name): the mean and (biased) variance over ``x`` of the input it sees in train mode,
    float64 (H,) each; the model's state is restored afterwards and it is left in eval mode."""
    norms = _batchnorms(model)
    seen: dict[str, list[Tensor]] = {name: [] for name, _ in norms}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: seen[name].append(
        inp[0].reshape(-1, inp[0].shape[-1]).double())) for name, m in norms]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    try:
        for i in range(0, len(x), batch):
            model(x[i:i + batch])
    finally:
        for h in hooks:
            h.remove()
        model.load_state_dict(saved)
        model.eval()
    stats = {}
    for name, _ in norms:
        z = torch.cat(seen[name])  # (n L, H)
        stats[name] = (z.mean(0), z.var(0, unbiased=False))
    return stats


def batchnorm_lines(model: nn.Module, stats: dict[str, tuple[Tensor, Tensor]]) -> list[str]:
    """Per BatchNorm: running variance / input variance and |running mean - input mean| / input std over features."""
    lines = []
    for name, m in _batchnorms(model):
        mean, var = stats[name]
        ratio = m.running_var.double() / var
        shift = (m.running_mean.double() - mean).abs() / var.sqrt()
        lines.append(f"  {name:18s} running var / input var: median {ratio.median().item():.3g} min "
                     f"{ratio.min().item():.3g} max {ratio.max().item():.3g};  |running mean - mean| / std: median "
                     f"{shift.median().item():.3g} max {shift.max().item():.3g}")
    return lines


@torch.no_grad()
def recalibrated_lines(model: nn.Module, x: Tensor, y: Tensor, stats: dict[str, tuple[Tensor, Tensor]],
                       batch: int) -> list[str]:
    """Eval-mode accuracy on ``x`` with the running statistics as stored, with the first BatchNorm's running mean set
    to ``stats``' mean, and with every BatchNorm's running mean and variance set to ``stats``' (the model's state is
    restored afterwards)."""
    norms = _batchnorms(model)
    if not norms:
        return ["  (no BatchNorm)"]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    first = norms[0][0]
    settings = [("as stored", {}), (f"{first} running mean from the images", {first: ("mean",)}),
                ("every BatchNorm's running mean and variance from the images",
                 {name: ("mean", "var") for name, _ in norms})]
    lines = []
    try:
        for label, replace in settings:
            model.load_state_dict(saved)
            for name, m in norms:
                mean, var = stats[name]
                if "mean" in replace.get(name, ()):
                    m.running_mean.copy_(mean)
                if "var" in replace.get(name, ()):
                    m.running_var.copy_(var)
            model.eval()
            logits = torch.cat([model(x[i:i + batch]).float() for i in range(0, len(x), batch)])  # (n, 2)
            acc = 100.0 * (logits.argmax(-1) == y).float().mean().item()
            lines.append(f"  eval mode, {label}: accuracy {acc:6.2f} %")
    finally:
        model.load_state_dict(saved)
        model.eval()
    return lines


def diagnose(path: Path, args: argparse.Namespace, device: torch.device) -> list[str]:
    """Every line of one checkpoint's diagnosis."""
    ckpt = load_checkpoint(path)
    task_info = ckpt["task"]
    resolution = math.isqrt(int(task_info["seq_len"]))
    normalize = pixel_normalize(path, task_info, args.normalize)
    with tempfile.TemporaryDirectory() as tmp:
        task = fresh_images(resolution, args.n + args.stats_n, args.seed, normalize, Path(tmp))
        x, y = batches(task, args.n + args.stats_n, device)
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
            f"fresh images: {args.n} scored, {args.stats_n} others for the statistics (generator seed {args.seed}, "
            f"pixels {PIXEL_VALUES[normalize]}, label 1 in "
            f"{100.0 * y[:args.n].float().mean().item():.1f} %)"]
    stats = input_statistics(model, x[args.n:], args.batch)
    return head + ["parameters:"] + parameter_lines(model) + ["optimizer state:"] + \
        optimizer_lines(model, ckpt, path) + ["accuracy:"] + \
        accuracy_lines(model, x[:args.n], y[:args.n], args.batch) + ["BatchNorm statistics:"] + \
        batchnorm_lines(model, stats) + ["accuracy with running statistics from the statistics images:"] + \
        recalibrated_lines(model, x[:args.n], y[:args.n], stats, args.batch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--n", type=int, default=960, help="fresh images scored (default 960)")
    parser.add_argument("--stats-n", type=int, default=256, help="fresh images for the BatchNorm statistics")
    parser.add_argument("--seed", type=int, default=5, help="the generator's seed for the fresh images (default 5)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--normalize", action="store_true", help="pixels (x - 127.5) / 127.5 instead of x / 255, "
                        "for a checkpoint that does not record its scaling")
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
