"""The setting a cell was measured at, held to the setting today's spec gives it: the same, another seed, or stale.

A results file records the tier's whole resolved configuration (``config``, the runner's dataclass as a dict) and the
seed (``seed``). What computes one cell is a part of it: for a training table, the (row, task) pair that trains it --
the architecture, the row's model and train settings merged as the runner merges them, the task's data settings, the
seed, the reported metrics, and for a delta row its base row's setting; for other runners, the whole configuration.
:func:`cell_setting` takes that part of a file's configuration, and :func:`differences` holds it to the part today's
spec gives the same cell (:func:`runners.specs.selection.tier_config` of the spec as it is now, for the file's data
variant), after dropping the keys that cannot change what is computed (:data:`NON_COMPUTING`).

- equal, seed included: the same setting, the same seed;
- equal but for the seed: another seed of the same setting (judged together: :mod:`runners.judge.verdicts`);
- otherwise STALE: the file measured another setting (an edited spec since, an override, an edited file); it is
  shown, with the keys that differ, never judged as today's setting.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

from ..core.errors import SpecError

#: keys of a training cell's setting that cannot change what is computed, with why: dropped before settings are
#: compared (tests/test_settings_non_computing.py trains a cell with each changed and gets the same history)
NON_COMPUTING: dict[str, str] = {
    "train.checkpoint_every_steps": "how often a checkpoint is written (a resumed run continues the same stream)",
    "train.log_every_steps": "how often steps.jsonl gets a line",
    "train.num_workers": "data-loader processes (the same batches in the same order)",
    "train.device_data": "where the training set lives in memory (the same batches gathered on the device)",
    "task.loader_args.workers": "threads that decode the data files",
    "task.prepare.workers": "processes that generate the data (each batch from its own seed)",
    "train.chance_stop_epoch": "when a run still at chance stops; a run that left chance computes the same, and a "
                               "stopped one records stop: at_chance",
}

Setting = dict[str, Any]


def _drop(tree: Setting, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.get(key) if isinstance(tree, dict) else None
        if not isinstance(tree, dict):
            return
    tree.pop(leaf, None)


def _computing(setting: Setting) -> Setting:
    out = json.loads(json.dumps(setting, default=str))  # a deep copy in JSON's types (tuples read as lists)
    for dotted in NON_COMPUTING:
        _drop(out, dotted)
    return out


def _training_unit(config: dict[str, Any], row: str, column: str) -> tuple[str, str] | None:
    """The (model row, task) of a training table whose cells include (row, column), or None."""
    from ..train.table import TrainTableConfig, unit_cells

    cfg = TrainTableConfig(**config)
    for model in cfg.models:
        for task in cfg.tasks:
            if (row, column) in unit_cells(cfg, model, task):
                return model, task
    return None


def _unit_setting(config: dict[str, Any], model: str, task: str, seed: Any) -> Setting:
    from ..train.table import TrainTableConfig

    cfg = TrainTableConfig(**config)
    train = dict(cfg.cell_train(model, task))
    cell_seed = train.pop("seed", seed)  # the cell's own seed, else the run's (as the runner seeds it)
    data = {k: v for k, v in cfg.tasks[task].items() if k not in ("columns", "model", "train")}
    return {"arch": cfg.models[model]["arch"], "model": cfg.cell_model(model, task), "train": train, "task": data,
            "metrics": list(cfg.metrics), "seed": cell_seed}


def cell_setting(runner: str, config: dict[str, Any], seed: Any, row: str, column: str) -> Setting | None:
    """What computes cell (row, column) in a file of ``runner`` with this ``config`` and ``seed``; None where the
    configuration does not produce the cell. ValueError/TypeError where the configuration is not one that today's
    runner reads (a file from before a change of its schema)."""
    if runner != "train.table":
        return {"config": config, "seed": seed}
    unit = _training_unit(config, row, column)
    if unit is None:
        return None
    setting = _unit_setting(config, *unit, seed)
    deltas = config.get("deltas") or {}
    if unit[0] in deltas:
        setting["delta_base"] = _unit_setting(config, deltas[unit[0]], unit[1], seed)
    return setting


def differences(recorded: Setting, today: Setting, *, ignore_seed: bool = False) -> list[str]:
    """The dotted keys whose values differ between two cell settings (keys of NON_COMPUTING left out), each as
    "key: recorded -> today"; [] when they are the same."""
    a, b = _computing(recorded), _computing(today)
    if ignore_seed:
        a.pop("seed", None), b.pop("seed", None)
    out: list[str] = []

    def walk(x: Any, y: Any, at: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y), key=str):
                walk(x.get(key, _MISSING), y.get(key, _MISSING), f"{at}.{key}" if at else str(key))
        elif x != y:
            out.append(f"{at}: {_show(x)} -> {_show(y)}")

    walk(a, b, "")
    return out


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


_MISSING = _Missing()


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, _Missing) else json.dumps(value)


def today_settings(spec: Any, tier: str) -> Callable[[str], dict[str, Any] | None]:
    """data variant ("release" / "suite") -> today's configuration of ``spec``'s tier for it, as a results file
    records it (None where the tier has no such variant)."""
    from ..specs.selection import tier_config

    cache: dict[str, dict[str, Any] | None] = {}

    def of(data: str) -> dict[str, Any] | None:
        if data not in cache:
            try:
                cache[data] = dataclasses.asdict(tier_config(spec, tier, data))
            except SpecError:  # no such data variant at this tier: nothing is today's
                cache[data] = None
        return cache[data]

    return of


@dataclasses.dataclass
class Today:
    """Today's setting of a spec's tier, to hold a results file's cells to: the runner, the tier's seed and its
    configuration per data variant (:func:`today_settings`)."""

    runner: str
    seed: Any
    config_of: Callable[[str], dict[str, Any] | None]

    @classmethod
    def of_spec(cls, spec: Any, tier: str) -> "Today":
        return cls(spec.runner, spec.tiers[tier].seed, today_settings(spec, tier))

    def gap(self, doc: dict[str, Any], row: str, column: str) -> list[str] | None:
        """How the setting at which ``doc`` measured cell (row, column) differs from today's, seed apart: [] when
        it is today's, a list of "key: recorded -> today" when it is not, None when today's spec no longer
        produces the cell."""
        today = self.config_of(doc.get("data") or "release")
        if today is None:
            return [f"data: {doc.get('data')!r} -> (no such variant at this tier today)"]
        try:
            now = cell_setting(self.runner, today, self.seed, row, column)
        except (TypeError, ValueError, KeyError):
            return None
        if now is None:
            return None
        if doc.get("runner") != self.runner:
            return [f"runner: {doc.get('runner')!r} -> {self.runner!r}"]
        try:
            recorded = cell_setting(doc["runner"], doc.get("config") or {}, doc.get("seed"), row, column)
        except (TypeError, ValueError, KeyError) as exc:
            return [f"config: not a configuration today's runner reads ({' '.join(str(exc).split())[:200]})"]
        if recorded is None:
            return ["config: does not produce this cell"]
        return differences(recorded, now, ignore_seed=True)

    def seed_of(self, doc: dict[str, Any], row: str, column: str) -> Any:
        """The seed cell (row, column) of ``doc`` was measured with."""
        try:
            recorded = cell_setting(doc["runner"], doc.get("config") or {}, doc.get("seed"), row, column)
        except (TypeError, ValueError, KeyError):
            return doc.get("seed")
        return (recorded or {}).get("seed", doc.get("seed"))
