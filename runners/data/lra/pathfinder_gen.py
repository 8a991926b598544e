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
(the original thresholds the sum of two blurred masks), turn angles are 5-degree steps (the
original takes the integer pixels on a circle), and a target that runs into a dead end is retracted
by 1-3 paddles and regrown (up to 30 times) where the original restarts both targets: the local
rules are the same, but which long paths survive is conditioned differently (here, at 64 and 128,
most 14-paddle walks from the centre run into the border, so restarting alone is slow).

Layout written (the release's): ``<out>/pathfinder<R>/curv_contour_length_14/imgs/<k>/sample_<i>.png``
and ``metadata/<k>.npy``, a text file with one line per image:
``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> <distractor_length>
<paddle_length> <paddle_thickness> <margin> <number of paddle contrasts>``. A batch's metadata file
is written last, atomically: a rerun skips batches whose metadata exists (resumable).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from PIL import Image

from runners.atomic import atomic_path, write_text_atomic
from runners.data.lra.layout import PATHFINDER_DIFFICULTY as DIFFICULTY
from runners.data.progress import progress_bar

MAX_PAIR_ATTEMPTS = 2000  # restarts of the two targets before giving up
MAX_DEAD_ENDS = 30  # dead ends tolerated while growing the two targets before a restart
BACKTRACK_MAX = 3  # a dead end retracts the growing target by 1..BACKTRACK_MAX paddles


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


def _seg_dist(py: np.ndarray, px: np.ndarray, a: tuple, b: tuple) -> np.ndarray:
    """Distance from points (py, px) (broadcastable arrays) to the segment a-b (each (y, x))."""
    dy, dx = b[0] - a[0], b[1] - a[1]
    qy, qx = py - a[0], px - a[1]
    t = np.minimum(np.maximum((qy * dy + qx * dx) * (1.0 / max(dy * dy + dx * dx, 1e-12)), 0.0), 1.0)
    return np.hypot(qy - t * dy, qx - t * dx)


def _box(a: tuple, b: tuple, r: float, size: int):
    """Pixel index ranges (y0, y1, x0, x1), inclusive, of the box around a-b grown by r."""
    return (max(0, math.floor(min(a[0], b[0]) - r)), min(size - 1, math.ceil(max(a[0], b[0]) + r)),
            max(0, math.floor(min(a[1], b[1]) - r)), min(size - 1, math.ceil(max(a[1], b[1]) + r)))


class _Canvas:
    """Occupancy of one image: how many committed paddles keep each pixel out (reversible)."""

    def __init__(self, p: PathfinderParams, margin: int):
        self.p, self.margin, self.R = p, margin, p.resolution
        self.keepout = max(p.paddle_thickness + 2 * margin - 0.5, p.paddle_thickness + 1.0)
        self.count = np.zeros((self.R, self.R), dtype=np.int16)  # (R, R)
        self.lo, self.hi = float(p.padding), float(self.R - 1 - p.padding)
        self.t = np.linspace(0.0, 1.0, int(math.ceil(p.paddle_length / 0.5)) + 1)  # points along a paddle

    def feasible(self, sy, sx, ey, ex, others: list) -> np.ndarray:
        """Which candidate paddles (start (sy, sx), end (ey, ex), arrays (n,)) stay inside the padding
        and off the keep-out of committed paddles and of ``others`` (uncommitted (a, b) paddles)."""
        lo, hi = self.lo, self.hi
        ok = (np.minimum(sy, ey) >= lo) & (np.maximum(sy, ey) <= hi) & (np.minimum(sx, ex) >= lo) \
            & (np.maximum(sx, ex) <= hi)
        py = sy[:, None] + self.t * (ey - sy)[:, None]  # (n, P)
        px = sx[:, None] + self.t * (ex - sx)[:, None]  # (n, P)
        top = self.R - 0.5001
        iy = (np.minimum(np.maximum(py, 0.0), top) + 0.5).astype(np.intp)  # nearest pixel, kept inside
        ix = (np.minimum(np.maximum(px, 0.0), top) + 0.5).astype(np.intp)
        ok &= ~(self.count[iy, ix] > 0).any(axis=1)
        for a, b in others:
            ok &= (_seg_dist(py, px, a, b) > self.keepout).all(axis=1)
        return ok

    def mark(self, a: tuple, b: tuple, delta: int) -> None:
        """Add (delta=1) or remove (delta=-1) the keep-out footprint of paddle a-b."""
        y0, y1, x0, x1 = _box(a, b, self.keepout, self.R)
        py = np.arange(y0, y1 + 1, dtype=np.float64)[:, None]
        px = np.arange(x0, x1 + 1, dtype=np.float64)[None, :]
        self.count[y0:y1 + 1, x0:x1 + 1] += delta * (_seg_dist(py, px, a, b) <= self.keepout)

    def free_fraction(self) -> float:
        return float((self.count == 0).mean())


class _Snake:
    """Paddles (start, end) and headings; all but the last paddle are marked on the canvas."""

    def __init__(self, start: tuple, theta: float, length: float):
        self.paddles = [(start, (start[0] + length * math.sin(theta), start[1] + length * math.cos(theta)))]
        self.thetas = [theta]

    @property
    def last(self):
        return self.paddles[-1]


def _turn_table(p: PathfinderParams) -> tuple[np.ndarray, np.ndarray]:
    """Turn angles (multiples of angle_step with |turn| continuity < pi/2) and their weights."""
    step = math.radians(p.angle_step_deg)
    k = int(math.floor((math.pi / 2) / (p.continuity * step) - 1e-9))
    turns = step * np.arange(-k, k + 1)
    weights = np.cos(np.abs(turns) * p.continuity) ** 2
    return turns, weights


def _extend(rng: np.random.Generator, canvas: _Canvas, snake: _Snake, others: list, turns, weights) -> bool:
    """Add one paddle ``2 margin`` beyond the last one; the previous last paddle gets marked."""
    p, m = canvas.p, canvas.margin
    (_, end), theta = snake.last, snake.thetas[-1]
    py, px = end[0] + m * math.sin(theta), end[1] + m * math.cos(theta)  # pivot
    thetas = theta + turns
    uy, ux = np.sin(thetas), np.cos(thetas)
    sy, sx = py + m * uy, px + m * ux
    ey, ex = sy + p.paddle_length * uy, sx + p.paddle_length * ux
    w = weights * canvas.feasible(sy, sx, ey, ex, others)
    cdf = np.cumsum(w)
    if cdf[-1] <= 0:
        return False
    j = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(w) - 1)
    canvas.mark(*snake.last, 1)
    snake.paddles.append(((float(sy[j]), float(sx[j])), (float(ey[j]), float(ex[j]))))
    snake.thetas.append(float(thetas[j]))
    return True


