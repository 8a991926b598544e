"""Fused recurrent steps: one Triton program updates a block of (batch, feature) states and reduces them to the
outputs, so each step reads and writes every state once (the torch step makes one pass per operation).

- :func:`diag_step`: the diagonal recurrence whose convolution kernel is S4D eq. (6)-(7):
  x_t = dA x_{t-1} + dB u_t, y_t = 2 Re(C x_t), per mode n (x holds one mode of each conjugate pair, so the
  output is twice the real part of the sum over them, S4D Section 3.3).
- :func:`dplr_step`: S4's bilinear step with the state matrix A = Lambda - P P^*, rank 1 (S4 Theorem 3, App. C.2):
  x_t = A1 (A0 x_{t-1} + dt B u_t), A0 = I + dt/2 A, A1 = (I - dt/2 A)^-1 applied by Woodbury,
  A1 z = D z - D P (1 + dt/2 P^* D P)^-1 dt/2 P^* D z with D = (I - dt/2 Lambda)^-1; y_t = Re(C x_t); the state
  holds one mode of each conjugate pair, as the layers' step does.

Both write the new state over ``x`` (``out=x``) or into ``out``; complex64 computes in float32, complex128 in
float64. Inputs are checked here; the callers (the kernels' ``step``) choose this path for the 'triton' backend.
"""
from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor

FEATURE_ELEMENTS = 1024  # features x padded modes whose parameters one program holds (4 warps)
BATCH_PER_PROGRAM = 16  # batch rows one program steps with those parameters (read once, not once per row)


