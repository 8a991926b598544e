"""Parameter plumbing shared by the diagonal and DPLR kernels: step sizes, the real part of A, complex storage."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

REAL_TRANSFORMS = ("exp", "relu", "none")
DISCRETIZATIONS = ("bilinear", "zoh")


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of: {', '.join(allowed)}")
    return value


def init_log_dt(h: int, dt_min: float, dt_max: float, generator: torch.Generator | None = None) -> Tensor:
    """log(dt) geometrically uniform in [dt_min, dt_max] (S4D Listing 1, first line). -> (H,)"""
    if not 0 < dt_min <= dt_max:
        raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
    u = torch.rand(h, generator=generator, dtype=torch.float64)
    return u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)


def real_param_from(real: Tensor, transform: str) -> Tensor:
    """Inverse of :func:`real_part`: the stored parameter whose transform gives Re(A) = real (< 0)."""
    if transform == "exp":
        return torch.log(-real)  # Re(A) = -exp(p)  (S4D Section 3.3)
    if transform == "relu":
        return -real  # Re(A) = -relu(p)
    return real  # unconstrained (DSS)


def real_part(param: Tensor, transform: str) -> Tensor:
    """Re(A) from its stored parameter: -exp(p), -relu(p), or p itself (S4D Section 3.3, Table 2 right)."""
    if transform == "exp":
        return -torch.exp(param)
    if transform == "relu":
        return -torch.relu(param)
    return param


def register(module: nn.Module, name: str, value: Tensor, trainable: bool, lr: float | None) -> None:
    """Register ``value`` as a parameter carrying its optimizer settings (S4 Appendix D.2), or as a buffer.

    Complex tensors are stored as real views (..., 2) so every optimizer handles them.
    """
    if value.is_complex():
        value = torch.view_as_real(value)
    if trainable:
        param = nn.Parameter(value.contiguous())
        if lr is not None:
            param._optim = {"lr": lr, "weight_decay": 0.0}
        module.register_parameter(name, param)
    else:
        module.register_buffer(name, value.contiguous())


def as_complex(t: Tensor) -> Tensor:
    return torch.view_as_complex(t)
