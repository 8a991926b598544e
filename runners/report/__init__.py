"""What a reader sees: the markdown reports and their glance, training progress, projected GPU time, and the
``compare`` command's side-by-side of two runs."""
