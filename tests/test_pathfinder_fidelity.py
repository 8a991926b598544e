"""The suite's Pathfinder-32 images against the original generator's, statistic by statistic.

The original's figures are facts measured outside the suite: drewlinsley/pathfinder ``snakes2.py`` (the code LRA
generated its data with) run under Python 3 with only what it needs to run changed (scipy.misc.imresize / imsave
re-created with scipy 1.x semantics: min-max scale to uint8, then PIL's Lanczos resize; np.float -> float), called
as LRA's TFDS builder documents for 32 x 32 (margin 1, padding 1, paddle length 2, marker radius 1.5, contour length
14, thickness 0.5, antialias 2, seed distance 7, continuity 1.0, distractor length 4, 5 distractor snakes, snake
contrast 2, paddle contrast 0.75, no single paddles), 4,000 images (two runs of 2,000, numpy seeds 1 and 2), the
geometry (markers, distractors placed, target starts) recorded by wrapping its functions. A colleague's earlier
measurement of 4,000 other images of it gave the same within sampling error (pixels = 0: 65.9 %; 1-31 / 32-127 /
128-254 / 255: 19.6 / 6.0 / 8.3 / 0.22 %; non-zero fraction 0.341 +- 0.039; ink 80.9 +- 8.1; components 8.5 / 13.8;
pixels at 255: 2.3; markers brightest: 34 %; distractors 1.15, none in 25.9 %; start distance 7.04 +- 0.26).

Each statistic is a mean over images (runners.data.lra.pathfinder_stats defines them), so the suite's 1,000 images
must land within 4 standard errors of the difference of two means (the original's per-image standard deviation
over sqrt(1,000) and sqrt(4,000)); the three spreads the table reports (non-zero fraction, ink, start distance) within
4 standard errors of a standard deviation (from the original's fourth moments). No allowance is added for a
deliberate difference: there is none (with the original's order of random draws the suite's generator reproduces
the original's images pixel for pixel).
"""
import math

import pytest

from runners.data.lra.pathfinder_stats import generated_statistics

N_ORIGINAL = 4000
N_SUITE = 1000
Z = 4.0

#: statistic: (mean, per-image standard deviation) over the original's 4,000 images (see the module docstring)
ORIGINAL = {
    "zero": (0.65933, 0.03819),
    "dim": (0.19589, 0.02595),
    "mid": (0.059867, 0.0105),
    "bright": (0.082716, 0.009306),
    "full": (0.0021973, 0.001349),
    "nonzero": (0.34067, 0.03819),
    "ink": (80.855, 7.949),
    "pieces_lit": (8.3355, 3.271),
    "pieces_bright": (13.736, 3.197),
    "saturated": (2.25, 1.381),
    "markers_brightest": (0.34225, 0.4745),
    "distractors": (1.147, 0.9096),
    "no_distractors": (0.259, 0.4381),
    "start_distance": (7.0373, 0.2551),
    "label1": (0.5, 0.5),  # the generator's label draw (draw_label): p = 0.5, as the original's (its sample: 0.5035)
}
#: statistic: sqrt(n) x the standard error of its per-image standard deviation, from the original's fourth moment
SPREAD_SE = {"nonzero": 0.0265, "ink": 6.293, "start_distance": 0.1895}


@pytest.fixture(scope="module")
def suite_statistics():
    return generated_statistics(32, N_SUITE, 2024)


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
