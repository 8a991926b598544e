"""Pathfinder / Path-X generator (Linsley et al. 2018; LRA's per-resolution settings), written anew.

It follows the original generator, github.com/drewlinsley/pathfinder ``snakes2.py`` / ``snakes.py`` (the code LRA
generated its data with), step by step, in its own code:

- Positions are whole pixels. A paddle is drawn at the antialias scale (a line of width thickness x aa, from the
  centre pixel of a window of 2 half aa + 1 pixels, half = paddle length + ceil(thickness) + margin, its other end
  rounded up) and Lanczos-resized alone to its 2 half + 1 window through uint8 (scipy.misc.imresize); its mask is
  the line dilated by a disk of radius margin x aa, resized the same way. The occupancy is the max of the committed
  masks, with the padding at 1, in float32 steps of 1/255 as the original keeps it.
- A path grows from a pivot that moves paddle_length + 2 margin along the last heading, rounded up. The candidate
  far ends are the pixels one pixel of arc apart on the circle of radius paddle_length + margin around it,
  truncated and deduplicated; each weighs cos(min(|turn| continuity, pi/2))^2 x (1 - the occupancy dilated by the
  margin's disk); below a total of 1e-4 the path is at a dead end. Up to max_paddle_retrial + 1 far ends are drawn;
  the paddle drawn back from one must keep its mask plus the occupancy below 1.8 (saturated pixels meeting).
- A seeded snake (the first target, every distractor) draws an integer heading and then a start where the
  occupancy (with a frame taken: 2 seed_distance for the first target, one pixel for distractors) dilated by the
  paddle's own saturated mask, one pixel off the element's centre, is at most 0.3. OpenCV pads that float dilation
  with the lowest float, and unless the element reaches every quadrant the original then finds no free start at
  all: at 32 x 32 only the 30 headings -150..-121 degrees can start a snake (95 of 360 at 64; 354 and 360 at 128;
  all at 256), so the first target always starts heading up-left and of five distractor snakes about one is
  placed. A seed whose far end or pivot leaves the image is redrawn (up to max_paddle_retrial + 1 times).
- The second target starts seed_distance from the first at an integer angle (rounded half to even) with no
  occupancy test. The two grow alternately and any failure restarts both. A snake's newest paddle is committed
  only when its next one is placed, and at the end only the second target's last one: the targets' growing tips
  are never tested against each other, and distractors may cover the first target's far end.
- Distractors: num_distractors snakes of max_snake_retrial + 1 attempts each, none started once under 1 % of the
  image is free; a failed one leaves no trace.
- Markers: a disk of radius marker_radius x aa around pixel (y aa, x aa) at the antialias scale (0.25 pixel up-left
  of the 1x pixel's centre at aa = 2), resized; intensity 1, max-composited with the paddles (targets at snake
  contrast x paddle contrast, distractors at the snake contrast). The image is then scaled min..max to 0..255
  (scipy.misc.imsave): where a distractor (contrast 2 at 32 x 32) is brighter than 1, the markers are not the
  brightest pixels (two thirds of the 32 x 32 images).
- Labels are drawn at random per image, as the original does (not balanced).

Attempts at the two targets are independent, so many are run at once as arrays (``_target_pairs``) and the successes
kept for the next images (``PairPool``): the same distribution as restarting one attempt at a time, as the original
does. Most of an image's time goes to that search (at 128 x 128 about 700 attempts per pair found with margin 3, 55
with margin 2), the rest to the distractors, the rendering and the PNG. Each part has a fast path that gives the same
bytes from the same random draws as the reference it replaced, which stays here for the tests
(tests/test_pathfinder_fast_paths.py): the search reads paddle lists (``_PairTables``: one table look-up per
committed paddle) instead of an occupancy image per attempt (``_target_pairs_dense``); distractor starts come from a
bit image (``_Starts``, for ``_free_starts``) and a distractor grows through windows (``_extend_one``, for the
batched ``_extend`` on one row); markers are a sprite away from the edges (``markers_image``, for ``_marker``);
PNGs are encoded directly (``png_bytes``; zlib level 3, no row filter). On one core of this 2-core CI machine, timed
beside other work (geometry, rendering and the PNG; results/diagnostics/pathx128_statistics_20261208T0127.log): 25-31 ms
per image at 128 x 128 against 119 ms for the version before these paths in the same rounds (3.8 times less; that
version took 52 ms on an idle core), 10.5 against 12.5 ms at 32 x 32 (where small batches of attempts leave numpy's
per-call cost in front); the original took 0.20 s and 2.3 s per image (timed outside the suite). A worker process
builds its tables once (about 1 s at 128 x 128). With ``batch=1`` the random draws are made
in the original's order: driven by the original's own random stream (legacy numpy, same seed) this generator
reproduces its images pixel for pixel (checked outside the suite on 200 images at 32 x 32, 4 at 64, 8 at 128 and 4
at 256, and as many again on other seeds, of the original run under Python 3 with scipy.misc.imresize / imsave
re-created with scipy 1.x semantics).

Measured (``runners.data.lra.pathfinder_stats``, log: results/diagnostics/pathfinder32_statistics_20261127T1343.log;
tests/test_pathfinder_fidelity.py holds each within sampling error) at 32 x 32, the original (4,000 images, numpy
seeds 1 and 2) against this generator (4,000 images, seed 11): pixels = 0: 65.93 % / 65.95 %; 1-31, 32-127, 128-254,
255: 19.6, 6.0, 8.3, 0.22 % / 19.6, 6.0, 8.3, 0.22 %; non-zero fraction 0.341 +- 0.038 / 0.341 +- 0.038; ink (sum /
255) 80.9 +- 7.9 / 80.8 +- 7.8; 8-connected pieces above 0 and above 64: 8.3, 13.7 / 8.4, 13.8; pixels at 255: 2.25
/ 2.26; markers the brightest pixels: 34.2 % / 34.7 %; distractor snakes 1.15 (25.9 % none) / 1.13 (26.2 % none);
distance between the target starts 7.04 +- 0.26 / 7.05 +- 0.25; label 1: 50.35 % / 50.05 %. A logistic regression on
raw pixels (6,000 images to fit, 2,000 to test; run outside the suite) tells the two apart 50.4 % of the time (the
previous version of this generator: 92.2 %). Paths meet as in the original: the two targets light a common pixel in
24.0 % of 400 images and come within one pixel in 65.5 %, a target and a distractor 5.3 % / 41.5 %; mean |turn| 31.9
degrees, 18 % straight (the original, 200 images: 26.5 / 68.5 %, 7.5 / 41.0 %, 32.0-32.3 degrees, 18 %;
``path_statistics`` of ``runners.data.lra.pathfinder_check``).

At 128 x 128 (Path-X; results/diagnostics/pathx128_statistics_20261208T0127.log, tests/test_pathx_fidelity.py), the
original (603 images, numpy seeds 1-3) against this generator (1,000 images, seed 11): pixels = 0: 86.27 % / 86.31 %;
1-31, 32-127, 128-254: 8.25, 2.45, 2.96 % / 8.23, 2.44, 2.94 %; non-zero fraction 0.1373 +- 0.0053 / 0.1369 +-
0.0060; ink 509.5 +- 19.8 / 506.6 +- 22.0; 8-connected pieces above 0 and above 64: 69.7, 57.7 / 71.8, 57.7; pixels
at 255: 12.01 / 12.01 (the markers' cores; the markers' centre pixels are never both the maximum: the maximum lies
beside them); distractor snakes 7.73 / 7.68 (never none); distance between the target starts 20.00 +- 0.27 / 20.01
+- 0.27; label 1: 51.7 % / 50.1 %. The largest deviations, ink (-2.8 standard errors) and its spread (+2.7), come from
the images drawn with margin 3 (per margin the means agree within 2.1 standard errors).

What differs from the original, none of it visible in the images' distribution:

- The random stream (numpy's Generator, one per batch) and, in batches, the order of draws; contrasts are drawn
  after the placement (they do not affect it) and the pair of snake contrasts by numpy rather than Python's
  ``random.shuffle``.
- The second target's start must lie inside the image (the original draws it there anyway with LRA's parameters),
  the padding must be at least one pixel (LRA's are 1 and 22), and the search gives up after MAX_PAIR_ATTEMPTS
  failed attempts at the two targets (the original never gives up).
- Options LRA does not use (single-paddle distractors, the segmentation task) are not implemented.

Not compared: LRA's release images themselves (not at hand here). The original ran under Python 2, so with Pillow
6.2 at the latest: Pillow 6.2.2 draws and resizes every paddle, mask and marker of the four resolutions byte for
byte as the Pillow 13.0 used here does (checked outside the suite).

Parameters per resolution are those LRA's TFDS builder documents for its data, with that script's defaults where
LRA set none (no single-paddle distractors: the script sets ``use_single_paddles = False``), and Python 2
integer division where LRA wrote ``contour_length / 3`` (the script is Python 2):

==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
resolution  pad.   paddle  gap   thick.   marker r   seed d  contin. distractors  snake contr. paddle c.
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========
32          1      2       [1]   0.5      1.5        7       1.0     5 x 4        2.0          0.75
64          1      5       [1]   1.0      2.5        12      1.8     5 x 4        0.8          1.0
128         1      5       [2,3] 1.5      3.0        20      1.8     8 x 4        0.9          1.0
256         22     5       [3]   2.0      5.0        27      1.8     7 x 4        1.0          1.0
==========  =====  ======  ====  =======  =========  ======  ======  ==========  ===========  ========

All with contour_length 14 (the ``curv_contour_length_14`` difficulty LRA uses), antialias scale 2, 4 attempts
more per distractor snake and 2 draws more per paddle ("gap" is the margin, drawn per image).

Layout written (the release's): ``<out>/pathfinder<R>/curv_contour_length_14/imgs/<k>/sample_<i>.png``
and ``metadata/<k>.npy``, a text file with one line per image:
``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> <distractor_length>
<paddle_length> <paddle_thickness> <margin> <number of paddle contrasts>``. A batch's metadata file
is written last, atomically: a rerun skips batches whose metadata exists (resumable).
"""
from __future__ import annotations

