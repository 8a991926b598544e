"""Triton passes around the FFTs of :mod:`ssm_core.fftconv` (see there for the math).

Memory-bound passes, each reading and writing every element once (B2 = ceil(B / 2); n = 2L):

- ``pack``: rows of x (B, C, H, L) real, any strides -> (B2, C, H, n) complex, rows b and b + B2 as the real
  and imaginary parts, zero for l >= L; optionally times act'(y) (the activation's derivative, backward). x may be
  narrower than the spectrum (bfloat16 into complex64): it is upcast as it is read.
- ``unpack``: (B2, C, H, n) complex -> act(rows) (B, C, H, L) real, any output strides (l < L only).
- ``full_spectrum``: the rfft (C, H, n/2 + 1) of a real kernel -> its full spectrum (C, H, n) by Hermitian symmetry,
  plus D, over n (what one complex FFT of the zero-padded real kernel gives, with half its transform work).
- ``spectral_fwd``: W (B2, H, n) * K (C, H, n) -> (B2, C, H, n).
- ``spectral_bwd``: G (B2, C, H, n), W, K -> sum_c G conj(K) written over G[:, 0], and S = sum_b G conj(W).

A complex tensor is handled as its real view. The pack / unpack tiles are BLOCK_H rows by BLOCK_L positions,
long along l when the real side is contiguous along l and square-ish when it is contiguous along h (the
transposed (B, L, H) layout); the complex side is always read / written contiguously: unpack loads the tile as
(rows, positions, 2) and splits it; pack gathers float f of a row from position f // 2 of batch row p (f even) or
p + B2 (f odd) and stores the floats contiguously. In-tile offsets are int32, tile origins int64. Float32 and
float64 both work (float64 for the tests). Launches go through the cached launcher of
:mod:`ssm_core.ops.cauchy_triton` (no Triton dispatch on repeat calls).

The pack / unpack passes gather (one row of a pair per lane); a form that loads both rows as tiles and stores
tl.join of them was tried on an H200 and dropped (its timings were not kept). The spectral
passes run near the copy bandwidth (spectral_bwd 213 us for 768 MiB: results/bench-layers/
20261126T060727_gpu_profile.txt).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from .ops.cauchy_triton import Launcher, cdiv

#: (BLOCK_H, BLOCK_L) tiles of the pack / unpack passes when the real side is contiguous along l, and along h
TILE_L_MAJOR, TILE_H_MAJOR = (8, 256), (32, 64)
BLOCK_F = 512  # frequencies per program of the spectral passes
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
                 ACT: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr):
    """One tile of BLOCK_H rows by BLOCK_L positions of one packed row pair p (and channel c), written as its
    2 BLOCK_L interleaved floats per row: float f is position f // 2 of batch row p (f even) or p + B2 (f odd), zero
    for positions >= L (the gathers from the two rows are coalesced; the store is contiguous)."""
    pc = tl.program_id(2)
    p = pc // C
    c = pc - p * C
    h0 = tl.program_id(1) * BLOCK_H
    l0 = tl.program_id(0) * BLOCK_L
    hh = tl.arange(0, BLOCK_H)                       # in-tile offsets (int32); the tile's origin is int64
    f = tl.arange(0, 2 * BLOCK_L)
    ll = f // 2
    odd = f % 2
    hm = ((h0 + hh) < H)[:, None]
    row = (pc.to(tl.int64) * H + h0) * (2 * NF) + 2 * l0
    o_tile = hh[:, None] * (2 * NF) + f[None, :]      # (BLOCK_H, 2 BLOCK_L)
    m = hm & ((l0 + ll) < L)[None, :] & ((odd == 0) | (p + B2 < B))[None, :]
    base = p.to(tl.int64) * s_xb + c.to(tl.int64) * s_xc + h0.to(tl.int64) * s_xh + l0.to(tl.int64) * s_xl
    src = hh[:, None] * s_xh + (ll * s_xl)[None, :] + (odd.to(tl.int64) * B2 * s_xb)[None, :]
    # upcast (exact) to the spectrum's precision where x is narrower (a bfloat16 input); a no-op otherwise
    val = tl.load(x_ptr + base + src, mask=m, other=0.0).to(o_ptr.dtype.element_ty)
    if HAS_Y:  # times act'(z), z = the packed pre-activation y at the same place
        z = tl.load(y_ptr + row + o_tile, mask=m, other=0.0)
        val = val * _act_grad(z, ACT)
    tl.store(o_ptr + row + o_tile, val, mask=hm & ((l0 + ll) < NF)[None, :])


@triton.jit
def _bf16_rtne(v):
    """v (float32) rounded to the nearest bfloat16, ties to even (as torch casts), done on the bits so that every
    backend gives it (the CPU interpreter truncates its casts)."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _unpack_kernel(y_ptr, o_ptr, B, B2, C, H, L, NF, s_ob, s_oc, s_oh, s_ol, ACT: tl.constexpr,
                   OUT_BF16: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr):
    """One (BLOCK_H, BLOCK_L) tile of positions l < L of one packed row pair: (re, im) pairs of y, read
    contiguously -> act(re) into row p of o, act(im) into row p + B2."""
    pc = tl.program_id(2)
    p = pc // C
    c = pc - p * C
    h0 = tl.program_id(1) * BLOCK_H
    l0 = tl.program_id(0) * BLOCK_L
    hh = tl.arange(0, BLOCK_H)
    ll = tl.arange(0, BLOCK_L)
    two = tl.arange(0, 2)
    m = ((h0 + hh) < H)[:, None] & ((l0 + ll) < L)[None, :]
    row = (pc.to(tl.int64) * H + h0) * (2 * NF) + 2 * l0
    y_tile = hh[:, None, None] * (2 * NF) + 2 * ll[None, :, None] + two[None, None, :]
    zr, zi = tl.split(tl.load(y_ptr + row + y_tile, mask=m[:, :, None], other=0.0))
    o_tile = hh[:, None] * s_oh + ll[None, :] * s_ol
    rest = c.to(tl.int64) * s_oc + h0.to(tl.int64) * s_oh + l0.to(tl.int64) * s_ol
    if OUT_BF16:  # rounded here; other dtypes by the store
        tl.store(o_ptr + (p.to(tl.int64) * s_ob + rest) + o_tile, _bf16_rtne(_act(zr, ACT)), mask=m)
        tl.store(o_ptr + ((p + B2).to(tl.int64) * s_ob + rest) + o_tile, _bf16_rtne(_act(zi, ACT)),
                 mask=m & (p + B2 < B))
    else:
        tl.store(o_ptr + (p.to(tl.int64) * s_ob + rest) + o_tile, _act(zr, ACT), mask=m)
        tl.store(o_ptr + ((p + B2).to(tl.int64) * s_ob + rest) + o_tile, _act(zi, ACT), mask=m & (p + B2 < B))


