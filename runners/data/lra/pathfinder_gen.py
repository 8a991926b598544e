"""Pathfinder / Path-X generator (Linsley et al. 2018; LRA's per-resolution settings), written anew.

An image holds two target paths and a few short distractor paths, each a "snake" of dashed
segments ("paddles"): paddle k+1 starts ``2 * margin`` beyond paddle k along a bend. A new heading is
drawn among the original's discrete ones (toward the integer pixels on a circle of radius
``paddle_length + margin``) with weight ``cos(min(|turn| * continuity, pi/2))^2`` times how free its far
end is, the whole paddle is then tested against the paddles already committed (drawn, except each
snake's newest), and after ``max_paddle_retrial + 1`` rejected draws the snake fails. The first target
starts anywhere outside a ``2 * seed_distance`` border, the second ``seed_distance`` away at a random
angle; both grow alternately and any failure restarts both. A circle marker is put on the start of
one target and on the far end of the same target (label 1) or of the other target (label 0). Labels
are balanced exactly within every batch.

Parameters per resolution are those LRA's TFDS builder documents for its data (generated with
github.com/drewlinsley/pathfinder ``snakes2``), with that script's defaults where LRA set none
(no single-paddle distractors: the script sets ``use_single_paddles = False``), and Python 2
integer division where LRA wrote ``contour_length / 3`` (the script is Python 2):

==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
resolution  pad.   paddle  gap   thick.   marker r   seed d  contin. distractors  snake contr. paddle c.
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
32          1      2       [1]   0.5      1.5        7       1.0     5 x 4        2.0          0.75
64          1      5       [1]   1.0      2.5        12      1.8     5 x 4        0.8          1.0
128         1      5       [2,3] 1.5      3.0        20      1.8     8 x 4        0.9          1.0
256         22     5       [3]   2.0      5.0        27      1.8     7 x 4        1.0          1.0
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========

All with contour_length 14 (the ``curv_contour_length_14`` difficulty LRA uses) and antialias scale 2.
Target paddles have intensity snake contrast x paddle contrast, distractors the snake contrast,
markers 1. Three behaviours of the original that shape LRA's images are reproduced on purpose:

- Seeded snakes (the first target and every distractor) can start only with some headings: the
  original looks for free start pixels by dilating the occupancy (a float image) with the paddle's
  saturated mask pixels, offset one pixel from the kernel's anchor, and OpenCV pads with -inf; for
  headings whose kernel misses its anchor no start pixel is free and the attempt fails
  (``seed_orientations`` recomputes which, by the same drawing and resizing). At 32 x 32 that leaves
  30 of 360 headings (-150 to -121 degrees), so only about one of the five distractor snakes gets
  placed, and the first target always starts heading up-left.
- Lines and markers are drawn hard-edged at 2x and Lanczos-resized to 1x (through uint8, as
  scipy.misc.imresize did), then the image is scaled min..max to 0..255 (scipy.misc.imsave): thin
  paddles come out at about half intensity, so the markers are the brightest objects.
- A new paddle is tested only against committed paddles. A paddle is committed when the next paddle of
  its snake is placed, and once both targets are complete only the second target's last paddle is (the
  original commits ``current_segment_masks[-1]``); the second target's first paddle is placed with a
  bounds test alone. So the growing tips of the two targets may touch or cross each other, and a
  distractor may cover the first target's far end: the junctions that make some of LRA's images
  ambiguous (and, rarely, a target's far end lands on the other's tip). In 200 images of the original at
  32 x 32 (run outside the suite, in a Python 3 port with scipy's resizing re-created) the two targets
  light a common pixel in 26.5 % of images and come within one pixel in 68.5 %, a target and a
  distractor 7.5 % / 41.0 %; in 400 of this generator 31.0 % / 63.8 % and 7.8 % / 38.0 % (measured by
  ``path_statistics`` of ``runners.data.lra.pathfinder_check``, the port's images by the same rules). An
  earlier version of this generator kept all paths apart (0 % / 37 % and 0 % / 31 %): S4 reached 99 %
  test accuracy on its images, far above the paper's 94.2 on the release.

Remaining differences from the original, each kept for a reason:

- Hard distances for the original's blurred masks. The original rejects a paddle where the sum of its
  Lanczos-blurred, margin-dilated mask and the committed mask reaches 1.8 (only where saturated line
  pixels meet: parallel paddles one pixel apart pass), and weights a far end by 1 - (that mask
  dilated by the margin's cross; the padding is part of it). Here a paddle's points (every half
  pixel) must stay more than ``thickness + 0.5`` pixels from committed paddles; a far end weighs 0
  outside the padding, within one pixel of it or within ``thickness + 2 margin - 1.25`` pixels of a
  committed paddle (the keep-out), 0.2 where a 4-neighbour is in the keep-out, else 1. The same rules
  without the blur's ringing, and cheap; their constants are those among the variants tried whose
  contact rates and distractor count (above and below) come closest to the original's at 32 x 32.
- Headings are the original's discrete set (so paths run in straight, grid-aligned strokes as there:
  at 32 x 32 19 % of target turns are exactly 0 degrees, the original 18 %; mean |turn| 33.1 against
  32.0-32.3 degrees in two samples of 300 images of the port), but positions are float: the original
  rounds pivots up (``ceil``) and places paddles on integer pixels, which spreads the gap between
  paddles over 1-2.8 pixels (here 1.6-2.0). A total far-end weight below 1e-4 is a dead end, as there.
- Each paddle is resized to 1x alone, as in the original, but by exactly 1 / aa over a window around it
  instead of the original's paddle window (17 -> 9 pixels at 32 x 32, a 1.89x resize); intensities
  differ by a few grey levels, not in kind.
- A distractor's start is drawn among free pixels where its first paddle fits (64 tested), instead of
  from the dilated availability map; same intent (a free start), no -inf artefact beyond the heading rule.
- At 64 and 128 (``target_dead_ends``) a target that fails to extend is retracted by 1-3 paddles and
  regrown (up to 30 times) before both restart: with restarts alone long targets rarely fit at these
  sizes and generation is dozens of times slower. At 32 and 256 failures restart both targets, as in
  the original.
- Somewhat fewer distractors at 32 x 32: 0.92 distractor snakes per image (34 % of images none)
  against the original's 1.14-1.23 (23-25 % none) in two samples of it (200 and 400 images). The
  heading rule is the original's (11 of 12 attempts fail on it in both); a looser body test places
  more distractors but then paths meet far more often than in the original.

Layout written (the release's): ``<out>/pathfinder<R>/curv_contour_length_14/imgs/<k>/sample_<i>.png``
and ``metadata/<k>.npy``, a text file with one line per image:
``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> <distractor_length>
<paddle_length> <paddle_thickness> <margin> <number of paddle contrasts>``. A batch's metadata file
is written last, atomically: a rerun skips batches whose metadata exists (resumable).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw

from runners.atomic import atomic_path, write_text_atomic
from runners.data.lra.layout import PATHFINDER_DIFFICULTY as DIFFICULTY
from runners.data.progress import progress_bar

MAX_PAIR_ATTEMPTS = 50000  # restarts of the two targets before giving up (the original never gives up)
SEED_TRIES = 64  # free pixels tested as a distractor's start
BACKTRACK_MAX = 3  # a dead end retracts the growing target by 1..BACKTRACK_MAX paddles
#: keep-out radius = paddle thickness + 2 margin - KEEPOUT_OFFSET pixels (module docstring, "Hard distances")
KEEPOUT_OFFSET = 1.25
#: a paddle's points must stay more than paddle thickness + BODY_SLACK pixels from committed paddles (the
#: original's ``mask + m_im < 1.8`` rejects only paddles whose saturated line pixels meet: parallel paddles one
#: pixel apart pass)
BODY_SLACK = 0.5
#: weight of a far end with a 4-neighbour in the keep-out (the original weights far ends by 1 - its mask dilated
#: by the margin's cross, the mask being about 0.8 one pixel off a paddle's line)
HEAD_NEAR_WEIGHT = 0.2
#: pixels around a paddle's box in which it is resized alone: beyond the Lanczos filter's reach (3 pixels at 1x)
PADDLE_WINDOW_PAD = 6


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
    max_paddle_retrial: int = 2       # rejected turn draws allowed per paddle, minus one (original's name)
    antialias_scale: int = 2          # drawing resolution / image resolution (LRA: 2 at every resolution)
    target_dead_ends: int = 0         # failed target extensions retracted and regrown before a restart


PARAMS = {
    32: PathfinderParams(32, padding=1, paddle_length=2, paddle_margins=(1,), paddle_thickness=0.5,
                         marker_radius=1.5, seed_distance=7, continuity=1.0, distractor_length=4,
                         num_distractors=5, snake_contrasts=(2.0,), paddle_contrasts=(0.75,)),
    64: PathfinderParams(64, padding=1, paddle_length=5, paddle_margins=(1,), paddle_thickness=1.0,
                         marker_radius=2.5, seed_distance=12, continuity=1.8, distractor_length=4,
                         num_distractors=5, snake_contrasts=(0.8,), paddle_contrasts=(1.0,), target_dead_ends=30),
    128: PathfinderParams(128, padding=1, paddle_length=5, paddle_margins=(2, 3), paddle_thickness=1.5,
                          marker_radius=3.0, seed_distance=20, continuity=1.8, distractor_length=4,
                          num_distractors=8, snake_contrasts=(0.9,), paddle_contrasts=(1.0,), target_dead_ends=30),
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
    """Occupancy of one image (reversible): how many committed paddles keep each pixel out (``count``: far
    ends, distractor starts) and how many lie within ``body_radius`` of it (``body``: a paddle's points)."""

    def __init__(self, p: PathfinderParams, margin: int):
        self.p, self.margin, self.R = p, margin, p.resolution
        self.keepout = p.paddle_thickness + 2 * margin - KEEPOUT_OFFSET
        self.count = np.zeros((self.R, self.R), dtype=np.int16)  # (R, R)
        self.body_radius = p.paddle_thickness + BODY_SLACK
        self.body = np.zeros((self.R, self.R), dtype=np.int16)  # (R, R): committed paddles within body_radius
        self.lo, self.hi = float(p.padding), float(self.R - 1 - p.padding)
        self.n_points = int(math.ceil(p.paddle_length / 0.5)) + 1  # tested points along a paddle

    def feasible(self, a: tuple, b: tuple) -> bool:
        """Whether paddle a-b stays inside the padding and more than ``body_radius`` from committed paddles,
        tested at points every half pixel along it."""
        lo, hi = self.lo, self.hi
        if not (lo <= min(a[0], b[0]) and max(a[0], b[0]) <= hi and lo <= min(a[1], b[1]) and max(a[1], b[1]) <= hi):
            return False
        count, k = self.body, self.n_points - 1
        dy, dx = b[0] - a[0], b[1] - a[1]
        for i in range(k + 1):
            y, x = a[0] + dy * i / k, a[1] + dx * i / k
            if count[int(y + 0.5), int(x + 0.5)]:
                return False
        return True

    def head_free(self, ey: np.ndarray, ex: np.ndarray) -> np.ndarray:
        """Weights (n,) of far ends (arrays (n,)), as the original's 1 - (mask dilated by the margin cross):
        0 outside the padding, within one pixel of it (the padding is part of the original's mask) or on a
        kept-out pixel, HEAD_NEAR_WEIGHT with a kept-out 4-neighbour, else 1."""
        inside = (ey >= self.lo) & (ey <= self.hi) & (ex >= self.lo) & (ex <= self.hi)
        iy = np.minimum((np.clip(ey, 0.0, self.R - 1) + 0.5).astype(np.intp), self.R - 1)
        ix = np.minimum((np.clip(ex, 0.0, self.R - 1) + 0.5).astype(np.intp), self.R - 1)
        ok = inside & (iy >= self.lo + 1) & (iy <= self.hi - 1) & (ix >= self.lo + 1) & (ix <= self.hi - 1)
        count, top = self.count, self.R - 1
        ok &= count[iy, ix] == 0
        # where ok, the 4-neighbours lie inside the image; elsewhere the weight is 0 whatever they read
        near = ((count[np.maximum(iy - 1, 0), ix] > 0) | (count[np.minimum(iy + 1, top), ix] > 0)
                | (count[iy, np.maximum(ix - 1, 0)] > 0) | (count[iy, np.minimum(ix + 1, top)] > 0))
        return ok * np.where(near, HEAD_NEAR_WEIGHT, 1.0)

    def mark(self, a: tuple, b: tuple, delta: int) -> None:
        """Add (delta=1) or remove (delta=-1) the keep-out and body footprints of paddle a-b."""
        y0, y1, x0, x1 = _box(a, b, max(self.keepout, self.body_radius), self.R)
        py = np.arange(y0, y1 + 1, dtype=np.float64)[:, None]
        px = np.arange(x0, x1 + 1, dtype=np.float64)[None, :]
        d = _seg_dist(py, px, a, b)
        self.count[y0:y1 + 1, x0:x1 + 1] += delta * (d <= self.keepout)
        self.body[y0:y1 + 1, x0:x1 + 1] += delta * (d <= self.body_radius)

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


def _turn_table(p: PathfinderParams, margin: int) -> tuple[np.ndarray, np.ndarray]:
    """The original's candidate headings (``get_coords_cmf``): the integer pixels hit by points one pixel of
    arc apart on the circle of radius paddle_length + margin around the (integer) pivot, truncated
    (``astype(int)`` of positive image coordinates: the floor of the offsets) and deduplicated; a heading is
    the angle of its pixel's displacement (two pixels may share one, e.g. 0 degrees at 32 x 32).
    Returns absolute headings (radians) and unit weights; :func:`_extend` weights them by the turn."""
    r = p.paddle_length + margin
    phi = np.radians(np.arange(0, 360, 360.0 / (2 * r * np.pi)))
    off = np.unique(np.floor(np.stack([r * np.sin(phi), r * np.cos(phi)], 1)).astype(int), axis=0)
    headings = np.arctan2(off[:, 0], off[:, 1]).astype(np.float64)
    return headings, np.ones_like(headings)


def _extend(rng: np.random.Generator, canvas: _Canvas, snake: _Snake, turns, weights) -> bool:
    """Add one paddle ``2 margin`` beyond the last one, as the original does: a turn is drawn with weight
    ``cos^2`` x its far end's weight (:meth:`_Canvas.head_free`), the whole paddle is then tested against the
    committed paddles (:meth:`_Canvas.feasible`), and after ``max_paddle_retrial + 1`` rejected draws the
    extension fails. On success the previous last paddle gets committed (marked)."""
    p, m = canvas.p, canvas.margin
    (_, end), theta = snake.last, snake.thetas[-1]
    py, px = end[0] + m * math.sin(theta), end[1] + m * math.cos(theta)  # pivot
    thetas = turns  # (T,) absolute headings; weight cos^2 of the turn, as the original
    turn = np.abs((thetas - theta + math.pi) % (2 * math.pi) - math.pi)
    weights = weights * np.cos(np.minimum(turn * p.continuity, math.pi / 2)) ** 2
    uy, ux = np.sin(thetas), np.cos(thetas)
    sy, sx = py + m * uy, px + m * ux
    ey, ex = sy + p.paddle_length * uy, sx + p.paddle_length * ux
    w = weights * canvas.head_free(ey, ex)
    cdf = np.cumsum(w)
    if cdf[-1] < 1e-4:  # the original: a pmf total below 1e-4 is a dead end (also for turns of 90 degrees)
        return False
    for _ in range(p.max_paddle_retrial + 1):
        j = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(w) - 1)
        a, b = (float(sy[j]), float(sx[j])), (float(ey[j]), float(ex[j]))
        if canvas.feasible(a, b):
            canvas.mark(*snake.last, 1)
            snake.paddles.append((a, b))
            snake.thetas.append(float(thetas[j]))
            return True
    return False


