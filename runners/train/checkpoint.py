"""Checkpoint file: written atomically, read with ``torch.load(weights_only=True)``, checked on resume.

Everything in it is a tensor or a plain Python value (dict, list, tuple, str, int, float, bool,
None), so the safe unpickler reads it. Random-number states are stored per process: torch CPU and
CUDA generators as uint8 tensors, numpy's Mersenne Twister as an int64 tensor, Python's as a tuple.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..core.atomic import atomic_path, remove_stale_temps

FORMAT = 1
CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointMismatch(ValueError):
    """The checkpoint in the run directory was made by a different config, model or dataset."""


def save_atomic(obj: dict[str, Any], path: Path) -> None:
    """torch.save to a temporary file in the same directory, fsync, then os.replace; a killed save's temp file
    left there earlier is removed first (:func:`runners.core.atomic.remove_stale_temps`)."""
    remove_stale_temps(Path(path).parent)
    with atomic_path(path, fsync=True) as tmp:
        torch.save(obj, tmp)


def load(path: Path, advice: str = "delete it to start over") -> dict[str, Any]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise CheckpointMismatch(f"{path}: cannot be read as a training checkpoint ({type(e).__name__}: {e}); "
                                 f"{advice}") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointMismatch(f"{path}: not a checkpoint of format {FORMAT}; {advice}")
    return ckpt


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """This process's random-number states as tensors and plain values (CUDA: ``device``'s only)."""
    mt_name, mt_keys, mt_pos, has_gauss, cached = np.random.get_state()
    cuda = device is not None and device.type == "cuda"
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if cuda else None,
        "numpy": {"name": mt_name, "keys": torch.from_numpy(mt_keys.astype(np.int64)), "pos": int(mt_pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def model_shapes(model: nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def check_compatible(ckpt: dict[str, Any], path: Path, *, config: dict[str, Any], resumable: tuple[str, ...],
                     model_config: dict[str, Any] | None, task: dict[str, Any],
                     shapes: dict[str, list[int]], config_defaults: dict[str, Any] | None = None,
                     advice: str = "Use another run directory or delete the checkpoint to start over.") -> None:
    """Raise CheckpointMismatch naming every field where the checkpoint and this run differ. A config field the
    checkpoint lacks (written before the field existed) reads as its default in ``config_defaults``."""
    problems: list[str] = []
    saved = {**{k: v for k, v in (config_defaults or {}).items() if k in config}, **ckpt["config"]}
    for key in sorted(set(saved) | set(config)):
        if key in resumable and not (key == "epochs" and config.get("scheduler") == "cosine"):
            continue
        if saved.get(key) != config.get(key):
            why = " (the cosine schedule's length depends on it)" if key == "epochs" else ""
            problems.append(f"config.{key}: checkpoint {saved.get(key)!r}, now {config.get(key)!r}{why}")
    if config.get("epochs", 0) < ckpt["epoch"]:
        problems.append(f"config.epochs: now {config['epochs']} but the checkpoint already finished {ckpt['epoch']}")
    saved_mc = ckpt.get("model_config")
    if saved_mc != model_config:
        keys = sorted(set(saved_mc or {}) | set(model_config or {}))
        diff = [k for k in keys if (saved_mc or {}).get(k) != (model_config or {}).get(k)]
        for k in diff:
            problems.append(f"model_config.{k}: checkpoint {(saved_mc or {}).get(k)!r}, "
                            f"now {(model_config or {}).get(k)!r}")
    for key in sorted(set(ckpt["task"]) | set(task)):
        if ckpt["task"].get(key) != task.get(key):
            problems.append(f"task.{key}: checkpoint {ckpt['task'].get(key)!r}, now {task.get(key)!r}")
    saved_shapes = ckpt["model_shapes"]
    for name in sorted(set(saved_shapes) | set(shapes)):
        if saved_shapes.get(name) != shapes.get(name):
            problems.append(f"model.{name}: checkpoint shape {saved_shapes.get(name)}, now {shapes.get(name)}")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise CheckpointMismatch(f"{path} was written by a different run; mismatching: " + "; ".join(shown)
                                 + ". " + advice)