@triton.jit
def _full_spectrum_kernel(h_ptr, d_ptr, o_ptr, NH, NF, HAS_D: tl.constexpr, BLOCK_F: tl.constexpr):
    offs_f = tl.program_id(0).to(tl.int64) * BLOCK_F + tl.arange(0, BLOCK_F)
    row = tl.program_id(1).to(tl.int64)  # c * H + h
    two = tl.arange(0, 2)
    fm = (offs_f < NF)[:, None]
    mirrored = offs_f >= NH  # bins n/2 + 1 .. n - 1: conj of bin n - j
    src = tl.where(mirrored, NF - offs_f, offs_f)
    re, im = tl.split(tl.load(h_ptr + (row * NH + src)[:, None] * 2 + two[None, :], mask=fm, other=0.0))
    im = tl.where(mirrored, -im, im)
    if HAS_D:  # D u is the convolution with D delta_0, whose spectrum is the constant D
        re += tl.load(d_ptr + row)
    out = tl.join(re / NF, im / NF)  # the 1/n of the inverse transform (run unnormalized)
    tl.store(o_ptr + (row * NF + offs_f)[:, None] * 2 + two[None, :], out, mask=fm)


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
_PACK = Launcher(_pack_kernel)
_UNPACK = Launcher(_unpack_kernel)
_FULL_SPECTRUM = Launcher(_full_spectrum_kernel)
_SPECTRAL_FWD = Launcher(_spectral_fwd_kernel)
_SPECTRAL_BWD = Launcher(_spectral_bwd_kernel)


