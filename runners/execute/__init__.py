"""Running: one spec at one tier (``run_spec``), training cells spread over GPUs, checkpoints packed for transfer."""
