"""One-off measurements behind statements in the notes and comments (README.md in this folder): each a module run
from the repository root, ``python -m benchmarks.diagnostics.<name>``; their outputs are in results/diagnostics/."""
