"""What a run's data loading came to, and the exit status it gives the run.

A training table records a task whose data could not be loaded as not run (null cells with the loader's one-line
reason) and goes on with the other tasks. The kind of problem travels with the run's ``problems`` line
(:class:`DataProblem`) and decides, once the results file is written, how the run ends
(:func:`raise_for_data_problems`):

- data that is not there (:class:`runners.data.base.DataMissing`): ``NotRunnable``, exit 3 ("cannot run here");
  the message names the results file written and what to fetch;
- data that is there but malformed (any other :class:`runners.data.base.DatasetError`): :class:`DataFileError`,
  a ``SpecError`` (bad input, exit 2), one line naming the data file (and line or key where known).

Where both happen in one run, bad input wins: :class:`DataFileError`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from runners.core.errors import NotRunnable, SpecError
from runners.data.base import DataMissing, DatasetError, one_line

MISSING, MALFORMED = "missing", "malformed"


class DataFileError(SpecError):
    """A dataset file is present but malformed: bad input (exit 2). ``results_path``: the results file written with
    the other cells (None when none was written)."""

    def __init__(self, message: str, results_path: Optional[Path] = None) -> None:
        super().__init__(message)
        self.results_path = results_path


class DataProblem(str):
    """One line of a run's ``problems`` (a plain string in the results file) that also carries the task ``column``,
    the ``kind`` of problem (:data:`MISSING` or :data:`MALFORMED`) and the loader's one-line ``reason``."""

    column: str
    kind: str
    reason: str

    def __new__(cls, column: str, kind: str, reason: str) -> "DataProblem":
        if kind not in (MISSING, MALFORMED):
            raise ValueError(f"DataProblem kind {kind!r} not allowed; allowed: {MISSING!r}, {MALFORMED!r}")
        line = super().__new__(cls, f"{column}: NOT-RUN, data {kind}: {reason}")
        line.column, line.kind, line.reason = column, kind, reason
        return line


def data_problem(column: str, exc: DatasetError) -> DataProblem:
    """The problem of task ``column`` whose loader raised ``exc``: missing for :class:`DataMissing`, else malformed."""
    kind = MISSING if isinstance(exc, DataMissing) else MALFORMED
    return DataProblem(column, kind, one_line(exc, limit=2000))


def _columns(problems: list[DataProblem]) -> str:
    """The task columns of ``problems``, comma-separated."""
    return ", ".join(p.column for p in problems)


def raise_for_data_problems(problems: Iterable[str], results_path: Optional[Path], run_name: str,
                            command: str) -> None:
    """Raise for the data problems among a run's ``problems``, once its results file (``results_path``) is written.

    ``run_name`` names the run ("<spec id> tier '<tier>'"), ``command`` the command that runs it again. Malformed data
    raises :class:`DataFileError` (exit 2) naming the first malformed file; else missing data raises
    ``runners.core.errors.NotRunnable`` (exit 3) with every missing task's reason (what to fetch and where). Nothing is
    raised when no line is a :class:`DataProblem`."""
    found = [p for p in problems if isinstance(p, DataProblem)]
    malformed = [p for p in found if p.kind == MALFORMED]
    missing = [p for p in found if p.kind == MISSING]
    written = (f"results file {results_path} written with the cells of {_columns(found)} not run" if results_path
               else "no results file written")
    if malformed:
        first = malformed[0]
        also = (f"; also malformed: {_columns(malformed[1:])}" if len(malformed) > 1 else "") \
            + (f"; data also missing for {_columns(missing)}" if missing else "")
        raise DataFileError(f"{first.reason.rstrip('.')} (task {first.column} of {run_name}: data malformed"
                            f"{also}; {written})", results_path)
    if missing:
        reasons = " | ".join(f"{p.column}: {p.reason.rstrip('.')}" for p in missing)
        exc = NotRunnable(f"{run_name}: data missing: {reasons}. The {written}. Then: {command}")
        exc.results_path = results_path  # type: ignore[attr-defined]
        raise exc
