"""The command line, one module per command group; ``runners/__main__.py`` only starts :func:`main.main`."""
