"""Cauchy and Vandermonde products, the computational cores of the S4 and S4D kernels.

Entry points take an explicit ``backend`` ('auto', 'torch', 'triton'; see :mod:`.backend`).
"""
from __future__ import annotations

from torch import Tensor

from .backend import BACKENDS, ENV_VAR, BackendUnavailable, resolve_backend
from .reference import cauchy_torch, log_vandermonde_torch


def cauchy(v: Tensor, z: Tensor, w: Tensor, *, backend: str | None = None) -> Tensor:
    """sum_n v_n / (z_l - w_n) + conj(v_n) / (z_l - conj(w_n)).

    v, w: (B, N) complex (or any leading shape); z: (L,) complex -> (B, L) complex.
    """
    if v.shape != w.shape:
        raise ValueError(f"cauchy: v and w must have the same shape, got {tuple(v.shape)} and {tuple(w.shape)}")
    if z.dim() != 1:
        raise ValueError(f"cauchy: z must be 1-D (L,), got shape {tuple(z.shape)}")
    if resolve_backend(backend, v.device) == "triton":
        from .cauchy_triton import cauchy_triton

        return cauchy_triton(v, z, w)
    return cauchy_torch(v, z, w)


def log_vandermonde(v: Tensor, x: Tensor, length: int, *, backend: str | None = None) -> Tensor:
    """2 Re sum_n v_n exp(x_n l) for l = 0 .. length-1.

    v, x: (B, N) complex (or any leading shape) -> (B, length) real.
    """
    if v.shape != x.shape:
        raise ValueError(f"log_vandermonde: v and x must have the same shape, got {tuple(v.shape)} and {tuple(x.shape)}")
    if length < 1:
        raise ValueError(f"log_vandermonde: length must be >= 1, got {length}")
    if resolve_backend(backend, v.device) == "triton":
        from .vandermonde_triton import log_vandermonde_triton

        return log_vandermonde_triton(v, x, length)
    return log_vandermonde_torch(v, x, length)


__all__ = ["cauchy", "log_vandermonde", "BACKENDS", "ENV_VAR", "BackendUnavailable", "resolve_backend"]
