"""The fused FFT convolution (ssm_core.fftconv) and the layer around it vs a float64 direct convolution.

Forward and all gradients (u, k, D) for both implementations of the passes around the FFTs: 'torch', and
'triton' (under TRITON_INTERPRET=1 on a machine without CUDA, compiled with CUDA). Fresh random inputs per
run; odd batch (an unpaired row in the complex packing), a single row (the real-to-complex path), odd length, H not a multiple of the tile, several
channels, short / causal / bidirectional kernels, both input and output layouts, every fused activation.
"""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from ssm_core import SSMLayer
from ssm_core.fftconv import FUSED_ACTIVATIONS, fft_conv, input_spectrum, resolve_impl
from ssm_core.ops import BackendUnavailable

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
ACT_FNS = {"identity": lambda z: z, "gelu": F.gelu, "relu": torch.relu, "silu": F.silu, "tanh": torch.tanh}


def direct_conv(u: torch.Tensor, k: torch.Tensor, d: torch.Tensor | None, activation: str) -> torch.Tensor:
    """act(y) with y[b, c, h, l] = sum_s T[c, h, l, s] u[b, h, s] + d[c, h] u[b, h, l] in float64, where
    T[l, s] = k[l - s] for 0 <= l - s < Lk (causal) and, for a 2L-long kernel, k[2L - (s - l)] for s > l
    (negative lag s - l at index 2L - (s - l))."""
    length, lk = u.shape[-1], k.shape[-1]
    lag = (torch.arange(length)[:, None] - torch.arange(length)[None, :]) % (2 * length)  # (L, L)
    valid = lag < lk
    t = torch.where(valid, k[..., lag.clamp(max=lk - 1)], torch.zeros((), dtype=k.dtype))  # (C, H, L, L)
    y = torch.einsum("chls,bhs->bchl", t, u)
    if d is not None:
        y = y + d[None, :, :, None] * u[:, None]
    return ACT_FNS[activation](y)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _inputs(gen, bsz, h, length, channels, lk, transposed_input, dtype, device):
    if transposed_input:  # a (B, H, L) view of (B, L, H) memory, as the default layer passes it
        u = torch.randn(bsz, length, h, generator=gen, dtype=torch.float64).transpose(-1, -2)
    else:
        u = torch.randn(bsz, h, length, generator=gen, dtype=torch.float64)
    k = torch.randn(channels, h, lk, generator=gen, dtype=torch.float64) / lk ** 0.5
    d = torch.randn(channels, h, generator=gen, dtype=torch.float64)
    g = torch.randn(bsz, channels, h, length, generator=gen, dtype=torch.float64)
    return u, k, d, g


def _check(gen, impl, activation, bsz, h, length, channels, lk, transposed_input, layout, dtype, device, tol):
    u, k, d, g = _inputs(gen, bsz, h, length, channels, lk, transposed_input, torch.float64, "cpu")
    leaves = [t.clone().requires_grad_() for t in (u, k, d)]
    ref = direct_conv(*leaves, activation)
    ref_grads = torch.autograd.grad(ref, leaves, g)
    dev = [t.to(device=device, dtype=dtype).detach().requires_grad_() for t in (u, k, d)]  # .to keeps strides
    assert dev[0].is_contiguous() != transposed_input
    out = fft_conv(dev[0], dev[1], dev[2], activation=activation, layout=layout, impl=impl)
    assert out.shape == (bsz, channels, h, length) and out.dtype == dtype
    if layout == "blch":
        assert out.permute(0, 3, 1, 2).is_contiguous()
    else:
        assert out.is_contiguous()
    grads = torch.autograd.grad(out, dev, g.to(device=device, dtype=dtype))
    assert grads[0].stride() == dev[0].stride()  # grad u comes back in u's layout
    assert _rel(out.double().cpu(), ref) < tol
    for name, a, b in zip("ukd", grads, ref_grads):
        assert _rel(a.double().cpu(), b) < tol, f"grad {name}"


