"""Symmetric Cauchy product as Triton kernels, forward and backward, with a thin autograd wrapper.

S4 (Gu et al., ICLR 2022), Algorithm 1 step 3 and Lemma C.3: the generating function of the
DPLR kernel at the nodes z is a sum of Cauchy terms. With the state stored as halves of
conjugate pairs the product is symmetric:

    out[b, l] = sum_n v[b,n] / (z[l] - w[b,n]) + conj(v[b,n]) / (z[l] - conj(w[b,n]))

Forward. The two terms of a pair share one denominator. With a = Re z - Re w:

    v/(z-w) + v̄/(z-w̄) = (2 Re v * a - 2 Im v Im w + 2i Re v Im z) / D,
    D = (z-w)(z-w̄) = a² - (Im z - Im w)(Im z + Im w) + 2i a Im z,

so each (n, l) costs one real reciprocal; D is formed from differences, not from the expanded
quadratic, so its rounding error stays below 2 eps |D| (near-unstable w, real w included).

Backward (PyTorch's convention for complex gradients, conjugate Wirtinger): with g = dLoss/dout,

    grad_v = conj(S1),      S1[n] = sum_l ḡ_l / (z_l - w) + g_l / (z̄_l - w)
    grad_w = conj(v * S2),  S2[n] = sum_l ḡ_l / (z_l - w)² + g_l / (z̄_l - w)²

and again the pair shares E = (z-w)(z̄-w) = a² + (Im z - Im w)(Im z + Im w) - 2i a Im w:

    S1 terms = 2 (Re g * a - Im g Im z - i Re g Im w) / E
    S2 terms = (2 Re g - 4 Im z * q / E) / E,   q = Re g Im z + Im g (a - i Im w).

Scaling. Nodes far from the poles (|z| up to ~1e4 for S4's bilinear nodes at L = 16384, and
~1e8 next to omega = -1) would overflow |D|²; every geometric quantity is multiplied by
kappa_l ~ 1 / max(1, |Re z_l|, |Im z_l|), which leaves each term unchanged. kappa_l is a power of two (the
one that puts max(1, |Re z_l|, |Im z_l|) kappa_l in [0.5, 1)), so the scaled differences kappa (Im z - Im w) are
computed as exactly as Im z - Im w itself, also next to a pole.

Memory: O(B (N + L)). The forward kernel holds a (BLOCK_N, BLOCK_L) tile in registers and
loops over n; the backward kernel loops over l and reduces in registers; nothing of size
B x N x L exists. complex64 computes in float32, complex128 in float64.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from .backend import BackendUnavailable

try:  # triton >= 3.4 keeps its environment switches in triton.knobs
    from triton import knobs as _knobs

    INTERPRET = bool(_knobs.runtime.interpret)
except (ImportError, AttributeError):  # pragma: no cover - older triton
    INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


#: Minimum number of programs the backward kernel aims for (None: 2 x the GPU's SM count on
#: CUDA, 1 under the interpreter). Tests lower it to exercise the split-over-L path.
MIN_PROGRAMS: int | None = None


# ----------------------------------------------------------------------------- shared helpers
# (also used by vandermonde_triton.py)

#: SSM_TRITON_AUTOTUNE=0 (read at import) uses the first config of each search space instead of
#: timing them all (quick test runs on a GPU; the `gpu` tests check every config explicitly).
AUTOTUNE = os.environ.get("SSM_TRITON_AUTOTUNE", "1") != "0"


def autotune_configs(space: list[tuple[dict, int]], interpret: dict, keep_last: bool = False) -> list[triton.Config]:
    """The GPU search space, or one small config under TRITON_INTERPRET (keeps CPU tests fast).

    Without AUTOTUNE: the first config (and the last too when keep_last, for a pruning function
    that picks it for some dtypes).
    """
    if INTERPRET:
        return [triton.Config(interpret, num_warps=1)]
    configs = [triton.Config(kw, num_warps=w) for kw, w in space]
    if AUTOTUNE:
        return configs
    return [configs[0], configs[-1]] if keep_last and len(configs) > 1 else configs[:1]


def _tuning_bench(kernel_call, quantiles):
    """Shorter timing runs than Triton's default while autotuning (10 ms warm-up, 40 ms)."""
    return triton.testing.do_bench(kernel_call, warmup=10, rep=40, quantiles=quantiles)


