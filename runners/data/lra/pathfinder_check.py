"""Label and learnability checks for generated Pathfinder.

``label_problems`` reads, from the generator's records of one image, whatever would make its label unreadable (a
broken target path, a marker off the tips, a label that disagrees with the markers' paths, a faint marker).
``shortcut_probe`` asks the opposite question: whether a global statistic of the image (lit pixels, total intensity,
the distance between the markers, connected pieces, distractors drawn) tells the label without following a path;
each one's best threshold, fitted on half of fresh images, should score near chance (50 %) on the other half.
``learnability`` trains a small CNN on fresh data: a label that cannot be read from the image leaves every model at
chance (50 %). It generates ``n`` images with ``runners.data.lra.pathfinder_gen``, splits them as the loader does
(80/10/10), trains a small residual CNN for a time budget and reports the best validation accuracy. The command
runs both and exits non-zero when that accuracy stays below ``--min-acc`` or a statistic's held-out accuracy
exceeds ``--max-shortcut-acc``:

    python -m runners.data.lra.pathfinder_check --n 40000 --minutes 8 --device cuda --min-acc 0.7 \\
        --workers 16 --out /tmp/pathfinder_check --output pathfinder_check.json

Existing data under ``--out`` is reused (the generator skips finished batches).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy import ndimage

from runners.core.atomic import write_text_atomic
from runners.data.lra.pathfinder import load_pathfinder
from runners.data.lra.pathfinder_gen import (
    PairPool, PathfinderParams, SampleGeometry, _marker, generate_pathfinder, intensity_image, paddle_layer,
    pathfinder_params, render, sample_geometry)

#: the global statistics shortcut_probe tries, in the order of its result
SHORTCUT_FEATURES = ("lit_pixels", "total_intensity", "marker_distance", "connected_pieces", "distractors")


def _path_mask(paddles: list, p: PathfinderParams, scale: int, bridge: float) -> np.ndarray:
    """bool (R scale, R scale): the paddles drawn with half width ``bridge`` pixels (1x units) at ``scale`` x."""
    size = p.resolution * scale
    mask = np.zeros((size, size), dtype=bool)
    for a, b in paddles:
        y0, y1 = sorted((a[0], b[0]))
        x0, x1 = sorted((a[1], b[1]))
        r = bridge + 1.0
        ys = np.arange(max(0, math.floor((y0 - r) * scale)), min(size, math.ceil((y1 + r) * scale) + 1))
        xs = np.arange(max(0, math.floor((x0 - r) * scale)), min(size, math.ceil((x1 + r) * scale) + 1))
        py, px = ys[:, None] / scale, xs[None, :] / scale
        dy, dx = b[0] - a[0], b[1] - a[1]
        t = np.clip(((py - a[0]) * dy + (px - a[1]) * dx) / max(dy * dy + dx * dx, 1e-12), 0.0, 1.0)
        mask[np.ix_(ys, xs)] |= np.hypot(py - a[0] - t * dy, px - a[1] - t * dx) <= bridge
    return mask


def max_gap(p: PathfinderParams, margin: int) -> float:
    """The farthest apart (pixels) the original's rules can put consecutive paddles of a path: the pivot moves
    paddle_length + 2 margin and is rounded up (up to sqrt 2), the far ends are whole pixels truncated from the
    circle of radius paddle_length + margin (up to sqrt 2 off it, at either paddle), and a paddle's drawn end is
    rounded up at the antialias scale (up to sqrt 2 / aa)."""
    return 2 * margin + 3 * math.sqrt(2) + math.sqrt(2) / p.antialias_scale


def label_problems(g: SampleGeometry, p: PathfinderParams, label: int, scale: int = 4) -> list[str]:
    """What makes this image's label unreadable, from the generator's records (empty list: none).

    Each target, drawn alone at ``scale`` x with its gaps bridged (half width ``max_gap`` / 2 plus half a fine
    pixel: wider gaps than the original's rounding allows), must be one connected piece; each marker must sit on
    a tip of a target (the start of ``targets[origin]``, the far end of ``targets[terminal]``); the markers share a
    target iff ``label`` is 1; and in the rendered image each marker's centre pixel must be at least as bright as
    the marker itself (markers are max-composited over the paddles; the original does not keep them the
    brightest objects: at 32 x 32 distractor paddles, of contrast 2, outshine them in two thirds of its images).
    """
    problems = []
    for k, t in enumerate(g.targets):
        mask = _path_mask(t, p, scale, max_gap(p, g.margin) / 2 + 0.5 / scale)
        _, pieces = ndimage.label(mask, structure=np.ones((3, 3)))
        if pieces != 1:
            problems.append(f"target {k} falls apart into {pieces} pieces")
    tips = [[t[0][0], t[-1][1]] for t in g.targets]
    own = []
    for m in g.markers:
        near = [k for k in (0, 1) for tip in tips[k] if math.dist(m, tip) < 0.5]
        if len(near) != 1:
            problems.append(f"marker at {tuple(round(c, 1) for c in m)} is on {len(near)} target tips")
        own.append(near[0] if near else -1)
    if (own[0] == own[1]) != (label == 1):
        problems.append(f"label {label} but the markers are on targets {own}")
    raw = intensity_image(g, p)  # (R, R) before the final scaling (which keeps the order of intensities)
    for m in g.markers:
        y, x = int(round(m[0])), int(round(m[1]))
        if raw[y, x] < _marker(p, m)[y, x] / 255.0:  # below the marker's own intensity at its centre pixel
            problems.append(f"marker at {tuple(round(c, 1) for c in m)} is faint")
    return problems


def _global_statistics(g: SampleGeometry, p: PathfinderParams) -> list[float]:
    """SHORTCUT_FEATURES of one image: pixels above 40/255, the sum of its pixels, the markers' distance (pixels),
    the 8-connected pieces of its lit pixels and the distractors drawn."""
    image = render(g, p).astype(np.float64)  # (R, R)
    lit = image > 40
    (y0, x0), (y1, x1) = g.markers
    pieces = ndimage.label(lit, structure=np.ones((3, 3)))[1]
    return [float(lit.sum()), float(image.sum()), math.hypot(y0 - y1, x0 - x1), float(pieces),
            float(len(g.distractors))]


def path_statistics(*, resolution: int = 32, n: int = 400, seed: int = 5) -> dict[str, float]:
    """What the paths of fresh images look like, to compare with the original generator's (its rates are in the
    generator's docstring). How often paths meet: the fraction of images where the two targets light a common
    pixel (``targets_share_pixel``) or come within one pixel (``targets_within_1px``), and the same for a target
    and a distractor (a snake's pixels: those of its own layer, its paddles anti-aliased as rendered, above 0.35
    of that layer's maximum). The distractor snakes placed per image and the fraction of images with none. The
    targets' turns between consecutive paddles: mean |turn| in degrees and the fraction of exactly straight
    ones."""
    p = pathfinder_params(resolution)
    rng, pool = np.random.default_rng(seed), PairPool()
    near = np.ones((3, 3), dtype=bool)
    hits = {"targets_share_pixel": 0, "targets_within_1px": 0, "target_distractor_share_pixel": 0,
            "target_distractor_within_1px": 0, "distractors_per_image": 0, "images_without_distractors": 0}
    turns: list[float] = []

    def lit(snakes: list, margin: int) -> np.ndarray:
        layer = paddle_layer(snakes, p, margin)  # (R, R)
        return layer > 0.35 * layer.max() if snakes else np.zeros_like(layer, dtype=bool)

    for k in range(n):
        g = sample_geometry(rng, p, k % 2, pool=pool)
        t0, t1 = lit(g.targets[:1], g.margin), lit(g.targets[1:], g.margin)
        d = lit(g.distractors, g.margin)
        hits["targets_share_pixel"] += bool((t0 & t1).any())
        hits["targets_within_1px"] += bool((ndimage.binary_dilation(t0, near) & t1).any())
        hits["target_distractor_share_pixel"] += bool(((t0 | t1) & d).any())
        hits["target_distractor_within_1px"] += bool((ndimage.binary_dilation(t0 | t1, near) & d).any())
        hits["distractors_per_image"] += len(g.distractors)
        hits["images_without_distractors"] += not g.distractors
        for target in g.targets:
            heads = [math.atan2(b[0] - a[0], b[1] - a[1]) for a, b in target]
            turns += [abs((h1 - h0 + math.pi) % (2 * math.pi) - math.pi) for h0, h1 in zip(heads, heads[1:])]
    turn_deg = np.degrees(np.array(turns))
    return {**{key: v / n for key, v in hits.items()}, "mean_abs_turn_deg": float(turn_deg.mean()),
            "straight_turns": float((turn_deg < 1e-6).mean())}


def _threshold_accuracy(f_fit: np.ndarray, y_fit: np.ndarray, f_test: np.ndarray, y_test: np.ndarray) -> float:
    """Held-out accuracy of the best rule 'label 1 iff s (f - t) > 0' (s = +-1, t a fitted value) fitted on f_fit."""
    best, rule = -1.0, (1.0, 0.0)
    for t in np.unique(f_fit):
        for sign in (1.0, -1.0):
            acc = float(((sign * (f_fit - t) > 0) == (y_fit == 1)).mean())
            if acc > best:
                best, rule = acc, (sign, float(t))
    sign, t = rule
    return float(((sign * (f_test - t) > 0) == (y_test == 1)).mean())


def shortcut_probe(*, resolution: int = 32, n: int = 2000, seed: int = 0) -> dict[str, float]:
    """{feature: held-out accuracy} of one threshold on each global statistic (SHORTCUT_FEATURES) of ``n`` fresh
    images with random labels; the first half fits the threshold, the second half scores it. Chance is 0.5; a
    value well above it means the label can be read without following the paths."""
    if n < 20:
        raise ValueError(f"shortcut_probe: n must be at least 20, got {n}")
    p = pathfinder_params(resolution)
    rng, pool = np.random.default_rng(seed), PairPool()
    labels = rng.integers(2, size=n)  # (n,)
    feats = np.array([_global_statistics(sample_geometry(rng, p, int(y), pool=pool), p) for y in labels])  # (n, 5)
    half = n // 2
    return {name: _threshold_accuracy(feats[:half, j], labels[:half], feats[half:, j], labels[half:])
            for j, name in enumerate(SHORTCUT_FEATURES)}


class _Block(nn.Module):
    """Residual 3x3 block with dilation d: x + conv(relu(bn(conv(relu(bn(x))))))."""

    def __init__(self, channels: int, dilation: int):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C, H, W)
        return x + self.conv2(F.relu(self.bn2(self.conv1(F.relu(self.bn1(x))))))


class PathCNN(nn.Module):
    """Stem conv, residual blocks with growing dilation (receptive field over the whole image), max pool."""

    def __init__(self, channels: int = 32, dilations: Sequence[int] = (1, 2, 4, 8, 1, 2, 4, 8)):
        super().__init__()
        self.stem = nn.Conv2d(1, channels, 3, padding=1)
        self.blocks = nn.Sequential(*[_Block(channels, d) for d in dilations])
        self.norm = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 1, H, W) -> (B, 2)
        h = F.relu(self.norm(self.blocks(self.stem(x))))
        return self.head(h.amax(dim=(2, 3)))


def _dihedral(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A random flip / transpose of the batch (the label is unchanged by any of the 8 symmetries)."""
    k = int(torch.randint(8, (1,), generator=g))
    if k & 1:
        x = x.flip(2)
    if k & 2:
        x = x.flip(3)
    if k & 4:
        x = x.transpose(2, 3)
    return x


def _split_tensors(task) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train' | 'val': (x float (N, 1, R, R) in [0, 1], y long (N,))} from the loader's datasets."""
    out = {}
    for name in ("train", "val"):
        ds = getattr(task, name)
        idx = ds.indices
        r = ds.images.shape[-1]
        x = ds.images[idx].float().div_(255.0).view(-1, 1, r, r)
        out[name] = (x, ds.labels[idx])
    return out


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device, batch: int = 1024) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(y), batch):
        correct += int((model(x[i:i + batch].to(device)).argmax(1).cpu() == y[i:i + batch]).sum())
    return correct / max(len(y), 1)


def train_check(data: dict, *, seconds: Optional[float] = None, device: str = "cpu", seed: int = 0, channels: int = 32,
                dilations: Sequence[int] = (1, 2, 4, 8, 1, 2, 4, 8), batch_size: int = 64, lr: float = 3e-3,
                max_epochs: Optional[int] = None) -> dict:
    """Train PathCNN on data['train'] until ``seconds`` have passed or ``max_epochs`` are done (whole epochs,
    at least one; one of the two must be given) and return
    {'best_val_acc', 'val_acc' (per epoch), 'train_acc', 'epochs', 'seconds', 'n_train', 'n_val'}."""
    if seconds is None and max_epochs is None:
        raise ValueError("train_check: give seconds or max_epochs")
    torch.manual_seed(seed)
    dev = torch.device(device)
    g = torch.Generator().manual_seed(seed)
    model = PathCNN(channels, dilations).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    (xtr, ytr), (xva, yva) = data["train"], data["val"]
    steps_per_epoch = math.ceil(len(ytr) / batch_size)
    history: list[float] = []
    start = time.perf_counter()
    epoch = 0
    while True:
        model.train()
        order = torch.randperm(len(ytr), generator=g)
        for i in range(steps_per_epoch):
            b = order[i * batch_size:(i + 1) * batch_size]
            xb = _dihedral(xtr[b], g).to(dev, non_blocking=True)  # (B, 1, R, R)
            loss = F.cross_entropy(model(xb), ytr[b].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        epoch += 1
        history.append(_accuracy(model, xva, yva, dev))
        elapsed = time.perf_counter() - start
        if (seconds is not None and elapsed >= seconds) or (max_epochs is not None and epoch >= max_epochs):
            break
    return {"best_val_acc": max(history), "val_acc": history, "train_acc": _accuracy(model, xtr[:len(yva) or 1],
                                                                                      ytr[:len(yva) or 1], dev),
            "epochs": epoch, "seconds": round(time.perf_counter() - start, 1), "n_train": len(ytr),
            "n_val": len(yva)}


def learnability(out: Path, *, resolution: int = 32, n: int = 40000, gen_seed: int = 0, workers: int = 1,
                 seconds: float = 480.0, device: str = "cpu", train_seed: int = 0, **train_kwargs) -> dict:
    """Generate (or reuse) n Pathfinder-<resolution> images under ``out`` and run train_check on them."""
    t0 = time.perf_counter()
    generate_pathfinder(out, resolution=resolution, n=n, per_batch=min(1000, n), seed=gen_seed, workers=workers,
                        progress=False)
    gen_s = time.perf_counter() - t0
    task = load_pathfinder(out, resolution=resolution, use_cache=False, workers=max(1, workers))
    result = train_check(_split_tensors(task), seconds=seconds, device=device, seed=train_seed, **train_kwargs)
    result.update(resolution=resolution, n=n, gen_seed=gen_seed, train_seed=train_seed, device=device,
                  generate_seconds=round(gen_s, 1))
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.data.lra.pathfinder_check",
                                 description="Train a small CNN on freshly generated Pathfinder; fail below --min-acc.")
    ap.add_argument("--out", required=True, help="data directory for the generated images (reused if present)")
    ap.add_argument("--resolution", type=int, default=32)
    ap.add_argument("--n", type=int, default=40000, help="images to generate (split 80/10/10)")
    ap.add_argument("--minutes", type=float, default=8.0, help="training time budget")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--min-acc", type=float, default=0.7, help="best validation accuracy required (chance: 0.5)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (training uses the same)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="generator processes")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--probe-n", type=int, default=2000,
                    help="fresh images for the shortcut probe (0: skip it)")
    ap.add_argument("--max-shortcut-acc", type=float, default=0.6,
                    help="held-out accuracy of a global statistic's threshold above which the check fails")
    ap.add_argument("--output", default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    if not 0.0 < args.min_acc < 1.0:
        ap.error(f"--min-acc must be in (0, 1), got {args.min_acc}")
    if not 0.5 < args.max_shortcut_acc < 1.0:
        ap.error(f"--max-shortcut-acc must be in (0.5, 1), got {args.max_shortcut_acc}")
    if args.probe_n != 0 and args.probe_n < 20:
        ap.error(f"--probe-n must be 0 (skip) or at least 20, got {args.probe_n}")
    probe = (shortcut_probe(resolution=args.resolution, n=args.probe_n, seed=args.seed + 1)
             if args.probe_n else {})
    res = learnability(Path(args.out), resolution=args.resolution, n=args.n, gen_seed=args.seed,
                       workers=args.workers, seconds=args.minutes * 60, device=args.device, train_seed=args.seed,
                       channels=args.channels, batch_size=args.batch_size, lr=args.lr)
    from runners.core.provenance import environment

    res["environment"] = environment(torch.device(args.device))  # card, versions, commit
    res["min_acc"] = args.min_acc
    res["shortcut_probe"] = {"n": args.probe_n, "max_acc": args.max_shortcut_acc, "held_out_acc": probe}
    shortcuts = [name for name, acc in probe.items() if acc > args.max_shortcut_acc]
    res["passed"] = res["best_val_acc"] >= args.min_acc and not shortcuts
    text = json.dumps(res, indent=1)
    if args.output:
        write_text_atomic(Path(args.output), text + "\n")
    print(text)
    print(f"pathfinder{args.resolution} learnability: best val acc {res['best_val_acc']:.3f} "
          f"(need >= {args.min_acc}); shortcut probe: "
          + (", ".join(f"{k} {v:.3f}" for k, v in probe.items()) + f" (need <= {args.max_shortcut_acc})"
             if probe else "skipped")
          + f": {'PASS' if res['passed'] else 'FAIL'}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