IMPLS = ["torch", "triton"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("length", [37, 600])  # one block of frequencies, and two with the mirror across them
def test_full_spectrum_of_a_real_kernel_equals_its_complex_fft(gen, impl, length) -> None:
    """The pass that extends a real kernel's rfft to all n = 2L bins by Hermitian symmetry, adds D and divides by
    n: equal to the complex FFT of the zero-padded kernel (norm 'forward') plus D / n, float64 and float32."""
    from ssm_core.fftconv import _passes

    n = 2 * length
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        k = torch.randn(2, 3, length - 5, generator=gen, dtype=torch.float64)
        d = torch.randn(2, 3, generator=gen, dtype=torch.float64)
        for with_d in (d, None):
            ref = torch.fft.fft(k, n=n, norm="forward") + (0 if with_d is None else with_d[..., None] / n)
            half = torch.fft.rfft(k.to(DEVICE, dtype), n=n)
            got = _passes(impl).full_spectrum(half, None if with_d is None else with_d.to(DEVICE, dtype), n)
            assert got.shape == (2, 3, n) and got.dtype == half.dtype
            assert _rel(got.cpu().to(torch.complex128), ref) < tol


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("activation", FUSED_ACTIVATIONS)
def test_fft_conv_matches_direct_convolution_each_activation(gen, impl, activation) -> None:
    _check(gen, impl, activation, bsz=3, h=5, length=37, channels=1, lk=37, transposed_input=False,
           layout="bchl", dtype=torch.float64, device=DEVICE, tol=1e-10)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bsz, channels, lk, transposed_input, layout", [
    (1, 1, 20, True, "blch"),  # one row: the packed partner is empty; kernel shorter than L
    (4, 2, 80, False, "blch"),  # bidirectional (2L) kernel, two channels
    (5, 3, 40, True, "bchl"),  # causal, three channels, transposed input
])
def test_fft_conv_shapes_and_layouts(gen, impl, bsz, channels, lk, transposed_input, layout) -> None:
    _check(gen, impl, "gelu", bsz=bsz, h=33, length=40, channels=channels, lk=lk, transposed_input=transposed_input,
           layout=layout, dtype=torch.float64, device=DEVICE, tol=1e-10)


@pytest.mark.parametrize("impl", IMPLS)
def test_fft_conv_float32(gen, impl) -> None:
    _check(gen, impl, "gelu", bsz=6, h=7, length=300, channels=1, lk=300, transposed_input=True, layout="blch",
           dtype=torch.float32, device=DEVICE, tol=1e-4)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bsz, activation", [(5, "gelu"), (4, "identity"), (1, "gelu")])
