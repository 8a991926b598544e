"""Triton passes around the FFTs of :mod:`ssm_core.fftconv` (see there for the math).

Memory-bound passes, each reading and writing every element once (B2 = ceil(B / 2); n = 2L):

- ``pack``: rows of x (B, C, H, L) real, any strides -> (B2, C, H, n) complex, rows b and b + B2 as the real
  and imaginary parts, zero for l >= L; optionally times act'(y) (the activation's derivative, backward).
- ``unpack``: (B2, C, H, n) complex -> act(rows) (B, C, H, L) real, any output strides (l < L only).
- ``spectral_fwd``: W (B2, H, n) * K (C, H, n) -> (B2, C, H, n).
- ``spectral_bwd``: G (B2, C, H, n), W, K -> sum_c G conj(K) written over G[:, 0], and S = sum_b G conj(W).

A complex tensor is handled as its real view: the pack / unpack tiles are (BLOCK_H rows, BLOCK_J floats of
interleaved real / imaginary parts), so the complex side is read and written contiguously; float j of a row
is position l = j // 2 of batch row p (j even) or p + B2 (j odd). Float32 and float64 both work (float64 for
the tests). Offsets are int64.

Measured (NVIDIA H200, B=32, H=256, L=4096, results/bench-layers/20261126T060727_gpu_profile.txt): the spectral
passes run near the copy bandwidth (spectral_bwd 214 us for 768 MiB), the pack / unpack passes at a third to
half of it (unpack 313 us, pack 224 us per call against ~65-120 us floors). An earlier unpack that loaded
(rows, cols, 2) tiles and split them ran in 87 us; the same shape joined and stored (pack) ran in 493 us.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_H, BLOCK_J, BLOCK_F = 16, 256, 512
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # triton.jit reads it at import: reload to switch


@triton.jit
def _act(z, ACT: tl.constexpr):
    """The activation; matches torch's nn.GELU (exact, erf), ReLU, SiLU, Tanh, Identity."""
    out = z
    if ACT == "gelu":
        out = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    if ACT == "relu":
        out = tl.where(z > 0, z, 0.0)
    if ACT == "silu":
        out = z * tl.sigmoid(z)
    if ACT == "tanh":
        out = 2.0 * tl.sigmoid(2.0 * z) - 1.0
    return out


@triton.jit
def _act_grad(z, ACT: tl.constexpr):
    """d act / d z."""
    out = tl.full(z.shape, 1.0, z.dtype)
    if ACT == "gelu":  # Phi(z) + z phi(z)
        out = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476)) + z * tl.exp(-0.5 * z * z) * 0.3989422804014327
    if ACT == "relu":
        out = tl.where(z > 0, 1.0, 0.0).to(z.dtype)
    if ACT == "silu":
        s = tl.sigmoid(z)
        out = s * (1.0 + z * (1.0 - s))
    if ACT == "tanh":
        t = 2.0 * tl.sigmoid(2.0 * z) - 1.0
        out = 1.0 - t * t
    return out


@triton.jit
def _pack_kernel(x_ptr, y_ptr, o_ptr, B, B2, C, H, L, NF, s_xb, s_xc, s_xh, s_xl, HAS_Y: tl.constexpr,
                 ACT: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr):
    pc = tl.program_id(2).to(tl.int64)
    p, c = pc // C, pc % C
    offs_j = tl.program_id(0).to(tl.int64) * BLOCK_J + tl.arange(0, BLOCK_J)  # interleaved float index
    offs_h = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    pos, odd = offs_j // 2, (offs_j % 2) == 1
    hm = offs_h[:, None] < H
    m = hm & (pos < L)[None, :]
    src = c * s_xc + offs_h[:, None] * s_xh + pos[None, :] * s_xl
    xa = tl.load(x_ptr + p * s_xb + src, mask=m & ~odd[None, :], other=0.0)
    xb = tl.load(x_ptr + (p + B2) * s_xb + src, mask=m & odd[None, :] & (p + B2 < B), other=0.0)
    val = xa + xb  # zero for l >= L
    dst = (pc * H + offs_h[:, None]) * (2 * NF) + offs_j[None, :]
    if HAS_Y:  # times act'(z), z = the packed pre-activation y at the same place
        z = tl.load(y_ptr + dst, mask=m, other=0.0)
        val = val * _act_grad(z, ACT)
    tl.store(o_ptr + dst, val, mask=hm & (offs_j < 2 * NF)[None, :])


