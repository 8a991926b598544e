"""Statistics that compare Pathfinder images from two generators (the suite's and the original drewlinsley/pathfinder
``snakes2``): the pixel histogram, ink, connected pieces, marker brightness, and, where the generator's records are at
hand, distractors, the distance between the target starts and the label balance.

Every statistic is the mean over images of a per-image value (``per_image_statistics``), so its standard error is
that value's standard deviation / sqrt(n) (``image_statistics`` reports both). Definitions, for uint8 images:

- ``zero``, ``dim``, ``mid``, ``bright``, ``full``: fraction of pixels equal to 0, in 1-31, 32-127, 128-254, equal
  to 255.
- ``nonzero``: fraction of an image's pixels above 0; ``ink``: sum of its pixels / 255.
- ``pieces_lit``, ``pieces_bright``: 8-connected components of the pixels above 0, above 64.
- ``saturated``: pixels equal to 255.
- ``markers_brightest``: 1 when the pixel at each marker's centre (the whole pixel the original draws the marker
  around) equals the image's maximum, else 0. (Other readings, e.g. the brightest pixel of the two marker disks being
  the image maximum, give within 1 point of the same on the original's images.)
- ``distractors``: distractor snakes placed; ``no_distractors``: 1 when none is.
- ``start_distance``: distance (pixels) between the starts of the two target paths.
- ``label1``: 1 for label 1.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
from scipy import ndimage

#: per-image statistics computed from the pixels alone
PIXEL_STATISTICS = ("zero", "dim", "mid", "bright", "full", "nonzero", "ink", "pieces_lit", "pieces_bright",
                    "saturated")
_EIGHT = np.ones((3, 3), dtype=bool)


def per_image_statistics(images: np.ndarray, *, markers: Optional[np.ndarray] = None,
                         distractors: Optional[Sequence[int]] = None, starts: Optional[np.ndarray] = None,
                         labels: Optional[Sequence[int]] = None) -> dict[str, np.ndarray]:
    """{statistic: float (n,)} for uint8 images (n, R, R) (see the module docstring). ``markers`` int (n, 2, 2)
    ((y, x) of each marker's centre pixel), ``distractors`` (n,) snakes placed, ``starts`` (n, 2, 2) the targets'
    start pixels and ``labels`` (n,) add the statistics that need them."""
    images = np.asarray(images)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 (n, R, R), got {images.dtype} {images.shape}")
    n = images.shape[0]
    flat = images.reshape(n, -1)  # (n, R^2)
    out = {
        "zero": (flat == 0).mean(1), "dim": ((flat >= 1) & (flat <= 31)).mean(1),
        "mid": ((flat >= 32) & (flat <= 127)).mean(1), "bright": ((flat >= 128) & (flat <= 254)).mean(1),
        "full": (flat == 255).mean(1), "nonzero": (flat > 0).mean(1), "ink": flat.sum(1) / 255.0,
        "pieces_lit": np.array([ndimage.label(im > 0, structure=_EIGHT)[1] for im in images], dtype=np.float64),
        "pieces_bright": np.array([ndimage.label(im > 64, structure=_EIGHT)[1] for im in images], dtype=np.float64),
        "saturated": (flat == 255).sum(1).astype(np.float64),
    }
    if markers is not None:
        m = np.asarray(markers, dtype=np.int64)  # (n, 2, 2)
        at = images[np.arange(n)[:, None], m[:, :, 0], m[:, :, 1]]  # (n, 2)
        out["markers_brightest"] = (at == flat.max(1)[:, None]).all(1).astype(np.float64)
    if distractors is not None:
        d = np.asarray(distractors, dtype=np.float64)
        out["distractors"], out["no_distractors"] = d, (d == 0).astype(np.float64)
    if starts is not None:
        s = np.asarray(starts, dtype=np.float64)  # (n, 2, 2)
        out["start_distance"] = np.hypot(s[:, 0, 0] - s[:, 1, 0], s[:, 0, 1] - s[:, 1, 1])
    if labels is not None:
        out["label1"] = (np.asarray(labels) == 1).astype(np.float64)
    return out


def image_statistics(images: np.ndarray, **records) -> dict[str, dict[str, float]]:
    """{statistic: {'mean', 'sd', 'se'}} over images (n, R, R) uint8: each per-image statistic's mean, standard
    deviation across images and the mean's standard error (sd / sqrt(n)). ``records`` as in
    ``per_image_statistics``."""
    out = {}
    for name, v in per_image_statistics(images, **records).items():
        sd = float(v.std())
        out[name] = {"mean": float(v.mean()), "sd": sd, "se": sd / math.sqrt(max(len(v), 1))}
    return out


def geometry_records(geometries: Sequence, labels: Sequence[int]) -> dict[str, np.ndarray]:
    """The ``records`` of ``per_image_statistics`` from the suite generator's SampleGeometry of each image."""
    return {"markers": np.array([[[round(c) for c in m] for m in g.markers] for g in geometries]),
            "distractors": np.array([len(g.distractors) for g in geometries]),
            "starts": np.array([[t[0][0] for t in g.targets] for g in geometries]),
            "labels": np.asarray(labels)}


def generated_statistics(resolution: int, n: int, seed: int) -> dict[str, dict[str, float]]:
    """``image_statistics`` of ``n`` images of this suite's generator at ``resolution``, drawn as a batch of the
    data set draws them (the label, then the image) from numpy seed ``seed``, with the geometry's records."""
    from .pathfinder_gen import PairPool, draw_label, pathfinder_params, render, sample_geometry

    p = pathfinder_params(resolution)
    rng, pool = np.random.default_rng(seed), PairPool()
    labels, geoms = [], []
    for _ in range(n):
        labels.append(draw_label(rng))
        geoms.append(sample_geometry(rng, p, labels[-1], pool=pool))
    images = np.stack([render(g, p) for g in geoms])  # uint8 (n, R, R)
    return image_statistics(images, **geometry_records(geoms, np.array(labels)))


def format_table(columns: dict[str, dict[str, dict[str, float]]]) -> str:
    """A plain-text table: one row per statistic, one 'mean +- sd' column per entry of ``columns``."""
    names = list(dict.fromkeys(k for col in columns.values() for k in col))
    head = f"{'statistic':<18}" + "".join(f"{c:>22}" for c in columns)
    rows = [head]
    for name in names:
        cells = []
        for col in columns.values():
            s = col.get(name)
            cells.append(f"{s['mean']:>12.4f} +- {s['sd']:<7.4f}" if s else f"{'':>22}")
        rows.append(f"{name:<18}" + "".join(cells))
    return "\n".join(rows)


def montage(left: np.ndarray, right: np.ndarray, *, cols: int = 4, scale: int = 4, gap: int = 2) -> np.ndarray:
    """uint8 image: the images of ``left`` and ``right`` (each (n, R, R) uint8) in two grids of ``cols`` columns,
    side by side, each pixel a ``scale`` x ``scale`` block, grey lines between images and a wide one between the
    grids."""

    def grid(images: np.ndarray) -> np.ndarray:
        n, r = images.shape[0], images.shape[1] * scale
        rows = math.ceil(n / cols)
        out = np.full((rows * (r + gap) + gap, cols * (r + gap) + gap), 96, dtype=np.uint8)
        for k, im in enumerate(images):
            y, x = gap + (k // cols) * (r + gap), gap + (k % cols) * (r + gap)
            out[y:y + r, x:x + r] = np.kron(im, np.ones((scale, scale), dtype=np.uint8))
        return out

    a, b = grid(np.asarray(left)), grid(np.asarray(right))
    h = max(a.shape[0], b.shape[0])
    pad = lambda g: np.pad(g, ((0, h - g.shape[0]), (0, 0)), constant_values=96)
    return np.concatenate([pad(a), np.full((h, 6 * gap), 200, dtype=np.uint8), pad(b)], axis=1)


def _read_pngs(folder: str, n: int) -> np.ndarray:
    """uint8 (k, R, R): up to n PNGs under ``folder`` (searched recursively, in name order)."""
    from pathlib import Path

    from PIL import Image

    files = sorted(Path(folder).rglob("*.png"))[:n]
    if not files:
        raise SystemExit(f"no PNG images under {folder}")
    return np.stack([np.asarray(Image.open(f).convert("L")) for f in files])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Compare the PNGs of two folders: print their pixel statistics and write a side-by-side montage."""
    import argparse

    from PIL import Image

    ap = argparse.ArgumentParser(prog="python -m runners.data.lra.pathfinder_stats", description=main.__doc__)
    ap.add_argument("left", help="folder of PNG images (searched recursively), e.g. the original's")
    ap.add_argument("right", help="folder of PNG images, e.g. the suite's")
    ap.add_argument("--n", type=int, default=1000, help="images read from each folder for the statistics")
    ap.add_argument("--montage", default=None, help="write a montage of the first 16 images of each here (PNG)")
    args = ap.parse_args(argv)
    left, right = _read_pngs(args.left, args.n), _read_pngs(args.right, args.n)
    print(format_table({f"left (n={len(left)})": image_statistics(left),
                        f"right (n={len(right)})": image_statistics(right)}))
    if args.montage:
        Image.fromarray(montage(left[:16], right[:16])).save(args.montage)
        print(f"montage: {args.montage}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