def _retract(canvas: _Canvas, snake: _Snake) -> None:
    """Undo the last _extend of ``snake`` (its first paddle stays)."""
    if len(snake.paddles) > 1:
        snake.paddles.pop()
        snake.thetas.pop()
        canvas.mark(*snake.last, -1)


def _random_theta(rng: np.random.Generator) -> float:
    return math.radians(int(rng.integers(-180, 180)))


@functools.lru_cache(maxsize=None)
def seed_orientations(paddle_length: int, thickness: float, margin: int, aa: int) -> np.ndarray:
    """bool (360,): which integer headings -180..179 degrees a seeded snake (the first target, a distractor)
    may start with.

    The original finds free seed positions by dilating the occupancy with the paddle's own mask; the kernel
    is that mask's saturated (== 255) pixels, placed one pixel down and right of the kernel's anchor, and
    OpenCV pads a float image with -inf when dilating. Unless the kernel covers its anchor, the border
    pixels become -inf, the original then finds no free position, and the seed attempt fails. Here the
    mask is made the same way (line of width round(thickness aa) drawn at aa x resolution, dilated by a
    disk of radius margin aa, Lanczos-resized to 1x) and the anchor pixel tested.
    """
    cm = paddle_length + math.ceil(thickness) + margin  # half size of the 1x window
    n, c, r = 2 * cm * aa + 1, cm * aa, margin * aa
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    disk = list(zip(*np.nonzero(yy ** 2 + xx ** 2 <= r * r)))
    out = np.zeros(360, dtype=bool)
    for k, deg in enumerate(range(-180, 180)):
        th = math.radians(deg)
        head = (math.ceil(c + paddle_length * aa * math.cos(th)), math.ceil(c + paddle_length * aa * math.sin(th)))
        im = Image.new("L", (n, n), 0)
        ImageDraw.Draw(im).line([(c, c), head], fill=255, width=int(round(thickness * aa)))  # (x, y) points
        line = np.pad(np.asarray(im) > 0, r)  # (n + 2r, n + 2r)
        dilated = np.zeros((n, n), dtype=bool)
        for dy, dx in disk:
            dilated |= line[dy:dy + n, dx:dx + n]
        small = Image.fromarray(dilated.astype(np.uint8) * 255).resize((2 * cm + 1,) * 2, Image.Resampling.LANCZOS)
        out[k] = np.asarray(small)[cm - 1, cm - 1] == 255
    return out


