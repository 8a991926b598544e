"""What a run is asked to do: specs with their includes and overrides, expected files, the selection of cells,
the registries of runners and plots, and the schemas of every setting."""
