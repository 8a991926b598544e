"""Pathfinder / Path-X generator (Linsley et al. 2018; LRA's per-resolution settings), written anew.

An image holds two target paths and a few short distractor paths, each a "snake" of dashed
segments ("paddles"): paddle k+1 starts ``2 * margin`` beyond paddle k along a bend, its direction
drawn with weight ``cos(min(|turn| * continuity, pi/2))^2`` among 5-degree steps, and never within a
keep-out distance of the paddles already drawn (except the one just before it). The two target
snakes start ``seed_distance`` apart near the centre and grow alternately; a circle marker is put
on the start of one target and on the far end of the same target (label 1) or of the other
target (label 0), so the two markers are never told apart by distance alone. Labels are balanced
exactly within every batch.

Parameters per resolution are those LRA's TFDS builder documents for its data (generated with
github.com/drewlinsley/pathfinder ``snakes2``), with that script's defaults where LRA set none,
and Python 2 integer division where LRA wrote ``contour_length / 3`` (the script is Python 2):

==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
resolution  pad.   paddle  gap   thick.   marker r   seed d  contin. distractors  snake contr. paddle c.
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
32          1      2       [1]   0.5      1.5        7       1.0     5 x 4        2.0          0.75
64          1      5       [1]   1.0      2.5        12      1.8     5 x 4        0.8          1.0
128         1      5       [2,3] 1.5      3.0        20      1.8     8 x 4        0.9          1.0
256         22     5       [3]   2.0      5.0        27      1.8     7 x 4        1.0          1.0
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========

All with contour_length 14 (the ``curv_contour_length_14`` difficulty LRA uses). Target paddles have
intensity snake contrast x paddle contrast, distractors the snake contrast, markers 1; the image is
then scaled so its maximum is 255 (as scipy.misc.imsave did). Differences from the original
script: lines and circles are anti-aliased by a distance ramp (not Lanczos-resized 2x drawings),
the collision test is a hard keep-out of ``thickness + 2 margin - 0.5`` pixels between centre lines
(the original thresholds the sum of two blurred masks), and turn angles are 5-degree steps
(the original takes the integer pixels on a circle).

Layout written (the release's): ``<out>/pathfinder<R>/curv_contour_length_14/imgs/<k>/sample_<i>.png``
and ``metadata/<k>.npy``, a text file with one line per image:
``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> <distractor_length>
<paddle_length> <paddle_thickness> <margin> <number of paddle contrasts>``. A batch's metadata file
is written last, atomically: a rerun skips batches whose metadata exists (resumable).
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from runners.data.lra.common import write_text_atomic
from runners.data.lra.pathfinder import DIFFICULTY

MAX_PAIR_ATTEMPTS = 2000


@dataclass(frozen=True)
class PathfinderParams:
    resolution: int
    padding: int                      # no paddle point closer than this to the border
    paddle_length: int
    paddle_margins: tuple[int, ...]   # gap parameter, one drawn per image; gap between paddles = 2 margin
    paddle_thickness: float
    marker_radius: float
    seed_distance: int                # distance between the starts of the two targets
    continuity: float                 # turn weight cos(min(|turn| continuity, pi/2))^2
    distractor_length: int            # paddles per distractor snake
    num_distractors: int
    snake_contrasts: tuple[float, ...]
    paddle_contrasts: tuple[float, ...]
    contour_length: int = 14          # paddles per target snake
    max_snake_retrial: int = 4        # distractor snake attempts (original: max_distractor_contour_retrial)
    angle_step_deg: float = 5.0


PARAMS = {
    32: PathfinderParams(32, padding=1, paddle_length=2, paddle_margins=(1,), paddle_thickness=0.5,
                         marker_radius=1.5, seed_distance=7, continuity=1.0, distractor_length=4,
                         num_distractors=5, snake_contrasts=(2.0,), paddle_contrasts=(0.75,)),
    64: PathfinderParams(64, padding=1, paddle_length=5, paddle_margins=(1,), paddle_thickness=1.0,
                         marker_radius=2.5, seed_distance=12, continuity=1.8, distractor_length=4,
                         num_distractors=5, snake_contrasts=(0.8,), paddle_contrasts=(1.0,)),
    128: PathfinderParams(128, padding=1, paddle_length=5, paddle_margins=(2, 3), paddle_thickness=1.5,
                          marker_radius=3.0, seed_distance=20, continuity=1.8, distractor_length=4,
                          num_distractors=8, snake_contrasts=(0.9,), paddle_contrasts=(1.0,)),
    256: PathfinderParams(256, padding=22, paddle_length=5, paddle_margins=(3,), paddle_thickness=2.0,
                          marker_radius=5.0, seed_distance=27, continuity=1.8, distractor_length=4,
                          num_distractors=7, snake_contrasts=(1.0,), paddle_contrasts=(1.0,)),
}


def pathfinder_params(resolution: int) -> PathfinderParams:
    """LRA's settings for Pathfinder-<resolution> (32, 64, 128 = Path-X, 256)."""
    if resolution not in PARAMS:
        raise ValueError(f"pathfinder resolution must be one of {sorted(PARAMS)}, got {resolution}")
    return PARAMS[resolution]


