"""Long convolution by FFT with the D skip and the activation: act(u * k + D u) (S4 Section 3.4; S4D Listing 1).

One implementation, arranged to make few passes over memory (the convolution is memory-bound):

- The D skip is folded into the kernel: D u is the convolution with D delta_0, so k[..., 0] += D.
- Two real rows per complex FFT: with w = u_a + i u_b and K the spectrum of a real kernel,
  IFFT(FFT(w) K) = (u_a * k) + i (u_b * k). One complex FFT of size n = 2L serves two batch rows, and the
  inverse is a complex-to-complex transform (a complex-to-real one makes torch clone its input).
- 1/n is folded into the (small) kernel spectrum, so the inverse transform runs unnormalized (no scaling pass).
- The activation is applied while unpacking the inverse FFT's output, and its derivative while packing the
  output gradient: nothing of size (B, H, L) is written between the FFTs and the activation.
- Backward, grad u = IFFT(G conj(K)) and grad k = Re IFFT(sum_b G conj(W)) (the adjoint of the circular
  convolution is the circular correlation) come from one pass over G = FFT(packed grad) and W = FFT(packed u);
  the imaginary cross terms of the packed rows cancel in the real part.

A single row (B = 1) has no partner to pack: it takes real-to-complex transforms instead, whose spectra hold
n/2 + 1 bins, half a packed one's, and keeps for the backward only the input, the kernel's half spectrum and the
real pre-activation; its few elementwise ops are torch's whichever ``impl`` is chosen.

The padding is n = 2L: enough for the linear (causal) convolution of an L-long input with a kernel of up
to L taps, and exactly the circle on which a 2L-long bidirectional kernel (:func:`bidirectional_kernel`) puts
its negative lags. A bfloat16 input (more than one row) is read in place by the packing pass, which upcasts it to
float32; the rest computes in float32 and u's gradient is rounded to bfloat16 by the backward's last pass (the
values of the float32 convolution of the same values, without a cast pass either way).

The passes around the FFTs run as Triton kernels on CUDA (:mod:`ssm_core.fftconv_triton`)
and as the same formulas in torch elsewhere; choose with ``impl`` or the environment variable ``SSM_FFTCONV``
('auto' | 'torch' | 'triton'; 'auto' = Triton on CUDA tensors).
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .ops.backend import resolve_backend

FUSED_ACTIVATIONS = ("identity", "gelu", "relu", "silu", "tanh")
LAYOUTS = ("bchl", "blch")
IMPL_ENV_VAR = "SSM_FFTCONV"


def bidirectional_kernel(k: Tensor) -> Tensor:
    """Two causal kernels back to back (S4D Appendix B, "Bidirectional"; Goel et al.).

    k: (2, C, H, L) forward and backward halves -> (C, H, 2L): k_fwd at lags 0..L-1, k_bwd flipped at lags -L..-1.
    """
    return F.pad(k[0], (0, k.shape[-1])) + F.pad(k[1].flip(-1), (k.shape[-1], 0))


def resolve_impl(impl: str | None, device: torch.device) -> str:
    """'torch' or 'triton' for the passes around the FFTs (the backend rule, with SSM_FFTCONV)."""
    return resolve_backend(impl, device, env_var=IMPL_ENV_VAR, what="fft_conv impl")


# -- the passes in torch (CPU, and the reference for the Triton ones) ----------------------------------------------
def _act_torch(z: Tensor, activation: str) -> Tensor:
    if activation == "gelu":
        return F.gelu(z)
    if activation == "relu":
        return torch.relu(z)
    if activation == "silu":
        return F.silu(z)
    if activation == "tanh":
        return torch.tanh(z)
    return z


def _act_grad_torch(z: Tensor, activation: str) -> Tensor:
    if activation == "gelu":  # Phi(z) + z phi(z)
        return 0.5 * (1 + torch.erf(z * 0.5 ** 0.5)) + z * torch.exp(-0.5 * z * z) * (2 * torch.pi) ** -0.5
    if activation == "relu":
        return (z > 0).to(z.dtype)
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    if activation == "tanh":
        return 1 - torch.tanh(z) ** 2
    return torch.ones_like(z)


def _act_backward_torch(grad: Tensor, z: Tensor, activation: str) -> Tensor:
    """grad * act'(z), one fused op where torch has one (gelu, silu)."""
    if activation == "gelu":
        return torch.ops.aten.gelu_backward(grad, z)
    if activation == "silu":
        return torch.ops.aten.silu_backward(grad, z)
    return grad * _act_grad_torch(z, activation)


