"""Results files: writing them (one per run, never overwritten) and reading them back, checked."""
