"""The errors every stage shares and the command line's exit status for each.

A stage raises these; the command line (runners/cli/) turns each into one line and an exit status:

    SpecError    bad input (a spec, expected, results or data file, a setting): the message names the file and
                 the key and what is allowed                                                        -> EXIT_BAD_INPUT
    NotRunnable  this tier cannot run here (no GPU, no data): the message says why and what would run it
                                                                                                    -> EXIT_NOT_RUNNABLE
    Paused       a deadline (``run --stop-after-minutes``) stopped a runner; the same command resumes -> EXIT_PAUSED
"""
from __future__ import annotations

#: exit status: done (check / compare: nothing failed)
EXIT_OK = 0
#: a FAIL (check: a verdict; compare: a regression; run --gpus: a training cell's process failed)
EXIT_FAIL = 1
#: bad input (a spec, expected, results or data file, a setting) or an unexpected error
EXIT_BAD_INPUT = 2
#: cannot run here (no GPU or no data: NOT-RUN with the reason)
EXIT_NOT_RUNNABLE = 3
#: a child (or the whole run) stopped at its deadline; the same command resumes it
EXIT_PAUSED = 4
#: a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130


class SpecError(ValueError):
    """A spec or expected file is invalid: the message names the file, the key and what is allowed."""


class NotRunnable(RuntimeError):
    """This tier cannot run here (no GPU, no data): the message says why and what would run it."""


class Paused(RuntimeError):
    """A deadline (``run --stop-after-minutes``) stopped a runner before every selected cell finished. Its state is
    checkpointed and the same command resumes it; ``cells`` says where each unfinished cell stands."""

    def __init__(self, cells: list[str]) -> None:
        super().__init__("; ".join(cells))
        self.cells = cells
