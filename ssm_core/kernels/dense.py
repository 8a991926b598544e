"""Dense reference: the SSM convolution kernel of any state matrix by explicit powers (S4D eq. 6).

Used by the tests to check the structured kernels, and by the LSSL baseline. O(N^2 L) work per channel.
"""
from __future__ import annotations

import torch
from torch import Tensor


def discretize_dense(a: Tensor, b: Tensor, dt: Tensor, method: str = "bilinear") -> tuple[Tensor, Tensor]:
    """Discretize x' = A x + B u with step dt (S4D Section 3.1).

    bilinear: dA = (I - dt/2 A)^-1 (I + dt/2 A), dB = (I - dt/2 A)^-1 dt B
    zoh:      dA = exp(dt A),                    dB = (dt A)^-1 (exp(dt A) - I) dt B
    a: (..., N, N), b: (..., N), dt: (...,) -> dA (..., N, N), dB (..., N)
    """
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    dt_ = dt[..., None, None].to(a.dtype)
    if method == "bilinear":
        inv = torch.linalg.inv(eye - dt_ / 2 * a)
        return inv @ (eye + dt_ / 2 * a), (inv @ (dt_[..., 0] * b)[..., None])[..., 0]
    if method == "zoh":
        da = torch.linalg.matrix_exp(dt_ * a)
        db = torch.linalg.solve(a, ((da - eye) @ b[..., None]))[..., 0]
        return da, db
    raise ValueError(f"discretization {method!r} not allowed; choose 'bilinear' or 'zoh'")


def dense_kernel(a: Tensor, b: Tensor, c: Tensor, dt: Tensor, length: int, method: str = "bilinear") -> Tensor:
    """K_l = C dA^l dB for l < length (S4D eq. 6), by repeated multiplication.

    a: (H, N, N), b: (H, N), c: (..., H, N), dt: (H,) -> (..., H, length); real part if inputs are complex.
    """
    da, db = discretize_dense(a, b, dt, method)
    out = []
    x = db  # (H, N): dA^l dB
    for _ in range(length):
        out.append((c * x).sum(-1))
        x = (da @ x[..., None])[..., 0]
    k = torch.stack(out, dim=-1)
    return k.real if k.is_complex() else k
