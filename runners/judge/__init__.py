"""Verdicts: each expected cell judged against the results that measured it, repeats of a cell, and the checks of
specs and expected files together."""