import functools
import math
import os
import struct
import zlib
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage, signal

from runners.core.atomic import write_text_atomic
from runners.data.lra.layout import PATHFINDER_DIFFICULTY as DIFFICULTY
from runners.data.progress_bar import progress_bar

MAX_PAIR_ATTEMPTS = 10_000_000  # attempts at the two targets before giving up (the original never gives up)
MAX_BATCH_BYTES = 64 << 20  # memory for one batch of target attempts (occupancies and temporaries)
#: the original's occupancy thresholds: a pixel is taken for a start where its (dilated) mask exceeds SEED_TAKEN,
#: and a paddle is refused where its mask plus the occupancy reaches BODY_OVERLAP (saturated pixels meeting)
SEED_TAKEN = 0.3
BODY_OVERLAP = 1.8
#: a distractor is not started once fewer than this fraction of pixels are free (mask <= SEED_TAKEN)
STOP_AVAILABILITY = 0.01
#: a turn distribution whose total weight is below this is a dead end
MIN_TOTAL_WEIGHT = 1e-4
_LANCZOS = Image.Resampling.LANCZOS


@dataclass(frozen=True)
class PathfinderParams:
    resolution: int
    padding: int                      # border of the occupancy mask (pixels) that paddles keep off
    paddle_length: int
    paddle_margins: tuple[int, ...]   # one drawn per image; a paddle starts about 2 margin past the last one
    paddle_thickness: float           # line width at the antialias scale is thickness * antialias_scale
    marker_radius: float
    seed_distance: int                # distance between the starts of the two targets
    continuity: float                 # turn weight cos(min(|turn| continuity, pi/2))^2
    distractor_length: int            # paddles per distractor snake
    num_distractors: int
    snake_contrasts: tuple[float, ...]
    paddle_contrasts: tuple[float, ...]
    contour_length: int = 14          # paddles per target snake
    max_snake_retrial: int = 4        # extra attempts per distractor snake (original: max_distractor_contour_retrial)
    max_paddle_retrial: int = 2       # extra draws per paddle (original's name)
    antialias_scale: int = 2          # drawing resolution / image resolution (LRA: 2 at every resolution)


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


# ---------------------------------------------------------------------------------------------------------------
# integer geometry


def _step(y: int, x: int, theta: float, dist: float) -> tuple[int, int]:
    """(y, x) moved ``dist`` along heading ``theta`` (radians; y down), each coordinate rounded up: the
    original's rounding of every pivot, start and far end."""
    return math.ceil(y + dist * math.sin(theta)), math.ceil(x + dist * math.cos(theta))


def _reverse(theta: float) -> float:
    """theta + pi wrapped the original's way: into [0, pi) for negative theta, into [-pi, 0] otherwise."""
    return theta + math.pi if theta < 0 else theta - math.pi


def _radians(degrees: int) -> float:
    return degrees * math.pi / 180


def _disk(radius: int) -> np.ndarray:
    """bool (2 r + 1, 2 r + 1): the pixels within ``radius`` of the centre."""
    yy, xx = np.ogrid[-radius:radius + 1, -radius:radius + 1]
    return yy ** 2 + xx ** 2 <= radius ** 2


def _half(p: PathfinderParams, margin: int) -> int:
    """Half size (1x pixels) of the window a paddle is drawn in: paddle length + ceil(thickness) + margin."""
    return p.paddle_length + math.ceil(p.paddle_thickness) + margin


def _blown_offset(p: PathfinderParams, margin: int, theta: float) -> tuple[int, int]:
    """(dy, dx) at the antialias scale from a paddle's anchor to its other end, drawn along ``theta``: the end is
    rounded up from the window's centre pixel, as the original draws it."""
    aa = p.antialias_scale
    c = _half(p, margin) * aa
    ey, ex = _step(c, c, theta, p.paddle_length * aa)
    return ey - c, ex - c


# ---------------------------------------------------------------------------------------------------------------
# one paddle: its picture and its occupancy mask


def _bytes_resize(big: np.ndarray, size: int) -> np.ndarray:
    """uint8 (size, size): a uint8 image Lanczos-resized by PIL (scipy.misc.imresize on uint8 input)."""
    return np.asarray(Image.fromarray(big).resize((size, size), _LANCZOS))


@functools.lru_cache(maxsize=None)
def _sprite(p: PathfinderParams, margin: int, dy: int, dx: int) -> tuple[np.ndarray, np.ndarray]:
    """(line uint8 (S, S), mask float64 (S, S)), S = 2 half + 1: one paddle whose anchor is the window's centre
    pixel and whose other end lies (dy, dx) away at the antialias scale.

    As the original: a line of width thickness * aa (white on black) is drawn in a window of 2 half aa + 1
    pixels, from its centre pixel; the line, and the line dilated by a disk of radius margin * aa (the
    paddle's keep-out), are Lanczos-resized to S x S through uint8. The mask is those bytes / 255 in float32
    precision, as the original keeps it (its occupancy tests compare sums of these values with thresholds).
    """
    aa, half = p.antialias_scale, _half(p, margin)
    n, c = 2 * half * aa + 1, half * aa
    width = int(round(p.paddle_thickness * aa))
    if width != p.paddle_thickness * aa:
        raise ValueError(f"paddle thickness {p.paddle_thickness} x antialias {aa} must be a whole number of pixels")
    im = Image.new("L", (n, n), 0)
    ImageDraw.Draw(im).line([(c, c), (c + dx, c + dy)], fill=255, width=width)  # (x, y) points
    big = np.asarray(im)  # (n, n) 0 / 255
    keepout = ndimage.binary_dilation(big > 0, structure=_disk(margin * aa)).astype(np.uint8) * 255  # (n, n)
    line = _bytes_resize(big, 2 * half + 1)  # (S, S)
    mask = (_bytes_resize(keepout, 2 * half + 1) / 255.0).astype(np.float32).astype(np.float64)  # (S, S)
    line.flags.writeable = mask.flags.writeable = False
    return line, mask


def _window(anchor: tuple[int, int], half: int, size: int) -> Optional[tuple[slice, slice, slice, slice]]:
    """(image rows, image cols, sprite rows, sprite cols) of a sprite centred on ``anchor``, clipped to the
    image; None when nothing of it is inside."""
    y, x = anchor
    y0, y1, x0, x1 = max(y - half, 0), min(y + half, size - 1), max(x - half, 0), min(x + half, size - 1)
    if y0 > y1 or x0 > x1:
        return None
    return (slice(y0, y1 + 1), slice(x0, x1 + 1),
            slice(y0 - y + half, y1 - y + half + 1), slice(x0 - x + half, x1 - x + half + 1))


# ---------------------------------------------------------------------------------------------------------------
# the original's tables

#: float64 (256,): the occupancy value of a mask byte k as the original stores it (k / 255 in float32 precision)
_BYTE_VALUE = (np.arange(256) / 255.0).astype(np.float32).astype(np.float64)
#: bool (256, 256): an occupancy byte a and a new paddle's mask byte b pass the body test (sum below BODY_OVERLAP)
_FITS = (_BYTE_VALUE[:, None] + _BYTE_VALUE[None, :]) < BODY_OVERLAP
#: float64 (256,): the weight of a far end whose dilated occupancy byte is k
_FREE = 1.0 - _BYTE_VALUE
#: bool (256,): an occupancy byte that rules a start out
_TAKEN = _BYTE_VALUE > SEED_TAKEN


def _turn_offsets(p: PathfinderParams, margin: int) -> np.ndarray:
    """int (N, 2): the original's candidate far ends around a pivot (``get_coords_cmf``): points one pixel of arc
    apart on the circle of radius paddle_length + margin, truncated to their pixels and deduplicated, in (dy, dx)
    order. Truncating an integer pivot plus an offset equals the pivot plus the offset's floor, except where an
    offset lies within rounding error of an integer: only the exact ones at angle 0 do, which is checked here."""
    r = p.paddle_length + margin
    ang = np.arange(0, 360, 360.0 / (2 * r * np.pi)) * np.pi / 180
    fy, fx = r * np.sin(ang), r * np.cos(ang)
    for v in (fy, fx):
        frac = np.abs(v - np.round(v))
        if np.any((frac < 1e-9) & (frac != 0)):
            raise ValueError(f"turn table of radius {r}: an offset lies within rounding error of an integer")
    return np.unique(np.stack([np.floor(fy), np.floor(fx)], 1).astype(np.int64), axis=0)


def _seed_offsets(p: PathfinderParams, margin: int, theta: float) -> np.ndarray:
    """int (K, 2): how the original tests a start (``seed_snake``): it dilates the occupancy by a structuring
    element made of the paddle's own mask drawn in a (2 (length + margin) + 1)^2 window one pixel down-right of the
    window's centre, kept where saturated (== 255). A start q is free when no occupied pixel lies at q + o for an
    offset o of the element (relative to its centre; OpenCV's dilation does not mirror the element)."""
    _, mask = _sprite(p, margin, *_blown_offset(p, margin, theta))
    half, span = _half(p, margin), p.paddle_length + margin
    lo = half - span - 1  # sprite rows / cols that fall inside the element's window
    return np.argwhere(mask[lo:lo + 2 * span + 1, lo:lo + 2 * span + 1] >= 1.0) - span


