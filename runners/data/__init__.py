"""The datasets of the training tables: loaders of each published on-disk layout, the suite's generators and
stand-ins, the download step, and what a run's data loading came to (status)."""
