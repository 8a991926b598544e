"""Registries by name: one :class:`Registry` (lm-evaluation-harness's pattern) holds the runners, another the plots;
runners/data/registry.py holds the datasets' loaders and preparers in two more.

A runner turns one tier's config into measured cells. It is registered with the dataclass that describes its
config; the spec loader builds that dataclass from the tier's YAML mapping and reports unknown keys or wrong types
with the file and key (runners/specs/spec.py). A plot draws a results file's ``series``.

    @register("analytic.theorem3", config=Theorem3Config, kind="analytic", cells=theorem3_cells)
    def run_theorem3(cfg: Theorem3Config, ctx: RunContext) -> RunOutput: ...

``cells`` (optional) maps a config to the (row, column) cells the runner can produce with it, so that
``runners validate`` finds expected cells a spec can never produce before anything runs.
"""
from __future__ import annotations

import dataclasses
import importlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator, MutableMapping
from typing import Any, Callable, Generic, Optional, TypeVar, Union

import torch
from tqdm.auto import tqdm

T = TypeVar("T")


class Registry(MutableMapping[str, T], Generic[T]):
    """Names -> objects of one ``kind`` (runner, plot, loader, ...), a mapping in the order of registration.

    :meth:`register` adds a name once (a second registration of it is an error), directly or as a decorator;
    :meth:`register_lazy` adds ``"module:attribute"``, imported when the name is first looked up, so that listing or
    checking names does not import the modules behind them. Setting an item replaces it (a test's stand-in).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._lazy: dict[str, str] = {}

    def register(self, name: str, obj: Any = None) -> Any:
        """``registry.register(name, obj)``, or ``@registry.register(name)`` above the object."""
        if obj is None:
            return lambda target: self.register(name, target)
        if name in self:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = obj
        return obj

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``name`` as ``target`` ("package.module:attribute"), imported on first lookup."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        module, sep, attribute = target.partition(":")
        if not (sep and module and attribute):
            raise ValueError(f"{self.kind} {name!r}: {target!r} is not 'module:attribute'")
        self._entries[name] = None
        self._lazy[name] = target

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise KeyError(name)
        if name in self._lazy:
            module, _, attribute = self._lazy.pop(name).partition(":")
            self._entries[name] = getattr(importlib.import_module(module), attribute)
        return self._entries[name]

    def __setitem__(self, name: str, obj: T) -> None:
        self._lazy.pop(name, None)
        self._entries[name] = obj

    def __delitem__(self, name: str) -> None:
        self._lazy.pop(name, None)
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"


#: A measured value: a number, the string "X" (failed / out of memory, as in the papers), or None (not measured).
Value = Union[float, int, str, None]

RUNNER_KINDS = ("analytic", "benchmark", "train")


@dataclass
class Cell:
    """One measured table cell. ``row`` and ``column`` match the names in expected/<table>.yaml."""

    row: str
    column: str
    value: Value
    unit: str | None = None
    note: str | None = None  # e.g. why a value is "X" ("CUDA out of memory at batch 32")


@dataclass
class RunContext:
    """What the framework hands a runner besides its config."""

    spec_id: str
    tier: str
    device: torch.device
    seed: int
    work_dir: Path  # scratch space for this run (checkpoints, caches); created by the framework
    data_dir: Path  # $DATA_PATH, default ./data
    progress: bool = True  # show tqdm bars
    #: the (row, column) cells this run should produce (``run --cells`` / ``--data``); None: every cell. A runner
    #: whose cells are expensive (training) skips the work of unselected cells; the framework drops the rest.
    selected: frozenset[tuple[str, str]] | None = None
    #: time.time() after which a training runner checkpoints and stops (``run --stop-after-minutes``); None: never
    deadline: float | None = None
    #: train only these (row, task) units of a training table (one child process of ``run --gpus``); None: all
    units: frozenset[tuple[str, str]] | None = None
    logs: tuple[str, ...] = ()  # extra training logs beside metrics.jsonl ("tensorboard"; runners/train/tb_log.py)
    _started: dict[str, tuple[float, int]] = field(default_factory=dict, repr=False, init=False)

    def wants(self, row: str, columns: list[str]) -> bool:
        """Whether any of ``row``'s ``columns`` is selected."""
        return self.selected is None or any((row, c) in self.selected for c in columns)

    def cell_started(self, label: str, cells: list[Cell]) -> None:
        """Call when the work of a cell (or of cells computed together, ``label`` naming them) starts; ``cells``:
        the runner's list of cells so far. Prints one line, so that a log says which cell is running."""
        self._started[label] = (time.perf_counter(), len(cells))
        _say(f"[{self.spec_id} {self.tier}] {label}: started")

    def cell_finished(self, label: str, cells: list[Cell], outcome: str | None = None) -> None:
        """Call when that work is done: one line with the cells it added to ``cells`` and the time it took (or,
        given, the ``outcome`` of work that did not finish, e.g. "paused at the deadline")."""
        t0, n0 = self._started.pop(label, (time.perf_counter(), len(cells)))
        seconds = time.perf_counter() - t0
        if outcome is not None:
            _say(f"[{self.spec_id} {self.tier}] {label}: {outcome} after {seconds:.1f} s")
            return
        done = ", ".join(_cell_text(c, label) for c in cells[n0:]) or "no cell"
        _say(f"[{self.spec_id} {self.tier}] {label}: done in {seconds:.1f} s: {done}")