def _usable(offsets: np.ndarray) -> bool:
    """Whether the original's start search can succeed with this element at all. OpenCV pads the float occupancy
    with the lowest float when dilating: an image pixel that sees no offset inside the image gets a negative
    value, and the original then finds no free start anywhere. That happens unless the offsets reach every closed
    quadrant, so at 32 x 32 only 30 of the 360 headings can start a snake."""
    oy, ox = offsets[:, 0], offsets[:, 1]
    return bool(np.any((oy >= 0) & (ox >= 0)) and np.any((oy >= 0) & (ox <= 0))
                and np.any((oy <= 0) & (ox >= 0)) and np.any((oy <= 0) & (ox <= 0)))


def _free_starts(taken: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """int (n, 2): the pixels q, in row-major order, where no ``taken`` pixel (bool (R, R)) lies at q + offset."""
    size = taken.shape[0]
    blocked = np.zeros_like(taken)
    for oy, ox in offsets.tolist():
        # blocked[q] |= taken[q + o] for q and q + o inside the image
        blocked[max(0, -oy):size - max(0, oy), max(0, -ox):size - max(0, ox)] |= \
            taken[max(0, oy):size - max(0, -oy), max(0, ox):size - max(0, -ox)]
    return np.argwhere(~blocked)


def _sparse(images: list, keep, pad_index: int, width: int) -> tuple[np.ndarray, ...]:
    """Per image (uint8 (s, s), centre = anchor) of ``images``: the pixels where ``keep(image)`` holds, as rows
    padded to a common length: flat offsets in an occupancy of row length ``width``, (dy, dx), byte values, and
    whether each entry is padding (offset ``pad_index``, value 0)."""
    picks = [np.argwhere(keep(im)) - im.shape[0] // 2 for im in images]
    k = max(1, max(len(q) for q in picks))
    off = np.full((len(images), k), pad_index, dtype=np.int64)
    dy, dx = np.zeros((2, len(images), k), dtype=np.int64)
    val = np.zeros((len(images), k), dtype=np.uint8)
    for i, (im, q) in enumerate(zip(images, picks)):
        c = im.shape[0] // 2
        off[i, :len(q)] = q[:, 0] * width + q[:, 1]
        dy[i, :len(q)], dx[i, :len(q)] = q[:, 0], q[:, 1]
        val[i, :len(q)] = im[q[:, 0] + c, q[:, 1] + c]
    return off, dy, dx, val, np.arange(k)[None, :] >= np.array([len(q) for q in picks])[:, None]


class _Tables:
    """Everything the search reads for one (parameters, margin), precomputed.

    Headings are ids: 0..359 the integer degrees -180..179 that seeds draw, 360 + j the heading of turn candidate j.
    Paddles are sprites (ids; ``blown`` their antialias-scale offsets). An attempt's state is two flat uint8 arrays
    over the image inside a zero frame of ``pad`` pixels (row length ``width``) plus one spare cell at the end
    (``trash``, the target of padded index entries): ``occ``, the occupancy (mask bytes, the original's ``mask``),
    and ``dil``, the occupancy dilated by the margin's disk (the original dilates it afresh before each paddle).
    ``dil`` is kept by maxing in each committed paddle's dilated mask. That equals dilating the occupancy, whose
    committed masks are clipped to the image, at every pixel a candidate far end can be: only pixels within margin
    of the border see a clipped-off part, and they see the padding (byte 255) anyway."""

    def __init__(self, p: PathfinderParams, margin: int):
        if p.padding < 1:
            raise ValueError(f"pathfinder padding must be at least 1, got {p.padding}")
        self.p, self.margin, self.R = p, margin, p.resolution
        self.half = half = _half(p, margin)
        self.pad = pad = half + margin
        self.width = W = self.R + 2 * pad
        self.trash = W * W
        turns = _turn_offsets(p, margin)  # (N, 2)
        self.turn_dy, self.turn_dx = turns[:, 0], turns[:, 1]
        turn_theta = np.arctan2(turns[:, 0], turns[:, 1]).astype(np.float64)  # (N,)
        theta = [_radians(d) for d in range(-180, 180)] + [float(t) for t in turn_theta]
        self.sin = np.array([math.sin(t) for t in theta])  # (360 + N,)
        self.cos = np.array([math.cos(t) for t in theta])
        self.rsin = np.array([math.sin(_reverse(t)) for t in theta])
        self.rcos = np.array([math.cos(_reverse(t)) for t in theta])
        # turn weight from heading h to candidate j: cos(min(|turn| continuity, pi/2))^2, as the original computes it
        turn = np.abs(turn_theta[None, :] - np.array(theta)[:, None])  # (360 + N, N)
        turn = np.minimum(np.minimum(turn, 2 * np.pi - turn) * p.continuity, 0.5 * np.pi)
        self.turn_weight = np.maximum(np.cos(turn), 0) ** 2
        # sprites: seeds are drawn from their start along the heading, turns back from their far end
        blown = [_blown_offset(p, margin, t) for t in theta[:360]]
        blown += [_blown_offset(p, margin, _reverse(t)) for t in theta[360:]]
        ids: dict = {}
        sprite = np.array([ids.setdefault(b, len(ids)) for b in blown])
        self.seed_sprite, self.turn_sprite = sprite[:360], sprite[360:]
        self.blown = np.array(list(ids), dtype=np.int64).reshape(-1, 2)  # (n_sprites, 2)
        masks = [(_sprite(p, margin, *b)[1] * 255).round().astype(np.uint8) for b in ids]  # (S, S) bytes
        disk = _disk(margin)
        dilated = [ndimage.grey_dilation(np.pad(m, margin), footprint=disk, mode="constant", cval=0) for m in masks]
        self.masks, self.dilated = masks, dilated  # per sprite: (S, S) and (S + 2 margin)^2 bytes, centre = anchor
        # committing: every non-zero byte (occ, clipped to the image) and dilated byte (dil); testing: the bytes that
        # can fail the body test against some occupancy byte (the rest pass against any)
        self.occ_off, self.occ_dy, self.occ_dx, self.occ_val, self.occ_pad = _sparse(masks, lambda m: m > 0,
                                                                                     self.trash, W)
        self.dil_off, _, _, self.dil_val, self.dil_pad = _sparse(dilated, lambda m: m > 0, self.trash, W)
        risky = ~_FITS.all(axis=0)  # (256,): mask bytes that fail against a full occupancy byte
        self.fit_off, _, _, self.fit_val, _ = _sparse(masks, lambda m: risky[m], 0, W)
        # seeds: which headings can start, their elements, and the first target's free starts per heading
        self.seed_offsets = [_seed_offsets(p, margin, t) for t in theta[:360]]
        self.usable = np.array([_usable(o) for o in self.seed_offsets])
        self.start_gap = max(int(np.abs(o[:, 1]).max(initial=0)) for o in self.seed_offsets) + 1  # see _Starts
        b = max(2 * p.seed_distance, p.padding)
        taken = np.ones((self.R, self.R), dtype=bool)
        taken[b:self.R - b, b:self.R - b] = False
        firsts = [_free_starts(taken, o) if ok else np.zeros((0, 2), np.int64)
                  for o, ok in zip(self.seed_offsets, self.usable)]
        self.first_count = np.array([len(f) for f in firsts])
        self.first_offset = np.concatenate([[0], np.cumsum(self.first_count)[:-1]])
        self.first_starts = np.concatenate(firsts).astype(np.int64)  # (sum, 2)
        phi = np.arange(360) * np.pi / 180
        self.phi_sin, self.phi_cos = np.sin(phi), np.cos(phi)
        occ = np.zeros((self.R, self.R), dtype=np.uint8)
        b = p.padding
        occ[:b], occ[-b:], occ[:, :b], occ[:, -b:] = 255, 255, 255, 255
        dil = ndimage.grey_dilation(np.pad(occ, margin), footprint=disk, mode="constant", cval=0)[margin:-margin,
                                                                                                  margin:-margin]
        self.empty_occ, self.empty_dil = (np.append(np.pad(a, pad).ravel(), np.uint8(0)) for a in (occ, dil))

    @functools.lru_cache(maxsize=None)
    def start_shifts(self, stride: int) -> list[list[int]]:
        """Per heading id: its seed element's offsets as shifts of a bit image with row stride ``stride``."""
        return [(o[:, 0] * stride + o[:, 1]).tolist() for o in self.seed_offsets]

    @functools.lru_cache(maxsize=None)
    def start_image(self, stride: int) -> int:
        """The bits of the image's pixels in a bit image with row stride ``stride``."""
        row = (1 << self.R) - 1
        return sum(row << (y * stride) for y in range(self.R))

    def image(self, occ: np.ndarray) -> np.ndarray:
        """uint8 (R, R): the in-image part of one flat occupancy (or dilated occupancy)."""
        q = self.pad
        return occ[:self.trash].reshape(self.width, self.width)[q:q + self.R, q:q + self.R]


@functools.lru_cache(maxsize=None)
def _tables(p: PathfinderParams, margin: int) -> _Tables:
    return _Tables(p, margin)


def seed_orientations(p: PathfinderParams, margin: int) -> np.ndarray:
    """bool (360,): which integer headings -180..179 degrees can start a seeded snake (the first target, a
    distractor) in the original (see ``_usable``)."""
    return _tables(p, margin).usable.copy()


# ---------------------------------------------------------------------------------------------------------------
# growing snakes, many attempts at once


class _Snakes:
    """One snake in each of k attempts: the next pivot's base (py, px) and heading id, and every paddle drawn so
    far as (anchor y, anchor x, sprite id) columns in path order. The first paddle is drawn from its start, the
    others back from their far end; the newest paddle is not yet committed to the occupancy."""

    def __init__(self, k: int, length: int):
        self.py, self.px, self.head = (np.zeros(k, np.int64) for _ in range(3))
        self.ay, self.ax, self.sprite = (np.zeros((k, length), np.int64) for _ in range(3))
        self.n = 0  # paddles drawn (the same in every live attempt)

    def place(self, rows: np.ndarray, anchor_y, anchor_x, sprite, py, px, head) -> None:
        """Record a new paddle and pivot for ``rows``."""
        self.ay[rows, self.n], self.ax[rows, self.n], self.sprite[rows, self.n] = anchor_y, anchor_x, sprite
        self.py[rows], self.px[rows], self.head[rows] = py, px, head

    def select(self, rows: np.ndarray) -> None:
        """Keep the attempts ``rows`` only, in that order."""
        for name in ("py", "px", "head", "ay", "ax", "sprite"):
            setattr(self, name, getattr(self, name)[rows])

    def paddles(self, row: int) -> np.ndarray:
        """int (n, 3): the paddles of attempt ``row`` as (anchor y, anchor x, sprite id) rows."""
        return np.stack([self.ay[row], self.ax[row], self.sprite[row]], 1)


def _base(t: _Tables, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """int (n, 1): flat state indices of pixels (y, x) (each (n,))."""
    return ((y + t.pad) * t.width + x + t.pad)[:, None]


def _fits(t: _Tables, occ: np.ndarray, rows: np.ndarray, y: np.ndarray, x: np.ndarray,
          sprite: np.ndarray) -> np.ndarray:
    """bool (n,): whether each new paddle's mask plus its attempt's occupancy stays below BODY_OVERLAP everywhere
    (tested where the mask byte can fail at all; the frame holds zeros, as the original's clipping leaves)."""
    return _FITS[occ[rows[:, None], _base(t, y, x) + t.fit_off[sprite]], t.fit_val[sprite]].all(axis=1)


def _commit(t: _Tables, occ: np.ndarray, dil: np.ndarray, rows: np.ndarray, y: np.ndarray, x: np.ndarray,
            sprite: np.ndarray) -> None:
    """Max a paddle's mask into the occupancy (in-image pixels only) and its dilated mask into the dilated
    occupancy of each of ``rows``."""
    if not (occ.flags.c_contiguous and dil.flags.c_contiguous):
        raise ValueError("_commit: the states must be contiguous (they are updated through flat views)")
    base = _base(t, y, x) + rows[:, None] * occ.shape[1]  # (n, 1) in the flattened states
    trash = rows[:, None] * occ.shape[1] + t.trash
    iy, ix = y[:, None] + t.occ_dy[sprite], x[:, None] + t.occ_dx[sprite]
    keep = ~t.occ_pad[sprite] & (iy >= 0) & (iy < t.R) & (ix >= 0) & (ix < t.R)
    for state, idx, val in ((occ, np.where(keep, base + t.occ_off[sprite], trash), t.occ_val[sprite]),
                            (dil, np.where(t.dil_pad[sprite], trash, base + t.dil_off[sprite]), t.dil_val[sprite])):
        flat = state.reshape(-1)  # a view
        flat[idx] = np.maximum(flat[idx], val)


def _ceil_step(y: np.ndarray, x: np.ndarray, dist: float, s: np.ndarray, c: np.ndarray):
    """Integer pixels (y, x) moved ``dist`` along headings with sines ``s`` and cosines ``c``, each coordinate rounded
    up (the original's ``translate_coord``)."""
    return np.ceil(y + float(dist) * s).astype(np.int64), np.ceil(x + float(dist) * c).astype(np.int64)


def _inside(t: _Tables, *coords: np.ndarray) -> np.ndarray:
    ok = np.ones(coords[0].shape, dtype=bool)
    for v in coords:
        ok &= (v >= 0) & (v < t.R)
    return ok


def _extend(rng: np.random.Generator, t: _Tables, occ: np.ndarray, dil: np.ndarray, s: _Snakes,
            rows: np.ndarray) -> np.ndarray:
    """Add one paddle to the snake of each attempt in ``rows`` (rows of the states ``occ``, ``dil``) as the
    original's ``extend_snake``; returns bool (n,): placed.

    The pivot moves paddle_length + 2 margin along the last heading (rounded up). Each candidate far end inside
    the image weighs ``cos(min(|turn| continuity, pi/2))^2 * (1 - occupancy dilated by the margin's disk)``; a
    total below MIN_TOTAL_WEIGHT is a dead end. Up to max_paddle_retrial + 1 far ends are drawn from those
    weights; the paddle drawn back from one must pass ``_fits``. On success the snake's previous paddle is
    committed."""
    p, n = t.p, rows.size
    h = s.head[rows]
    py, px = _ceil_step(s.py[rows], s.px[rows], p.paddle_length + 2 * t.margin, t.sin[h], t.cos[h])
    cy, cx = py[:, None] + t.turn_dy, px[:, None] + t.turn_dx  # (n, N)
    inside = (cy >= 0) & (cy < t.R) & (cx >= 0) & (cx < t.R)
    dilated = dil[rows[:, None], np.where(inside, (cy + t.pad) * t.width + cx + t.pad, t.trash)]  # (n, N) bytes
    pmf = _FREE[dilated] * t.turn_weight[h] * inside
    total = pmf.sum(axis=1)
    live = total >= MIN_TOTAL_WEIGHT
    cmf = np.cumsum(pmf / np.where(live, total, 1.0)[:, None], axis=1)
    first_inside = inside.argmax(axis=1)
    chosen = np.full(n, -1)
    pending = np.flatnonzero(live)
    for _ in range(p.max_paddle_retrial + 1):
        if pending.size == 0:
            break
        j = (cmf[pending] <= rng.random(pending.size)[:, None]).sum(axis=1)
        j = np.where(j == cmf.shape[1], first_inside[pending], j)  # the original's argmax over an all-false test
        fit = _fits(t, occ, rows[pending], cy[pending, j], cx[pending, j], t.turn_sprite[j])
        chosen[pending[fit]] = j[fit]
        pending = pending[~fit]
    placed = chosen >= 0
    g, j = np.flatnonzero(placed), chosen[placed]
    last = s.n - 1
    r = rows[g]
    _commit(t, occ, dil, r, s.ay[r, last], s.ax[r, last], s.sprite[r, last])
    s.place(r, cy[g, j], cx[g, j], t.turn_sprite[j], py[g], px[g], 360 + j)
    return placed


def _seed_heads(t: _Tables, ty: np.ndarray, tx: np.ndarray, d: np.ndarray):
    """Far ends and pivots of seeds with starts (ty, tx) and heading ids d, and whether both lie inside."""
    L = t.p.paddle_length
    hy, hx = _ceil_step(ty, tx, L, t.sin[d], t.cos[d])
    vy, vx = _ceil_step(hy, hx, L + t.margin, t.rsin[d], t.rcos[d])
    return vy, vx, _inside(t, hy, hx, vy, vx)


def _seed_pairs(rng: np.random.Generator, t: _Tables, k: int) -> tuple[_Snakes, _Snakes, np.ndarray]:
    """The seeds of k independent attempts at the two targets (``initialize_two_seeds``): the first target starts,
    with a heading it can start with, where ``first_starts`` allows; the second seed_distance away at an integer
    angle (rounded half to even, as numpy rounds) with an integer heading (no occupancy test). A seed whose far end
    or pivot leaves the image is redrawn, up to max_paddle_retrial + 1 times. Returns the two snakes (one paddle
    each) and the attempts whose two seeds were placed, in order."""
    p = t.p
    C, tries = p.contour_length, p.max_paddle_retrial + 1
    first, second = _Snakes(k, C), _Snakes(k, C)
    ok1 = np.zeros(k, dtype=bool)
    pending = np.arange(k)
    for _ in range(tries):
        if pending.size == 0:
            break
        d = rng.integers(-180, 180, size=pending.size) + 180
        count = np.where(t.usable[d], t.first_count[d], 0)
        pending, d, count = pending[count > 0], d[count > 0], count[count > 0]  # no free start: attempt over
        start = t.first_starts[t.first_offset[d] + rng.integers(0, count)]  # (n, 2)
        vy, vx, ok = _seed_heads(t, start[:, 0], start[:, 1], d)
        first.place(pending[ok], start[ok, 0], start[ok, 1], t.seed_sprite[d[ok]], vy[ok], vx[ok], d[ok])
        ok1[pending[ok]] = True
        pending = pending[~ok]
    ok2 = np.zeros(k, dtype=bool)
    pending = np.flatnonzero(ok1)
    for _ in range(tries):
        if pending.size == 0:
            break
        d = rng.integers(-180, 180, size=pending.size) + 180
        phi = rng.integers(0, 360, size=pending.size)
        ty = np.round(first.ay[pending, 0] + p.seed_distance * t.phi_sin[phi]).astype(np.int64)
        tx = np.round(first.ax[pending, 0] + p.seed_distance * t.phi_cos[phi]).astype(np.int64)
        vy, vx, ok = _seed_heads(t, ty, tx, d)
        ok &= _inside(t, ty, tx)  # (always so with LRA's parameters)
        second.place(pending[ok], ty[ok], tx[ok], t.seed_sprite[d[ok]], vy[ok], vx[ok], d[ok])
        ok2[pending[ok]] = True
        pending = pending[~ok]
    return first, second, np.flatnonzero(ok2)


def _target_pairs_dense(rng: np.random.Generator, t: _Tables, k: int) -> list[tuple]:
    """The reference for ``_target_pairs`` (same results, same random draws): each attempt keeps its occupancy and
    dilated occupancy as images (``_Tables``), updated by ``_commit``, read by ``_extend`` and ``_fits``.

    Run k independent attempts at the two targets (``two_snakes`` / ``initialize_two_seeds``) and return the
    successful ones, each as (state uint8 (2, trash + 1): occupancy and dilated occupancy, first, second) with a
    target as int (C, 3) rows (anchor y, anchor x, sprite id). Seeds: ``_seed_pairs``. Both then grow alternately,
    one paddle each per step, and any failure fails the attempt. A snake's newest paddle is uncommitted until its
    next one is placed, and at the end only the second target's last paddle is committed: the growing tips are
    never tested against each other, and distractors may cover the first target's far end. With k = 1 the random
    draws are made in the original's order.
    """
    C = t.p.contour_length
    first, second, alive = _seed_pairs(rng, t, k)
    first.n = second.n = 1
    occ, dil = np.empty((2, alive.size, t.trash + 1), dtype=np.uint8)
    occ[:], dil[:] = t.empty_occ, t.empty_dil
    rows = np.arange(alive.size)
    first.select(alive)  # the live attempts only, in compact states
    second.select(alive)
    for _ in range(C - 1):
        for snake in (first, second):
            rows = rows[_extend(rng, t, occ, dil, snake, rows)]
            snake.n += 1
    _commit(t, occ, dil, rows, second.ay[rows, -1], second.ax[rows, -1], second.sprite[rows, -1])
    return [(np.stack([occ[r], dil[r]]), first.paddles(r), second.paddles(r)) for r in rows.tolist()]


class _PairTables:
    """What ``_target_pairs`` reads in place of per-attempt occupancy images: an attempt is its paddle list, and the
    two tests the search makes are answered from the paddles committed so far, one table look-up per paddle.

    - The dilated occupancy at the N candidate far ends around a pivot P is the max of the empty image's (the
      padding, dilated) and, per committed paddle with sprite s anchored at A, its dilated mask's bytes at
      P - A + turn offsets: ``dil_rows[(s side + dy) side + dx]`` with (dy, dx) = P - A + D, an (N,) row, zeros
      (the last row) where P - A lies farther than D = half + margin + radius apart. ``border_rows`` holds the empty
      image's row per pivot, 255 at far ends outside the image (their weight is 0 either way). Pivots lie within
      radius + step + 1 of the image (a pivot is one step on from a pivot whose far end, or a seed's own pivot,
      lies inside), which is the frame of ``border_rows``.
    - The body test of a new paddle (sprite n anchored at a far end inside the image) against the occupancy (the
      max of the committed masks, clipped to the image, and the padding at 255) passes where it passes against the
      padding (``border_fits[n, y, x]``) and against every committed paddle alone (``pair_fits[c, n, dy, dx]``,
      (dy, dx) = new anchor - committed anchor + 2 half, True beyond). A max-composite passes a threshold test where
      each of its parts does; the clipping drops no failing pixel where the padding test passes, because the
      pixels of a paddle that can fail at all form one 8-connected piece around its anchor (checked here): one of
      them outside the image puts another on the padding.
    """

    def __init__(self, t: _Tables):
        p, margin, R, half = t.p, t.margin, t.R, t.half
        radius, N, ns = p.paddle_length + margin, t.turn_dy.size, len(t.masks)
        self.R, self.N, self.ns = R, N, ns
        risky = ~_FITS.all(axis=0)  # (256,): mask bytes that can fail the body test
        eight = np.ones((3, 3), dtype=bool)
        for s, m in enumerate(t.masks):
            labels, pieces = ndimage.label(risky[m], structure=eight)
            if pieces != 1 or not risky[m[half, half]]:
                raise ValueError(f"pathfinder{R} margin {margin}: sprite {s}'s pixels that can fail the body test do "
                                 f"not form one piece around its anchor; the paddle-list search does not apply")
        # dilated occupancy at the far ends, per committed paddle: (ns side side + 1, N)
        hd = half + margin  # half size of a dilated mask
        self.D = D = hd + radius
        self.side = side = 2 * D + 1
        big = np.zeros((ns, 2 * (hd + D + radius) + 1, 2 * (hd + D + radius) + 1), dtype=np.uint8)
        c = hd + D + radius
        for s, d in enumerate(t.dilated):
            big[s, c - hd:c + hd + 1, c - hd:c + hd + 1] = d
        oy = c + np.arange(-D, D + 1)[:, None, None] + t.turn_dy  # (side, 1, N)
        ox = c + np.arange(-D, D + 1)[None, :, None] + t.turn_dx  # (1, side, N)
        self.dil_rows = np.concatenate([big[:, oy, ox].reshape(ns * side * side, N), np.zeros((1, N), np.uint8)])
        self.dil_none = ns * side * side
        # the empty image's dilated occupancy at the far ends, per pivot in a frame F around the image: (bs^2, N)
        self.F = F = radius + p.paddle_length + 2 * margin + 1
        self.bs = bs = R + 2 * F
        frame = np.full((bs + 2 * radius, bs + 2 * radius), 255, dtype=np.uint8)
        frame[F + radius:F + radius + R, F + radius:F + radius + R] = t.image(t.empty_dil)
        py = radius + np.arange(bs)[:, None, None] + t.turn_dy  # (bs, 1, N)
        px = radius + np.arange(bs)[None, :, None] + t.turn_dx  # (1, bs, N)
        self.border_rows = np.ascontiguousarray(frame[py, px].reshape(bs * bs, N))
        # body test against one committed paddle: (ns, ns, side2, side2) flattened, then True for "too far apart"
        self.Dh = Dh = 2 * half
        self.side2 = side2 = 2 * Dh + 1
        S = 2 * half + 1
        occ = np.zeros((ns, S + 2 * Dh, S + 2 * Dh), dtype=np.uint8)
        for s, m in enumerate(t.masks):
            occ[s, Dh:Dh + S, Dh:Dh + S] = m
        need = np.argmax(~_FITS, axis=0)  # (256,): the lowest occupancy byte a mask byte fails against
        bits = np.left_shift(np.uint64(1), np.arange(S + 2 * Dh, dtype=np.uint64))  # columns as bits of a uint64
        levels = {int(v): ((occ >= v) * bits).sum(axis=2, dtype=np.uint64) for v in np.unique(need[risky])}
        window = np.uint64((1 << side2) - 1)
        fail = np.zeros((ns, ns, side2), dtype=np.uint64)  # (committed, new, dy): bit dx set where the pair fails
        for n, m in enumerate(t.masks):
            for hy, hx in np.argwhere(risky[m]).tolist():
                # the new paddle's pixel (hy, hx) of its window lies at committed-window pixel (dy, dx) + (hy, hx)
                fail[:, n] |= (levels[int(need[m[hy, hx]])][:, hy:hy + side2] >> np.uint64(hx)) & window
        fail = (fail[..., None] >> np.arange(side2, dtype=np.uint64)) & np.uint64(1)  # (ns, ns, side2, side2)
        self.pair_fits = np.append(fail.reshape(-1) == 0, True)
        self.pair_none = fail.size
        # body test against the padding, per sprite and anchor inside the image: (ns R R,). The padding holds 255,
        # which every pixel that can fail fails against: a paddle fails where one of them lies on the padding
        empty = t.image(t.empty_occ)
        if not np.isin(empty, (0, 255)).all():
            raise ValueError(f"pathfinder{R}: the empty occupancy must hold only 0 and 255")
        padding = (empty == 255).astype(np.float64)  # (R, R)
        fits = np.empty((ns, R, R), dtype=bool)
        for n, m in enumerate(t.masks):  # how many of them lie on the padding: a correlation of whole numbers
            on_padding = signal.fftconvolve(padding, risky[m][::-1, ::-1].astype(np.float64), mode="same")
            fits[n] = on_padding < 0.5
        self.border_fits = fits.reshape(-1)


@functools.lru_cache(maxsize=None)
def _pair_tables(p: PathfinderParams, margin: int) -> _PairTables:
    return _PairTables(_tables(p, margin))


def _target_pairs(rng: np.random.Generator, t: _Tables, k: int) -> list[tuple]:
    """``_target_pairs_dense`` on paddle lists (``_PairTables``): the same successes, in the same order, from the
    same random draws.

    An attempt is its paddles in the order the original commits them (first[0], second[0], first[1], ...): when a
    snake grows, the committed ones are a prefix of that list, all but the two newest. Live attempts are kept
    compact, in order; only the successes get occupancy images, at the end."""
    p, g = t.p, _pair_tables(t.p, t.margin)
    C, tries, R, N = p.contour_length, p.max_paddle_retrial + 1, t.R, g.N
    first, second, alive = _seed_pairs(rng, t, k)
    n = alive.size
    ay, ax, sp = (np.zeros((n, 2 * C), dtype=np.int64) for _ in range(3))  # paddles in commit order
    for col, s in ((0, first), (1, second)):
        ay[:, col], ax[:, col], sp[:, col] = s.ay[alive, 0], s.ax[alive, 0], s.sprite[alive, 0]
    py = np.stack([first.py[alive], second.py[alive]], 1)  # (n, 2): each snake's last pivot and heading
    px = np.stack([first.px[alive], second.px[alive]], 1)
    head = np.stack([first.head[alive], second.head[alive]], 1)
    step = float(p.paddle_length + 2 * t.margin)
    reach_y, reach_x = step * t.sin, step * t.cos  # (360 + N,): a pivot's move per heading, as _ceil_step makes it
    for i in range(1, C):
        for x in (0, 1):
            c = 2 * (i - 1) + x  # committed paddles
            h = head[:, x]
            vy = np.ceil(py[:, x] + reach_y[h]).astype(np.int64)  # the new pivots (n,)
            vx = np.ceil(px[:, x] + reach_x[h]).astype(np.int64)
            fy, fx = vy + g.F, vx + g.F
            if n and max(fy.view(np.uint64).max(), fx.view(np.uint64).max()) >= g.bs:
                raise AssertionError("_target_pairs: a pivot left the frame of its tables")
            dil = g.border_rows.take(fy * g.bs + fx, axis=0)  # (n, N) bytes
            if c:
                dy, dx = vy[:, None] - ay[:, :c] + g.D, vx[:, None] - ax[:, :c] + g.D  # (n, c)
                near = (dy.view(np.uint64) < g.side) & (dx.view(np.uint64) < g.side)
                rows = np.where(near, (sp[:, :c] * g.side + dy) * g.side + dx, g.dil_none).T  # (c, n)
                if n * c <= 4096:  # one gather of every row, else one per committed paddle (quicker for many)
                    np.maximum(dil, g.dil_rows.take(rows.ravel(), axis=0).reshape(c, n, N).max(axis=0), out=dil)
                else:
                    for r in rows:
                        np.maximum(dil, g.dil_rows.take(r, axis=0), out=dil)
            pmf = _FREE[dil] * t.turn_weight.take(h, axis=0)  # (n, N): as _extend's (far ends outside weigh 0)
            total = pmf.sum(axis=1)
            live = total >= MIN_TOTAL_WEIGHT
            cmf = np.empty((N, n))  # far end j's cumulative weight in row j (rows add contiguously)
            np.divide(pmf.T, np.where(live, total, 1.0), out=cmf)
            if n > 256:  # (for fewer, one call is quicker)
                for q in range(1, N):
                    cmf[q] += cmf[q - 1]
            else:
                np.cumsum(cmf, axis=0, out=cmf)
            chosen = np.full(n, -1)
            pending = np.flatnonzero(live)
            for _ in range(tries):
                if pending.size == 0:
                    break
                draws = rng.random(pending.size)
                j = ((cmf if pending.size == n else cmf[:, pending]) <= draws).sum(axis=0)
                edge = np.flatnonzero(j == N)  # the original's argmax over an all-false test: the first far end inside
                if edge.size:
                    ey, ex = vy[pending[edge], None] + t.turn_dy, vx[pending[edge], None] + t.turn_dx
                    j[edge] = ((ey >= 0) & (ey < R) & (ex >= 0) & (ex < R)).argmax(axis=1)
                ny, nx, ns = vy[pending] + t.turn_dy[j], vx[pending] + t.turn_dx[j], t.turn_sprite[j]
                fit = g.border_fits[(ns * R + ny) * R + nx]
                if c:
                    dy, dx = ny[:, None] - ay[pending, :c] + g.Dh, nx[:, None] - ax[pending, :c] + g.Dh  # (m, c)
                    near = (dy.view(np.uint64) < g.side2) & (dx.view(np.uint64) < g.side2)
                    pair = ((sp[pending, :c] * g.ns + ns[:, None]) * g.side2 + dy) * g.side2 + dx
                    fit &= g.pair_fits[np.where(near, pair, g.pair_none)].all(axis=1)
                chosen[pending[fit]] = j[fit]
                pending = pending[~fit]
            keep = np.flatnonzero(chosen >= 0)
            j, n = chosen[keep], keep.size
            ay, ax, sp, py, px, head, alive = (a[keep] for a in (ay, ax, sp, py, px, head, alive))
            vy, vx = vy[keep], vx[keep]
            col = 2 * i + x
            ay[:, col], ax[:, col], sp[:, col] = vy + t.turn_dy[j], vx + t.turn_dx[j], t.turn_sprite[j]
            py[:, x], px[:, x], head[:, x] = vy, vx, 360 + j
    if n == 0:
        return []
    # occupancy images of the successes: every paddle but the first target's last, committed in order
    occ, dil = np.empty((2, n, t.trash + 1), dtype=np.uint8)
    occ[:], dil[:] = t.empty_occ, t.empty_dil
    rows = np.arange(n)
    for col in range(2 * C):
        if col != 2 * C - 2:
            _commit(t, occ, dil, rows, ay[:, col], ax[:, col], sp[:, col])
    return [(np.stack([occ[r], dil[r]]), np.stack([ay[r, 0::2], ax[r, 0::2], sp[r, 0::2]], 1),
             np.stack([ay[r, 1::2], ax[r, 1::2], sp[r, 1::2]], 1)) for r in range(n)]


#: uint8 (256,): set bits per byte; uint8 (256, 8): the position of each byte's k-th set bit (lowest first)
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(np.uint8)
_NTH_BIT = np.array([[([b for b in range(8) if v >> b & 1] + [0] * 8)[k] for k in range(8)] for v in range(256)],
                    dtype=np.uint8)


class _Starts:
    """The starts a distractor may draw on one image's state, as ``_free_starts`` finds them, with the image as one
    integer of bits (bit y stride + x for pixel (y, x); the stride leaves a gap of zero bits wider than any offset
    between rows): a start q is free when no taken bit lies at q + o for an offset o of the heading's element, so
    the blocked bits are the OR of the taken bits shifted by each offset. Pixels beyond the image read as zeros, as
    ``_free_starts`` leaves them out."""

    def __init__(self, t: _Tables, state: np.ndarray):
        self.t, R = t, t.R
        taken = _TAKEN[t.image(state[0])]  # (R, R)
        self.crowded = float((~taken).mean()) < STOP_AVAILABILITY
        taken[0, :] = taken[-1, :] = taken[:, 0] = taken[:, -1] = True
        self.stride = stride = R + t.start_gap
        rows = np.zeros((R, stride), dtype=bool)
        rows[:, :R] = taken
        self.nbytes = (R * stride + 7) // 8
        self.taken = int.from_bytes(np.packbits(rows.reshape(-1), bitorder="little").tobytes(), "little")
        self._free: dict[int, int] = {}

    def free(self, d: int) -> int:
        """The free starts of heading id ``d`` as bits (0 when the heading cannot start or the image is crowded)."""
        if d not in self._free:
            t, bits = self.t, 0
            if t.usable[d] and not self.crowded:
                taken, blocked = self.taken, 0
                for shift in t.start_shifts(self.stride)[d]:  # blocked[q] |= taken[q + shift]
                    blocked |= taken >> shift if shift >= 0 else taken << -shift
                bits = t.start_image(self.stride) & ~blocked
            self._free[d] = bits
        return self._free[d]

    def count(self, d: int) -> int:
        return self.free(d).bit_count()

    def pick(self, d: int, k: int) -> tuple[int, int]:
        """(y, x) of the k-th free start of heading id ``d`` in row-major order (as ``_free_starts(...)[k]``)."""
        by = np.frombuffer(self.free(d).to_bytes(self.nbytes, "little"), dtype=np.uint8)
        seen = np.cumsum(_POPCOUNT[by])  # free starts up to each byte
        i = int(np.searchsorted(seen, k, side="right"))
        q = i * 8 + int(_NTH_BIT[by[i], k - (int(seen[i - 1]) if i else 0)])
        return divmod(q, self.stride)


def _commit_one(t: _Tables, occ: np.ndarray, dil: np.ndarray, y: int, x: int, sprite: int) -> None:
    """``_commit`` of one paddle into one state (``occ``, ``dil``: flat (trash + 1,) uint8) through windows: its
    mask maxed into the occupancy inside the image, its dilated mask into the dilated occupancy. (The spare cell,
    which ``_commit`` also maxes the clipped-off bytes into, is left alone: no test reads it.)"""
    R, W, q, h = t.R, t.width, t.pad, t.half
    occ2, dil2 = occ[:t.trash].reshape(W, W), dil[:t.trash].reshape(W, W)
    y0, y1, x0, x1 = max(y - h, 0), min(y + h, R - 1), max(x - h, 0), min(x + h, R - 1)
    if y0 <= y1 and x0 <= x1:
        win = occ2[y0 + q:y1 + q + 1, x0 + q:x1 + q + 1]
        np.maximum(win, t.masks[sprite][y0 - y + h:y1 - y + h + 1, x0 - x + h:x1 - x + h + 1], out=win)
    e = h + t.margin
    win = dil2[y + q - e:y + q + e + 1, x + q - e:x + q + e + 1]
    np.maximum(win, t.dilated[sprite], out=win)


def _extend_one(rng: np.random.Generator, t: _Tables, occ: np.ndarray, dil: np.ndarray, paddles: list,
                pivot: list) -> bool:
    """``_extend`` for one snake on one state (``occ``, ``dil``: flat (trash + 1,) uint8), with the same random draws
    and results: ``paddles`` is its list of (anchor y, anchor x, sprite id), ``pivot`` [y, x, heading id]; on
    success the new paddle is appended, the previous one committed and ``pivot`` updated."""
    p, R, W, q = t.p, t.R, t.width, t.pad
    py0, px0, h = pivot
    step = float(p.paddle_length + 2 * t.margin)
    py, px = math.ceil(py0 + step * float(t.sin[h])), math.ceil(px0 + step * float(t.cos[h]))
    cy, cx = py + t.turn_dy, px + t.turn_dx  # (N,)
    inside = (cy >= 0) & (cy < R) & (cx >= 0) & (cx < R)
    pmf = (_FREE[dil[np.where(inside, (cy + q) * W + cx + q, t.trash)]] * t.turn_weight[h] * inside)[None]  # (1, N)
    total = pmf.sum(axis=1)
    if not total[0] >= MIN_TOTAL_WEIGHT:
        return False
    cmf = np.cumsum(pmf / total[:, None], axis=1)[0]
    for _ in range(p.max_paddle_retrial + 1):
        j = int((cmf <= rng.random(1)[0]).sum())
        if j == cmf.size:  # the original's argmax over an all-false test
            j = int(inside.argmax())
        ny, nx, ns = py + int(t.turn_dy[j]), px + int(t.turn_dx[j]), int(t.turn_sprite[j])
        if _FITS[occ[(ny + q) * W + nx + q + t.fit_off[ns]], t.fit_val[ns]].all():
            break
    else:
        return False
    _commit_one(t, occ, dil, *paddles[-1])
    paddles.append((ny, nx, ns))
    pivot[:] = [py, px, 360 + j]
    return True


def _distractor(rng: np.random.Generator, t: _Tables, state: np.ndarray,
                starts: Optional[_Starts] = None) -> Optional[np.ndarray]:
    """One distractor snake (``make_snake``) on one image's ``state`` (uint8 (2, trash + 1): occupancy and dilated
    occupancy, see ``_Tables``), committed on success and returned as int (distractor_length, 3) rows (anchor y,
    anchor x, sprite id); on failure the state is left as it was. ``starts``: ``_Starts`` of this state, if at
    hand (it stays valid while attempts fail).

    Its start is drawn as the original's: the occupancy with a one-pixel frame taken, dilated by the heading's seed
    element (``_free_starts``, here ``_Starts``); no start once less than STOP_AVAILABILITY of the image is free.
    It grows by ``_extend_one``."""
    p = t.p
    starts = starts or _Starts(t, state)
    for _ in range(p.max_paddle_retrial + 1):
        d = int(rng.integers(-180, 180)) + 180
        count = starts.count(d)
        if count == 0:
            return None
        ty, tx = starts.pick(d, int(rng.integers(count)))
        # _seed_heads on one seed: its far end and pivot, each coordinate rounded up, both inside the image
        L, R = float(p.paddle_length), t.R
        hy, hx = math.ceil(ty + L * float(t.sin[d])), math.ceil(tx + L * float(t.cos[d]))
        back = float(p.paddle_length + t.margin)
        vy, vx = math.ceil(hy + back * float(t.rsin[d])), math.ceil(hx + back * float(t.rcos[d]))
        if 0 <= hy < R and 0 <= hx < R and 0 <= vy < R and 0 <= vx < R:
            break
    else:
        return None
    paddles, pivot = [(ty, tx, int(t.seed_sprite[d]))], [vy, vx, d]
    occ, dil = state[0].copy(), state[1].copy()  # the state while it grows
    for _ in range(p.distractor_length - 1):
        if not _extend_one(rng, t, occ, dil, paddles, pivot):
            return None
    _commit_one(t, occ, dil, *paddles[-1])
    state[0], state[1] = occ, dil
    return np.array(paddles, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------
# one image


@dataclass
class SampleGeometry:
    """What one image is drawn from. A paddle is ((y0, x0), (y1, x1)) in path order, the ends of its line as drawn
    (1x pixel coordinates; multiples of 1 / antialias_scale). A snake's first paddle is anchored at (drawn from) its
    start, the others at their far end; anchors are whole pixels."""
    targets: list            # two lists of paddles, each in path order
    distractors: list        # lists of paddles
    markers: tuple           # ((y, x), (y, x)): start of targets[origin], far end of targets[terminal]
    origin: int
    terminal: int            # == origin iff label 1
    margin: int
    target_contrasts: list   # per paddle intensities (two lists)
    distractor_contrasts: list  # per paddle intensities (one list per distractor)


class PairPool:
    """Successful target pairs not used yet, per margin, and how often attempts succeed (to size the next batch of
    attempts). Attempts are independent, so using a pair from an earlier batch is the same as restarting until
    one succeeds, as the original does."""

    def __init__(self):
        self.ready: dict[int, list] = {}
        self.attempts: dict[int, int] = {}
        self.successes: dict[int, int] = {}

    def batch_size(self, t: _Tables) -> int:
        """Attempts for the next batch: about two successes' worth at the rate seen so far, within memory bounds."""
        a, s = self.attempts.get(t.margin, 0), self.successes.get(t.margin, 0)
        want = 16 if a == 0 else 2 * (a + 1) // (s + 1)
        per_attempt = 2 * t.trash + 24 * t.turn_dy.size + 24 * t.occ_off.shape[1]  # state, temporaries
        cap = max(1, MAX_BATCH_BYTES // per_attempt)
        return int(min(max(want, 16), cap))

    def take(self, rng: np.random.Generator, t: _Tables, batch: Optional[int] = None) -> tuple:
        """A successful target pair for margin ``t.margin``: the oldest one ready, else from new batches of
        attempts (of ``batch`` attempts each, or adaptively sized)."""
        ready, tried = self.ready.setdefault(t.margin, []), 0
        while not ready:
            if tried >= MAX_PAIR_ATTEMPTS:
                raise RuntimeError(f"pathfinder{t.p.resolution}: could not place two target paths in {tried} "
                                   f"attempts; the parameters leave too little room")
            k = batch or self.batch_size(t)
            found = _target_pairs(rng, t, k)
            tried += k
            self.attempts[t.margin] = self.attempts.get(t.margin, 0) + k
            self.successes[t.margin] = self.successes.get(t.margin, 0) + len(found)
            ready.extend(found)
        return ready.pop(0)


def _paddles(t: _Tables, rows: np.ndarray) -> list:
    """A snake's paddles (int (n, 3) rows: anchor y, anchor x, sprite id) as ((y0, x0), (y1, x1)) float pairs in
    path order (see SampleGeometry)."""
    aa, out = t.p.antialias_scale, []
    for k, (y, x, sprite) in enumerate(rows.tolist()):
        dy, dx = t.blown[sprite].tolist()
        anchor, other = (float(y), float(x)), (y + dy / aa, x + dx / aa)
        out.append((anchor, other) if k == 0 else (other, anchor))
    return out


def _drawn(paddles: list, aa: int) -> list:
    """The inverse of ``_paddles``: (anchor, antialias-scale offset to the other end) of each paddle of one snake."""
    out = []
    for k, (a, b) in enumerate(paddles):
        anchor, other = (a, b) if k == 0 else (b, a)
        out.append(((int(round(anchor[0])), int(round(anchor[1]))),
                    (int(round((other[0] - anchor[0]) * aa)), int(round((other[1] - anchor[1]) * aa)))))
    return out


def sample_geometry(rng: np.random.Generator, p: PathfinderParams, label: int, *, pool: Optional[PairPool] = None,
                    batch: Optional[int] = None) -> SampleGeometry:
    """Place the two targets, the distractors and the markers of one image with the given label, as the original's
    ``from_wrapper`` does: a margin per image, target pairs until one succeeds (``PairPool``; pass one pool for a
    run of images so that no successful attempt is wasted), num_distractors distractor snakes of
    max_snake_retrial + 1 attempts each (those that fail are left out), the markers, and last the contrasts (they
    do not affect placement): two snake contrasts drawn from the list twice over, a paddle contrast per target
    step (shared by the two targets), a snake contrast per distractor paddle. ``batch=1`` makes the random draws
    in the original's order (for comparing the two draw by draw)."""
    if label not in (0, 1):
        raise ValueError(f"label must be 0 or 1, got {label}")
    margin = int(p.paddle_margins[rng.integers(len(p.paddle_margins))])
    t = _tables(p, margin)
    state, first, second = (pool or PairPool()).take(rng, t, batch)
    state = state.copy()
    distractors, starts = [], None
    for _ in range(p.num_distractors):
        for _ in range(p.max_snake_retrial + 1):
            starts = starts or _Starts(t, state)  # a failed attempt leaves the state as it was
            snake = _distractor(rng, t, state, starts)
            if snake is not None:
                distractors.append(snake)
                starts = None
                break
    origin = int(rng.integers(2))
    terminal = origin if label == 1 else 1 - origin
    targets = (first, second)
    snake_c = rng.permutation(list(p.snake_contrasts) * 2)[:2]
    step_c = np.asarray(p.paddle_contrasts)[rng.integers(len(p.paddle_contrasts), size=p.contour_length)]
    start, end = targets[origin][0, :2].tolist(), targets[terminal][-1, :2].tolist()
    return SampleGeometry(
        [_paddles(t, s) for s in targets], [_paddles(t, d) for d in distractors],
        ((float(start[0]), float(start[1])), (float(end[0]), float(end[1]))), origin, terminal, margin,
        [[float(c * sc) for c in step_c] for sc in snake_c],
        [[float(c) for c in np.asarray(p.snake_contrasts)[rng.integers(len(p.snake_contrasts), size=len(d))]]
         for d in distractors])



@functools.lru_cache(maxsize=None)
def _paddle_value(p: PathfinderParams, margin: int, dy: int, dx: int, contrast: float) -> np.ndarray:
    """float32 (S, S): a paddle's picture (``_sprite``) as it is composited: bytes / 255 times its contrast, rounded
    to float32 as the original stores it."""
    return (_sprite(p, margin, dy, dx)[0] / 255.0 * contrast).astype(np.float32)


def _draw_snakes(image: np.ndarray, snakes: list, contrasts: list, p: PathfinderParams, margin: int) -> None:
    """Max-composite the paddles of ``snakes`` (paddle lists) into ``image`` (float64 (R, R)), each paddle's
    bytes / 255 times its contrast, rounded to float32 as the original stores them."""
    aa, half, R = p.antialias_scale, _half(p, margin), p.resolution
    for paddles, cs in zip(snakes, contrasts):
        for (anchor, blown), c in zip(_drawn(paddles, aa), cs):
            w = _window(anchor, half, R)
            if w is None:
                continue
            value = _paddle_value(p, margin, *blown, float(c))[w[2], w[3]]
            np.maximum(image[w[0], w[1]], value, out=image[w[0], w[1]])


def _marker(p: PathfinderParams, centre: tuple) -> np.ndarray:
    """uint8 (R, R): the original's ``draw_circle``: a disk of radius marker_radius * aa drawn at the antialias scale
    around pixel centre * aa (so 0.5 - 0.5 / aa pixels up-left of the 1x pixel's centre) and Lanczos-resized."""
    aa, R = p.antialias_scale, p.resolution
    cy, cx = int(round(centre[0])), int(round(centre[1]))
    yy, xx = np.ogrid[-cy * aa:(R - cy) * aa, -cx * aa:(R - cx) * aa]
    disk = (yy ** 2 + xx ** 2 <= (p.marker_radius * aa) ** 2).astype(np.uint8) * 255  # (R aa, R aa)
    return _bytes_resize(disk, R)


#: a marker's reach (1x pixels) beyond its radius: Lanczos-3 at the antialias scale 2 spreads 3 pixels, plus one
_MARKER_SPREAD = 4


@functools.lru_cache(maxsize=None)
def _marker_sprite(p: PathfinderParams) -> tuple[np.ndarray, int]:
    """(uint8 (2 M + 1, 2 M + 1), M): ``_marker`` around a centre far from the edges, cropped to M pixels around it.
    A marker whose window stays ``_marker_edge`` pixels inside the image is this sprite moved there (the resize of
    whole antialias-scale pixel pairs is the same everywhere but where its kernel meets the edge)."""
    m = math.ceil(p.marker_radius) + _MARKER_SPREAD
    c = p.resolution // 2
    full = _marker(p, (c, c))
    sprite = full[c - m:c + m + 1, c - m:c + m + 1].copy()
    if full.sum(dtype=np.int64) != sprite.sum(dtype=np.int64):
        raise ValueError(f"pathfinder{p.resolution}: the marker reaches beyond its sprite")
    return sprite, m


def _marker_edge(p: PathfinderParams) -> int:
    """How far (pixels) a marker's centre must lie from every edge to be drawn from ``_marker_sprite``: PIL's
    Lanczos-3 halving reads input pixels 2 i - 5 ... 2 i + 6 for output pixel i, so pixels 3 ... R - 4 see no edge,
    and the sprite's pixels lie within M of the centre."""
    return _marker_sprite(p)[1] + 3


def markers_image(p: PathfinderParams, centres: tuple) -> np.ndarray:
    """uint8 (R, R): the max of ``_marker`` at each centre, each drawn from ``_marker_sprite`` where it lies far
    enough inside the image, else as ``_marker`` draws it."""
    R = p.resolution
    out = np.zeros((R, R), dtype=np.uint8)
    sprite, m = _marker_sprite(p)
    edge = _marker_edge(p)
    for centre in centres:
        cy, cx = int(round(centre[0])), int(round(centre[1]))
        if edge <= cy < R - edge and edge <= cx < R - edge:
            win = out[cy - m:cy + m + 1, cx - m:cx + m + 1]
            np.maximum(win, sprite, out=win)
        else:
            np.maximum(out, _marker(p, (cy, cx)), out=out)
    return out


def intensity_image(g: SampleGeometry, p: PathfinderParams) -> np.ndarray:
    """float64 (R, R): the image before its final scaling: paddles (each drawn alone, times its contrast) and the
    two markers (intensity 1), max-composited as the original does."""
    image = np.zeros((p.resolution,) * 2)  # (R, R)
    _draw_snakes(image, g.targets, g.target_contrasts, p, g.margin)
    _draw_snakes(image, g.distractors, g.distractor_contrasts, p, g.margin)
    return np.maximum(image, markers_image(p, g.markers) / 255.0)


def bytescale(image: np.ndarray) -> np.ndarray:
    """uint8: ``image`` scaled min..max to 0..255 and rounded half up, as scipy.misc.imsave / imresize did."""
    lo, hi = image.min(), image.max()
    scale = 255.0 / ((hi - lo) or 1.0)
    return (((image - lo) * scale).clip(0, 255) + 0.5).astype(np.uint8)


def render(g: SampleGeometry, p: PathfinderParams) -> np.ndarray:
    """uint8 (R, R): the image as saved (``intensity_image`` through ``bytescale``)."""
    return bytescale(intensity_image(g, p))


def paddle_layer(snakes: list, p: PathfinderParams, margin: int) -> np.ndarray:
    """float (R, R) in [0, 1]: the paddles of ``snakes`` (lists of paddles in path order) drawn at contrast 1 and
    max-composited, without markers."""
    image = np.zeros((p.resolution,) * 2)
    _draw_snakes(image, snakes, [[1.0] * len(s) for s in snakes], p, margin)
    return image


def make_sample(rng: np.random.Generator, p: PathfinderParams, label: int, *, pool: Optional[PairPool] = None,
                batch: Optional[int] = None) -> tuple[np.ndarray, int]:
    """One image (uint8 (R, R)) with the given label, and the paddle margin it was drawn with (``sample_geometry``
    says what ``pool`` and ``batch`` do)."""
    g = sample_geometry(rng, p, label, pool=pool, batch=batch)
    return render(g, p), g.margin


def metadata_line(batch: int, i: int, label: int, p: PathfinderParams, margin: int) -> str:
    """One line of metadata/<batch>.npy in the release's format."""
    fields = [f"imgs/{batch}", f"sample_{i}.png", i, label, p.continuity, p.contour_length, p.distractor_length,
              p.paddle_length, p.paddle_thickness, margin, len(p.paddle_contrasts)]
    return " ".join(str(f) for f in fields)


#: zlib level of the PNGs written (3: about PIL's default size, five times faster)
PNG_LEVEL = 3


def png_bytes(image: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    """A grayscale PNG (8 bits, no interlacing, no row filter) of uint8 (H, W) ``image``, zlib ``level``."""
    if image.dtype != np.uint8 or image.ndim != 2:
        raise ValueError(f"png_bytes: image must be uint8 (H, W), got {image.dtype} {image.shape}")
    h, w = image.shape
    raw = np.zeros((h, w + 1), dtype=np.uint8)  # each row: filter type 0, then its bytes
    raw[:, 1:] = image

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + chunk(b"IEND", b""))


def _save_png(path: Path, image: np.ndarray) -> None:
    """Write the PNG in place: a batch's images count only once its metadata is written (last), so a batch cut short
    is written again whole."""
    path.write_bytes(png_bytes(image))


def draw_label(rng: np.random.Generator) -> int:
    """One image's label as the original draws it: 0 or 1, each with probability 1/2 (labels are not balanced)."""
    return int(rng.integers(2))


def make_batch(job: tuple) -> int:
    """Write batch ``k`` (PNGs, then metadata/<k>.npy); skipped if its metadata already exists. Each image's label
    is drawn at random, as in the original (not balanced)."""
    folder, batch, n, params, seed = job
    folder = Path(folder)
    params = dict(params)
    for key in ("paddle_margins", "snake_contrasts", "paddle_contrasts"):
        params[key] = tuple(params[key])
    p = PathfinderParams(**params)
    meta = folder / "metadata" / f"{batch}.npy"
    if meta.exists():
        return n
    rng = np.random.default_rng([seed, p.resolution, batch])
    img_dir = folder / "imgs" / str(batch)
    img_dir.mkdir(parents=True, exist_ok=True)
    lines, pool = [], PairPool()
    for i in range(n):
        label = draw_label(rng)
        image, margin = make_sample(rng, p, label, pool=pool)
        _save_png(img_dir / f"sample_{i}.png", image)
        lines.append(metadata_line(batch, i, label, p, margin))
    write_text_atomic(meta, "\n".join(lines) + "\n")
    return n


def generate_pathfinder(out: Path, *, resolution: int = 32, n: int = 200000, per_batch: int = 1000, seed: int = 0,
                        workers: int = 1, progress: bool = True) -> Path:
    """Write n images in the release layout under ``out/pathfinder<R>/curv_contour_length_14``; returns it.

    Batch k holds images per_batch * k ... (the last batch may be smaller) and is seeded by
    (seed, resolution, k), so the output does not depend on ``workers`` (processes; at most one per core and per
    batch: the work is all CPU).
    """
    p = pathfinder_params(resolution)
    for name, value in (("n", n), ("per_batch", per_batch), ("workers", workers)):
        if value < 1:
            raise ValueError(f"generate_pathfinder: {name} must be >= 1, got {value}")
    folder = Path(out) / f"pathfinder{resolution}" / DIFFICULTY
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    n_batches = math.ceil(n / per_batch)
    jobs = [(str(folder), k, min(per_batch, n - k * per_batch), asdict(p), seed) for k in range(n_batches)]
    with progress_bar(n, f"pathfinder{resolution}", "img", show=None if progress else False) as bar:
        workers = min(workers, n_batches, os.cpu_count() or 1)
        if workers > 1:
            with get_context("spawn").Pool(workers) as pool:
                for done in pool.imap_unordered(make_batch, jobs):
                    bar.update(done)
        else:
            for job in jobs:
                bar.update(make_batch(job))
    return folder