#: Keyword arguments of every triton.autotune here: quick timing, choices cached on disk.
AUTOTUNE_KW = {"do_bench": _tuning_bench, "cache_results": True}


def check_device(*tensors: Tensor, op: str) -> torch.device:
    """All tensors on one device, and that device can run Triton here (else BackendUnavailable)."""
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise ValueError(f"{op}: all inputs must be on one device, got {device} and {t.device}")
    if device.type == "cpu" and not INTERPRET:
        raise BackendUnavailable(
            f"{op}: Triton kernels got CPU tensors but {__name__} was imported without TRITON_INTERPRET=1 "
            "(set it before the first import of the kernels, or use backend='torch')")
    if device.type not in ("cpu", "cuda"):
        raise BackendUnavailable(f"{op}: Triton kernels support CUDA tensors, not device type '{device.type}'")
    return device


_REAL_OK = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPLEX_OK = (torch.complex32, torch.complex64, torch.complex128)


def complex_dtype(*tensors: Tensor, op: str) -> torch.dtype:
    """complex128 if any input is double precision, else complex64 (the fast path)."""
    wide = False
    for t in tensors:
        if t.dtype not in _REAL_OK + _COMPLEX_OK:
            raise TypeError(f"{op}: inputs must be floating or complex tensors (complex64 or complex128 "
                            f"preferred), got {t.dtype}")
        wide |= t.dtype in (torch.float64, torch.complex128)
    return torch.complex128 if wide else torch.complex64


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def min_programs(device: torch.device) -> int:
    if MIN_PROGRAMS is not None:
        return MIN_PROGRAMS
    if device.type == "cuda":
        return 2 * _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 1


def split_count(rows: int, max_splits: int, device: torch.device) -> int:
    """How many programs share one row's reduction over L so that the grid fills the device."""
    want = cdiv(min_programs(device), max(rows, 1))
    return max(1, min(want, max_splits))


def fast_math(dtype: torch.dtype) -> bool:
    """Hardware rcp/sin/cos (inline PTX) for the compiled float32 path; exact library calls otherwise."""
    return dtype == torch.complex64 and not INTERPRET


#: SSM_TRITON_FAST_LAUNCH=0 (read at import) always goes through Triton's own launch path.
FAST_LAUNCH = os.environ.get("SSM_TRITON_FAST_LAUNCH", "1") != "0"


class Launcher:
    """Launch a Triton kernel (autotuned or plain); repeat launches skip Triton's Python dispatch.

    ``launcher(grid, *args, **meta)``: grid is a function of the kernel's keyword arguments (the
    chosen config included) returning the grid tuple; args are the kernel's positional arguments:
    complex tensors (passed as float pointers to their (re, im) storage), real tensors or ints.
    The first launch for a given key (CUDA device, every int argument's value, every tensor's dtype
    and 16-byte alignment, the keyword arguments) goes through Triton, which autotunes / compiles;
    later launches with that key call the compiled kernel directly with the tensors' addresses. The
    key holds everything Triton specializes a compiled kernel on, so the cached kernel is the one
    Triton would have run. Under the interpreter, with FAST_LAUNCH off, or with a Triton launch hook
    installed (profilers), every launch goes through Triton.
    """

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        fn = getattr(kernel, "fn", None)  # an Autotuner wraps the JIT function; a JIT function wraps a Python one
        fn = fn if hasattr(fn, "arg_names") else kernel
        self.names = list(fn.arg_names)
        self.interpreted = type(fn).__name__ == "InterpretedFunction"  # jit-decorated under TRITON_INTERPRET=1
        self.cache: dict[tuple, tuple] = {}

    def __call__(self, grid, *args, **meta) -> None:
        if self.interpreted or not FAST_LAUNCH or _launch_hooks_installed():
            self.kernel[grid](*[_float_view(a) for a in args], **meta)
            return
        device = torch.cuda.current_device()
        values = []
        key = [device]
        for a in args:
            if isinstance(a, Tensor):
                ptr = a.data_ptr()
                values.append(ptr)
                key.append((a.dtype, ptr & 15 == 0))
            else:
                values.append(a)
                key.append(a)
        key.extend(meta.items())
        key = tuple(key)
        hit = self.cache.get(key)
        if hit is None:
            compiled = self.kernel[grid](*[_float_view(a) for a in args], **meta)
            best = getattr(self.kernel, "best_config", None)  # autotuned kernels: the config it chose
            merged = {**meta, **(best.kwargs if best is not None else {})}
            tail = tuple(merged[name] for name in self.names[len(args):])
            run = compiled.run  # (loads the module on first use)
            self.cache[key] = (run, compiled.function, compiled.packed_metadata, merged, tail)
            return
        run, function, packed, merged, tail = hit
        g = grid(merged)
        run(g[0], g[1] if len(g) > 1 else 1, g[2] if len(g) > 2 else 1, torch._C._cuda_getCurrentRawStream(device),
            function, packed, None, None, None, *values, *tail)