def _unpack_rows(y: Tensor, bsz: int, length: int) -> Tensor:
    """(B2, ..., n) complex -> (B, ..., L) real: real parts are rows 0..B2-1, imaginary parts rows B2..B-1."""
    y = y[..., :length]
    return torch.cat([y.real, y.imag])[:bsz]


def _pack_rows(x: Tensor, n: int, cdtype: torch.dtype) -> Tensor:
    """(B, ..., L) real -> (B2, ..., n) complex, zero for l >= L; the inverse of :func:`_unpack_rows`."""
    bsz, length = x.shape[0], x.shape[-1]
    b2 = (bsz + 1) // 2
    out = x.new_zeros((b2, *x.shape[1:-1], n), dtype=cdtype)
    out.real[:, ..., :length] = x[:b2]
    out.imag[: bsz - b2, ..., :length] = x[b2:]
    return out


class _TorchPasses:
    """The passes of :mod:`ssm_core.fftconv_triton`, same signatures, in torch ops."""

    @staticmethod
    def pack(x: Tensor, n: int, cdtype: torch.dtype, y: Tensor | None = None, activation: str = "identity") -> Tensor:
        if y is not None:
            x = x * _act_grad_torch(_unpack_rows(y, x.shape[0], x.shape[-1]), activation)
        return _pack_rows(x, n, cdtype)

    @staticmethod
    def unpack(y: Tensor, out: Tensor, activation: str = "identity") -> Tensor:
        return out.copy_(_act_torch(_unpack_rows(y, out.shape[0], out.shape[-1]), activation))

    @staticmethod
    def full_spectrum(half: Tensor, d: Tensor | None, n: int) -> Tensor:
        full = torch.cat([half, half[..., 1: n // 2].flip(-1).conj()], -1)  # (C, H, n): bin n - j = conj(bin j)
        return (full if d is None else full + d[..., None]) / n

    @staticmethod
    def spectral_fwd(w: Tensor, kf: Tensor) -> Tensor:
        return w.unsqueeze(1) * kf  # (B2, C, H, n)

    @staticmethod
    def spectral_bwd(gf: Tensor, w: Tensor, kf: Tensor, need_u: bool, need_k: bool, s_out: Tensor | None = None):
        gu_f = (gf * kf.conj()).sum(1) if need_u else None  # (B2, H, n)
        s = None
        if need_k:
            s = (gf * w.unsqueeze(1).conj()).sum(0)  # (C, H, n)
            s = s if s_out is None else s_out.copy_(s)
        return gu_f, s


def _passes(impl: str):
    if impl == "triton":
        from . import fftconv_triton

        return fftconv_triton
    return _TorchPasses


def _new_output(u: Tensor, channels: int, layout: str, dtype: torch.dtype | None = None) -> Tensor:
    """An empty (B, C, H, L) output (u's dtype unless ``dtype``): contiguous for layout 'bchl', a view of
    (B, L, C, H) memory for 'blch'."""
    bsz, h, length = u.shape
    dtype = dtype or u.dtype
    if layout == "bchl":
        return u.new_empty(bsz, channels, h, length, dtype=dtype)
    return u.new_empty(bsz, length, channels, h, dtype=dtype).permute(0, 2, 3, 1)


def _dense_stride(u: Tensor) -> tuple[int, ...] | None:
    """u's strides if its memory is (B, H, L) or (B, L, H) dense (its gradient is then made alike), else None."""
    return u.stride() if u.is_contiguous() or u.transpose(-1, -2).is_contiguous() else None


def _empty_like_input(shape: torch.Size, stride: tuple[int, ...] | None, dtype: torch.dtype,
                      device: torch.device) -> Tensor:
    """An empty gradient for the input in the input's layout (see :func:`_dense_stride`)."""
    if stride is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def _complex_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _real_dtype(cdtype: torch.dtype) -> torch.dtype:
    return torch.float64 if cdtype == torch.complex128 else torch.float32


def _input_spectrum(u: Tensor, passes, cdtype: torch.dtype | None = None) -> Tensor:
    """FFT of the rows of u (B, H, L) packed in pairs and zero-padded to n = 2L: (B2, H, n) complex of ``cdtype``
    (default: that of u's dtype, complex64 for float32 and bfloat16). A bfloat16 u is read as it is: the packing
    pass upcasts it (exactly) to the spectrum's precision."""
    n = 2 * u.shape[-1]
    return torch.fft.fft(passes.pack(u.unsqueeze(1), n, cdtype or _complex_dtype(u.dtype))[:, 0])


def kernel_spectrum(k: Tensor, d: Tensor | None, n: int, impl: str) -> Tensor:
    """The spectrum of k + d delta_0 over n points, divided by n (the inverse transform runs unnormalized):
    (C, H, n) complex. k: (C, H, Lk) real, Lk <= n; d: (C, H) or None. D u is the convolution with D delta_0,
    whose spectrum is the constant D; the real kernel's half spectrum is extended by Hermitian symmetry."""
    return _passes(impl).full_spectrum(torch.fft.rfft(k, n=n), d, n)


def conv_forward(ctx, u: Tensor, kf: Tensor, w: Tensor | None, activation: str, layout: str, impl: str,
                 lk: int, need_grad: bool, out_dtype: torch.dtype | None = None) -> Tensor:
    """act(first L outputs of the circular convolution of u, padded to n = 2L, with the kernel whose spectrum
    (over n, D folded in) is kf (C, H, n)): (B, C, H, L) in ``layout``, of dtype ``out_dtype`` (default the
    spectra's real dtype, float32 for complex64; the last pass rounds to it). u (B, H, L) is of kf's real dtype
    or bfloat16: a bfloat16 u is read as it is by the packing pass, which upcasts it (exactly) to kf's precision,
    and its gradient comes back in bfloat16 (the float32 gradient rounded once by the last pass). w: the input's
    packed spectrum (B2, H, n) or None (computed here). With ``need_grad``, keeps on ``ctx`` what
    :func:`conv_backward` needs (whose ``grad_out`` may be of any float dtype: it is read in the spectra's
    precision)."""
    passes = _passes(impl)
    if w is None:
        w = _input_spectrum(u, passes, kf.dtype)  # (B2, H, n): spectra of rows b + i rows b + B2
    y = torch.fft.ifft(passes.spectral_fwd(w, kf), norm="forward")  # (B2, C, H, n): packed u * k + D u
    out = _new_output(u, kf.shape[0], layout, out_dtype or _real_dtype(kf.dtype))
    passes.unpack(y, out, activation)
    if need_grad:
        # intermediates (not outputs) kept as attributes so that backward can free them as soon as used
        ctx.w, ctx.y = w, y
        ctx.meta = (activation, impl, lk, u.shape, _dense_stride(u), u.dtype)
    return out


def conv_backward(ctx, grad_out: Tensor, kf: Tensor, need_u: bool, need_k: bool,
                  s_out: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
    """The gradients of :func:`conv_forward`'s output for u (B, H, L) (in u's dtype: computed in the spectra's
    precision, a bfloat16 u's rounded once by the last pass) and for the kernel's spectrum kf (C, H, n)
    complex (autograd's convention for a complex tensor; written into ``s_out`` when given), None where not needed.
    :func:`kernel_gradient` turns the second into the gradient of k + d delta_0. Frees the intermediates kept on
    ``ctx`` as it goes."""
    w, y = ctx.w, ctx.y
    ctx.w = ctx.y = None
    activation, impl, _, u_shape, u_stride, u_dtype = ctx.meta
    passes = _passes(impl)
    gf = passes.pack(grad_out, y.shape[-1], y.dtype, y, activation)  # (B2, C, H, n): packed dL/dz
    del y
    gf = torch.fft.fft(gf)
    gu_f, s = passes.spectral_bwd(gf, w, kf, need_u, need_k, s_out)  # (B2, H, n), (C, H, n)
    del w
    grad_u = None
    if need_u:
        x = torch.fft.ifft(gu_f, norm="forward")  # (B2, H, n): packed correlation of the gradient with k
        del gf, gu_f
        grad_u = _empty_like_input(u_shape, u_stride, u_dtype, x.device)
        passes.unpack(x.unsqueeze(1), grad_u.unsqueeze(1))
        del x  # before the kernel's gradient spectrum is transformed: one (B2, H, n) spectrum less at the peak
    return grad_u, s


def kernel_gradient(s: Tensor) -> Tensor:
    """The gradient of the kernel k + d delta_0 over the n = 2L circle, (C, H, n) real, from that of its spectrum
    kf = FFT(k + d delta_0) / n (:func:`conv_backward`'s second result): Re IFFT(s)."""
    return torch.fft.ifft(s).real


class _FFTConv(torch.autograd.Function):
    """act(first L outputs of the circular convolution of u, padded to n = 2L, with k + d delta_0)."""

    @staticmethod
    def forward(ctx, u: Tensor, k: Tensor, d: Tensor | None, activation: str, layout: str, impl: str,
                w: Tensor | None, out_dtype: torch.dtype | None) -> Tensor:
        kf = kernel_spectrum(k, d, 2 * u.shape[-1], impl)  # (C, H, n)
        need_grad = any(ctx.needs_input_grad[:3])
        if need_grad:
            ctx.save_for_backward(kf)
        return conv_forward(ctx, u, kf, w, activation, layout, impl, k.shape[-1], need_grad, out_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        (kf,) = ctx.saved_tensors
        need_u, need_k, need_d = ctx.needs_input_grad[:3]
        lk = ctx.meta[2]
        grad_u, s = conv_backward(ctx, grad_out, kf, need_u, need_k or need_d)
        grad_full = kernel_gradient(s) if need_k or need_d else None  # (C, H, n)
        grad_k = grad_full[..., :lk] if need_k else None
        grad_d = grad_full[..., 0] if need_d else None
        return grad_u, grad_k, grad_d, None, None, None, None, None


class _FFTConvOneRow(torch.autograd.Function):
    """The same convolution for a single row (B = 1) with real-to-complex FFTs (S4 Section 3.4: the kernel's and
    the input's spectra multiplied, one inverse transform): z = irfft(rfft(u) (rfft(k) + d))[:L], out = act(z)."""

    @staticmethod
    def forward(ctx, u: Tensor, k: Tensor, d: Tensor | None, activation: str, layout: str,
                w: Tensor | None, out_dtype: torch.dtype | None) -> Tensor:
        length = u.shape[-1]
        channels, lk = k.shape[0], k.shape[-1]
        n = 2 * length
        kf = torch.fft.rfft(k, n=n)  # (C, H, n/2 + 1)
        if d is not None:  # D u is the convolution with D delta_0, whose spectrum is the constant D
            kf.add_(d[..., None])
        if w is None and channels == 1:  # our own buffer: the product in place, one half spectrum less at the peak
            spec = torch.fft.rfft(u, n=n).mul_(kf).unsqueeze(1)  # (1, 1, H, n/2 + 1)
        else:
            w = torch.fft.rfft(u, n=n) if w is None else w  # (1, H, n/2 + 1)
            spec = w.unsqueeze(1) * kf  # (1, C, H, n/2 + 1)
            del w
        z = torch.fft.irfft(spec, n=n)[..., :length]  # (1, C, H, L): u * k + D u
        del spec
        out = _new_output(u, channels, layout, out_dtype)
        out.copy_(_act_torch(z, activation))
        if any(ctx.needs_input_grad[:3]):
            # the input (alive in the caller anyway; its spectrum is recomputed in backward), the kernel's half
            # spectrum, and the real pre-activation where the activation's derivative needs it
            ctx.save_for_backward(u, kf, None if activation == "identity" else z.contiguous())
            ctx.meta = (activation, lk, n)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        u, kf, z = ctx.saved_tensors
        activation, lk, n = ctx.meta
        need_u, need_k, need_d = ctx.needs_input_grad[:3]
        grad_out = grad_out.to(u.dtype)  # (the output may have been rounded to a lower precision)
        g = grad_out if z is None else _act_backward_torch(grad_out, z, activation)  # (1, C, H, L): dL/dz
        gf = torch.fft.rfft(g, n=n)[0]  # (C, H, n/2 + 1); B = 1
        del g
        channels = gf.shape[0]
        grad_u = grad_k = grad_d = None
        # the products below are taken in place where the buffer is ours and its shape allows: at H = 128,
        # L = 1024 each half spectrum is 1 MiB, and the peak of this backward is a handful of them
        if need_k or need_d:  # circular correlation of dL/dz with u: a product of Hermitian spectra
            uf = torch.fft.rfft(u, n=n)  # (1, H, n/2 + 1)
            s = uf.conj_physical_().mul_(gf) if channels == 1 else gf * uf.conj()  # (C, H, n/2 + 1)
            del uf
            grad_full = torch.fft.irfft(s, n=n)  # (C, H, n): gradient of the kernel k + d delta_0
            del s
            # copies, not views: a view would keep the whole (C, H, n) buffer alive through the rest of backward
            grad_k = (grad_full if lk == n else grad_full[..., :lk].clone()) if need_k else None
            grad_d = grad_full[..., 0].clone() if need_d else None
            del grad_full
        if need_u:  # circular correlation of dL/dz with k, summed over the channels
            prod = gf.mul_(kf.conj())  # (C, H, n/2 + 1): gf is not needed after this
            del gf
            x = torch.fft.irfft(prod.sum(0, keepdim=True) if channels > 1 else prod, n=n)  # (1, H, n)
            del prod
            grad_u = _empty_like_input(u.shape, _dense_stride(u), u.dtype, u.device)
            grad_u.copy_(x[..., : u.shape[-1]])
        return grad_u, grad_k, grad_d, None, None, None, None


def _spectrum_shape(u: Tensor) -> tuple[int, int, int]:
    """The shape of :func:`input_spectrum` (u): (B2, H, 2L) packed rows, or (1, H, L + 1) for a single row."""
    bsz, h, length = u.shape
    return (1, h, length + 1) if bsz == 1 else ((bsz + 1) // 2, h, 2 * length)


def input_spectrum(u: Tensor, impl: str | None = None) -> Tensor:
    """The FFT of the input that :func:`fft_conv` needs, without autograd: pass it as ``u_spectrum`` to start the
    transform early (e.g. before computing the kernel, so the GPU works while the host issues the kernel's ops).
    Complex64 for a float32 or half-precision u (a bfloat16 u of more than one row read in place by the packing
    pass), complex128 for float64."""
    if u.dim() != 3:
        raise ValueError(f"input_spectrum: u must be (B, H, L), got shape {tuple(u.shape)}")
    impl = resolve_impl(impl, u.device)
    with torch.no_grad():
        if u.shape[0] == 1:
            u = _as_real_float(u)
            return torch.fft.rfft(u, n=2 * u.shape[-1])
        u = u if _read_in_place(u) else _as_real_float(u)
        return _input_spectrum(u, _passes(impl), _complex_dtype(_compute_dtype(u.dtype)))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 or float64: the precision the convolution computes in for inputs of ``dtype``."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _as_real_float(t: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    return t.to(_compute_dtype(dtype or t.dtype))


def _read_in_place(u: Tensor) -> bool:
    """Whether the packed path (B > 1) reads u without a cast first: bfloat16 (e.g. a bf16 residual stream); its
    packing pass upcasts it to the computation's precision."""
    return u.dtype == torch.bfloat16 and u.shape[0] > 1


def fft_conv(u: Tensor, k: Tensor, d: Tensor | None = None, activation: str = "identity", layout: str = "bchl",
             impl: str | None = None, u_spectrum: Tensor | None = None,
             out_dtype: torch.dtype | None = None) -> Tensor:
    """y[b, c, h, l] = act(sum_j k[c, h, j] u[b, h, l - j] + d[c, h] u[b, h, l]).

    u: (B, H, L), any strides (a transposed view of (B, L, H) is read in place); k: (C, H, Lk) with Lk <= L
    (causal) or Lk = 2L (bidirectional, from :func:`bidirectional_kernel`, where lag j >= L wraps to the
    negative lag j - 2L); d: (C, H) or None. activation: one of FUSED_ACTIVATIONS. Returns (B, C, H, L); with
    layout 'blch' its memory is (B, L, C, H) contiguous (what a position-wise linear layer wants), with 'bchl'
    (B, C, H, L) contiguous. Half-precision inputs are computed in float32 (returns float32): a bfloat16 u of
    more than one row is read as it is by the first pass, which upcasts it (exactly; no separate cast pass), and
    its gradient is returned in bfloat16 (the float32 gradient rounded once), the values of the float32
    convolution of u.float() and of its gradient cast to bfloat16; other half-precision inputs (and one row) are
    cast to float32 first. The kernel and D are computed in float32 (float64 if k is). u_spectrum: the
    result of :func:`input_spectrum` for this u (optional; computed here if not given). A single row (B = 1)
    takes real-to-complex FFTs and torch's elementwise ops for either ``impl`` (half the spectra's memory).
    out_dtype: the output's dtype (default the computation's float32 / float64), e.g. bfloat16 where a bf16 layer
    reads it next: the last pass rounds to it, the values a cast of the float32 output would give, without the
    cast's pass (and the gradient is read in that dtype).
    """
    if u.dim() != 3:
        raise ValueError(f"fft_conv: u must be (B, H, L), got shape {tuple(u.shape)}")
    if k.dim() != 3 or k.shape[1] != u.shape[1]:
        raise ValueError(f"fft_conv: k must be (C, H={u.shape[1]}, Lk), got shape {tuple(k.shape)}")
    length, lk = u.shape[-1], k.shape[-1]
    if lk > 2 * length:
        raise ValueError(f"fft_conv: kernel length {lk} is longer than 2L = {2 * length}")
    if d is not None and d.shape != k.shape[:2]:
        raise ValueError(f"fft_conv: d must be (C, H) = {tuple(k.shape[:2])}, got shape {tuple(d.shape)}")
    if activation not in FUSED_ACTIVATIONS:
        raise ValueError(f"fft_conv: activation={activation!r} not allowed; choose one of: "
                         f"{', '.join(FUSED_ACTIVATIONS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"fft_conv: layout={layout!r} not allowed; choose one of: {', '.join(LAYOUTS)}")
    dtype = _compute_dtype(torch.promote_types(u.dtype, k.dtype))  # float32 or float64
    u = u if _read_in_place(u) and dtype != torch.float64 else u.to(dtype)  # (B, H, L): bf16 or dtype
    k = k.to(dtype)
    d = None if d is None else d.to(dtype)
    impl = resolve_impl(impl, u.device)
    if u_spectrum is not None and (u_spectrum.dtype != _complex_dtype(dtype) or
                                   u_spectrum.shape != _spectrum_shape(u)):
        raise ValueError(f"fft_conv: u_spectrum must be input_spectrum(u), of shape {_spectrum_shape(u)} and dtype "
                         f"{_complex_dtype(dtype)}, got {tuple(u_spectrum.shape)} {u_spectrum.dtype}")
    with torch.autocast(u.device.type, enabled=False):
        if u.shape[0] == 1:
            return _FFTConvOneRow.apply(u, k, d, activation, layout, u_spectrum, out_dtype)
        return _FFTConv.apply(u, k, d, activation, layout, impl, u_spectrum, out_dtype)
