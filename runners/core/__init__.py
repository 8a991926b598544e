"""Below every stage: errors and exit codes, where runs and results live, machine provenance, atomic writes, the
lock, YAML reading, number formatting. Imports nothing else of runners."""