def _retract(canvas: _Canvas, snake: _Snake) -> None:
    """Undo the last _extend of ``snake`` (its first paddle stays)."""
    if len(snake.paddles) > 1:
        snake.paddles.pop()
        snake.thetas.pop()
        canvas.mark(*snake.last, -1)


def _random_theta(rng: np.random.Generator) -> float:
    return math.radians(int(rng.integers(-180, 180)))


def _seed_ok(canvas: _Canvas, snake: _Snake, others: list) -> bool:
    (a, b) = snake.last
    return bool(canvas.feasible(np.array([a[0]]), np.array([a[1]]), np.array([b[0]]), np.array([b[1]]),
                                others)[0])


def _two_targets(rng: np.random.Generator, p: PathfinderParams, margin: int, turns, weights):
    """Two target snakes of contour_length paddles whose starts are seed_distance apart, or None.

    The shorter snake (the first on ties) grows next; a dead end retracts that snake by 1-3 paddles
    and tries again, up to MAX_DEAD_ENDS times.
    """
    canvas = _Canvas(p, margin)
    R, sd = p.resolution, p.seed_distance
    lo, hi = 2 * sd, R - 2 * sd  # the first target starts near the centre, as in the original
    if hi <= lo:
        lo, hi = p.padding, R - p.padding
    y, x = rng.integers(lo, hi, size=2)
    s1 = _Snake((float(y), float(x)), _random_theta(rng), p.paddle_length)
    if not _seed_ok(canvas, s1, []):
        return None
    phi = math.radians(int(rng.integers(0, 360)))
    s2 = _Snake((float(round(y + sd * math.sin(phi))), float(round(x + sd * math.cos(phi)))), _random_theta(rng),
                p.paddle_length)
    if not _seed_ok(canvas, s2, [s1.last]):
        return None
    snakes, dead_ends = [s1, s2], 0
    while min(len(s.paddles) for s in snakes) < p.contour_length:
        i = 0 if len(s1.paddles) <= len(s2.paddles) else 1
        if not _extend(rng, canvas, snakes[i], [snakes[1 - i].last], turns, weights):
            dead_ends += 1
            if dead_ends > MAX_DEAD_ENDS:
                return None
            for _ in range(int(rng.integers(1, BACKTRACK_MAX + 1))):
                _retract(canvas, snakes[i])
    for s in snakes:
        canvas.mark(*s.last, 1)
    return canvas, snakes