def _float_view(a):
    return torch.view_as_real(a) if isinstance(a, Tensor) and a.is_complex() else a


def _launch_hooks_installed() -> bool:
    try:
        hook = _knobs.runtime.launch_enter_hook
    except (NameError, AttributeError):  # pragma: no cover - older triton
        return False
    calls = getattr(hook, "calls", None)  # triton 3.6: a (usually empty) HookChain
    return bool(calls) if calls is not None else hook is not None


def cdiv(a: int, b: int) -> int:
    """Ceiling division of Python ints (triton.cdiv costs a wrapper call per use on the host)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def tuning_bucket(length: int) -> int:
    """The autotuning key of a length (kernel argument L_BUCKET): the next power of two.

    The kernels mask their tails, so every config is correct at every length; keying the tuning on the exact
    length would re-time all configs for each new length of a variable-length batch (ListOps pads to the batch
    maximum), which costs seconds per length.
    """
    return next_pow2(length)


def flat_rows(t: Tensor, dtype: torch.dtype) -> Tensor:
    """(..., N) -> contiguous (B, N) of `dtype` (no copy when t already is one)."""
    if t.dtype != dtype:
        t = t.to(dtype)
    if t.dim() != 2:
        t = t.reshape(-1, t.shape[-1])
    return contiguous(t)


#: The dtypes the kernels compute in (complex64 in float32, complex128 in float64).
KERNEL_DTYPES = (torch.complex64, torch.complex128)


def is_plain(t: Tensor) -> bool:
    """Contiguous storage without lazy conjugate / negative bits (what the kernels read as is)."""
    return t.is_contiguous() and not (t.is_conj() or t.is_neg())


def contiguous(t: Tensor) -> Tensor:
    """t with plain, contiguous storage (materializes lazy conj/neg bits only when present)."""
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    return t if t.is_contiguous() else t.contiguous()


def first_order_backward(grads_fn):
    """A Function.backward from ``grads_fn(ctx, *grad_outputs)``: called directly in the usual case (grad mode is off
    inside backward), and through torch's once_differentiable under create_graph=True, so that differentiating the
    result again is an error rather than a silent zero. (once_differentiable on every call would cost the host a
    no_grad context per backward.)"""
    once = once_differentiable(grads_fn)

    def backward(ctx, *grad_outputs):
        return once(ctx, *grad_outputs) if torch.is_grad_enabled() else grads_fn(ctx, *grad_outputs)

    return staticmethod(backward)


def launch_guard(device: torch.device):
    """Triton launches on the current CUDA device; make it the tensors' device."""
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return _NullContext()


class _NullContext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ----------------------------------------------------------------------------- forward kernel