def _block_n(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


@triton.jit
def _diag_step_kernel(x_ptr, out_ptr, u_ptr, da_ptr, db_ptr, c_ptr, y_ptr, B, H, N, C,
                      BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BATCH: tl.constexpr):
    h = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    n = tl.arange(0, BLOCK_N)
    hmask = h < H
    pmask = hmask[:, None] & (n < N)[None, :]
    ps = h[:, None] * (2 * N) + 2 * n[None, :]  # dA, dB (H, N) complex as (re, im) pairs
    ar = tl.load(da_ptr + ps, mask=pmask, other=0.0)
    ai = tl.load(da_ptr + ps + 1, mask=pmask, other=0.0)
    br = tl.load(db_ptr + ps, mask=pmask, other=0.0)
    bi = tl.load(db_ptr + ps + 1, mask=pmask, other=0.0)
    for i in range(BATCH):
        b = tl.program_id(1) * BATCH + i
        rmask = hmask & (b < B)
        mask = pmask & (b < B)
        xs = b * (H * 2 * N) + ps  # x (B, H, N)
        xr = tl.load(x_ptr + xs, mask=mask, other=0.0)
        xi = tl.load(x_ptr + xs + 1, mask=mask, other=0.0)
        u = tl.load(u_ptr + b * H + h, mask=rmask, other=0.0).to(xr.dtype)[:, None]  # u (B, H)
        nr = ar * xr - ai * xi + br * u
        ni = ar * xi + ai * xr + bi * u
        tl.store(out_ptr + xs, nr, mask=mask)
        tl.store(out_ptr + xs + 1, ni, mask=mask)
        for ch in range(C):  # y (B, C, H) = 2 Re sum_n C x
            cs = ch * (H * 2 * N) + ps
            cr = tl.load(c_ptr + cs, mask=pmask, other=0.0)
            ci = tl.load(c_ptr + cs + 1, mask=pmask, other=0.0)
            tl.store(y_ptr + (b * C + ch) * H + h, 2 * tl.sum(cr * nr - ci * ni, axis=1), mask=rmask)


@triton.jit
def _dplr_step_kernel(x_ptr, out_ptr, u_ptr, lam_ptr, p_ptr, d_ptr, b_ptr, c_ptr, half_ptr, inner_ptr, y_ptr,
                      B, H, N, C, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BATCH: tl.constexpr):
    h = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    n = tl.arange(0, BLOCK_N)
    hmask = h < H
    pmask = hmask[:, None] & (n < N)[None, :]
    ps = h[:, None] * (2 * N) + 2 * n[None, :]  # Lambda, P, D, dt B (H, N)
    pr = tl.load(p_ptr + ps, mask=pmask, other=0.0)
    pi = tl.load(p_ptr + ps + 1, mask=pmask, other=0.0)
    lr = tl.load(lam_ptr + ps, mask=pmask, other=0.0)
    li = tl.load(lam_ptr + ps + 1, mask=pmask, other=0.0)
    br = tl.load(b_ptr + ps, mask=pmask, other=0.0)
    bi = tl.load(b_ptr + ps + 1, mask=pmask, other=0.0)
    dr = tl.load(d_ptr + ps, mask=pmask, other=0.0)
    di = tl.load(d_ptr + ps + 1, mask=pmask, other=0.0)
    dpr = dr * pr - di * pi  # D P
    dpi = dr * pi + di * pr
    half1 = tl.load(half_ptr + h, mask=hmask, other=0.0).to(pr.dtype)  # dt / 2 (H,)
    half = half1[:, None]
    g = tl.load(inner_ptr + h, mask=hmask, other=0.0).to(pr.dtype)  # (1 + dt/2 P^* D P)^-1 (H,)
    for i in range(BATCH):
        bb = tl.program_id(1) * BATCH + i
        rmask = hmask & (bb < B)
        mask = pmask & (bb < B)
        xs = bb * (H * 2 * N) + ps
        xr = tl.load(x_ptr + xs, mask=mask, other=0.0)
        xi = tl.load(x_ptr + xs + 1, mask=mask, other=0.0)
        u = tl.load(u_ptr + bb * H + h, mask=rmask, other=0.0).to(xr.dtype)[:, None]
        # A0 x = x + dt/2 (Lambda x - P (P^* x)); P^* x over all N modes = 2 Re sum over the kept half (real)
        s = 2 * tl.sum(pr * xr + pi * xi, axis=1)[:, None]
        zr = xr + half * (lr * xr - li * xi - pr * s) + br * u
        zi = xi + half * (lr * xi + li * xr - pi * s) + bi * u
        # A1 z = D z - D P inner dt/2 P^* D z (inner and P^* D z real)
        yr = dr * zr - di * zi
        yi = dr * zi + di * zr
        q = (g * 2 * tl.sum(pr * yr + pi * yi, axis=1) * half1)[:, None]
        nr = yr - dpr * q
        ni = yi - dpi * q
        tl.store(out_ptr + xs, nr, mask=mask)
        tl.store(out_ptr + xs + 1, ni, mask=mask)
        for ch in range(C):  # y (B, C, H) = Re sum over all N of C x = 2 Re sum over the kept half
            cs = ch * (H * 2 * N) + ps
            cr = tl.load(c_ptr + cs, mask=pmask, other=0.0)
            ci = tl.load(c_ptr + cs + 1, mask=pmask, other=0.0)
            tl.store(y_ptr + (bb * C + ch) * H + h, 2 * tl.sum(cr * nr - ci * ni, axis=1), mask=rmask)


def _check(op: str, x: Tensor, u: Tensor, out: Tensor | None, params: dict[str, tuple[Tensor, tuple]]) -> None:
    """x (B, H, N) complex contiguous, u (B, H) real, every parameter of the given shape and x's dtype/device."""
    if x.dim() != 3 or not x.is_complex() or not x.is_contiguous():
        raise ValueError(f"{op}: the state x must be a contiguous complex (B, H, N) tensor, got "
                         f"{x.dtype} {tuple(x.shape)}{'' if x.is_contiguous() else ' (not contiguous)'}")
    batch, h, _ = x.shape
    if u.shape != (batch, h) or u.is_complex():
        raise ValueError(f"{op}: the input u must be real (B, H) = {(batch, h)}, got {u.dtype} {tuple(u.shape)}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous()):
        raise ValueError(f"{op}: out must be contiguous {x.dtype} {tuple(x.shape)}, got {out.dtype} "
                         f"{tuple(out.shape)}")
    for name, (t, shape) in params.items():
        if tuple(t.shape) != shape or t.dtype != x.dtype or t.device != x.device or not t.is_contiguous():
            raise ValueError(f"{op}: {name} must be contiguous {x.dtype} {shape} on {x.device}, got {t.dtype} "
                             f"{tuple(t.shape)} on {t.device}")


def _launch(kernel, x: Tensor, out: Tensor, u: Tensor, params: list[Tensor], channels: int,
            real_dtype: torch.dtype) -> Tensor:
    """Grid: blocks of features x slices of BATCH_PER_PROGRAM batch rows."""
    batch, h, n = x.shape
    y = torch.empty((batch, channels, h), dtype=real_dtype, device=x.device)
    block_n = _block_n(n)
    block_h = max(1, FEATURE_ELEMENTS // block_n)
    per = min(BATCH_PER_PROGRAM, batch)
    if batch and h:
        grid = (triton.cdiv(h, block_h), triton.cdiv(batch, per))
        with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
            kernel[grid](torch.view_as_real(x), torch.view_as_real(out), u.contiguous(), *params, y, batch, h, n,
                         channels, BLOCK_H=block_h, BLOCK_N=block_n, BATCH=per)
    return y


_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def diag_step(x: Tensor, u: Tensor, da: Tensor, db: Tensor, c: Tensor, out: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
    """x (B, H, N) complex, u (B, H) real, dA, dB (H, N), C (channels, H, N) -> y (B, channels, H) real and the
    new state (``out``, default a new tensor; ``out=x`` updates in place)."""
    channels = c.shape[0] if c.dim() == 3 else -1
    _check("diag_step", x, u, out, {"dA": (da, tuple(x.shape[1:])), "dB": (db, tuple(x.shape[1:])),
                                    "C": (c, (channels, *x.shape[1:]))})
    out = torch.empty_like(x) if out is None else out
    y = _launch(_diag_step_kernel, x, out, u,
                [torch.view_as_real(da), torch.view_as_real(db), torch.view_as_real(c)], channels, _REAL[x.dtype])
    return y, out


def dplr_step(x: Tensor, u: Tensor, lam: Tensor, p: Tensor, d: Tensor, b: Tensor, c: Tensor, half: Tensor,
              inner: Tensor, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """S4's rank-1 bilinear step on one mode of each conjugate pair (the other half of the state is its conjugate).
    x (B, H, N/2) complex, u (B, H) real; Lambda, P, D = (1 - dt/2 Lambda)^-1 and dt B, each (H, N/2); C
    (channels, H, N/2); half = dt / 2 and inner = (1 + dt/2 P^* D P)^-1 (the sum over all N modes), each (H,) real
    -> y (B, channels, H) real and the new state (``out``; ``out=x`` updates in place)."""
    hn = tuple(x.shape[1:])
    channels = c.shape[0] if c.dim() == 3 else -1
    _check("dplr_step", x, u, out, {"Lambda": (lam, hn), "P": (p, hn), "D": (d, hn), "B": (b, hn),
                                    "C": (c, (channels, *hn))})
    for name, t in (("half (dt / 2)", half), ("inner", inner)):
        if tuple(t.shape) != hn[:1] or t.is_complex() or t.device != x.device:
            raise ValueError(f"dplr_step: {name} must be real {hn[:1]} on {x.device}, got {t.dtype} "
                             f"{tuple(t.shape)} on {t.device}")
    out = torch.empty_like(x) if out is None else out
    real = _REAL[x.dtype]
    y = _launch(_dplr_step_kernel, x, out, u,
                [torch.view_as_real(lam), torch.view_as_real(p), torch.view_as_real(d), torch.view_as_real(b),
                 torch.view_as_real(c), half.to(real).contiguous(), inner.to(real).contiguous()], channels, real)
    return y, out
