"""The suite's Path-X images (Pathfinder at 128 x 128) against the original generator's, statistic by statistic.

The original's figures are facts measured outside the suite (results/diagnostics/pathx128_statistics_20261208T0127.log):
drewlinsley/pathfinder ``snakes2.py`` at commit ab9c130 (the code LRA generated its data with) run under Python 3 with
only what it needs to run changed (scipy.misc.imresize / imsave re-created with scipy 1.x semantics: min-max scale to
uint8, then PIL's Lanczos resize; np.float -> float, np.round_ -> np.round), called as LRA's TFDS builder documents for
128 x 128 (padding 1, paddle length 5, margins 2 and 3 drawn per image, marker radius 3, contour length 14, thickness
1.5, antialias 2, seed distance 20, continuity 1.8, distractor length 4, 8 distractor snakes, snake contrast 0.9,
paddle contrast 1.0, no single paddles), 603 images (three runs, numpy seeds 1, 2 and 3: 192, 272 and 139 images), the
geometry (markers, distractors placed, target starts) recorded by wrapping its functions.

Each statistic is a mean over images (runners.data.lra.pathfinder_stats defines them), so the suite's 400 images must
land within 4 standard errors of the difference of two means (the original's per-image standard deviation over
sqrt(400) and sqrt(603)); the three spreads the table reports (non-zero fraction, ink, start distance) within 4
standard errors of a standard deviation (from the original's fourth moments). Two statistics are 0 in every image of
the original's sample and have no spread to test against: the markers' centre pixels are never both the image's
maximum at 128 x 128 (the marker is drawn 0.25 pixel up-left of its centre pixel, so the maximum lies beside it), and
every image has distractors; the suite's rate of each must stay below 1 %. No allowance is added for a deliberate
difference: there is none (with the original's order of random draws the suite's generator reproduces the original's
images pixel for pixel).
"""
import math

import pytest

from runners.data.lra.pathfinder_stats import generated_statistics

N_ORIGINAL = 603
N_SUITE = 400
Z = 4.0

#: statistic: (mean, per-image standard deviation) over the original's images (see the module docstring)
ORIGINAL = {
    "zero": (0.86267, 0.005305),
    "dim": (0.082479, 0.00453),
    "mid": (0.02449, 0.001708),
    "bright": (0.029628, 0.001365),
    "full": (0.00073323, 6.983e-06),
    "nonzero": (0.13733, 0.005305),
    "ink": (509.5, 19.76),
    "pieces_lit": (69.695, 23.39),
    "pieces_bright": (57.685, 2.291),
    "saturated": (12.013, 0.1144),
    "distractors": (7.7297, 0.4869),
    "start_distance": (20.001, 0.2728),
    "label1": (0.5, 0.5),  # the generator's label draw (draw_label): p = 0.5, as the original's (its sample: 0.5174)
}
#: statistic: sqrt(n) x the standard error of its per-image standard deviation, from the original's fourth moment
SPREAD_SE = {"nonzero": 0.004357, "ink": 16.31, "start_distance": 0.1767}
#: statistics that are 0 in every one of the original's images: the suite's rate must stay below this
NEVER = {"markers_brightest": 0.01, "no_distractors": 0.01}


@pytest.fixture(scope="module")
def suite_statistics():
    return generated_statistics(128, N_SUITE, 2024)


@pytest.mark.parametrize("name", list(ORIGINAL))
def test_mean_matches_the_original(suite_statistics, name):
    mean, sd = ORIGINAL[name]
    tol = Z * sd * math.sqrt(1 / N_SUITE + 1 / N_ORIGINAL)
    got = suite_statistics[name]["mean"]
    assert abs(got - mean) <= tol, f"{name}: suite {got:.5g}, original {mean:.5g} (tolerance {tol:.3g})"


@pytest.mark.parametrize("name", list(SPREAD_SE))
def test_spread_matches_the_original(suite_statistics, name):
    sd = ORIGINAL[name][1]
    tol = Z * SPREAD_SE[name] * math.sqrt(1 / N_SUITE + 1 / N_ORIGINAL)
    got = suite_statistics[name]["sd"]
    assert abs(got - sd) <= tol, f"{name}: suite sd {got:.4g}, original {sd:.4g} (tolerance {tol:.3g})"


@pytest.mark.parametrize("name", list(NEVER))
def test_what_the_original_never_shows_stays_rare(suite_statistics, name):
    assert suite_statistics[name]["mean"] <= NEVER[name], f"{name}: suite {suite_statistics[name]['mean']:.4f}"