def _unit(theta):
    return np.stack([np.sin(theta), np.cos(theta)], axis=-1)  # (..., 2) as (dy, dx)


def _seg_dist(py, px, a, b):
    """Distance from points (py, px) to segment a-b (each (2,) as (y, x))."""
    d = b - a
    t = ((py - a[0]) * d[0] + (px - a[1]) * d[1]) / max(float(d @ d), 1e-12)
    t = np.clip(t, 0.0, 1.0)
    return np.hypot(py - (a[0] + t * d[0]), px - (a[1] + t * d[1]))


class _Canvas:
    """Occupancy of one image: a keep-out mask around committed paddles, plus the paddles drawn."""

    def __init__(self, p: PathfinderParams, margin: int):
        self.p, self.margin, self.R = p, margin, p.resolution
        self.keepout = max(p.paddle_thickness + 2 * margin - 0.5, p.paddle_thickness + 1.0)
        self.blocked = np.zeros((self.R, self.R), dtype=bool)  # (R, R)
        self.lo, self.hi = float(p.padding), float(self.R - 1 - p.padding)
        n_pts = int(math.ceil(p.paddle_length / 0.5)) + 1
        self.t = np.linspace(0.0, 1.0, n_pts)  # sample points along a paddle's centre line

    def copy(self) -> "_Canvas":
        c = object.__new__(_Canvas)
        c.__dict__.update(self.__dict__)
        c.blocked = self.blocked.copy()
        return c

    def feasible(self, starts: np.ndarray, ends: np.ndarray, others: list) -> np.ndarray:
        """Which candidate paddles (starts, ends: (n, 2)) stay inside and clear of the keep-out."""
        pts = starts[:, None, :] + self.t[None, :, None] * (ends - starts)[:, None, :]  # (n, P, 2)
        ok = ((pts >= self.lo) & (pts <= self.hi)).all(axis=(1, 2))
        idx = np.clip(np.rint(pts).astype(np.int64), 0, self.R - 1)
        ok &= ~self.blocked[idx[..., 0], idx[..., 1]].any(axis=1)
        for a, b in others:  # uncommitted last paddles of the other snakes
            ok &= (_seg_dist(pts[..., 0], pts[..., 1], a, b) > self.keepout).all(axis=1)
        return ok

    def commit(self, a: np.ndarray, b: np.ndarray) -> None:
        r = self.keepout
        y0, y1 = int(max(0, math.floor(min(a[0], b[0]) - r))), int(min(self.R - 1, math.ceil(max(a[0], b[0]) + r)))
        x0, x1 = int(max(0, math.floor(min(a[1], b[1]) - r))), int(min(self.R - 1, math.ceil(max(a[1], b[1]) + r)))
        py, px = np.mgrid[y0:y1 + 1, x0:x1 + 1].astype(np.float64)
        self.blocked[y0:y1 + 1, x0:x1 + 1] |= _seg_dist(py, px, a, b) <= r


class _Snake:
    def __init__(self, start: np.ndarray, theta: float, length: float):
        self.paddles = [(start, start + length * _unit(theta))]
        self.theta = theta

    @property
    def last(self):
        return self.paddles[-1]


def _turn_table(p: PathfinderParams) -> tuple[np.ndarray, np.ndarray]:
    step = math.radians(p.angle_step_deg)
    k = int(math.floor((math.pi / 2) / (p.continuity * step) - 1e-9))
    turns = step * np.arange(-k, k + 1)
    weights = np.cos(np.minimum(np.abs(turns) * p.continuity, math.pi / 2)) ** 2
    return turns, weights