def _seed_theta(rng: np.random.Generator, p: PathfinderParams, margin: int) -> Optional[float]:
    """A uniformly drawn integer heading, or None where the original's seed search fails for it."""
    deg = int(rng.integers(-180, 180))
    ok = seed_orientations(p.paddle_length, p.paddle_thickness, margin, p.antialias_scale)[deg + 180]
    return math.radians(deg) if ok else None


def _seed_ok(canvas: _Canvas, snake: _Snake) -> bool:
    return canvas.feasible(*snake.last)


def _two_targets(rng: np.random.Generator, p: PathfinderParams, margin: int, turns, weights):
    """Two target snakes of contour_length paddles whose starts are seed_distance apart, or None.

    The shorter snake (the first on ties) grows next, so they grow alternately as in the original. A
    failed extension restarts both (the original's rule) unless ``p.target_dead_ends`` > 0: then that
    snake is retracted by 1-3 paddles and regrown, up to that many times, before the restart. Each
    target's newest paddle is uncommitted, so the other target's next paddle is not tested against it;
    at the end only the second target's last paddle is committed (see the module docstring).
    """
    theta = _seed_theta(rng, p, margin)
    if theta is None:
        return None
    canvas = _Canvas(p, margin)
    R, sd = p.resolution, p.seed_distance
    lo, hi = 2 * sd, R - 2 * sd  # the first target starts near the centre, as in the original
    if hi <= lo:
        lo, hi = p.padding, R - p.padding
    y, x = rng.integers(lo, hi, size=2)
    s1 = _Snake((float(y), float(x)), theta, p.paddle_length)
    if not _seed_ok(canvas, s1):
        return None
    phi = math.radians(int(rng.integers(0, 360)))
    s2 = _Snake((float(round(y + sd * math.sin(phi))), float(round(x + sd * math.cos(phi)))), _random_theta(rng),
                p.paddle_length)
    if not _seed_ok(canvas, s2):  # nothing is committed yet: inside the padding is all it needs
        return None
    snakes, dead_ends = [s1, s2], 0
    while min(len(s.paddles) for s in snakes) < p.contour_length:
        i = 0 if len(s1.paddles) <= len(s2.paddles) else 1
        if not _extend(rng, canvas, snakes[i], turns, weights):
            dead_ends += 1
            if dead_ends > p.target_dead_ends:
                return None
            for _ in range(int(rng.integers(1, BACKTRACK_MAX + 1))):
                _retract(canvas, snakes[i])
    canvas.mark(*s2.last, 1)
    return canvas, snakes


