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

#: Block setting of each kernel: (features x padded modes whose parameters one program holds, broadcast over its
#: batch rows; complex states one program steps: batch rows x features x padded modes; warps per program). The
#: fastest of the settings benchmarks/diagnostics/step_kernel_rate.py timed on an H200 at the generation sizes
#: (batch 2048 and 3584, H 256 and 512, N/2 32: about 2.7-3.4 TB/s of state traffic); the DPLR step, which holds
#: more parameters per mode, is fastest with fewer features and warps per program.
BLOCKS = {"diag": (128, 2048, 4), "dplr": (64, 2048, 2)}


def _blocks(batch: int, h: int, n: int, kernel: str = "diag") -> tuple[int, int, int]:
    """(batch rows, features, modes) per program of ``kernel`` ('diag' or 'dplr'), each a power of two; the modes
    padded to one."""
    feature_elements, elements, _ = BLOCKS[kernel]
    block_n = triton.next_power_of_2(n)
    block_h = min(triton.next_power_of_2(h), max(1, feature_elements // block_n))
    block_b = min(triton.next_power_of_2(batch), max(1, elements // (block_h * block_n)))
    return block_b, block_h, block_n


# Layout: a complex (..., N) tensor is read as its float view (..., 2N), (re, im) interleaved, so the block of one
# batch row and BLOCK_H features is one contiguous span; tl.split / tl.join separate and re-interleave the parts.

@triton.jit
def _diag_step_kernel(x_ptr, out_ptr, u_ptr, da_ptr, db_ptr, c_ptr, y_ptr, B, H, N, C,
                      BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    b = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)  # B x H x 2N may pass 2^31
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    f = tl.arange(0, 2 * BLOCK_N)  # float offset within a row: 2 n (re), 2 n + 1 (im)
    hmask = h < H
    pmask = hmask[:, None] & (f < 2 * N)[None, :]  # (BLOCK_H, 2 BLOCK_N)
    ps = h[:, None] * (2 * N) + f[None, :]  # dA, dB (H, N) complex
    ar, ai = tl.split(tl.reshape(tl.load(da_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    br, bi = tl.split(tl.reshape(tl.load(db_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    bmask = b < B
    rmask = bmask[:, None] & hmask[None, :]  # (BLOCK_B, BLOCK_H)
    mask = bmask[:, None, None] & pmask[None, :, :]
    xs = b[:, None, None] * (H * 2 * N) + ps[None, :, :]  # x (B, H, N) complex
    xr, xi = tl.split(tl.reshape(tl.load(x_ptr + xs, mask=mask, other=0.0), (BLOCK_B, BLOCK_H, BLOCK_N, 2)))
    u = tl.load(u_ptr + b[:, None] * H + h[None, :], mask=rmask, other=0.0).to(xr.dtype)[:, :, None]  # u (B, H)
    nr = ar[None, :, :] * xr - ai[None, :, :] * xi + br[None, :, :] * u
    ni = ar[None, :, :] * xi + ai[None, :, :] * xr + bi[None, :, :] * u
    tl.store(out_ptr + xs, tl.reshape(tl.join(nr, ni), (BLOCK_B, BLOCK_H, 2 * BLOCK_N)), mask=mask)
    for ch in range(C):  # y (B, C, H) = 2 Re sum_n C x
        cr, ci = tl.split(tl.reshape(tl.load(c_ptr + ch * (H * 2 * N) + ps, mask=pmask, other=0.0),
                                     (BLOCK_H, BLOCK_N, 2)))
        yc = 2 * tl.sum(cr[None, :, :] * nr - ci[None, :, :] * ni, axis=2)
        tl.store(y_ptr + (b[:, None] * C + ch) * H + h[None, :], yc, mask=rmask)


@triton.jit
def _dplr_step_kernel(x_ptr, out_ptr, u_ptr, lam_ptr, p_ptr, d_ptr, b_ptr, c_ptr, half_ptr, inner_ptr, y_ptr,
                      B, H, N, C, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    b = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)  # B x H x 2N may pass 2^31
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    f = tl.arange(0, 2 * BLOCK_N)
    hmask = h < H
    pmask = hmask[:, None] & (f < 2 * N)[None, :]
    ps = h[:, None] * (2 * N) + f[None, :]  # Lambda, P, D, dt B (H, N) complex
    pr, pi = tl.split(tl.reshape(tl.load(p_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    lr, li = tl.split(tl.reshape(tl.load(lam_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    br, bi = tl.split(tl.reshape(tl.load(b_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    dr, di = tl.split(tl.reshape(tl.load(d_ptr + ps, mask=pmask, other=0.0), (BLOCK_H, BLOCK_N, 2)))
    dpr = (dr * pr - di * pi)[None, :, :]  # D P
    dpi = (dr * pi + di * pr)[None, :, :]
    pr = pr[None, :, :]
    pi = pi[None, :, :]
    half1 = tl.load(half_ptr + h, mask=hmask, other=0.0).to(pr.dtype)[None, :]  # dt / 2 (H,)
    half = half1[:, :, None]
    g = tl.load(inner_ptr + h, mask=hmask, other=0.0).to(pr.dtype)[None, :]  # (1 + dt/2 P^* D P)^-1 (H,)
    bmask = b < B
    rmask = bmask[:, None] & hmask[None, :]
    mask = bmask[:, None, None] & pmask[None, :, :]
    xs = b[:, None, None] * (H * 2 * N) + ps[None, :, :]  # x (B, H, N)
    xr, xi = tl.split(tl.reshape(tl.load(x_ptr + xs, mask=mask, other=0.0), (BLOCK_B, BLOCK_H, BLOCK_N, 2)))
    u = tl.load(u_ptr + b[:, None] * H + h[None, :], mask=rmask, other=0.0).to(xr.dtype)[:, :, None]
    # A0 x = x + dt/2 (Lambda x - P (P^* x)); P^* x over all N modes = 2 Re sum over the kept half (real)
    s = 2 * tl.sum(pr * xr + pi * xi, axis=2)[:, :, None]
    zr = xr + half * (lr[None, :, :] * xr - li[None, :, :] * xi - pr * s) + br[None, :, :] * u
    zi = xi + half * (lr[None, :, :] * xi + li[None, :, :] * xr - pi * s) + bi[None, :, :] * u
    # A1 z = D z - D P inner dt/2 P^* D z (inner and P^* D z real)
    yr = dr[None, :, :] * zr - di[None, :, :] * zi
    yi = dr[None, :, :] * zi + di[None, :, :] * zr
    q = (g * 2 * tl.sum(pr * yr + pi * yi, axis=2) * half1)[:, :, None]
    nr = yr - dpr * q
    ni = yi - dpi * q
    tl.store(out_ptr + xs, tl.reshape(tl.join(nr, ni), (BLOCK_B, BLOCK_H, 2 * BLOCK_N)), mask=mask)
    for ch in range(C):  # y (B, C, H) = Re sum over all N of C x = 2 Re sum over the kept half
        cr, ci = tl.split(tl.reshape(tl.load(c_ptr + ch * (H * 2 * N) + ps, mask=pmask, other=0.0),
                                     (BLOCK_H, BLOCK_N, 2)))
        yc = 2 * tl.sum(cr[None, :, :] * nr - ci[None, :, :] * ni, axis=2)
        tl.store(y_ptr + (b[:, None] * C + ch) * H + h[None, :], yc, mask=rmask)


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


def _launch(name: str, x: Tensor, out: Tensor, u: Tensor, params: list[Tensor], channels: int,
            real_dtype: torch.dtype) -> Tensor:
    """Grid: blocks of batch rows (axis 0, which may exceed 65,535 programs) x blocks of features (:func:`_blocks`,
    the setting ``BLOCKS[name]``)."""
    kernel = {"diag": _diag_step_kernel, "dplr": _dplr_step_kernel}[name]
    batch, h, n = x.shape
    y = torch.empty((batch, channels, h), dtype=real_dtype, device=x.device)
    block_b, block_h, block_n = _blocks(batch, h, n, name)
    if batch and h:
        grid = (triton.cdiv(batch, block_b), triton.cdiv(h, block_h))
        with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
            kernel[grid](torch.view_as_real(x), torch.view_as_real(out), u.contiguous(), *params, y, batch, h, n,
                         channels, BLOCK_B=block_b, BLOCK_H=block_h, BLOCK_N=block_n, num_warps=BLOCKS[name][2])
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
    y = _launch("diag", x, out, u,
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
    y = _launch("dplr", x, out, u,
                [torch.view_as_real(lam), torch.view_as_real(p), torch.view_as_real(d), torch.view_as_real(b),
                 torch.view_as_real(c), half.to(real).contiguous(), inner.to(real).contiguous()], channels, real)
    return y, out
