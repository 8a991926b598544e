"""The S4D paper's analytic results (Theorem 3 / Fig. 2, Conjecture 5 / Fig. 3, Theorem 6, Fig. 4,
Proposition 1): importing this package registers their runners and plots (drawn with matplotlib's Agg backend:
files, no display)."""
import matplotlib

matplotlib.use("Agg")

from . import conjecture5, figure4, proposition1, theorem3, theorem6  # noqa: E402,F401  (registration side effects)