def _distractor(rng: np.random.Generator, canvas: _Canvas, p: PathfinderParams, turns, weights):
    """Grow one distractor snake; it is left marked on success, removed on failure.

    As in the original, the heading is drawn first (most headings fail, see ``seed_orientations``), then
    the start uniformly among the free pixels where the first paddle fits (SEED_TRIES of them tested).
    """
    theta = _seed_theta(rng, p, canvas.margin)
    if theta is None:
        return None
    free = np.flatnonzero(canvas.count == 0)
    s = None
    for k in rng.permutation(free.size)[:SEED_TRIES]:
        y, x = divmod(int(free[k]), canvas.R)
        s = _Snake((float(y), float(x)), theta, p.paddle_length)
        if _seed_ok(canvas, s):
            break
        s = None
    if s is None:
        return None
    for _ in range(p.distractor_length - 1):
        if not _extend(rng, canvas, s, turns, weights):
            while len(s.paddles) > 1:
                _retract(canvas, s)
            return None
    canvas.mark(*s.last, 1)
    return s


def paddle_layer(paddles: list, p: PathfinderParams) -> np.ndarray:
    """float (R, R) in [0, 1]: each paddle drawn alone (hard-edged line of width round(thickness aa) at aa x
    resolution, Lanczos-resized to 1x through uint8) and the paddles max-composited, as the original draws
    them: where paddles touch or cross, the image is no brighter than either paddle."""
    aa, R = p.antialias_scale, p.resolution
    width, off, pad = int(round(p.paddle_thickness * aa)), (aa - 1) / 2, PADDLE_WINDOW_PAD
    out = np.zeros((R, R), dtype=np.uint8)  # (R, R)
    for a, b in paddles:
        y0, y1, x0, x1 = _box(a, b, pad, R)  # the paddle's window: what a whole-image resize would light
        im = Image.new("L", ((x1 - x0 + 1) * aa, (y1 - y0 + 1) * aa), 0)
        # pixel centre y of the 1x grid is y aa + (aa - 1) / 2 at aa x; (x, y) points
        ImageDraw.Draw(im).line([((a[1] - x0) * aa + off, (a[0] - y0) * aa + off),
                                 ((b[1] - x0) * aa + off, (b[0] - y0) * aa + off)], fill=255, width=width)
        small = np.asarray(im.resize((x1 - x0 + 1, y1 - y0 + 1), Image.Resampling.LANCZOS))
        np.maximum(out[y0:y1 + 1, x0:x1 + 1], small, out=out[y0:y1 + 1, x0:x1 + 1])
    return out.astype(np.float64) / 255.0


