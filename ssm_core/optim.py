"""Optimizer parameter groups: SSM parameters at their own learning rate, no decay on biases and norms.

S4 Appendix D.2: "the learning rate on HiPPO parameters (in particular A, P, Q, B, C, Delta) were
reduced to a maximum starting LR of 0.001", and S4D Appendix B: those parameters get no weight
decay. A layer marks such a parameter with a plain Python attribute on the ``nn.Parameter``::

    self.log_dt = nn.Parameter(log_dt)
    self.log_dt._optim = {"lr": 0.001, "weight_decay": 0.0}

:func:`param_groups` puts every marked parameter into a group with its settings (keys a marking
leaves out fall back to the global values); every other parameter gets the global learning rate,
with weight decay except for 1-D parameters (biases, normalization weights), as in nanoGPT, unless
``decay_1d`` (the authors' code decays them too; the papers give one weight decay and no exceptions).

A learning-rate schedule must scale every group by the same factor, so the SSM group keeps its
ratio to the global rate (the official code does the same); see ``runners/train/schedule.py``.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

#: Keys a parameter's ``_optim`` dict may set.
OPTIM_KEYS = ("lr", "weight_decay")
#: Names :func:`build_optimizer` accepts.
OPTIMIZERS = ("adamw", "adam", "sgd")


def _check_optim(name: str, optim: Any) -> dict[str, float]:
    if not isinstance(optim, dict):
        raise ValueError(f"parameter {name!r}: _optim must be a dict with keys from {OPTIM_KEYS}, "
                         f"got {type(optim).__name__}")
    unknown = sorted(set(optim) - set(OPTIM_KEYS))
    if unknown:
        raise ValueError(f"parameter {name!r}: unknown _optim keys {unknown}; allowed: {list(OPTIM_KEYS)}")
    for key, value in optim.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"parameter {name!r}: _optim[{key!r}] must be a number >= 0, got {value!r}")
    return {k: float(v) for k, v in optim.items()}


def param_groups(model: nn.Module, lr: float, weight_decay: float, decay_1d: bool = False) -> list[dict]:
    """Parameter groups for ``torch.optim.AdamW`` (each group carries a ``name`` for logs).

    Order: "decay" (>= 2-D, global lr and weight decay), "no_decay" (1-D: biases and norm weights,
    global lr, weight decay 0), then one group per distinct ``_optim`` setting in order of first
    appearance. ``decay_1d``: the 1-D parameters go to "decay" too (the authors' code decays every parameter
    but the marked SSM ones). Empty groups are left out; frozen parameters (requires_grad False) are skipped.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    marked: dict[tuple, list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        optim = getattr(p, "_optim", None)
        if optim is not None:
            settings = {"lr": float(lr), "weight_decay": float(weight_decay), **_check_optim(name, optim)}
            marked.setdefault(tuple(sorted(settings.items())), []).append(p)
        elif p.ndim < 2 and not decay_1d:
            no_decay.append(p)
        else:
            decay.append(p)

    groups = []
    if decay:
        groups.append({"name": "decay", "params": decay, "lr": float(lr), "weight_decay": float(weight_decay)})
    if no_decay:
        groups.append({"name": "no_decay", "params": no_decay, "lr": float(lr), "weight_decay": 0.0})
    for key, params in marked.items():
        settings = dict(key)
        label = ", ".join(f"{k}={v:g}" for k, v in key)
        groups.append({"name": f"marked({label})", "params": params, **settings})
    return groups


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float,
                    betas: tuple[float, float] = (0.9, 0.999), decay_1d: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``name`` ("adamw", "adam", "sgd") over :func:`param_groups` (``decay_1d`` passed on).

    For "sgd", ``betas[0]`` is the momentum. For "adam", weight decay is the L2 penalty of
    ``torch.optim.Adam``; for "adamw" it is decoupled (the papers use AdamW).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r} is not known; allowed: {list(OPTIMIZERS)}")
    groups = param_groups(model, lr, weight_decay, decay_1d)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    return torch.optim.SGD(groups, lr=lr, momentum=betas[0], weight_decay=weight_decay)