def _distractor(rng: np.random.Generator, canvas: _Canvas, p: PathfinderParams, turns, weights):
    """Grow one distractor snake from a random free pixel; it is left marked on success, removed on failure."""
    free = np.flatnonzero(canvas.count == 0)
    if free.size == 0:
        return None
    y, x = divmod(int(free[rng.integers(free.size)]), canvas.R)
    s = _Snake((float(y), float(x)), _random_theta(rng), p.paddle_length)
    if not _seed_ok(canvas, s, []):
        return None
    for _ in range(p.distractor_length - 1):
        if not _extend(rng, canvas, s, [], turns, weights):
            while len(s.paddles) > 1:
                _retract(canvas, s)
            return None
    canvas.mark(*s.last, 1)
    return s


def _draw(image: np.ndarray, a: tuple, b: tuple, half_width: float, value: float) -> None:
    """max-composite a line of the given half width, anti-aliased by a one-pixel distance ramp."""
    y0, y1, x0, x1 = _box(a, b, half_width + 1.0, image.shape[0])
    py = np.arange(y0, y1 + 1, dtype=np.float64)[:, None]
    px = np.arange(x0, x1 + 1, dtype=np.float64)[None, :]
    cover = np.minimum(np.maximum(half_width + 0.5 - _seg_dist(py, px, a, b), 0.0), 1.0)
    np.maximum(image[y0:y1 + 1, x0:x1 + 1], value * cover, out=image[y0:y1 + 1, x0:x1 + 1])


@dataclass
class SampleGeometry:
    """What one image is drawn from: paddles as ((y0, x0), (y1, x1)) in pixel coordinates."""
    targets: list            # two lists of paddles, each in path order
    distractors: list        # lists of paddles
    markers: tuple           # ((y, x), (y, x)): start of targets[origin], far end of targets[terminal]
    origin: int
    terminal: int            # == origin iff label 1
    margin: int
    target_contrasts: list   # per target paddle intensities (two lists)
    distractor_contrasts: list


def sample_geometry(rng: np.random.Generator, p: PathfinderParams, label: int) -> SampleGeometry:
    """Place the two targets, the distractors and the markers of one image with the given label."""
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
    target_c = [[c * p.paddle_contrasts[rng.integers(len(p.paddle_contrasts))] for _ in s.paddles]
                for s, c in zip(targets, snake_c)]
    distractors, distractor_c = [], []
    for _ in range(p.num_distractors):
        if canvas.free_fraction() < 0.01:  # the original stops at 1% free area
            break
        for _ in range(p.max_snake_retrial + 1):
            s = _distractor(rng, canvas, p, turns, weights)
            if s is not None:
                distractors.append(s.paddles)
                distractor_c.append(p.snake_contrasts[rng.integers(len(p.snake_contrasts))])
                break
    origin = int(rng.integers(2))
    terminal = origin if label == 1 else 1 - origin
    markers = (targets[origin].paddles[0][0], targets[terminal].last[1])
    return SampleGeometry([t.paddles for t in targets], distractors, markers, origin, terminal, margin, target_c,
                          distractor_c)


def render(g: SampleGeometry, p: PathfinderParams) -> np.ndarray:
    """uint8 (R, R) image: paddles and markers max-composited, scaled so the maximum is 255."""
    image = np.zeros((p.resolution, p.resolution), dtype=np.float64)  # (R, R)
    for paddles, cs in zip(g.targets, g.target_contrasts):
        for (a, b), c in zip(paddles, cs):
            _draw(image, a, b, p.paddle_thickness / 2, c)
    for paddles, c in zip(g.distractors, g.distractor_contrasts):
        for a, b in paddles:
            _draw(image, a, b, p.paddle_thickness / 2, c)
    for centre in g.markers:
        _draw(image, centre, centre, p.marker_radius, 1.0)
    return np.rint(image * (255.0 / image.max())).astype(np.uint8)


def make_sample(rng: np.random.Generator, p: PathfinderParams, label: int) -> tuple[np.ndarray, int]:
    """One image (uint8 (R, R)) with the given label, and the paddle margin it was drawn with."""
    g = sample_geometry(rng, p, label)
    return render(g, p), g.margin


def metadata_line(batch: int, i: int, label: int, p: PathfinderParams, margin: int) -> str:
    """One line of metadata/<batch>.npy in the release's format."""
    fields = [f"imgs/{batch}", f"sample_{i}.png", i, label, p.continuity, p.contour_length, p.distractor_length,
              p.paddle_length, p.paddle_thickness, margin, len(p.paddle_contrasts)]
    return " ".join(str(f) for f in fields)


def _save_png(path: Path, image: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        Image.fromarray(image, mode="L").save(tmp, format="PNG")


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
    with progress_bar(n, f"pathfinder{resolution}", "img", show=None if progress else False) as bar:
        if workers > 1 and n_batches > 1:
            with get_context("spawn").Pool(min(workers, n_batches)) as pool:
                for done in pool.imap_unordered(make_batch, jobs):
                    bar.update(done)
        else:
            for job in jobs:
                bar.update(make_batch(job))
    return folder