def _marker_layer(centres, p: PathfinderParams) -> np.ndarray:
    """float (R, R): filled disks of radius marker_radius drawn at aa x resolution, Lanczos-resized."""
    aa, R = p.antialias_scale, p.resolution
    yy, xx = np.mgrid[:R * aa, :R * aa]  # (R aa, R aa)
    disks = np.zeros((R * aa, R * aa), dtype=bool)
    for y, x in centres:
        c = (y * aa + (aa - 1) / 2, x * aa + (aa - 1) / 2)
        disks |= (yy - c[0]) ** 2 + (xx - c[1]) ** 2 <= (p.marker_radius * aa) ** 2
    im = Image.fromarray(disks.astype(np.uint8) * 255).resize((R, R), Image.Resampling.LANCZOS)
    return np.asarray(im, dtype=np.float64) / 255.0


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
    turns, weights = _turn_table(p, margin)
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
    """uint8 (R, R) image: the paddles (anti-aliased one by one) times their contrasts and the markers
    (contrast 1), max-composited, then scaled min..max to 0..255 as scipy.misc.imsave did."""
    by_contrast: dict = {}
    for paddles, cs in zip(g.targets, g.target_contrasts):
        for pad, c in zip(paddles, cs):
            by_contrast.setdefault(float(c), []).append(pad)
    for paddles, c in zip(g.distractors, g.distractor_contrasts):
        by_contrast.setdefault(float(c), []).extend(paddles)
    image = _marker_layer(g.markers, p)  # (R, R)
    for c, paddles in by_contrast.items():
        image = np.maximum(image, c * paddle_layer(paddles, p))
    lo, hi = image.min(), image.max()
    return np.floor((image - lo) * (255.0 / max(hi - lo, 1e-12)) + 0.5).astype(np.uint8)


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
