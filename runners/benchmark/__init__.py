"""Efficiency benchmarks (S4 Tables 2, 3, 7, 8): importing this package registers their runners."""
from . import generation, s4_vs_lssl, vs_transformers  # noqa: F401  (registration side effects)