@triton.jit
def _pow2_kappa(zr, zi):
    """kappa = 2^-(e+1) for 2^e <= m = max(1, |Re z|, |Im z|) < 2^(e+1) (so m kappa is in [0.5, 1)), read off m's
    exponent bits. A power of two makes every product with kappa exact, so kappa Im z - kappa Im w is the exactly
    scaled difference: near a pole (z ~ w or z ~ conj(w)) it keeps the exactness of Im z - Im w, which the
    separately rounded products of kappa = 1 / m lose (errors of order eps |z| / |z - w| relative)."""
    m = tl.maximum(tl.maximum(tl.abs(zr), tl.abs(zi)), 1.0)
    if m.dtype == tl.float64:
        e = (m.to(tl.int64, bitcast=True) >> 52) & 0x7FF
        kappa = ((2045 - e) << 52).to(tl.float64, bitcast=True)
    else:
        e = (m.to(tl.int32, bitcast=True) >> 23) & 0xFF
        kappa = ((253 - e) << 23).to(tl.float32, bitcast=True)
    return kappa


@triton.jit
def _rcp(x, FAST: tl.constexpr):
    """1/x; FAST (float32 on CUDA): one hardware reciprocal (rcp.approx.ftz, ~1 ulp) without the
    range fix-ups of '/', which the kappa scaling makes unnecessary."""
    if FAST:
        y = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                      pack=1)
    else:
        y = 1.0 / x
    return y