def _extend(rng: np.random.Generator, canvas: _Canvas, snake: _Snake, others: list, turns, weights) -> bool:
    """Add one paddle to ``snake``; its previous paddle is then committed to the keep-out mask."""
    p, m = canvas.p, canvas.margin
    _, end = snake.last
    pivot = end + m * _unit(snake.theta)
    thetas = snake.theta + turns
    u = _unit(thetas)  # (n, 2)
    starts = pivot + m * u
    ends = starts + p.paddle_length * u
    w = weights * canvas.feasible(starts, ends, others)
    total = w.sum()
    if total <= 0:
        return False
    j = rng.choice(len(w), p=w / total)
    prev = snake.last
    snake.paddles.append((starts[j], ends[j]))
    snake.theta = float(thetas[j])
    canvas.commit(*prev)
    return True


def _random_theta(rng: np.random.Generator) -> float:
    return math.radians(int(rng.integers(-180, 180)))


def _two_targets(rng: np.random.Generator, p: PathfinderParams, margin: int, turns, weights):
    """Two target snakes of contour_length paddles whose starts are seed_distance apart, or None."""
    canvas = _Canvas(p, margin)
    R, sd = p.resolution, p.seed_distance
    lo, hi = 2 * sd, R - 2 * sd
    if hi <= lo:
        lo, hi = p.padding, R - p.padding
    start1 = rng.integers(lo, hi, size=2).astype(np.float64)
    s1 = _Snake(start1, _random_theta(rng), p.paddle_length)
    if not canvas.feasible(*(np.array([x]) for x in s1.last), []).all():
        return None
    phi = math.radians(int(rng.integers(0, 360)))
    start2 = np.rint(start1 + sd * _unit(phi))
    s2 = _Snake(start2, _random_theta(rng), p.paddle_length)
    if not canvas.feasible(*(np.array([x]) for x in s2.last), [s1.last]).all():
        return None
    snakes = [s1, s2]
    for _ in range(p.contour_length - 1):
        for i, s in enumerate(snakes):
            if not _extend(rng, canvas, s, [snakes[1 - i].last], turns, weights):
                return None
    for s in snakes:
        canvas.commit(*s.last)
    return canvas, snakes


def _distractor(rng: np.random.Generator, canvas: _Canvas, p: PathfinderParams, turns, weights):
    """One distractor snake grown on a copy of the canvas; (canvas, snake) or None."""
    free = np.flatnonzero(~canvas.blocked)
    if free.size == 0:
        return None
    c = canvas.copy()
    y, x = divmod(int(free[rng.integers(free.size)]), c.R)
    s = _Snake(np.array([y, x], dtype=np.float64), _random_theta(rng), p.paddle_length)
    if not c.feasible(*(np.array([v]) for v in s.last), []).all():
        return None
    for _ in range(p.distractor_length - 1):
        if not _extend(rng, c, s, [], turns, weights):
            return None
    c.commit(*s.last)
    return c, s


def _draw(image: np.ndarray, a: np.ndarray, b: np.ndarray, half_width: float, value: float) -> None:
    """max-composite a line of the given half width, anti-aliased by a one-pixel distance ramp."""
    R = image.shape[0]
    r = half_width + 1.0
    y0, y1 = int(max(0, math.floor(min(a[0], b[0]) - r))), int(min(R - 1, math.ceil(max(a[0], b[0]) + r)))
    x0, x1 = int(max(0, math.floor(min(a[1], b[1]) - r))), int(min(R - 1, math.ceil(max(a[1], b[1]) + r)))
    py, px = np.mgrid[y0:y1 + 1, x0:x1 + 1].astype(np.float64)
    cover = np.clip(half_width + 0.5 - _seg_dist(py, px, a, b), 0.0, 1.0)
    np.maximum(image[y0:y1 + 1, x0:x1 + 1], value * cover, out=image[y0:y1 + 1, x0:x1 + 1])


