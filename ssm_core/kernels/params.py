"""Parameter plumbing shared by the diagonal and DPLR kernels: step sizes, the real part of A, complex storage."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

REAL_TRANSFORMS = ("exp", "relu", "none")
DISCRETIZATIONS = ("bilinear", "zoh")
#: SSM parameter groups a per-group learning rate names: the step size, the state matrix (Re and Im of A; P of the
#: DPLR form), the input matrix (the authors' code's keys)
LR_GROUPS = ("dt", "A", "B")


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


def check_lr(lr: float | dict | None) -> None:
    """ValueError unless ``lr`` is a learning rate > 0, None, or a dict giving each of LR_GROUPS one (or None)."""
    def ok(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
    if lr is None or ok(lr):
        return
    if isinstance(lr, dict) and set(lr) == set(LR_GROUPS) and all(v is None or ok(v) for v in lr.values()):
        return
    raise ValueError(f"lr={lr!r} is not allowed; expected a learning rate > 0 for the SSM parameters, None (the "
                     f"optimizer's settings), or a dict with keys {', '.join(LR_GROUPS)}, each a learning rate > 0 "
                     f"or None (the global learning rate), e.g. {{dt: null, A: 0.001, B: 0.001}}")


def optim_of(lr: float | dict | None, group: str) -> dict | None:
    """The optimizer settings (``_optim``, see ssm_core.optim) of an SSM parameter of ``group`` (one of LR_GROUPS).

    ``lr`` a number: that learning rate and no weight decay, for every group (S4 Appendix D.2: the HiPPO
    parameters A, P, Q, B, C, Delta at a reduced learning rate; S4D Appendix B: no weight decay on them). None:
    unmarked (the optimizer's own settings). A dict: per group, its learning rate, or None for the global one,
    still without weight decay (the form of the authors' configurations, e.g. {dt: None, A: 0.001, B: 0.001}).
    """
    if lr is None:
        return None
    rate = lr[group] if isinstance(lr, dict) else lr
    return {"weight_decay": 0.0} if rate is None else {"lr": float(rate), "weight_decay": 0.0}


def register(module: nn.Module, name: str, value: Tensor, trainable: bool, optim: dict | None) -> None:
    """Register ``value`` as a parameter carrying its optimizer settings ``optim`` (:func:`optim_of`; None:
    unmarked), or as a buffer. Complex tensors are stored as real views (..., 2) so every optimizer handles them.
    """
    if value.is_complex():
        value = torch.view_as_real(value)
    if trainable:
        param = nn.Parameter(value.contiguous())
        if optim is not None:
            param._optim = dict(optim)
        module.register_parameter(name, param)
    else:
        module.register_buffer(name, value.contiguous())


def as_complex(t: Tensor) -> Tensor:
    return torch.view_as_complex(t)