def test_fft_conv_out_dtype_rounds_the_float32_result_once(gen, impl, bsz, activation) -> None:
    """out_dtype=bfloat16: the float32 convolution's output rounded to bf16 (exactly a cast of it), and the
    gradients for a bf16 output gradient those of the same gradient in float32 (exactly)."""
    u, k, d, g = _inputs(gen, bsz, 6, 50, 2, 100, True, torch.float64, "cpu")
    leaves = [t.to(device=DEVICE, dtype=torch.float32).detach().requires_grad_() for t in (u, k, d)]
    ref = fft_conv(*leaves, activation=activation, layout="blch", impl=impl)
    g16 = g.to(device=DEVICE, dtype=torch.bfloat16)
    ref_grads = torch.autograd.grad(ref, leaves, g16.float())
    out = fft_conv(*leaves, activation=activation, layout="blch", impl=impl, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.permute(0, 3, 1, 2).is_contiguous()
    assert torch.equal(out, ref.detach().to(torch.bfloat16))
    for name, a, b in zip("ukd", torch.autograd.grad(out, leaves, g16), ref_grads):
        assert a.dtype == torch.float32 and torch.equal(a, b), f"grad {name}"


def test_fft_conv_gradient_for_k_only_and_u_only(gen) -> None:
    """Only one input needing its gradient takes the short backward paths."""
    u, k, d, g = _inputs(gen, 3, 4, 16, 1, 16, False, torch.float64, "cpu")
    ref_u, ref_k = torch.autograd.grad(direct_conv(u.requires_grad_(), k.requires_grad_(), d, "silu"), [u, k], g)
    for impl in IMPLS:
        uu, kk = u.detach().to(DEVICE), k.detach().to(DEVICE)
        (gk,) = torch.autograd.grad(fft_conv(uu, kk.requires_grad_(), d.to(DEVICE), "silu", impl=impl), [kk],
                                    g.to(DEVICE))
        (gu,) = torch.autograd.grad(fft_conv(uu.requires_grad_(), kk.detach(), d.to(DEVICE), "silu", impl=impl),
                                    [uu], g.to(DEVICE))
        assert _rel(gk.cpu(), ref_k) < 1e-10 and _rel(gu.cpu(), ref_u) < 1e-10


@pytest.mark.parametrize("impl", IMPLS)
def test_precomputed_input_spectrum_gives_the_same_result(gen, impl) -> None:
    u, k, d, g = _inputs(gen, 5, 3, 24, 2, 24, True, torch.float64, "cpu")
    u, k, d = (t.to(DEVICE).requires_grad_() for t in (u, k, d))
    a = fft_conv(u, k, d, "tanh", impl=impl)
    b = fft_conv(u, k, d, "tanh", impl=impl, u_spectrum=input_spectrum(u, impl=impl))
    assert torch.equal(a, b)
    ga = torch.autograd.grad(a, [u, k, d], g.to(DEVICE))
    gb = torch.autograd.grad(b, [u, k, d], g.to(DEVICE))
    assert all(torch.equal(x, y) for x, y in zip(ga, gb))


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("mode, output, activation", [("s4d", "glu", "gelu"), ("s4", "none", "silu"),
                                                     ("s4d", "linear", "tanh")])
def test_layer_equals_unfused_reference(gen, mode, output, activation, transposed) -> None:
    """SSMLayer.forward (fused) = kernel -> direct convolution + D u -> activation -> projection, and so do
    the gradients of every parameter and of the input."""
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    h, length, bsz = 6, 33, 3
    layer = SSMLayer(h, 8, mode=mode, output=output, activation=activation, transposed=transposed,
                     channels=1, bidirectional=mode == "s4d" and output == "linear").double().to(DEVICE)
    x = torch.randn(bsz, h, length, dtype=torch.float64, device=DEVICE)
    x = x if transposed else x.transpose(-1, -2).contiguous()
    x.requires_grad_()
    params = [p for p in layer.parameters() if p.requires_grad]
    y = layer(x)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *params], g)

    u = x if transposed else x.transpose(-1, -2)
    k = layer.kernel(length)
    if layer.bidirectional:
        from ssm_core.fftconv import bidirectional_kernel
        k = bidirectional_kernel(k.view(2, 1, h, length))
    ref = direct_conv(u.cpu(), k.cpu(), layer.d.cpu(), activation)[:, 0].to(DEVICE)  # (B, H, L)
    ref = ref if output == "none" else layer._project(ref.transpose(-1, -2)).transpose(-1, -2)
    ref = ref if transposed else ref.transpose(-1, -2)
    ref_grads = torch.autograd.grad(ref, [x, *params], g)
    assert _rel(y, ref) < 1e-10
    for a, b in zip(grads, ref_grads):
        assert _rel(a, b) < 1e-9


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("activation, channels, lk, transposed_input, layout", [
    ("identity", 2, 80, False, "blch"),  # bidirectional (2L) kernel: nothing saved for an activation
    ("silu", 3, 13, True, "bchl"),  # short causal kernel, transposed input
    ("gelu", 1, 40, False, "bchl"),  # the S4 Table 2 layer's case
])
def test_one_row_real_fft_path(gen, impl, activation, channels, lk, transposed_input, layout) -> None:
    """B = 1 takes the real-to-complex path: forward and every gradient against the float64 direct convolution,
    in float64 and float32, whichever impl is asked for."""
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        _check(gen, impl, activation, bsz=1, h=9, length=40, channels=channels, lk=lk,
               transposed_input=transposed_input, layout=layout, dtype=dtype, device=DEVICE, tol=tol)


def test_one_row_keeps_half_spectra_for_the_backward(gen) -> None:
    """At B = 1 the backward keeps the input, the kernel's real-to-complex spectrum (n/2 + 1 = L + 1 bins) and the
    real pre-activation, nothing of the packed path's length-2L spectra; the short gradient paths agree too."""
    h, length, channels = 6, 32, 2
    u, k, d, g = _inputs(gen, 1, h, length, channels, length, False, torch.float64, "cpu")
    saved: list[torch.Tensor] = []
    leaves = [t.to(DEVICE).requires_grad_() for t in (u, k, d)]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = fft_conv(*leaves, activation="gelu")
    assert [tuple(t.shape) for t in saved if t.is_complex()] == [(channels, h, length + 1)]
    assert sorted(tuple(t.shape) for t in saved if not t.is_complex()) == [(1, channels, h, length), (1, h, length)]
    ref_u, ref_k = torch.autograd.grad(direct_conv(u.requires_grad_(), k.requires_grad_(), d, "gelu"), [u, k], g)
    (gu,) = torch.autograd.grad(fft_conv(leaves[0], k.detach().to(DEVICE), d.to(DEVICE), "gelu"), [leaves[0]],
                                g.to(DEVICE))
    (gk,) = torch.autograd.grad(fft_conv(u.detach().to(DEVICE), leaves[1], d.to(DEVICE), "gelu"), [leaves[1]],
                                g.to(DEVICE))
    assert _rel(gu.cpu(), ref_u) < 1e-10 and _rel(gk.cpu(), ref_k) < 1e-10
    assert _rel(out.detach().cpu(), direct_conv(u.detach(), k.detach(), d, "gelu")) < 1e-10
    one = input_spectrum(leaves[0].detach())
    assert one.shape == (1, h, length + 1)
    assert torch.equal(fft_conv(*leaves, "gelu", u_spectrum=one), out)