def _tile(s_h: int, s_l: int) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_L) of a pack / unpack tile: long along l, unless the real side is contiguous along h."""
    return TILE_H_MAJOR if s_h == 1 and s_l != 1 else TILE_L_MAJOR


def pack(x: Tensor, n: int, cdtype: torch.dtype, y: Tensor | None = None, activation: str = "identity") -> Tensor:
    """x (B, C, H, L) real (float32 / float64, or bfloat16 upcast as read), any strides -> (B2, C, H, n) complex
    of ``cdtype`` [* act'(y), y (B2, C, H, n) complex], computed in ``cdtype``'s precision."""
    bsz, c, h, length = x.shape
    b2 = (bsz + 1) // 2
    out = torch.empty(b2, c, h, n, dtype=cdtype, device=x.device)
    s_b, s_c, s_h, s_l = x.stride()
    bh, bl = _tile(s_h, s_l)
    _PACK(lambda meta: (cdiv(n, bl), cdiv(h, bh), b2 * c), x, y.contiguous() if y is not None else x, out, bsz, b2,
          c, h, length, n, s_b, s_c, s_h, s_l, HAS_Y=y is not None, ACT=activation, BLOCK_H=bh, BLOCK_L=bl)
    return out


def unpack(y: Tensor, out: Tensor, activation: str = "identity") -> Tensor:
    """y (B2, C, H, n) complex -> out (B, C, H, L) real (preallocated, any strides, any float dtype: the values
    are rounded to it) = act(rows of y)."""
    bsz, c, h, length = out.shape
    b2, n = y.shape[0], y.shape[-1]
    s_b, s_c, s_h, s_l = out.stride()
    bh, bl = _tile(s_h, s_l)
    _UNPACK(lambda meta: (cdiv(length, bl), cdiv(h, bh), b2 * c), y.contiguous(), out, bsz, b2, c, h, length, n,
            s_b, s_c, s_h, s_l, ACT=activation, OUT_BF16=out.dtype == torch.bfloat16, BLOCK_H=bh, BLOCK_L=bl)
    return out


def full_spectrum(half: Tensor, d: Tensor | None, n: int) -> Tensor:
    """half (C, H, n/2 + 1) complex, the rfft of a real kernel over n points (n even); d (C, H) real or None ->
    (the full spectrum of n bins, bin n - j the conjugate of bin j, + d) / n: (C, H, n) complex."""
    c, h, nh = half.shape
    half = half.contiguous()
    out = torch.empty(c, h, n, dtype=half.dtype, device=half.device)
    _FULL_SPECTRUM(lambda meta: (cdiv(n, BLOCK_F), c * h), half, half if d is None else d.contiguous(), out, nh, n,
                   HAS_D=d is not None, BLOCK_F=BLOCK_F)
    return out


def spectral_fwd(w: Tensor, kf: Tensor) -> Tensor:
    """w (B2, H, n), kf (C, H, n) complex -> w[:, None] * kf (B2, C, H, n)."""
    b2, h, n = w.shape
    c = kf.shape[0]
    out = torch.empty(b2, c, h, n, dtype=w.dtype, device=w.device)
    _SPECTRAL_FWD(lambda meta: (cdiv(n, BLOCK_F), h), w.contiguous(), kf.contiguous(), out, b2, c, h, n,
                  BLOCK_F=BLOCK_F)
    return out


def spectral_bwd(gf: Tensor, w: Tensor, kf: Tensor, need_u: bool, need_k: bool,
                 s_out: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
    """gf (B2, C, H, n) (overwritten), w (B2, H, n), kf (C, H, n) complex -> (sum_c gf conj(kf), sum_b gf conj(w));
    the second written into ``s_out`` (contiguous, kf's shape) when given."""
    b2, c, h, n = gf.shape
    gf = gf.contiguous()
    s = None
    if need_k:
        s = torch.empty(kf.shape, dtype=kf.dtype, device=kf.device) if s_out is None else s_out
    _SPECTRAL_BWD(lambda meta: (cdiv(n, BLOCK_F), h), gf, w.contiguous(), kf.contiguous(), s if need_k else gf, b2,
                  c, h, n, NEED_U=need_u, NEED_K=need_k, BLOCK_F=BLOCK_F)
    return (gf[:, 0] if need_u else None), s
