"""Fused recurrent steps: one Triton program holds the parameters of a block of features and steps the states of one
batch row with them, or of a few rows one after the other in a pipelined loop (the loads of the next rows issued
while the current one is computed), so each step reads and writes every state once and reduces it to the outputs
(the torch step makes one pass per operation).

- :func:`diag_step`: the diagonal recurrence whose convolution kernel is S4D eq. (6)-(7):
  x_t = dA x_{t-1} + dB u_t, y_t = 2 Re(C x_t), per mode n (x holds one mode of each conjugate pair, so the
  output is twice the real part of the sum over them, S4D Section 3.3).
- :func:`dplr_step`: S4's bilinear step (S4 eq. (3)) with the state matrix A = Lambda - P P^*, rank 1 (S4 Theorem 3,
  App. C.2): x_t = A1 (A0 x_{t-1} + dt B u_t), A0 = I + dt/2 A, A1 = (I - dt/2 A)^-1 applied by Woodbury;
  y_t = Re(C x_t) over all N modes. The product A1 A0 is itself diagonal plus rank one, so the kernel runs the
  diagonal step with a rank-one correction (:func:`dplr_step_parts`): one reduction over the modes per state.

Both can add the skip term D u_t to the output (``skip``: S4 eq. (1), y = C x + D u) and write the new state over
``x`` (``out=x``) or into ``out``; complex64 computes in float32, complex128 in float64. Inputs are checked here;
the callers (the kernels' ``step``) choose this path for the 'triton' backend.
"""
from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor

#: Block setting per step: (features x padded modes whose parameters one program holds, batch rows it steps in
#: turn, warps, software-pipeline stages of the loop over the rows). The fastest of the settings
#: benchmarks/diagnostics/step_kernel_rate.py timed on an H200 at the generation sizes (batch 2048 and 3584, H 256
#: and 512, N/2 32): the diagonal step with one row per program, the DPLR step, whose rank-one correction waits for
#: a reduction over the modes, with four rows in a pipelined loop (about 3.7 TB/s of state traffic for both at the
#: full tier's Table 7 size, against 4.2 TB/s for a torch copy of the state).
BLOCKS = {"diag": (2048, 1, 4, 1), "dplr": (2048, 4, 4, 3)}