def test_fft_conv_argument_errors(monkeypatch) -> None:
    u, k = torch.randn(2, 3, 8), torch.randn(1, 3, 8)
    for kwargs, message in [(dict(activation="swish"), "activation"), (dict(layout="lbh"), "layout"),
                            (dict(impl="cuda"), "impl")]:
        with pytest.raises(ValueError, match=message):
            fft_conv(u, k, **kwargs)
    with pytest.raises(ValueError, match="u must be"):
        fft_conv(u[0], k)
    with pytest.raises(ValueError, match="k must be"):
        fft_conv(u, torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="longer than 2L"):
        fft_conv(u, torch.randn(1, 3, 17))
    with pytest.raises(ValueError, match="d must be"):
        fft_conv(u, k, torch.randn(3))
    with pytest.raises(ValueError, match="u_spectrum"):
        fft_conv(u, k, u_spectrum=input_spectrum(u[:, :2]))
    with pytest.raises(ValueError, match=r"u_spectrum must be input_spectrum\(u\), of shape \(1, 3, 9\)"):
        fft_conv(u[:1], k, u_spectrum=input_spectrum(u))  # one row: a half spectrum, not the packed one
    monkeypatch.setenv("SSM_FFTCONV", "fast")
    with pytest.raises(ValueError, match="SSM_FFTCONV"):
        fft_conv(u, k)
    monkeypatch.delenv("SSM_FFTCONV")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendUnavailable, match="TRITON_INTERPRET=1"):
        resolve_impl("triton", torch.device("cpu"))
    assert resolve_impl(None, torch.device("cpu")) == "torch"


def _layer_vs_float64(mode: str, h: int, bsz: int, length: int, device: str) -> dict[str, float]:
    """float32 layer output and input / D gradients, and the convolution's kernel gradient, against float64
    with the torch passes on the layer's own (float32) kernel; four random features also against the direct
    convolution. Returns max |err| / max |ref| of each."""
    torch.manual_seed(0)
    layer = SSMLayer(h, 64, mode=mode, output="none", transposed=True).to(device)
    x = torch.randn(bsz, h, length, device=device, requires_grad=True)
    y = layer(x)
    g = torch.randn_like(y)
    gx, gd = torch.autograd.grad(y, [x, layer.d], g)
    k = layer.kernel(length).detach()  # (1, H, L) float32, as used inside the layer
    k.requires_grad_()
    (gk,) = torch.autograd.grad(fft_conv(x, k, layer.d, activation="gelu"), [k], g[:, None])
    xd, kd, dd = (t.detach().double().requires_grad_() for t in (x, k, layer.d))
    ref = fft_conv(xd, kd, dd, activation="gelu", impl="torch")[:, 0]
    ref_gx, ref_gk, ref_gd = torch.autograd.grad(ref, [xd, kd, dd], g.double())
    errors = {"y": _rel(y.double(), ref), "grad x": _rel(gx.double(), ref_gx), "grad d": _rel(gd.double(), ref_gd),
              "grad k": _rel(gk.double(), ref_gk)}
    feats = torch.randperm(h)[:4]
    direct = direct_conv(xd.detach()[:, feats].cpu(), kd.detach()[:, feats].cpu(), dd.detach()[:, feats].cpu(),
                         "gelu")[:, 0]
    errors["y vs direct"] = _rel(y.detach()[:, feats].double().cpu(), direct)
    print(f"{mode} H={h} B={bsz} L={length} float32 on {device} vs float64, max |err| / max |ref|: {errors}")
    return errors


def test_small_layer_float32_against_float64() -> None:
    errors = _layer_vs_float64("s4d", 8, 3, 128, str(DEVICE))
    assert all(e < 1e-5 for e in errors.values()), errors


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["s4d", "s4"])
def test_gpu_size_against_float64(mode) -> None:
    """The benchmark's size (H=256, B=32, L=4096, N=64), float32 on the GPU."""
    errors = _layer_vs_float64(mode, 256, 32, 4096, "cuda")
    assert all(e < 1e-5 for e in errors.values()), errors