def make_sample(rng: np.random.Generator, p: PathfinderParams, label: int) -> tuple[np.ndarray, int]:
    """One image (uint8 (R, R)) with the given label, and the paddle margin it was drawn with."""
    if label not in (0, 1):
        raise ValueError(f"label must be 0 or 1, got {label}")
    margin = int(p.paddle_margins[rng.integers(len(p.paddle_margins))])
    turns, weights = _turn_table(p)
    for _ in range(MAX_PAIR_ATTEMPTS):
        res = _two_targets(rng, p, margin, turns, weights)
        if res is not None:
            break
    else:
        raise RuntimeError(f"pathfinder{p.resolution}: could not place two target paths in "
                           f"{MAX_PAIR_ATTEMPTS} attempts; the parameters leave too little room")
    canvas, targets = res
    snake_c = [p.snake_contrasts[i] for i in rng.integers(len(p.snake_contrasts), size=2)]
    strokes = []  # (a, b, intensity)
    for s, c in zip(targets, snake_c):
        for a, b in s.paddles:
            strokes.append((a, b, c * p.paddle_contrasts[rng.integers(len(p.paddle_contrasts))]))
    for _ in range(p.num_distractors):
        if (~canvas.blocked).mean() < 0.01:
            break
        for _ in range(p.max_snake_retrial + 1):
            got = _distractor(rng, canvas, p, turns, weights)
            if got is not None:
                canvas, s = got
                c = p.snake_contrasts[rng.integers(len(p.snake_contrasts))]
                strokes.extend((a, b, c) for a, b in s.paddles)
                break
    image = np.zeros((p.resolution, p.resolution), dtype=np.float64)  # (R, R)
    for a, b, c in strokes:
        _draw(image, a, b, p.paddle_thickness / 2, c)
    origin = int(rng.integers(2))
    terminal = origin if label == 1 else 1 - origin
    for centre in (targets[origin].paddles[0][0], targets[terminal].last[1]):
        _draw(image, centre, centre, p.marker_radius, 1.0)
    image = np.rint(image * (255.0 / image.max()))
    return image.astype(np.uint8), margin


def metadata_line(batch: int, i: int, label: int, p: PathfinderParams, margin: int) -> str:
    """One line of metadata/<batch>.npy in the release's format."""
    fields = [f"imgs/{batch}", f"sample_{i}.png", i, label, p.continuity, p.contour_length, p.distractor_length,
              p.paddle_length, p.paddle_thickness, margin, len(p.paddle_contrasts)]
    return " ".join(str(f) for f in fields)


def _save_png(path: Path, image: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        Image.fromarray(image, mode="L").save(tmp, format="PNG")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def make_batch(job: tuple) -> int:
    """Write batch ``k`` (PNGs, then metadata/<k>.npy); skipped if its metadata already exists."""
    folder, batch, n, params, seed = job
    folder, p = Path(folder), PathfinderParams(**params)
    meta = folder / "metadata" / f"{batch}.npy"
    if meta.exists():
        return n
    rng = np.random.default_rng([seed, p.resolution, batch])
    labels = np.array([0] * (n // 2) + [1] * (n // 2) + ([batch % 2] if n % 2 else []))
    rng.shuffle(labels)
    img_dir = folder / "imgs" / str(batch)
    img_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, label in enumerate(labels.tolist()):
        image, margin = make_sample(rng, p, label)
        _save_png(img_dir / f"sample_{i}.png", image)
        lines.append(metadata_line(batch, i, label, p, margin))
    write_text_atomic(meta, "\n".join(lines) + "\n")
    return n


def generate_pathfinder(out: Path, *, resolution: int = 32, n: int = 200000, per_batch: int = 1000, seed: int = 0,
                        workers: int = 1, progress: bool = True) -> Path:
    """Write n images in the release layout under ``out/pathfinder<R>/curv_contour_length_14``; returns it.

    Batch k holds images per_batch * k ... (the last batch may be smaller) and is seeded by
    (seed, resolution, k), so the output does not depend on ``workers``.
    """
    p = pathfinder_params(resolution)
    if n < 1 or per_batch < 1:
        raise ValueError(f"generate_pathfinder: n and per_batch must be >= 1, got {n}, {per_batch}")
    folder = Path(out) / f"pathfinder{resolution}" / DIFFICULTY
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    n_batches = math.ceil(n / per_batch)
    jobs = [(str(folder), k, min(per_batch, n - k * per_batch), asdict(p), seed) for k in range(n_batches)]
    with tqdm(total=n, desc=f"pathfinder{resolution}", unit="img", disable=not progress) as bar:
        if workers > 1 and n_batches > 1:
            with get_context("spawn").Pool(min(workers, n_batches)) as pool:
                for done in pool.imap_unordered(make_batch, jobs):
                    bar.update(done)
        else:
            for job in jobs:
                bar.update(make_batch(job))
    return folder