def _say(line: str) -> None:
    tqdm.write(line, file=sys.stdout)  # above any progress bar
    sys.stdout.flush()


def _cell_text(cell: Cell, label: str) -> str:
    value = f"{cell.value:.4g}" if isinstance(cell.value, float) else str(cell.value)
    name = f"{cell.row} / {cell.column}"
    return value if name == label else f"{name} = {value}"


@dataclass
class RunOutput:
    """What a runner returns; the framework wraps it into the results JSON."""

    cells: list[Cell]
    series: dict[str, Any] = field(default_factory=dict)  # JSON-able data for plots and curves
    notes: list[str] = field(default_factory=list)
    #: one line each: what kept cells from running (a data loader's error); printed and shown in the report
    problems: list[str] = field(default_factory=list)
    #: per dataset loaded: its splits' sizes and a digest of its files (runners.data.cache.data_manifest)
    data: dict[str, Any] = field(default_factory=dict)


#: a config -> every (row, column) the runner can produce with it
CellsFn = Callable[[Any], set[tuple[str, str]]]


@dataclass(frozen=True)
class RunnerEntry:
    name: str
    kind: str
    config: type
    fn: Callable[[Any, RunContext], RunOutput]
    cells: CellsFn | None = None  # None: the runner cannot tell its cells before it runs


RUNNERS: Registry[RunnerEntry] = Registry("runner")

#: Modules that register runners when imported (kept explicit so `runners list` is complete).
RUNNER_MODULES = (
    "runners.analytic",
    "runners.benchmark",
    "runners.train.table",
    "runners.train.plots",
)


def register(name: str, *, config: type, kind: str, cells: CellsFn | None = None) -> Callable:
    """``@register("analytic.theorem3", config=Theorem3Config, kind="analytic")`` above the runner function."""
    if kind not in RUNNER_KINDS:
        raise ValueError(f"runner {name!r}: kind {kind!r} not in {RUNNER_KINDS}")
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"runner {name!r}: config must be a dataclass, got {config!r}")

    def wrap(fn: Callable[[Any, RunContext], RunOutput]) -> Callable[[Any, RunContext], RunOutput]:
        RUNNERS.register(name, RunnerEntry(name, kind, config, fn, cells))
        return fn

    return wrap


def load_all() -> Registry[RunnerEntry]:
    """Every runner: the modules of :data:`RUNNER_MODULES` imported (they register theirs)."""
    for module in RUNNER_MODULES:
        importlib.import_module(module)
    return RUNNERS


def get(name: str) -> RunnerEntry:
    """The runner registered as ``name`` (KeyError if none is)."""
    load_all()
    return RUNNERS[name]


# ---------------------------------------------------------------------------------------------------------- plots
#: A plot: ``fn(result, path, expected)``. ``result`` is the whole results JSON, ``expected`` the table's expected
#: file (for the paper's values); the function writes a PNG at ``path``. A spec names plots; the report draws them.
PlotFn = Callable[[dict, Path, Optional[dict]], None]
PLOTS: Registry[PlotFn] = Registry("plot")


def register_plot(name: str) -> Callable[[PlotFn], PlotFn]:
    """``@register_plot("theorem3_basis")`` above ``def plot(result, path, expected=None) -> None``."""
    return PLOTS.register(name)
