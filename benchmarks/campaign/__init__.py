"""The long-range campaign's tools (README.md in this folder)."""
