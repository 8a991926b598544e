"""The bf16 residual stream (``train.amp: bf16_stream``; :func:`ssm_core.blocks.residual_stream`).

Under it the residual stream, the norms' inputs and outputs and the SSM convolutions' inputs are bf16, while the
SSM kernel, the FFTs and BatchNorm's statistics stay float32. Checked here: the FFT convolution reads a bf16 input
in place with the values of its float32 cast (forward and gradients, both implementations of the passes, against a
float64 reference), the layer passes its bf16 input to the convolution uncast, a small model agrees with float32
within bf16 rounding, the dtypes of the stream with the option on and off, and the setting's validation.
Fresh random inputs per run (the ``gen`` fixture).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import ssm_core.layers
from ssm_core import SequenceModel, SSMLayer
from ssm_core.blocks import residual_stream
from ssm_core.fftconv import fft_conv, input_spectrum
from ssm_core.kernels import graphs

from test_fftconv import DEVICE, IMPLS, _inputs, _rel, direct_conv

BF16 = torch.bfloat16


# -- the FFT convolution on a bf16 input -------------------------------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bsz, channels, lk, transposed_input, layout", [
    (5, 2, 80, True, "blch"),  # the layer's case: a (B, H, L) view of (B, L, H) memory, bidirectional 2L kernel
    (4, 1, 30, False, "bchl"),  # contiguous (B, H, L) input, short causal kernel
    (1, 1, 40, True, "blch"),  # one row: the real-to-complex path (it casts its input first)
])
def test_fft_conv_on_bf16_input_is_the_float32_convolution_of_its_values(gen, impl, bsz, channels, lk,
                                                                         transposed_input, layout) -> None:
    """A bf16 u: the output (float32, or bf16 with out_dtype) is exactly that of the float32 convolution of
    u.float(), and so are the kernel's and D's gradients; u's gradient comes back in bf16 in u's layout, exactly the
    float32 one rounded. Against the float64 direct convolution of the same (bf16-rounded) input: float32 rounding
    (1e-4 of the largest value, as test_fftconv's float32 case), and for u's bf16 gradient one bf16 rounding more
    (2^-8 of the largest value bounds it: a rounding to nearest moves a value by at most 2^-9 of itself)."""
    u64, k64, d64, g64 = _inputs(gen, bsz, 7, 40, channels, lk, transposed_input, torch.float64, "cpu")
    u16 = u64.to(device=DEVICE, dtype=BF16).requires_grad_()  # .to keeps the strides
    u32 = u16.detach().float().requires_grad_()  # the same values in float32
    k, d = (t.to(device=DEVICE, dtype=torch.float32).requires_grad_() for t in (k64, d64))
    g = g64.to(device=DEVICE, dtype=torch.float32)
    out = fft_conv(u16, k, d, activation="gelu", layout=layout, impl=impl)
    ref = fft_conv(u32, k, d, activation="gelu", layout=layout, impl=impl)
    assert out.dtype == torch.float32 and torch.equal(out, ref)
    grads = torch.autograd.grad(out, [u16, k, d], g)
    ref_grads = torch.autograd.grad(ref, [u32, k, d], g)
    assert grads[0].dtype == BF16 and grads[0].stride() == u16.stride()
    assert torch.equal(grads[0], ref_grads[0].to(BF16))
    assert torch.equal(grads[1], ref_grads[1]) and torch.equal(grads[2], ref_grads[2])
    # out_dtype: the same values rounded once
    out16 = fft_conv(u16, k, d, activation="gelu", layout=layout, impl=impl, out_dtype=BF16)
    assert out16.dtype == BF16 and torch.equal(out16, ref.detach().to(BF16))
    if bsz > 1:  # the early input spectrum of a bf16 input, read in place too
        spectrum = input_spectrum(u16.detach(), impl=impl)
        assert spectrum.dtype == torch.complex64
        assert torch.equal(fft_conv(u16, k, d, activation="gelu", layout=layout, impl=impl, u_spectrum=spectrum),
                           out)
    # the float64 reference on the bf16-rounded input
    leaves = [t.detach().cpu().double().requires_grad_() for t in (u16, k, d)]
    direct = direct_conv(*leaves, "gelu")
    direct_grads = torch.autograd.grad(direct, leaves, g64)
    assert _rel(out.detach().double().cpu(), direct) < 1e-4
    assert _rel(grads[0].double().cpu(), direct_grads[0]) < 2 ** -8 + 1e-4, "grad u"
    assert _rel(grads[1].double().cpu(), direct_grads[1]) < 1e-4, "grad k"
    assert _rel(grads[2].double().cpu(), direct_grads[2]) < 1e-4, "grad d"


@pytest.mark.parametrize("impl", IMPLS)
def test_layer_passes_a_bf16_input_to_the_convolution_uncast(gen, impl, monkeypatch) -> None:
    """Under autocast a bf16 input reaches fft_conv as it is (no cast pass before it), and the layer gives exactly
    what it gives for the same values in float32: output, every parameter's gradient, and the input's gradient
    (rounded once to bf16). The two-node path (the kernel generated eagerly, then fft_conv) on any device: on a GPU
    the kernel's CUDA graphs are turned off, since a replayed call takes the one-node path instead, whose first and
    later calls differ by the kernel spectrum's rounding (test_cuda_layer_and_model_with_a_bf16_stream)."""
    monkeypatch.setenv("SSM_FFTCONV", impl)
    monkeypatch.setenv(graphs.ENV_VAR, "0")
    seen: list[torch.dtype] = []
    real_fft_conv = ssm_core.layers.fft_conv

    def spy(u, *args, **kwargs):
        seen.append(u.dtype)
        return real_fft_conv(u, *args, **kwargs)

    monkeypatch.setattr(ssm_core.layers, "fft_conv", spy)
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    layer = SSMLayer(12, 8, mode="s4d", bidirectional=True, output="glu").to(DEVICE)
    params = list(layer.parameters())
    x16 = torch.randn(3, 64, 12, generator=gen).to(device=DEVICE, dtype=BF16).requires_grad_()
    x32 = x16.detach().float().requires_grad_()
    results = []
    for x in (x16, x32):
        with torch.autocast(DEVICE.type, dtype=BF16):
            y = layer(x)  # (B, L, H) bf16
        g = torch.ones_like(y)
        results.append((y, torch.autograd.grad(y, [x, *params], g)))
    assert seen == [BF16, torch.float32]
    (y16, grads16), (y32, grads32) = results
    assert y16.dtype == BF16 and torch.equal(y16, y32)
    assert grads16[0].dtype == BF16 and torch.equal(grads16[0], grads32[0].to(BF16))
    for a, b in zip(grads16[1:], grads32[1:]):
        assert torch.equal(a, b)


def test_cuda_layer_and_model_with_a_bf16_stream() -> None:
    """On a GPU (the kernel replayed from its CUDA graph, the compiled Triton passes, CUDA's batch norm): the layer
    under autocast gives for a bf16 input what it gives for the same values in float32 (within one bf16 step: the
    first calls may take the eager path, whose kernel spectrum is the Triton pass's, before the graph is captured),
    the input's gradient in bf16; a stream model keeps bf16 blocks and agrees with float32 as on the CPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(2)
    layer = SSMLayer(64, 16, mode="s4d", bidirectional=True).cuda()
    params = list(layer.parameters())
    for _ in range(3):
        x16 = torch.randn(8, 512, 64, device="cuda").to(BF16).requires_grad_()
        x32 = x16.detach().float().requires_grad_()
        outs = []
        for x in (x16, x32):
            with torch.autocast("cuda", dtype=BF16):
                y = layer(x)
            outs.append((y, torch.autograd.grad(y.float().square().sum(), [x, *params])))
        (y16, g16), (y32, g32) = outs
        torch.testing.assert_close(y16.float(), y32.float(), rtol=2 ** -7, atol=1e-5)
        assert g16[0].dtype == BF16
        torch.testing.assert_close(g16[0].float(), g32[0].to(BF16).float(), rtol=2 ** -7, atol=1e-5)
        flat16, flat32 = (torch.cat([g.flatten() for g in gs[1:]]) for gs in (g16, g32))
        assert (flat16 - flat32).norm() / flat32.norm() < 1e-2
    model = _model(3).cuda()
    x = torch.randn(4, 256, 1, device="cuda")
    y32 = model(x)
    grads32 = torch.autograd.grad(y32.square().sum(), list(model.parameters()))
    dtypes: set[torch.dtype] = set()

    def hook(module, inputs, out) -> None:
        dtypes.add(out.dtype)

    for block in model.blocks:
        block.register_forward_hook(hook)
    with torch.autocast("cuda", dtype=BF16), residual_stream(BF16):
        y = model(x)
    grads = torch.autograd.grad(y.float().square().sum(), list(model.parameters()))
    assert dtypes == {BF16}
    assert (y.float() - y32).norm() / y32.norm() < 3e-2  # the tolerances of test_stream_model_agrees_with_float32
    flat, flat32 = (torch.cat([g.flatten() for g in gs]) for gs in (grads, grads32))
    assert (flat - flat32).norm() / flat32.norm() < 5e-2


# -- a small model: the option on against float32 ---------------------------------------------------------------
def _model(seed: int, norm: str = "batch", prenorm: bool = True, output: str = "glu") -> SequenceModel:
    torch.manual_seed(seed)
    model = SequenceModel(d_input=1, d_output=3, d_model=16, n_layers=2, norm=norm, prenorm=prenorm,
                          layer=dict(mode="s4d", d_state=8, bidirectional=True, output=output))
    with torch.no_grad():  # a centred stream (see test_stream_model_agrees_with_float32)
        model.encoder.bias.zero_()
    return model


def _seed(gen: torch.Generator) -> int:
    return int(torch.randint(0, 2 ** 31, (1,), generator=gen))


def test_stream_model_agrees_with_float32(gen) -> None:
    """S4D, 2 layers, H 16, L 256, batch 4, BatchNorm, pre-norm, bidirectional, GLU: the output and every
    parameter's gradient under bf16 autocast with the bf16 stream against the float32 model.

    Tolerances. bf16 keeps 8 significant bits: each rounding moves a value by up to 2^-9 (0.2 %) of itself, and
    the stream rounds each value a few times per block (the encoder's output, each norm's output, each residual
    add, and in the backward the accumulated stream gradient, BatchNorm's input gradient and the convolution's
    input gradient), on top of the bf16 projections that plain bf16 autocast already has. Over 300 fresh draws of
    this test (model and input) the output's relative error ||y - y32|| / ||y32|| had median 2.9e-3 and maximum
    7.8e-3 (plain bf16 autocast: 2.5e-3, 5.7e-3), the whole gradient's 2.8e-3 and 1.8e-2 (bf16: 2.4e-3, 1.7e-2):
    the bounds below, 3e-2 (test_mixed_precision's for plain bf16) and 5e-2, hold those with a margin of ~2.5-4.
    Per parameter the error is measured against the parameter's own gradient (10 %) plus 3 % of the whole
    gradient's norm: the encoder's bias has no gradient in exact arithmetic (every BatchNorm after it removes a
    constant shift of the stream; float32 gives ~1e-6 of the whole), so its bf16 gradient is rounding noise, up
    to 1.3e-2 of the whole gradient in those draws, and the smallest gradients (e.g. of D or dt in one layer) sum
    terms that largely cancel, so that a rounding of 2^-9 of the terms is more of the sum; with this criterion
    every parameter of every draw passed with the absolute part alone.
    The encoder's bias is zeroed: a bf16 stream rounds each feature relative to its magnitude, so a feature whose
    mean dwarfs its spread (an encoder bias much larger than its weight) keeps few bits of its variation, which
    the next BatchNorm scales back up by mean / spread: with random biases the same draws reached output errors of
    3 % and gradient errors of 26 % (at mean / spread ~ 100). That is the numerics of a bf16 stream, not of this
    code; a centred stream makes the test measure the code.
    """
    model = _model(_seed(gen))
    x = torch.randn(4, 256, 1, generator=gen)
    params = list(model.parameters())
    y32 = model(x)
    grads32 = torch.autograd.grad(y32.square().sum(), params)
    with torch.autocast("cpu", dtype=BF16), residual_stream(BF16):
        y = model(x)
    grads = torch.autograd.grad(y.float().square().sum(), params)
    assert (y.float() - y32).norm() / y32.norm() < 3e-2
    flat, flat32 = (torch.cat([g.flatten() for g in gs]) for gs in (grads, grads32))
    assert (flat - flat32).norm() / flat32.norm() < 5e-2
    for (name, _), a, b in zip(model.named_parameters(), grads, grads32):
        assert a.dtype == torch.float32
        assert (a - b).norm() <= 0.1 * b.norm() + 0.03 * flat32.norm(), name


def _stream_dtypes(model: SequenceModel, x: torch.Tensor, autocast: bool, stream: torch.dtype | None,
                   monkeypatch) -> dict[str, set[torch.dtype]]:
    """The dtypes seen in one forward and backward: each block's input and output, each norm's output, the
    convolution's input, the pooled features, the gradient at each block's output."""
    seen: dict[str, set[torch.dtype]] = {k: set() for k in ("block_in", "block_out", "norm_out", "conv_in",
                                                            "features", "block_grad")}
    def block_hook(module, inputs, out) -> None:
        seen["block_in"].add(inputs[0].dtype)
        seen["block_out"].add(out.dtype)
        out.register_hook(lambda grad: seen["block_grad"].add(grad.dtype))

    def norm_hook(module, inputs, out) -> None:
        seen["norm_out"].add(out.dtype)

    handles = []
    for block in model.blocks:
        handles.append(block.register_forward_hook(block_hook))
        handles.append(block.norm.register_forward_hook(norm_hook))
    real_fft_conv = ssm_core.layers.fft_conv

    def spy(u, *args, **kwargs):
        seen["conv_in"].add(u.dtype)
        return real_fft_conv(u, *args, **kwargs)

    monkeypatch.setattr(ssm_core.layers, "fft_conv", spy)
    with torch.autocast("cpu", dtype=BF16, enabled=autocast), residual_stream(stream):
        features = model.features(x)
        seen["features"].add(features.dtype)
        out = model.decoder(features)
    out.float().square().sum().backward()
    for h in handles:
        h.remove()
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("norm, prenorm, output", [("batch", True, "glu"), ("batch", False, "linear"),
                                                   ("layer", True, "none")])
def test_the_stream_is_bf16_when_on_and_float32_when_off(gen, monkeypatch, norm, prenorm, output) -> None:
    """On (bf16 autocast + residual_stream(bf16)): every block's input, output and output gradient, the norms'
    outputs and the convolutions' inputs are bf16; BatchNorm's parameters, running statistics and the parameters'
    gradients stay float32; the pooled features are float32. Off (plain bf16 autocast): all of those float32.
    residual_stream outside autocast changes nothing (the float32 model's values, bit for bit)."""
    model = _model(_seed(gen), norm, prenorm, output)
    x = torch.randn(2, 32, 1, generator=gen)
    on = _stream_dtypes(model, x, True, BF16, monkeypatch)
    for key in ("block_in", "block_out", "block_grad", "norm_out", "conv_in"):
        assert on[key] == {BF16}, key
    assert on["features"] == {torch.float32}
    buffers_and_grads = [t for m in model.modules() if isinstance(m, nn.BatchNorm1d)
                         for t in (m.running_mean, m.running_var, m.weight, m.bias, m.weight.grad)]
    assert all(t.dtype == torch.float32 for t in buffers_and_grads)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    off = _stream_dtypes(model, x, True, None, monkeypatch)
    for key in ("block_in", "block_out", "block_grad", "conv_in", "features"):
        assert off[key] == {torch.float32}, key
    model.eval()  # no running statistics moved between the two calls
    with torch.no_grad():
        plain = model(x)
        with residual_stream(BF16):
            assert torch.equal(model(x), plain)


def test_mean_pooling_a_bf16_stream_accumulates_in_float32(gen) -> None:
    """Padded mean and last pooling of a bf16 stream: float32 features equal to pooling the float32 values."""
    from ssm_core.blocks import pool_sequence

    h = torch.randn(3, 300, 5, generator=gen).to(BF16)
    valid = torch.arange(300)[None, :] < torch.tensor([[300], [257], [1]])  # (B, L)
    for pool in ("mean", "last"):
        for v in (None, valid):
            got, ref = pool_sequence(h, pool, v), pool_sequence(h.float(), pool, v)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
    assert pool_sequence(h, "none").dtype == BF16


# -- the setting ----------------------------------------------------------------------------------------------------
def test_bad_settings_raise_a_clear_error(tmp_path) -> None:
    from runners.data.base import TaskData
    from runners.train.config import TrainConfig
    from runners.train.loop import train

    with pytest.raises(ValueError, match=r"TrainConfig\.amp = 'bf16-stream' is not allowed; expected one of "
                                         r"\['none', 'bf16', 'fp16', 'bf16_stream'\]"):
        TrainConfig(lr=0.01, epochs=1, batch_size=8, amp="bf16-stream")
    with pytest.raises(ValueError, match=r"residual_stream: dtype=torch.float16 not allowed"):
        with residual_stream(torch.float16):
            pass
    data = [(torch.randn(8, 1), torch.tensor(0))] * 16
    task = TaskData(name="toy", train=data, val=data, test=data, seq_len=8, d_output=3, d_input=1)
    pooled = nn.Sequential(nn.Flatten(), nn.Linear(8, 3))  # no residual stream to keep in bf16
    with pytest.raises(ValueError, match=r"TrainConfig\.amp = 'bf16_stream' is not allowed for Sequential"):
        train(lambda: pooled, task, TrainConfig(lr=0.01, epochs=1, batch_size=8, amp="bf16_stream"), tmp_path,
              torch.device("cpu"), progress=False)


def test_training_with_bf16_stream(gen, tmp_path) -> None:
    """The loop's amp='bf16_stream' trains and evaluates with a bf16 stream (CPU autocast); the loss stays
    finite."""
    from runners.data.base import TaskData
    from runners.train.config import TrainConfig
    from runners.train.loop import train

    xs, ys = torch.randn(32, 32, 1, generator=gen), torch.randint(0, 3, (32,), generator=gen)
    data = list(zip(xs, ys))
    task = TaskData(name="toy", train=data, val=data[:8], test=data[:8], seq_len=32, d_output=3, d_input=1)
    seen: dict[bool, set[torch.dtype]] = {True: set(), False: set()}

    def make() -> SequenceModel:
        model = _model(0)
        model.blocks[-1].register_forward_hook(lambda m, i, o: seen[m.training].add(o.dtype))
        return model

    res = train(make, task, TrainConfig(lr=0.01, epochs=1, batch_size=8, amp="bf16_stream"), tmp_path,
                torch.device("cpu"), progress=False)
    assert seen == {True: {BF16}, False: {BF16}}  # training and evaluation
    assert all(torch.isfinite(torch.tensor(e["train_loss"])) for e in res.history)
