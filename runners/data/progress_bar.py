"""Progress of long data work (generation, downloads, decoding) with an estimate of the time left.

On a terminal (and when progress is on) a tqdm bar, which shows the rate and the time left. Otherwise -- a log
file, ``run --no-progress`` -- one line at each tenth of the work once it has taken a few seconds, e.g.
``listops: 30% (28800/96000 expr) in 1m12s, about 2m48s left``, so that a log still says how far it is.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Optional

from tqdm.auto import tqdm


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class LineProgress:
    """The tqdm calls the suite uses (update, close, context manager), written as a line per tenth of ``total``."""

    def __init__(self, total: Optional[int], desc: str, unit: str, steps: int = 10, quiet_seconds: float = 5.0) -> None:
        self.total, self.desc, self.unit, self.steps = total, desc, unit, steps
        self.quiet_seconds = quiet_seconds  # work shorter than this prints nothing
        self.n, self.t0, self.next_step = 0, time.perf_counter(), 1

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.total:
            return
        crossed = False  # an update that crosses several tenths at once prints one line
        while self.next_step <= self.steps and self.n * self.steps >= self.next_step * self.total:
            self.next_step, crossed = self.next_step + 1, True
        elapsed = time.perf_counter() - self.t0
        if crossed and elapsed >= self.quiet_seconds:
            left = elapsed * (self.total - self.n) / self.n if self.n else 0.0
            tail = f", about {_clock(left)} left" if self.n < self.total else ""
            print(f"{self.desc}: {100 * self.n // self.total}% ({self.n}/{self.total} {self.unit}) in "
                  f"{_clock(elapsed)}{tail}", file=sys.stderr, flush=True)

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_bar(total: Optional[int], desc: str, unit: str, show: Optional[bool] = None, **tqdm_kwargs: Any) -> Any:
    """A tqdm bar when ``show`` (None: when stderr is a terminal), else a :class:`LineProgress`."""
    if show is None:
        show = sys.stderr.isatty()
    if show:
        return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, **tqdm_kwargs)
    return LineProgress(total, desc, unit)
