"""Long Range Arena data: loaders for the release layout and generators for ListOps and Pathfinder/Path-X.

Loaders (each returns runners.data.base.TaskData; root = data directory, default $DATA_PATH or ./data):
    load_listops, load_imdb (Text), load_aan (Retrieval), load_lra_image (Image),
    load_pathfinder (Pathfinder-32/64/128/256), load_pathx (= Pathfinder-128)
LRA_LOADERS maps the task names of the LRA tables to them. Names are imported on first use, so the
generators (runners.data.lra.generate) start without importing torch.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "load_listops": "runners.data.lra.listops",
    "load_imdb": "runners.data.lra.text",
    "load_aan": "runners.data.lra.retrieval",
    "load_lra_image": "runners.data.lra.image",
    "load_pathfinder": "runners.data.lra.pathfinder",
    "load_pathx": "runners.data.lra.pathfinder",
}
_TASKS = {"listops": "load_listops", "text": "load_imdb", "retrieval": "load_aan", "image": "load_lra_image",
          "pathfinder": "load_pathfinder", "pathx": "load_pathx"}  # pathfinder: resolution 32 by default

__all__ = ["LRA_LOADERS", *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    if name == "LRA_LOADERS":
        return {task: __getattr__(fn) for task, fn in _TASKS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
