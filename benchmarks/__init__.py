"""The suite's measuring tools beside the tables: kernel and layer benchmarks, diagnostics, the long-range campaign.
Run each from the repository root with ``python -m benchmarks.<module>``."""