def launch_blocks(batch: int, h: int, n: int, step: str = "diag") -> tuple[int, int, int]:
    """(batch rows, features, modes) per program of ``step`` ('diag' or 'dplr'): features and modes powers of two,
    the modes padded to one."""
    elements, rows, _, _ = BLOCKS[step]
    block_n = triton.next_power_of_2(n)
    block_h = min(triton.next_power_of_2(h), max(1, elements // block_n))
    return max(1, min(rows, batch)), block_h, block_n


# Layout: a complex (..., N) tensor is read as its float view (..., 2N), (re, im) interleaved, so the block of one
# batch row and BLOCK_H features is one contiguous span; tl.split / tl.join separate and re-interleave the parts.

@triton.jit
def _pair(ptr, offsets, mask, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    """(real, imaginary) parts, each (BLOCK_H, BLOCK_N), of the complex block at ``offsets`` (BLOCK_H, 2 BLOCK_N)."""
    return tl.split(tl.reshape(tl.load(ptr + offsets, mask=mask, other=0.0), (BLOCK_H, BLOCK_N, 2)))


@triton.jit
def step_kernel(x_ptr, out_ptr, u_ptr, e_ptr, g_ptr, w_ptr, f_ptr, k_ptr, c_ptr, skip_ptr, y_ptr, B, H, N,
                 CHANNELS: tl.constexpr, RANK1: tl.constexpr, HAS_SKIP: tl.constexpr, ROWS: tl.constexpr,
                 BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """x' = E x + G u (+ F r, r = k1 2 Re sum_n W_n x_n + k2 u, with RANK1), y = 2 Re sum_n C_n x'_n (+ skip u)."""
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    f = tl.arange(0, 2 * BLOCK_N)  # float offset within a row: 2 n (re), 2 n + 1 (im)
    hmask = h < H
    pmask = hmask[:, None] & (f < 2 * N)[None, :]  # (BLOCK_H, 2 BLOCK_N)
    ps = h[:, None] * (2 * N) + f[None, :]  # the (H, N) complex parameters
    er, ei = _pair(e_ptr, ps, pmask, BLOCK_H, BLOCK_N)
    gr, gi = _pair(g_ptr, ps, pmask, BLOCK_H, BLOCK_N)
    if RANK1:
        wr, wi = _pair(w_ptr, ps, pmask, BLOCK_H, BLOCK_N)
        fr, fi = _pair(f_ptr, ps, pmask, BLOCK_H, BLOCK_N)
        k1 = tl.load(k_ptr + 2 * h, mask=hmask, other=0.0)  # k (H, 2) real
        k2 = tl.load(k_ptr + 2 * h + 1, mask=hmask, other=0.0)
    if CHANNELS == 1:
        cr0, ci0 = _pair(c_ptr, ps, pmask, BLOCK_H, BLOCK_N)
    b0 = tl.program_id(0).to(tl.int64) * ROWS  # B x H x 2N may pass 2^31
    for i in tl.range(0, ROWS, num_stages=STAGES):
        b = b0 + i
        ok = b < B
        xs = b * (H * 2 * N) + ps  # x (B, H, N) complex
        xr, xi = _pair(x_ptr, xs, pmask & ok, BLOCK_H, BLOCK_N)
        u1 = tl.load(u_ptr + b * H + h, mask=hmask & ok, other=0.0).to(xr.dtype)  # u (B, H)
        u = u1[:, None]
        nr = er * xr - ei * xi + gr * u
        ni = er * xi + ei * xr + gi * u
        if RANK1:
            r = (k1 * (2 * tl.sum(wr * xr - wi * xi, axis=1)) + k2 * u1)[:, None]  # (BLOCK_H, 1) real
            nr += fr * r
            ni += fi * r
        tl.store(out_ptr + xs, tl.reshape(tl.join(nr, ni), (BLOCK_H, 2 * BLOCK_N)), mask=pmask & ok)
        for ch in tl.static_range(CHANNELS):  # y (B, C, H)
            if CHANNELS == 1:
                cr, ci = cr0, ci0
            else:
                cr, ci = _pair(c_ptr + ch * (H * 2 * N), ps, pmask, BLOCK_H, BLOCK_N)
            yc = 2 * tl.sum(cr * nr - ci * ni, axis=1)
            if HAS_SKIP:
                yc += tl.load(skip_ptr + ch * H + h, mask=hmask, other=0.0).to(yc.dtype) * u1
            tl.store(y_ptr + (b * CHANNELS + ch) * H + h, yc, mask=hmask & ok)


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


def _check_real(op: str, name: str, t: Tensor, shape: tuple, x: Tensor) -> None:
    if tuple(t.shape) != shape or t.is_complex() or t.device != x.device:
        raise ValueError(f"{op}: {name} must be real {shape} on {x.device}, got {t.dtype} {tuple(t.shape)} on "
                         f"{t.device}")


_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _launch(x: Tensor, out: Tensor, u: Tensor, e: Tensor, g: Tensor, c: Tensor, skip: Tensor | None,
            rank1: tuple[Tensor, Tensor, Tensor] | None) -> Tensor:
    """Grid: blocks of batch rows (axis 0, which may exceed 65,535 programs) x blocks of features
    (:func:`launch_blocks`,
    the step's setting in ``BLOCKS``). ``rank1``: (W, F, k) of :func:`dplr_step_parts`, or None for the diagonal
    step."""
    batch, h, n = x.shape
    channels = c.shape[0]
    y = torch.empty((batch, channels, h), dtype=_REAL[x.dtype], device=x.device)
    step = "diag" if rank1 is None else "dplr"
    rows, block_h, block_n = launch_blocks(batch, h, n, step)
    _, _, warps, stages = BLOCKS[step]
    if batch and h:
        vr = torch.view_as_real
        w, f, k = (vr(rank1[0]), vr(rank1[1]), rank1[2].to(y.dtype).contiguous()) if rank1 else (vr(e), vr(e), y)
        grid = (triton.cdiv(batch, rows), triton.cdiv(h, block_h))
        with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
            step_kernel[grid](vr(x), vr(out), u.contiguous(), vr(e), vr(g), w, f, k, vr(c),
                               y if skip is None else skip.contiguous(), y, batch, h, n, CHANNELS=channels,
                               RANK1=rank1 is not None, HAS_SKIP=skip is not None, ROWS=rows, BLOCK_H=block_h,
                               BLOCK_N=block_n, STAGES=stages, num_warps=warps)
    return y


def diag_step(x: Tensor, u: Tensor, da: Tensor, db: Tensor, c: Tensor, out: Tensor | None = None,
              skip: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """x (B, H, N) complex, u (B, H) real, dA, dB (H, N), C (channels, H, N) -> y (B, channels, H) real (plus
    ``skip`` (channels, H) real times u when given) and the new state (``out``, default a new tensor; ``out=x``
    updates in place)."""
    channels = c.shape[0] if c.dim() == 3 else -1
    _check("diag_step", x, u, out, {"dA": (da, tuple(x.shape[1:])), "dB": (db, tuple(x.shape[1:])),
                                    "C": (c, (channels, *x.shape[1:]))})
    if skip is not None:
        _check_real("diag_step", "skip (D)", skip, (channels, x.shape[1]), x)
    out = torch.empty_like(x) if out is None else out
    return _launch(x, out, u, da, db, c, skip, None), out


def dplr_step_parts(lam: Tensor, p: Tensor, d: Tensor, b: Tensor, half: Tensor, inner: Tensor
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """S4's rank-1 bilinear step as a diagonal step with a rank-one correction: (E, G, W, F) (H, N/2) complex and
    k (H, 2) real, such that

        A1 (A0 x + dt B u) = E x + G u + F r,   r = k1 P'x + k2 u,   P'x = 2 Re sum_n W_n x_n (the kept half),

    from Lambda, P, D = (I - dt/2 Lambda)^-1, dt B (H, N/2) complex, half = dt/2 and inner = (1 + dt/2 P^* D P)^-1
    (H,) real (the sums over all N modes). Derivation: with h = dt/2, A0 x = (I + h Lambda) x - h P s, s = P^* x, and
    the Woodbury form A1 z = D z - g h D P (P^* D z), g = inner, sigma = P^* D P, beta = P^* D dt B,

        P^* D z = P^* E x - h sigma s + beta u,   E = D (I + h Lambda),   z = A0 x + dt B u,

    so A1 z = E x + D dt B u + D P r with r = -h s - g h (P^* E x - h sigma s + beta u); since g (1 + h sigma) = 1,
    -h + g h^2 sigma = -g h and r = -g h (P^* (I + E) x + beta u). Hence G = D dt B, F = D P,
    W = conj(P) (1 + E), k1 = -g h, k2 = -g h beta (tests/test_step_triton.py checks the result against the dense
    bilinear step). Computed in complex128 and returned in Lambda's dtype."""
    cdtype, wide = lam.dtype, torch.complex128
    lam, p, d, b = (t.to(wide) for t in (lam, p, d, b))
    h, g = half.to(torch.float64), inner.to(torch.float64)  # (H,)
    e = d * (1 + h[:, None] * lam)  # (H, N/2)
    gb = d * b
    w = p.conj() * (1 + e)
    beta = 2 * (p.conj() * gb).sum(-1).real  # P^* D dt B over all N modes (H,)
    k = torch.stack([-g * h, -g * h * beta], -1)  # (H, 2)
    return (e.to(cdtype).contiguous(), gb.to(cdtype).contiguous(), w.to(cdtype).contiguous(),
            (d * p).to(cdtype).contiguous(), k.to(_REAL[cdtype]).contiguous())


def dplr_rank1_step(x: Tensor, u: Tensor, parts: tuple[Tensor, Tensor, Tensor, Tensor, Tensor], c: Tensor,
                    out: Tensor | None = None, skip: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:func:`dplr_step` from its :func:`dplr_step_parts` (computed once per discretization): x (B, H, N/2)
    complex, u (B, H) real, C (channels, H, N/2) -> y (B, channels, H) real (+ skip u) and the new state."""
    e, gb, w, f, k = parts
    hn = tuple(x.shape[1:])
    channels = c.shape[0] if c.dim() == 3 else -1
    _check("dplr_step", x, u, out, {"E": (e, hn), "G": (gb, hn), "W": (w, hn), "F": (f, hn),
                                    "C": (c, (channels, *hn))})
    _check_real("dplr_step", "k", k, (hn[0], 2), x)
    if skip is not None:
        _check_real("dplr_step", "skip (D)", skip, (channels, hn[0]), x)
    out = torch.empty_like(x) if out is None else out
    return _launch(x, out, u, e, gb, c, skip, (w, f, k)), out


def dplr_step(x: Tensor, u: Tensor, lam: Tensor, p: Tensor, d: Tensor, b: Tensor, c: Tensor, half: Tensor,
              inner: Tensor, out: Tensor | None = None, skip: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """S4's rank-1 bilinear step on one mode of each conjugate pair (the other half of the state is its conjugate).
    x (B, H, N/2) complex, u (B, H) real; Lambda, P, D = (1 - dt/2 Lambda)^-1 and dt B, each (H, N/2); C
    (channels, H, N/2); half = dt / 2 and inner = (1 + dt/2 P^* D P)^-1 (the sum over all N modes), each (H,) real
    -> y (B, channels, H) real (+ skip u) and the new state (``out``; ``out=x`` updates in place)."""
    hn = tuple(x.shape[1:])
    _check("dplr_step", x, u, out, {"Lambda": (lam, hn), "P": (p, hn), "D": (d, hn), "B": (b, hn)})
    for name, t in (("half (dt / 2)", half), ("inner", inner)):
        _check_real("dplr_step", name, t, hn[:1], x)
    return dplr_rank1_step(x, u, dplr_step_parts(lam, p, d, b, half, inner), c, out=out, skip=skip)