@triton.jit
def _unpack_kernel(y_ptr, o_ptr, B, B2, C, H, L, NF, s_ob, s_oc, s_oh, s_ol, ACT: tl.constexpr,
                   BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr):
    pc = tl.program_id(2).to(tl.int64)
    p, c = pc // C, pc % C
    offs_j = tl.program_id(0).to(tl.int64) * BLOCK_J + tl.arange(0, BLOCK_J)
    offs_h = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    pos, odd = offs_j // 2, (offs_j % 2) == 1
    m = (offs_h[:, None] < H) & (pos < L)[None, :]
    z = tl.load(y_ptr + (pc * H + offs_h[:, None]) * (2 * NF) + offs_j[None, :], mask=m, other=0.0)
    out = _act(z, ACT)
    dst = c * s_oc + offs_h[:, None] * s_oh + pos[None, :] * s_ol
    tl.store(o_ptr + p * s_ob + dst, out, mask=m & ~odd[None, :])
    tl.store(o_ptr + (p + B2) * s_ob + dst, out, mask=m & odd[None, :] & (p + B2 < B))


@triton.jit
def _spectral_fwd_kernel(w_ptr, k_ptr, o_ptr, B2, C, H, NF, BLOCK_F: tl.constexpr):
    offs_f = tl.program_id(0).to(tl.int64) * BLOCK_F + tl.arange(0, BLOCK_F)
    h = tl.program_id(1).to(tl.int64)
    two = tl.arange(0, 2)
    fm = (offs_f < NF)[:, None]
    cplx = offs_f[:, None] * 2 + two[None, :]  # (BLOCK_F, 2)
    c = 0
    while c < C:  # (while, not range: Triton 3.6's interpreter cannot run a range with a runtime bound)
        kre, kim = tl.split(tl.load(k_ptr + (c * H + h) * NF * 2 + cplx, mask=fm, other=0.0))
        p = 0
        while p < B2:
            wre, wim = tl.split(tl.load(w_ptr + (p * H + h) * NF * 2 + cplx, mask=fm, other=0.0))
            out = tl.join(wre * kre - wim * kim, wre * kim + wim * kre)
            tl.store(o_ptr + ((p * C + c) * H + h) * NF * 2 + cplx, out, mask=fm)
            p += 1
        c += 1


@triton.jit
def _spectral_bwd_kernel(g_ptr, w_ptr, k_ptr, s_ptr, B2, C, H, NF, NEED_U: tl.constexpr, NEED_K: tl.constexpr,
                         BLOCK_F: tl.constexpr):
    offs_f = tl.program_id(0).to(tl.int64) * BLOCK_F + tl.arange(0, BLOCK_F)
    h = tl.program_id(1).to(tl.int64)
    two = tl.arange(0, 2)
    fm = (offs_f < NF)[:, None]
    cplx = offs_f[:, None] * 2 + two[None, :]  # (BLOCK_F, 2)
    c = 0
    while c < C:  # (while, not range: Triton 3.6's interpreter cannot run a range with a runtime bound)
        kre, kim = tl.split(tl.load(k_ptr + (c * H + h) * NF * 2 + cplx, mask=fm, other=0.0))
        s_re = tl.zeros([BLOCK_F], dtype=kre.dtype)
        s_im = tl.zeros([BLOCK_F], dtype=kre.dtype)
        p = 0
        while p < B2:
            g_off = ((p * C + c) * H + h) * NF * 2 + cplx
            gre, gim = tl.split(tl.load(g_ptr + g_off, mask=fm, other=0.0))
            if NEED_K:  # G conj(W)
                wre, wim = tl.split(tl.load(w_ptr + (p * H + h) * NF * 2 + cplx, mask=fm, other=0.0))
                s_re += gre * wre + gim * wim
                s_im += gim * wre - gre * wim
            if NEED_U:  # G conj(K), summed over c into the slot of c = 0
                ure = gre * kre + gim * kim
                uim = gim * kre - gre * kim
                u_off = (p * C * H + h) * NF * 2 + cplx
                if c > 0:
                    are, aim = tl.split(tl.load(g_ptr + u_off, mask=fm, other=0.0))
                    ure += are
                    uim += aim
                tl.store(g_ptr + u_off, tl.join(ure, uim), mask=fm)
            p += 1
        if NEED_K:
            tl.store(s_ptr + (c * H + h) * NF * 2 + cplx, tl.join(s_re, s_im), mask=fm)
        c += 1


