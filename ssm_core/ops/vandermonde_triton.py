"""Log-Vandermonde product as Triton kernels, forward and backward, with a thin autograd wrapper.

S4D (Gu et al., NeurIPS 2022), eq. (7) with the discretized state matrix dA = exp(x) and
Listing 1's last line: the convolution kernel of a diagonal SSM is

    out[b, l] = 2 Re sum_n v[b,n] exp(x[b,n] l),   l = 0 .. L-1.

By powers, as a small matrix product. Write l = m + j with m a multiple of the tile width S
(m = l0 + t S) and 0 <= j < S. Then exp(x l) = exp(x m) exp(x j), so one tile of
BLOCK_T x S outputs is

    out[m_t + j] = 2 Re sum_n P[t, n] Q[n, j],   P[t, n] = v_n exp(x_n m_t),  Q[n, j] = exp(x_n j)

which costs N (BLOCK_T + S) complex exponentials for N BLOCK_T S terms (one exp per tile row
and column, then multiply-adds through tl.dot) instead of an exp, sin and cos per term.
Every table entry is computed directly, not by repeated multiplication, so the error does
not grow with l. The phase Im(x) m is formed exactly in float64 (a 24-bit mantissa times an
integer below 2^24) and reduced modulo 2 pi there before the float32 sin/cos, so even at
l = 16384 with |Im x| ~ 20 the phase error stays ~1e-7 (a float32 product x*l would be off
by ~1e-4 rad there).

Backward (PyTorch's convention; g = dLoss/dout is real):

    grad_v = 2 conj(S0),      S0[n] = sum_l g_l exp(x_n l)
    grad_x = 2 conj(v S1),    S1[n] = sum_l g_l l exp(x_n l)

and, with G the tile of g as BLOCK_T x S and E[n, t] = exp(x_n m_t), the products
W0 += E G and W1 += (E m) G accumulate over tiles; at the end S0 = sum_j Q W0 and
S1 = sum_j Q (W1 + j W0).

Memory: O(B (N + L)); no B x N x L tensor exists. complex64 computes in float32 (tl.dot with
input precision 'ieee' or 'tf32x3', see FWD_PRECISION / BWD_PRECISION; never plain TF32),
complex128 in float64 (tl.dot in float64, small tiles).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .cauchy_triton import (AUTOTUNE, AUTOTUNE_KW, INTERPRET, KERNEL_DTYPES, Launcher, autotune_configs, cdiv,
                            check_device, complex_dtype, contiguous, fast_math, first_order_backward, flat_rows,
                            is_plain, launch_guard, next_pow2, split_count, tuning_bucket)

#: tl.dot input precision of the float32 path, forward and backward: 'ieee' (exact float32
#: products, FMA units) or 'tf32x3' (three TF32 tensor-core passes, ~1e-6 relative error per
#: product, fewer registers). 'tf32' (one pass, ~1e-3) is not allowed.
FWD_PRECISION = "ieee"
BWD_PRECISION = "tf32x3"
_ALLOWED_PRECISIONS = ("ieee", "tf32x3")

#: Largest state block held by one program; larger N is cut into chunks of this size.
MAX_BLOCK_N = 128


@triton.jit
def _exp_table(xr, xi, m, FAST: tl.constexpr):
    """exp((xr + i xi) * m) for integers 0 <= m < 2^24 (tensors broadcast together).

    The phase xi*m is exact in float64 and reduced to [-pi, pi] there (2 pi in two parts), so
    FAST (float32 on CUDA) may use the hardware sin/cos, whose absolute error on [-pi, pi] is
    about 5e-7.
    """
    theta = xi.to(tl.float64) * m.to(tl.float64)
    k = tl.floor(theta * 0.15915494309189535 + 0.5)
    r = ((theta - k * 6.283185307179586) - k * 2.4492935982947064e-16).to(xr.dtype)
    mag = tl.exp(xr * m.to(xr.dtype))
    if FAST:
        c = tl.inline_asm_elementwise("cos.approx.ftz.f32 $0, $1;", "=r,r", [r], dtype=tl.float32, is_pure=True,
                                      pack=1)
        s = tl.inline_asm_elementwise("sin.approx.ftz.f32 $0, $1;", "=r,r", [r], dtype=tl.float32, is_pure=True,
                                      pack=1)
    else:
        c = tl.cos(r)
        s = tl.sin(r)
    return mag * c, mag * s


@triton.jit
def _matmul(a, b, acc, PRECISION: tl.constexpr):
    """acc + a @ b (float32 with the given input precision, or float64)."""
    return tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=acc.dtype)


def _prune(configs, named_args, **kwargs):
    """float64 (the accurate path, not the fast one): one small tile keeps its registers in bounds."""
    if named_args["v_ptr"].dtype == torch.float64:
        small = [c for c in configs if c.kwargs["BLOCK_T"] * c.kwargs["BLOCK_S"] <= 256]
        return small[:1] or [triton.Config({"BLOCK_T": 16, "BLOCK_S": 16}, num_warps=4)]
    return configs if AUTOTUNE else configs[:1]


_FWD_SPACE = [
    ({"BLOCK_T": 32, "BLOCK_S": 64}, 4),
    ({"BLOCK_T": 64, "BLOCK_S": 64}, 4),
    ({"BLOCK_T": 64, "BLOCK_S": 64}, 8),
    ({"BLOCK_T": 32, "BLOCK_S": 128}, 4),
    ({"BLOCK_T": 64, "BLOCK_S": 128}, 8),
    ({"BLOCK_T": 16, "BLOCK_S": 64}, 4),
    ({"BLOCK_T": 16, "BLOCK_S": 16}, 4),
]


@triton.autotune(configs=autotune_configs(_FWD_SPACE, {"BLOCK_T": 16, "BLOCK_S": 16}, keep_last=True), key=["N", "L_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune}, **AUTOTUNE_KW)
@triton.jit
def _vandermonde_fwd_kernel(v_ptr, x_ptr, out_ptr, N, L, L_BUCKET,
                            BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
                            PRECISION: tl.constexpr, FAST: tl.constexpr):
    """out[b, l0 : l0 + BLOCK_T*BLOCK_S] for one row b. v, x: float views (B, N, 2); out: (B, L)."""
    TILE: tl.constexpr = BLOCK_T * BLOCK_S
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(L, TILE)
    b = (pid // n_tiles).to(tl.int64)
    tile = pid % n_tiles
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    row = b * N * 2
    vr = tl.load(v_ptr + row + 2 * offs_n, mask=mask_n, other=0.0)   # padded states: v = 0, x = 0
    vi = tl.load(v_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    xr = tl.load(x_ptr + row + 2 * offs_n, mask=mask_n, other=0.0)
    xi = tl.load(x_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    j = tl.arange(0, BLOCK_S)
    m = tile * TILE + tl.arange(0, BLOCK_T) * BLOCK_S                 # (BLOCK_T,) row starts
    qr, qi = _exp_table(xr[:, None], xi[:, None], j[None, :], FAST)   # Q = exp(x j)   (BLOCK_N, BLOCK_S)
    er, ei = _exp_table(xr[None, :], xi[None, :], m[:, None], FAST)   # exp(x m)       (BLOCK_T, BLOCK_N)
    pr = vr[None, :] * er - vi[None, :] * ei                          # P = v exp(x m)
    pi = vr[None, :] * ei + vi[None, :] * er
    acc = tl.zeros((BLOCK_T, BLOCK_S), dtype=vr.dtype)
    acc = _matmul(pr, qr, acc, PRECISION)                            # Re(P Q)  (BLOCK_T, BLOCK_S)
    acc = _matmul(-pi, qi, acc, PRECISION)
    offs_l = m[:, None] + j[None, :]
    tl.store(out_ptr + b * L + offs_l, 2.0 * acc, mask=offs_l < L)


_BWD_SPACE = [
    ({"BLOCK_T": 32, "BLOCK_S": 32}, 4),
    ({"BLOCK_T": 32, "BLOCK_S": 64}, 4),
    ({"BLOCK_T": 64, "BLOCK_S": 32}, 4),
    ({"BLOCK_T": 64, "BLOCK_S": 64}, 8),
    ({"BLOCK_T": 16, "BLOCK_S": 64}, 4),
    ({"BLOCK_T": 16, "BLOCK_S": 16}, 4),
]


@triton.autotune(configs=autotune_configs(_BWD_SPACE, {"BLOCK_T": 16, "BLOCK_S": 16}, keep_last=True), key=["N", "L_BUCKET"],
                 prune_configs_by={"early_config_prune": _prune}, **AUTOTUNE_KW)
@triton.jit
def _vandermonde_bwd_kernel(v_ptr, x_ptr, g_ptr, d_ptr, B, N, L, L_BUCKET, SPLITS,
                            BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
                            PRECISION: tl.constexpr, FAST: tl.constexpr):
    """Partial grad_v, grad_x of row b over the tiles s, s+SPLITS, ... -> d[0, s, b, n], d[1, s, b, n]
    (float view (2, SPLITS, B, N, 2)).

    Accumulates over tiles W0[n, j] = sum_t exp(x_n m_t) g[m_t + j] and W1[n, j] = sum_t m_t exp(x_n m_t)
    g[m_t + j], then S0[n] = sum_j Q[n, j] W0[n, j] and S1[n] = sum_j Q[n, j] (W1[n, j] + j W0[n, j]).
    """
    TILE: tl.constexpr = BLOCK_T * BLOCK_S
    pid = tl.program_id(0)
    s = pid % SPLITS
    b = (pid // SPLITS).to(tl.int64)
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    row = b * N * 2
    vr = tl.load(v_ptr + row + 2 * offs_n, mask=mask_n, other=0.0)
    vi = tl.load(v_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    xr = tl.load(x_ptr + row + 2 * offs_n, mask=mask_n, other=0.0)
    xi = tl.load(x_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    j = tl.arange(0, BLOCK_S)
    w0r = tl.zeros((BLOCK_N, BLOCK_S), dtype=vr.dtype)
    w0i = tl.zeros((BLOCK_N, BLOCK_S), dtype=vr.dtype)
    w1r = tl.zeros((BLOCK_N, BLOCK_S), dtype=vr.dtype)
    w1i = tl.zeros((BLOCK_N, BLOCK_S), dtype=vr.dtype)
    n_tiles = tl.cdiv(L, TILE)
    for tile in range(s, n_tiles, SPLITS):
        m = tile * TILE + tl.arange(0, BLOCK_T) * BLOCK_S                   # (BLOCK_T,) row starts
        offs_l = m[:, None] + j[None, :]
        g = tl.load(g_ptr + b * L + offs_l, mask=offs_l < L, other=0.0)     # (BLOCK_T, BLOCK_S), 0 past L
        er, ei = _exp_table(xr[:, None], xi[:, None], m[None, :], FAST)     # exp(x m)  (BLOCK_N, BLOCK_T)
        w0r = _matmul(er, g, w0r, PRECISION)                            # (BLOCK_N, BLOCK_S)
        w0i = _matmul(ei, g, w0i, PRECISION)
        mf = m.to(vr.dtype)[None, :]
        w1r = _matmul(er * mf, g, w1r, PRECISION)
        w1i = _matmul(ei * mf, g, w1i, PRECISION)
    qr, qi = _exp_table(xr[:, None], xi[:, None], j[None, :], FAST)         # Q = exp(x j)  (BLOCK_N, BLOCK_S)
    s0r = tl.sum(qr * w0r - qi * w0i, axis=1)                               # S0 = sum_j Q W0
    s0i = tl.sum(qr * w0i + qi * w0r, axis=1)
    jf = j.to(vr.dtype)[None, :]
    k1r = w1r + jf * w0r
    k1i = w1i + jf * w0i
    s1r = tl.sum(qr * k1r - qi * k1i, axis=1)                               # S1 = sum_j Q (W1 + j W0)
    s1i = tl.sum(qr * k1i + qi * k1r, axis=1)
    out = (s * B + b) * N * 2 + 2 * offs_n
    dv_ptr = d_ptr
    dx_ptr = d_ptr + SPLITS * B * N * 2
    tl.store(dv_ptr + out, 2.0 * s0r, mask=mask_n)                            # grad_v = 2 conj(S0)
    tl.store(dv_ptr + out + 1, -2.0 * s0i, mask=mask_n)
    tl.store(dx_ptr + out, 2.0 * (vr * s1r - vi * s1i), mask=mask_n)          # grad_x = 2 conj(v S1)
    tl.store(dx_ptr + out + 1, -2.0 * (vr * s1i + vi * s1r), mask=mask_n)


# ----------------------------------------------------------------------------- launchers

_FWD_LAUNCH = Launcher(_vandermonde_fwd_kernel)
_BWD_LAUNCH = Launcher(_vandermonde_bwd_kernel)
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


_OPTIONS: dict[tuple, dict] = {}


def _kernel_options(dtype: torch.dtype, n: int, precision: str) -> dict:
    """The constexpr arguments of a launch (cached per dtype, N and precision)."""
    key = (dtype, n, precision)
    opts = _OPTIONS.get(key)
    if opts is None:
        if precision not in _ALLOWED_PRECISIONS:
            raise ValueError(f"vandermonde_triton: dot precision {precision!r} is not allowed; allowed: "
                             f"{_ALLOWED_PRECISIONS} (FWD_PRECISION / BWD_PRECISION)")
        fp64 = dtype == torch.complex128
        opts = _OPTIONS[key] = {"BLOCK_N": max(16, next_pow2(n)),
                                "PRECISION": "ieee" if fp64 or INTERPRET else precision, "FAST": fast_math(dtype)}
    return opts


def _forward_block(v: Tensor, x: Tensor, length: int) -> Tensor:
    """v, x: (B, N) contiguous with N <= MAX_BLOCK_N -> (B, length) real."""
    B, N = v.shape
    out = torch.empty((B, length), dtype=_REAL_OF[v.dtype], device=v.device)
    _FWD_LAUNCH(lambda meta: (B * cdiv(length, meta["BLOCK_T"] * meta["BLOCK_S"]),), v, x, out, N, length,
                tuning_bucket(length),
                **_kernel_options(v.dtype, N, FWD_PRECISION))
    return out


def _backward_block(v: Tensor, x: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """(grad_v, grad_x), each (B, N), for grad = dLoss/dout (B, L) real, contiguous."""
    B, N = v.shape
    L = grad.shape[-1]
    splits = split_count(B, cdiv(L, 2048), v.device)
    d = torch.empty((2, splits, B, N), dtype=v.dtype, device=v.device)  # (grad_v, grad_x) x partial sums
    _BWD_LAUNCH(lambda meta: (B * splits,), v, x, grad, d, B, N, L, tuning_bucket(L), splits,
                **_kernel_options(v.dtype, N, BWD_PRECISION))
    d = d.sum(1) if splits > 1 else d.view(2, B, N)
    return d[0], d[1]


def _forward(v: Tensor, x: Tensor, length: int) -> Tensor:
    B, N = v.shape
    if B == 0 or N == 0:
        return torch.zeros((B, length), dtype=_REAL_OF[v.dtype], device=v.device)
    if N <= MAX_BLOCK_N:
        return _forward_block(v, x, length)
    out = _forward_block(v[:, :MAX_BLOCK_N].contiguous(), x[:, :MAX_BLOCK_N].contiguous(), length)
    for n0 in range(MAX_BLOCK_N, N, MAX_BLOCK_N):
        out += _forward_block(v[:, n0:n0 + MAX_BLOCK_N].contiguous(), x[:, n0:n0 + MAX_BLOCK_N].contiguous(), length)
    return out


def _backward(v: Tensor, x: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    B, N = v.shape
    if B == 0 or N == 0:
        return torch.zeros_like(v), torch.zeros_like(x)
    grad = contiguous(grad)
    if N <= MAX_BLOCK_N:
        return _backward_block(v, x, grad)
    parts = [_backward_block(v[:, n0:n0 + MAX_BLOCK_N].contiguous(), x[:, n0:n0 + MAX_BLOCK_N].contiguous(), grad)
             for n0 in range(0, N, MAX_BLOCK_N)]
    return torch.cat([p[0] for p in parts], dim=-1), torch.cat([p[1] for p in parts], dim=-1)


class _LogVandermondeFunction(torch.autograd.Function):
    """Autograd wrapper: v, x (B, N) of one complex dtype, contiguous -> (B, length) real."""

    @staticmethod
    def forward(ctx, v: Tensor, x: Tensor, length: int) -> Tensor:
        ctx.save_for_backward(v, x)
        with launch_guard(v.device):
            return _forward(v, x, length)

    def _grads(ctx, grad: Tensor):
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_v or need_x):
            return None, None, None
        v, x = ctx.saved_tensors
        with launch_guard(v.device):
            dv, dx = _backward(v, x, grad)
        return (dv if need_v else None), (dx if need_x else None), None

    backward = first_order_backward(_grads)
    del _grads


def log_vandermonde_triton(v: Tensor, x: Tensor, length: int) -> Tensor:
    """2 Re sum_n v_n exp(x_n l) for l = 0 .. length-1 (S4D eq. 7, Listing 1).

    v, x: (..., N) complex -> (..., length) real. complex64 computes in float32, complex128 in
    float64; real inputs are promoted. Gradients flow to v and x. length must be < 2^24.
    """
    dtype = v.dtype
    if (dtype in KERNEL_DTYPES and x.dtype is dtype and v.dim() == 2 and v.shape == x.shape and type(length) is int
            and 1 <= length < 2 ** 24 and (v.is_cuda or INTERPRET) and is_plain(v) and is_plain(x)
            and v.device == x.device):
        # the common case (the S4D kernel's call): nothing to convert
        if torch.is_grad_enabled() and (v.requires_grad or x.requires_grad):
            return _LogVandermondeFunction.apply(v, x, length)
        with launch_guard(v.device):
            return _forward(v, x, length)
    op = "log_vandermonde (triton)"
    if v.shape != x.shape:
        raise ValueError(f"{op}: v and x must have the same shape, got {tuple(v.shape)} and {tuple(x.shape)}")
    if v.dim() < 1:
        raise ValueError(f"{op}: v and x must have a last axis N, got a 0-d tensor")
    length = int(length)
    if not 1 <= length < 2 ** 24:
        raise ValueError(f"{op}: length must be in [1, 2^24), got {length}")
    check_device(v, x, op=op)
    dtype = complex_dtype(v, x, op=op)
    out = _LogVandermondeFunction.apply(flat_rows(v, dtype), flat_rows(x, dtype), length)  # (B, length)
    return out if v.dim() == 2 else out.reshape(*v.shape[:-1], length)