@triton.jit
def _load_pairs(v_row, w_row, offs_n, N, MASKED: tl.constexpr):
    """v, w at the states offs_n (BLOCK_N,); past N: v = 0 and the pole w = -1 (their terms are masked)."""
    if MASKED:
        mask_n = offs_n < N
        vr = tl.load(v_row + 2 * offs_n, mask=mask_n, other=0.0)
        vi = tl.load(v_row + 2 * offs_n + 1, mask=mask_n, other=0.0)
        wr = tl.load(w_row + 2 * offs_n, mask=mask_n, other=-1.0)
        wi = tl.load(w_row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    else:
        vr = tl.load(v_row + 2 * offs_n)
        vi = tl.load(v_row + 2 * offs_n + 1)
        wr = tl.load(w_row + 2 * offs_n)
        wi = tl.load(w_row + 2 * offs_n + 1)
    return vr, vi, wr, wi


@triton.jit
def _fwd_terms(acc_re, acc_im, vr, vi, wr, wi, offs_n, N, zrk, zik, zik2, kappa, MASKED: tl.constexpr,
               FAST: tl.constexpr):
    """Add the pairs (vr + i vi, wr + i wi) (BLOCK_N,) to the (BLOCK_N, BLOCK_L) accumulators (scaled by 1/kappa)."""
    alpha = (2.0 * vr)[:, None]                         # (BLOCK_N, 1)
    c = (-2.0 * vi * wi)[:, None]
    wr2 = wr[:, None]
    wi2 = wi[:, None]
    k2 = kappa[None, :]                                 # (1, BLOCK_L)
    a = zrk[None, :] - wr2 * k2                         # kappa (Re z - Re w)      (BLOCK_N, BLOCK_L)
    b1 = zik[None, :] - wi2 * k2                        # kappa (Im z - Im w)
    b2 = zik[None, :] + wi2 * k2                        # kappa (Im z + Im w)
    d_re = a * a - b1 * b2                              # kappa² D
    d_im = a * zik2[None, :]
    inv = _rcp(d_re * d_re + d_im * d_im, FAST)         # 1 / |kappa² D|²
    if MASKED:
        inv = tl.where((offs_n < N)[:, None], inv, 0.0)
    n_re = alpha * a + c * k2                           # kappa * numerator
    n_im = alpha * zik[None, :]
    acc_re = acc_re + (n_re * d_re + n_im * d_im) * inv  # numerator * conj(D) / |D|²
    acc_im = acc_im + (n_im * d_re - n_re * d_im) * inv
    return acc_re, acc_im


_FWD_SPACE = [
    ({"BLOCK_N": 2, "BLOCK_L": 1024, "PREFETCH": True}, 4),
    # fastest on an H200 at L = 4096 and 16384, N/2 = 32 (results/diagnostics/cauchy_probe_20261126T0921.log):
    ({"BLOCK_N": 1, "BLOCK_L": 1024, "PREFETCH": True}, 4),
    ({"BLOCK_N": 1, "BLOCK_L": 2048, "PREFETCH": True}, 8),
    ({"BLOCK_N": 4, "BLOCK_L": 512, "PREFETCH": True}, 4),
    ({"BLOCK_N": 2, "BLOCK_L": 512, "PREFETCH": True}, 4),
    ({"BLOCK_N": 2, "BLOCK_L": 1024, "PREFETCH": True}, 8),
    ({"BLOCK_N": 2, "BLOCK_L": 2048, "PREFETCH": True}, 8),
    ({"BLOCK_N": 8, "BLOCK_L": 256, "PREFETCH": True}, 4),
    ({"BLOCK_N": 2, "BLOCK_L": 1024, "PREFETCH": False}, 4),
    ({"BLOCK_N": 4, "BLOCK_L": 512, "PREFETCH": False}, 4),
]


@triton.autotune(configs=autotune_configs(_FWD_SPACE, {"BLOCK_N": 4, "BLOCK_L": 32, "PREFETCH": True}),
                 key=["N", "L_BUCKET"], **AUTOTUNE_KW)
@triton.jit
def _cauchy_fwd_kernel(v_ptr, w_ptr, z_ptr, out_ptr, N, L, L_BUCKET,
                       BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, PREFETCH: tl.constexpr, FAST: tl.constexpr):
    """out[b, l] for one row b and BLOCK_L nodes. Pointers are float views (..., 2) of complex data.

    PREFETCH loads the next BLOCK_N pairs while the current ones are summed.
    """
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(L, BLOCK_L)
    b = (pid // n_tiles).to(tl.int64)
    tile = pid % n_tiles
    offs_l = tile * BLOCK_L + tl.arange(0, BLOCK_L)
    mask_l = offs_l < L
    zr = tl.load(z_ptr + 2 * offs_l, mask=mask_l, other=0.0)
    zi = tl.load(z_ptr + 2 * offs_l + 1, mask=mask_l, other=0.0)
    kappa = _pow2_kappa(zr, zi)                                         # (BLOCK_L,)
    zrk = zr * kappa
    zik = zi * kappa
    zik2 = 2.0 * zik
    v_row = v_ptr + b * N * 2
    w_row = w_ptr + b * N * 2
    acc_re = tl.zeros((BLOCK_N, BLOCK_L), dtype=zr.dtype)
    acc_im = tl.zeros((BLOCK_N, BLOCK_L), dtype=zr.dtype)
    offs = tl.arange(0, BLOCK_N)
    n_full = (N // BLOCK_N) * BLOCK_N
    if PREFETCH:  # indices clamped to N - 1 keep the loads in bounds; clamped copies are masked out below
        vr, vi, wr, wi = _load_pairs(v_row, w_row, tl.minimum(offs, N - 1), N, False)
        for n0 in range(0, n_full, BLOCK_N):
            nvr, nvi, nwr, nwi = _load_pairs(v_row, w_row, tl.minimum(n0 + BLOCK_N + offs, N - 1), N, False)
            acc_re, acc_im = _fwd_terms(acc_re, acc_im, vr, vi, wr, wi, n0 + offs, N, zrk, zik, zik2, kappa,
                                        False, FAST)
            vr, vi, wr, wi = nvr, nvi, nwr, nwi
    else:
        for n0 in range(0, n_full, BLOCK_N):
            vr, vi, wr, wi = _load_pairs(v_row, w_row, n0 + offs, N, False)
            acc_re, acc_im = _fwd_terms(acc_re, acc_im, vr, vi, wr, wi, n0 + offs, N, zrk, zik, zik2, kappa,
                                        False, FAST)
        vr, vi, wr, wi = _load_pairs(v_row, w_row, n_full + offs, N, True)
    if n_full < N:  # the last, partial block of pairs
        acc_re, acc_im = _fwd_terms(acc_re, acc_im, vr, vi, wr, wi, n_full + offs, N, zrk, zik, zik2, kappa,
                                    True, FAST)
    out_re = tl.sum(acc_re, axis=0) * kappa
    out_im = tl.sum(acc_im, axis=0) * kappa
    out_row = out_ptr + b * L * 2
    tl.store(out_row + 2 * offs_l, out_re, mask=mask_l)
    tl.store(out_row + 2 * offs_l + 1, out_im, mask=mask_l)


# ----------------------------------------------------------------------------- backward kernel

@triton.jit
def _bwd_tile(acc1r, acc1i, acc2r, acc2i, z_ptr, g_row, l0, L, wr, wi,
              BLOCK_L: tl.constexpr, MASKED: tl.constexpr, FAST: tl.constexpr):
    """Add the nodes l0 .. l0+BLOCK_L-1 to the S1 (halved) and S2 accumulators (BLOCK_N, BLOCK_L)."""
    offs_l = l0 + tl.arange(0, BLOCK_L)
    if MASKED:
        mask_l = offs_l < L
        zr = tl.load(z_ptr + 2 * offs_l, mask=mask_l, other=0.0)
        zi = tl.load(z_ptr + 2 * offs_l + 1, mask=mask_l, other=0.0)
        gr = tl.load(g_row + 2 * offs_l, mask=mask_l, other=0.0)
        gi = tl.load(g_row + 2 * offs_l + 1, mask=mask_l, other=0.0)
    else:
        zr = tl.load(z_ptr + 2 * offs_l)
        zi = tl.load(z_ptr + 2 * offs_l + 1)
        gr = tl.load(g_row + 2 * offs_l)
        gi = tl.load(g_row + 2 * offs_l + 1)
    # per node (BLOCK_L,), shared by the BLOCK_N rows
    kappa = _pow2_kappa(zr, zi)
    zik_l = zi * kappa
    g1r = gr * kappa                                    # kappa g    (S1 terms)
    g1i = gi * kappa
    g2r = g1r * kappa                                   # kappa² g   (S2 terms)
    g2i = g1i * kappa
    m4zik = -4.0 * zik_l
    # per node, broadcast over the BLOCK_N rows
    zrk = (zr * kappa)[None, :]
    zik = zik_l[None, :]
    k2x = (2.0 * kappa)[None, :]
    h = (g1i * zik_l)[None, :]
    g1r_b = g1r[None, :]
    g1r_h = (0.5 * g1r)[None, :]
    two_g2r = (2.0 * g2r)[None, :]
    qa = (m4zik * g2i)[None, :]                         # -4 Im z times q, folded in
    qp = (m4zik * g2r * zik_l)[None, :]
    qw = (2.0 * zik_l * g2i)[None, :]

    a = zrk - wr * (0.5 * k2x)                          # kappa (Re z - Re w)   (BLOCK_N, BLOCK_L); wr, wi (BLOCK_N, 1)
    wik2 = wi * k2x                                     # 2 kappa Im w
    b1 = zik - 0.5 * wik2                               # kappa (Im z - Im w)
    b2 = zik + 0.5 * wik2                               # kappa (Im z + Im w)
    e_re = a * a + b1 * b2                              # kappa² E, E = (z-w)(z̄-w)
    e_m = a * wik2                                      # -Im(kappa² E)
    inv = _rcp(e_re * e_re + e_m * e_m, FAST)
    if MASKED:
        inv = tl.where(mask_l[None, :], inv, 0.0)
    ir = e_re * inv                                     # 1/E = conj(E)/|E|²
    ii = e_m * inv
    # S1 / 2: (Re g a - Im g Im z - i Re g Im w) / E
    n1r = g1r_b * a - h
    n1i = g1r_h * wik2                                  # minus the imaginary part
    acc1r = acc1r + n1r * ir + n1i * ii                 # (left to right: two fused multiply-adds)
    acc1i = acc1i + n1r * ii - n1i * ir
    # S2: (2 Re g + t / E) / E with t = -4 Im z q,  q = Re g Im z + Im g (a - i Im w)
    tr = qa * a + qp
    ti = qw * wik2                                      # Im t = 4 Im z Im g Im w
    sr = two_g2r + tr * ir - ti * ii
    si = tr * ii + ti * ir
    acc2r = acc2r + sr * ir - si * ii
    acc2i = acc2i + sr * ii + si * ir
    return acc1r, acc1i, acc2r, acc2i


_BWD_SPACE = [
    ({"BLOCK_N": 8, "BLOCK_L": 128}, 4),
    ({"BLOCK_N": 8, "BLOCK_L": 64}, 2),
    ({"BLOCK_N": 16, "BLOCK_L": 128}, 4),
    ({"BLOCK_N": 16, "BLOCK_L": 256}, 8),
    ({"BLOCK_N": 16, "BLOCK_L": 64}, 2),
    ({"BLOCK_N": 32, "BLOCK_L": 64}, 4),
    ({"BLOCK_N": 16, "BLOCK_L": 64}, 4),
]


@triton.autotune(configs=autotune_configs(_BWD_SPACE, {"BLOCK_N": 4, "BLOCK_L": 16}), key=["N", "L_BUCKET"],
                 **AUTOTUNE_KW)
@triton.jit
def _cauchy_bwd_kernel(v_ptr, w_ptr, z_ptr, g_ptr, d_ptr, B, N, L, L_BUCKET, SPLITS,
                       BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, FAST: tl.constexpr):
    """grad_v, grad_w for one row b, BLOCK_N pairs, and the share s of the nodes (tiles s, s+SPLITS, ...).

    Writes partial gradients to d[0, s, b, n] (grad_v) and d[1, s, b, n] (grad_w) (float view (2, SPLITS, B, N, 2)).
    """
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    s = pid % SPLITS
    rest = pid // SPLITS
    nb = rest % n_blocks
    b = (rest // n_blocks).to(tl.int64)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    row = b * N * 2
    vr = tl.load(v_ptr + row + 2 * offs_n, mask=mask_n, other=0.0)
    vi = tl.load(v_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    # padded rows (never stored) get the pole w = -1 so that they stay finite
    wr = tl.load(w_ptr + row + 2 * offs_n, mask=mask_n, other=-1.0)
    wi = tl.load(w_ptr + row + 2 * offs_n + 1, mask=mask_n, other=0.0)
    wr2 = wr[:, None]
    wi2 = wi[:, None]
    g_row = g_ptr + b * L * 2
    acc1r = tl.zeros((BLOCK_N, BLOCK_L), dtype=vr.dtype)
    acc1i = tl.zeros((BLOCK_N, BLOCK_L), dtype=vr.dtype)
    acc2r = tl.zeros((BLOCK_N, BLOCK_L), dtype=vr.dtype)
    acc2i = tl.zeros((BLOCK_N, BLOCK_L), dtype=vr.dtype)
    n_full = L // BLOCK_L
    for tile in range(s, n_full, SPLITS):
        acc1r, acc1i, acc2r, acc2i = _bwd_tile(acc1r, acc1i, acc2r, acc2i, z_ptr, g_row, tile * BLOCK_L, L,
                                               wr2, wi2, BLOCK_L, False, FAST)
    if (n_full * BLOCK_L < L) & (n_full % SPLITS == s):
        acc1r, acc1i, acc2r, acc2i = _bwd_tile(acc1r, acc1i, acc2r, acc2i, z_ptr, g_row, n_full * BLOCK_L, L,
                                               wr2, wi2, BLOCK_L, True, FAST)
    s1r = 2.0 * tl.sum(acc1r, axis=1)
    s1i = 2.0 * tl.sum(acc1i, axis=1)
    s2r = tl.sum(acc2r, axis=1)
    s2i = tl.sum(acc2i, axis=1)
    out = (s * B + b) * N * 2 + 2 * offs_n
    dw_ptr = d_ptr + SPLITS * B * N * 2
    tl.store(d_ptr + out, s1r, mask=mask_n)                        # grad_v = conj(S1)
    tl.store(d_ptr + out + 1, -s1i, mask=mask_n)
    tl.store(dw_ptr + out, vr * s2r - vi * s2i, mask=mask_n)       # grad_w = conj(v S2)
    tl.store(dw_ptr + out + 1, -(vr * s2i + vi * s2r), mask=mask_n)


# ----------------------------------------------------------------------------- launchers

_FWD_LAUNCH = Launcher(_cauchy_fwd_kernel)
_BWD_LAUNCH = Launcher(_cauchy_bwd_kernel)


def _forward(v: Tensor, w: Tensor, z: Tensor) -> Tensor:
    """v, w: (B, N), z: (L,), one complex dtype, contiguous, on the current CUDA device -> (B, L)."""
    B, N = v.shape
    L = z.shape[0]
    out = torch.empty((B, L), dtype=v.dtype, device=v.device)
    if B == 0 or L == 0:
        return out
    if N == 0:
        return out.zero_()
    _FWD_LAUNCH(lambda meta: (B * cdiv(L, meta["BLOCK_L"]),), v, w, z, out, N, L, tuning_bucket(L),
                FAST=fast_math(v.dtype))
    return out


def _backward(v: Tensor, w: Tensor, z: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """Gradients (grad_v, grad_w), each (B, N), for grad = dLoss/dout (B, L) in PyTorch's convention."""
    B, N = v.shape
    L = z.shape[0]
    if B == 0 or N == 0 or L == 0:
        return torch.zeros_like(v), torch.zeros_like(w)
    splits = split_count(B * cdiv(N, 16), cdiv(L, 128), v.device)
    d = torch.empty((2, splits, B, N), dtype=v.dtype, device=v.device)  # (grad_v, grad_w) x partial sums
    _BWD_LAUNCH(lambda meta: (B * cdiv(N, meta["BLOCK_N"]) * splits,), v, w, z, contiguous(grad), d, B, N, L,
                tuning_bucket(L),
                splits, FAST=fast_math(v.dtype))
    if splits > 1:
        d = d.sum(1)
    else:
        d = d.view(2, B, N)
    return d[0], d[1]


class _CauchyFunction(torch.autograd.Function):
    """Autograd wrapper: v, w (B, N) and z (L,) of one complex dtype, contiguous -> (B, L)."""

    @staticmethod
    def forward(ctx, v: Tensor, w: Tensor, z: Tensor) -> Tensor:
        ctx.save_for_backward(v, w, z)
        with launch_guard(v.device):
            return _forward(v, w, z)

    def _grads(ctx, grad: Tensor):
        need_v, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_v or need_w):
            return None, None, None
        v, w, z = ctx.saved_tensors
        with launch_guard(v.device):
            dv, dw = _backward(v, w, z, grad)
        return (dv if need_v else None), (dw if need_w else None), None

    backward = first_order_backward(_grads)
    del _grads


def cauchy_triton(v: Tensor, z: Tensor, w: Tensor) -> Tensor:
    """Symmetric Cauchy product sum_n v_n/(z_l - w_n) + conj(v_n)/(z_l - conj(w_n)) (S4 Lemma C.3).

    v, w: (..., N) complex; z: (L,) complex -> (..., L) complex. complex64 computes in float32,
    complex128 in float64; real inputs are promoted. Gradients flow to v and w (not to z).
    """
    dtype = v.dtype
    if (dtype in KERNEL_DTYPES and w.dtype is dtype and z.dtype is dtype and v.dim() == 2 and z.dim() == 1
            and v.shape == w.shape and not z.requires_grad and (v.is_cuda or INTERPRET)
            and is_plain(v) and is_plain(w) and is_plain(z) and v.device == w.device == z.device):
        # the common case (the S4 kernel's call): nothing to convert
        if torch.is_grad_enabled() and (v.requires_grad or w.requires_grad):
            return _CauchyFunction.apply(v, w, z)
        with launch_guard(v.device):
            return _forward(v, w, z)
    op = "cauchy (triton)"
    if v.shape != w.shape:
        raise ValueError(f"{op}: v and w must have the same shape, got {tuple(v.shape)} and {tuple(w.shape)}")
    if v.dim() < 1:
        raise ValueError(f"{op}: v and w must have a last axis N, got a 0-d tensor")
    if z.dim() != 1:
        raise ValueError(f"{op}: z must be 1-D (L,), got shape {tuple(z.shape)}")
    if z.requires_grad:
        raise ValueError("cauchy: gradients with respect to the nodes z are not supported (z must not require grad)")
    check_device(v, w, z, op=op)
    dtype = complex_dtype(v, w, z, op=op)
    out = _CauchyFunction.apply(flat_rows(v, dtype), flat_rows(w, dtype), contiguous(z.to(dtype)))  # (B, L)
    return out if v.dim() == 2 else out.reshape(*v.shape[:-1], z.shape[0])