# -- launchers -----------------------------------------------------------------------------------------------------
def _real(t: Tensor) -> Tensor:
    return torch.view_as_real(t.contiguous())


def pack(x: Tensor, n: int, cdtype: torch.dtype, y: Tensor | None = None, activation: str = "identity") -> Tensor:
    """x (B, C, H, L) real, any strides -> (B2, C, H, n) complex [* act'(y), y (B2, C, H, n) complex]."""
    bsz, c, h, length = x.shape
    b2 = (bsz + 1) // 2
    out = torch.empty(b2, c, h, n, dtype=cdtype, device=x.device)
    grid = (triton.cdiv(2 * n, BLOCK_J), triton.cdiv(h, BLOCK_H), b2 * c)
    _pack_kernel[grid](x, _real(y) if y is not None else x, torch.view_as_real(out), bsz, b2, c, h, length, n,
                       *x.stride(), HAS_Y=y is not None, ACT=activation, BLOCK_H=BLOCK_H, BLOCK_J=BLOCK_J)
    return out


def unpack(y: Tensor, out: Tensor, activation: str = "identity") -> Tensor:
    """y (B2, C, H, n) complex -> out (B, C, H, L) real (preallocated, any strides) = act(rows of y)."""
    bsz, c, h, length = out.shape
    b2, n = y.shape[0], y.shape[-1]
    grid = (triton.cdiv(2 * length, BLOCK_J), triton.cdiv(h, BLOCK_H), b2 * c)
    _unpack_kernel[grid](_real(y), out, bsz, b2, c, h, length, n, *out.stride(), ACT=activation,
                         BLOCK_H=BLOCK_H, BLOCK_J=BLOCK_J)
    return out


def spectral_fwd(w: Tensor, kf: Tensor) -> Tensor:
    """w (B2, H, n), kf (C, H, n) complex -> w[:, None] * kf (B2, C, H, n)."""
    b2, h, n = w.shape
    c = kf.shape[0]
    out = torch.empty(b2, c, h, n, dtype=w.dtype, device=w.device)
    _spectral_fwd_kernel[(triton.cdiv(n, BLOCK_F), h)](_real(w), _real(kf), torch.view_as_real(out), b2, c, h, n,
                                                         BLOCK_F=BLOCK_F)
    return out


def spectral_bwd(gf: Tensor, w: Tensor, kf: Tensor, need_u: bool, need_k: bool) -> tuple[Tensor | None, Tensor | None]:
    """gf (B2, C, H, n) (overwritten), w (B2, H, n), kf (C, H, n) complex -> (sum_c gf conj(kf), sum_b gf conj(w))."""
    b2, c, h, n = gf.shape
    gf = gf.contiguous()
    s = torch.empty_like(kf, memory_format=torch.contiguous_format) if need_k else None
    g_real = torch.view_as_real(gf)
    _spectral_bwd_kernel[(triton.cdiv(n, BLOCK_F), h)](g_real, _real(w), _real(kf),
                                                         torch.view_as_real(s) if need_k else g_real, b2, c, h, n,
                                                         NEED_U=need_u, NEED_K=need_k, BLOCK_F=BLOCK_F)
    return (gf[:, 0] if need_u else None), s
