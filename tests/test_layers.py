"""SSMLayer and backbones: step mode equals convolution mode, bidirectional, rate change, errors."""
from __future__ import annotations

import pytest
import torch

from ssm_core import SequenceModel, SSMLayer
from ssm_core.fftconv import bidirectional_kernel, fft_conv
from ssm_core.kernels.graphs import Entry, cache_of, captured


@pytest.mark.parametrize("backend", ["torch", "triton"])  # triton: the fused step (interpreter on CPU)
@pytest.mark.parametrize("mode, init", [("s4d", "legs"), ("s4d", "inv"), ("s4", "legs"), ("s4", "fout"),
                                        ("s4", "legt")])
def test_step_mode_equals_convolution_mode(mode: str, init: str, backend: str) -> None:
    torch.manual_seed(0)
    layer = SSMLayer(6, 16, mode=mode, init=init, channels=2, output="linear", backend=backend).double().eval()
    if torch.cuda.is_available():
        layer = layer.cuda()
    x = torch.randn(3, 40, 6, dtype=torch.float64, device=layer.d.device)
    y = layer(x)
    layer.setup_step()
    state = layer.default_state(3)
    steps = []
    for t in range(x.shape[1]):
        yt, state = layer.step(x[:, t], state, inplace=t % 2 == 1)
        steps.append(yt)
    assert torch.allclose(torch.stack(steps, 1), y, atol=1e-10)


def test_model_step_mode_equals_convolution_mode() -> None:
    torch.manual_seed(1)
    model = SequenceModel(3, 5, d_model=8, n_layers=2, layer=dict(mode="s4d", d_state=8), pool="none",
                          norm="layer").double().eval()
    x = torch.randn(2, 25, 3, dtype=torch.float64)
    y = model(x)
    model.setup_step()
    state = model.default_state(2)
    outs = []
    for t in range(25):
        o, state = model.step(x[:, t], state)
        outs.append(o)
    assert torch.allclose(torch.stack(outs, 1), y, atol=1e-10)


def test_fft_conv_is_the_direct_convolution_causal_and_bidirectional() -> None:
    torch.manual_seed(2)
    B, H, L = 2, 3, 17
    u = torch.randn(B, H, L, dtype=torch.float64)
    k = torch.randn(2, 1, H, L, dtype=torch.float64)  # forward and backward halves
    d = torch.randn(1, H, dtype=torch.float64)
    direct = torch.zeros(B, H, L, dtype=torch.float64)
    for l in range(L):
        for j in range(L):
            if l - j >= 0:
                direct[..., l] += k[0, 0, :, j] * u[..., l - j]  # past and present
            if l + j + 1 < L:
                direct[..., l] += k[1, 0, :, j] * u[..., l + j + 1]  # strictly future
    direct += d[0, :, None] * u
    got = fft_conv(u, bidirectional_kernel(k), d)[:, 0]
    assert torch.allclose(got, direct, atol=1e-10)
    causal = fft_conv(u, k[0], d)[:, 0]
    direct_causal = direct - torch.stack([sum(k[1, 0, :, j] * u[..., l + j + 1] for j in range(L - l - 1))
                                          if l < L - 1 else torch.zeros(B, H, dtype=torch.float64)
                                          for l in range(L)], -1)
    assert torch.allclose(causal, direct_causal, atol=1e-10)


def test_bidirectional_layer_sees_the_future_and_causal_does_not() -> None:
    torch.manual_seed(3)
    x = torch.randn(1, 30, 4, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 20:] += 1.0
    for bidirectional, changed in ((False, False), (True, True)):
        layer = SSMLayer(4, 8, bidirectional=bidirectional).double()
        diff = (layer(x) - layer(x2))[:, :20].abs().max().item()
        assert (diff > 1e-8) == changed


def test_rate_change_keeps_the_continuous_time_response() -> None:
    """A smooth signal sampled at half the rate, with dt doubled (rate=2), gives the same outputs at the
    shared time points (S4 Section 4.3, Sampling Resolution Change)."""
    torch.manual_seed(4)
    layer = SSMLayer(4, 16, mode="s4d", init="legs", output="none", dt_min=1e-3, dt_max=3e-3).double()
    t = torch.linspace(0, 1, 2001, dtype=torch.float64)
    x = torch.stack([torch.sin(2 * torch.pi * f * t) for f in (1, 2, 3, 0.5)], -1)[None]  # (1, 2001, 4)
    full = layer(x)[:, ::2]
    half = layer(x[:, ::2], rate=2.0)
    naive = layer(x[:, ::2], rate=1.0)
    err_rate = (half - full).abs().max() / full.abs().max()
    err_naive = (naive - full).abs().max() / full.abs().max()
    assert err_rate < 0.05 < err_naive


def test_dss_has_no_step_mode_and_bidirectional_has_none() -> None:
    with pytest.raises(NotImplementedError, match="softmax"):
        SSMLayer(4, 8, mode="dss").setup_step()
    with pytest.raises(NotImplementedError, match="bidirectional"):
        SSMLayer(4, 8, bidirectional=True).setup_step()


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="s5"), "mode"), (dict(activation="swish"), "activation"), (dict(output="mlp"), "output"),
    (dict(mode="s4", init="inv"), "init"),
])
def test_layer_argument_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SSMLayer(4, 8, **kwargs)


@pytest.mark.parametrize("norm, prenorm", [("batch", True), ("layer", False)])
def test_backbone_shapes_and_gradients(norm: str, prenorm: bool) -> None:
    model = SequenceModel(0, 10, d_model=16, n_layers=2, vocab_size=20, norm=norm, prenorm=prenorm, dropout=0.1,
                          layer=dict(mode="s4", d_state=8, bidirectional=True))
    tokens = torch.randint(0, 20, (4, 33))
    out = model(tokens)
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------- CUDA graph replay

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _train_losses(mode: str, graphs: bool, monkeypatch, **kwargs) -> tuple[list[float], int]:
    """24 AdamW steps of two SSM layers on CUDA (lengths 256 / 300 / 512, evaluation under no_grad every 5 steps):
    the losses, and how many kernel generations were captured as CUDA graphs."""
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", "1" if graphs else "0")
    torch.manual_seed(0)
    model = torch.nn.Sequential(SSMLayer(32, 64, mode=mode, **kwargs), SSMLayer(32, 64, mode=mode, **kwargs)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    gen = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for step in range(24):
        length = (256, 300, 256, 512, 256, 300)[step % 6]
        x = torch.randn(4, length, 32, device="cuda", generator=gen)
        y = torch.randn(4, length, 32, device="cuda", generator=gen)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 5 == 4:
            model.eval()
            with torch.no_grad():
                losses.append(((model(x) - y) ** 2).mean().item())
            model.train()
    return losses, captured(model)


@needs_cuda
@pytest.mark.parametrize("mode,kwargs", [("s4d", {}), ("s4", {}), ("dss", {}), ("s4d", {"bidirectional": True})])
def test_training_with_kernel_graphs_matches_eager(mode, kwargs, monkeypatch):
    """Training with the kernel generation replayed from CUDA graphs (the default on CUDA) gives the losses of eager
    autograd, to 1e-6 relative (measured on an H200: identical for S4D, DSS and bidirectional S4D, <= 1.2e-7 for S4,
    which is what a one-ulp change of one parameter does to an eager run). Not FouT-initialized S4: its training
    amplifies one-ulp differences (an eager run with D changed by one ulp drifts from the unchanged one by more than
    the graph run does), so its graph replay is compared by gradients (tests/test_ops.py). Measurements:
    results/diagnostics/graphs_train_check_20261126T0928.log."""
    graphed, captured = _train_losses(mode, True, monkeypatch, **kwargs)
    eager, _ = _train_losses(mode, False, monkeypatch, **kwargs)
    assert captured > 0
    worst = max(abs(a - b) / abs(b) for a, b in zip(graphed, eager))
    assert worst <= 1e-6, (worst, graphed, eager)


class _Run:
    """Stands in for a CUDA graph on the CPU: replay() runs the function."""

    def __init__(self, fn) -> None:
        self.replay = fn


def _eager_entry(fn, params: list[torch.Tensor]) -> Entry:
    """An Entry whose 'graphs' compute fn(*params) eagerly into the static tensors a capture leaves: the forward's
    output in ``out``, the parameters' gradients for the one in ``grad_out`` in ``flat``."""
    entry = Entry()
    trainable = [p for p in params if p.requires_grad]
    with torch.no_grad():
        entry.out = fn(*params).clone()
    entry.grad_out = torch.empty_like(entry.out)
    entry.sizes, entry.shapes = [p.numel() for p in trainable], [p.shape for p in trainable]
    entry.mask = [p.requires_grad for p in params]
    entry.flat = torch.empty(sum(entry.sizes), dtype=trainable[0].dtype)

    def forward() -> None:
        with torch.no_grad():
            entry.out.copy_(fn(*params))

    def backward() -> None:
        aliases = [p.detach().requires_grad_(p.requires_grad) for p in params]
        with torch.enable_grad():
            grads = torch.autograd.grad(fn(*aliases), [a for a in aliases if a.requires_grad], entry.grad_out)
        entry.flat.copy_(torch.cat([g.reshape(-1) for g in grads]))

    entry.fwd, entry.bwd = _Run(forward), _Run(backward)
    return entry


def _one_node_parts(layer: SSMLayer, u: torch.Tensor, spectrum: bool):
    """(d, entry, params, trainable) of the layer's one-node path for input u (B, H, L), with the graph giving the
    kernel (d: the layer's D) or its spectrum with D (d None, D the last parameter); the graphs are eager
    stand-ins. trainable: u and every parameter that takes a gradient."""
    from ssm_core.kernel_conv import spectrum_fn

    length = u.shape[-1]
    _, kernel_fn, params = layer.kernel.graph_parts(length)
    conv_kernel = lambda *t: layer._conv_kernel(kernel_fn(*t))  # noqa: E731
    d = layer.d
    if spectrum:
        conv_kernel, params, d = spectrum_fn(conv_kernel, 2 * length), [*params, layer.d], None
    entry = _eager_entry(conv_kernel, params)
    trainable = [u, *[p for p in {id(p): p for p in [layer.d, *params]}.values() if p.requires_grad]]
    return d, entry, params, trainable


@pytest.mark.parametrize("mode,kwargs", [("s4d", {}), ("s4", {}), ("dss", {}), ("s4d", {"bidirectional": True}),
                                         ("s4", {"channels": 2, "output": "linear"})])
@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("spectrum", [False, True])
def test_kernel_and_convolution_in_one_node_match_the_two_nodes(mode, kwargs, transposed, spectrum, gen):
    """The one-node path (the kernel replayed from its graph and the FFT convolution: ssm_core/kernel_conv.py)
    gives the output and the gradients of u, D and every kernel parameter of the two-node path (kernel, then
    fft_conv), float64 on fresh random inputs, with the graph giving the kernel or its spectrum with D (the
    gradient of a complex output in autograd's convention); its graphs here are stand-ins that run the same ops
    eagerly."""
    from ssm_core.kernel_conv import N_ARGS, kernel_conv

    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    layer = SSMLayer(6, 8, mode=mode, transposed=transposed, backend="torch", **kwargs).double()
    length = 37
    u = torch.randn(5, 6, length, dtype=torch.float64, requires_grad=True)  # (B, H, L), B odd: one row unpaired
    layout = "bchl" if transposed else "blch"
    d, entry, params, trainable = _one_node_parts(layer, u, spectrum)
    out = kernel_conv(u, d, entry, params, "gelu", layout, "torch")
    ref = fft_conv(u, layer._conv_kernel(layer.kernel(length)), layer.d, "gelu", layout, impl="torch")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert out.stride() == ref.stride()
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, trainable, g), torch.autograd.grad(ref, trainable, g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    frozen = [i for i, p in enumerate(params) if not p.requires_grad]
    if frozen:  # DSS's B: no gradient returned for it
        again = kernel_conv(u, d, entry, params, "gelu", layout, "torch")  # (held: its node's saved tensors)
        grads = again.grad_fn.apply(g)
        assert all(grads[N_ARGS + i] is None for i in frozen)


#: float32 gradients against float64 ones: the suite's float32 tolerance for kernels (tests/test_ops.py's TOL32)
FLOAT32_GRADIENT_TOL = 1e-4


def _float32_paths_against_float64(names, one: list, two: list, exact: list) -> None:
    """Both float32 paths (one node, two nodes) within FLOAT32_GRADIENT_TOL of the float64 gradients, tensor by
    tensor. Not one path against the other: log_dt's float32 gradient sums terms that cancel, and each path rounds it
    its own way, up to 3.7e-5 (one node) and 4.5e-5 (two nodes) from float64 over 200 seeds of S4 with two channels,
    so the two float32 paths can differ by more than 1e-5 with neither at fault
    (results/diagnostics/one_node_float32_rounding_20261128T0702.log)."""
    errors = {name: (rel_error(a.double(), c), rel_error(b.double(), c)) for name, a, b, c in zip(names, one, two, exact)}
    worst = max(max(pair) for pair in errors.values())
    assert worst < FLOAT32_GRADIENT_TOL, f"(one node, two nodes) against float64: {errors}"


def one_node_float32_gradients(layer: SSMLayer, spectrum: bool, u: torch.Tensor, g: torch.Tensor):
    """(names, one node, two nodes, float64, output difference) for a float32 layer on the CPU with stand-in graphs:
    the gradients of u (B, H, L) and of every trainable parameter for the output gradient g, by the one-node path,
    the two-node path, and the two-node path on a float64 copy of the layer; and the relative difference of the two
    float32 paths' outputs. Also measured over many seeds by benchmarks/diagnostics/one_node_float32_rounding.py."""
    import copy

    from ssm_core.kernel_conv import kernel_conv

    exact_layer = copy.deepcopy(layer).double()
    u32, u64 = (u.detach().to(dtype).requires_grad_() for dtype in (torch.float32, torch.float64))
    length, grads, outputs = u.shape[-1], [], []
    for model, x, one_node in ((layer, u32, True), (layer, u32, False), (exact_layer, u64, False)):
        d, entry, params, trainable = _one_node_parts(model, x, spectrum)
        if one_node:
            out = kernel_conv(x, d, entry, params, "gelu", "bchl", "torch")
        else:
            out = fft_conv(x, model._conv_kernel(model.kernel(length)), model.d, "gelu", "bchl", impl="torch")
        grads.append(torch.autograd.grad(out, trainable, g.to(out.dtype)))
        outputs.append(out.detach())
        if model is layer and one_node:  # the order of every path's gradients: u, then the trainable parameters
            names = ["input"] + [next(n for n, q in layer.named_parameters() if q is t) for t in trainable[1:]]
    return (names, *grads, rel_error(outputs[0], outputs[1]))


@pytest.mark.parametrize("mode,kwargs", [("s4d", {}), ("s4", {}), ("dss", {}), ("s4d", {"bidirectional": True}),
                                         ("s4", {"channels": 2, "output": "linear"})])
@pytest.mark.parametrize("spectrum", [False, True])
def test_one_node_float32_gradients_are_as_accurate_as_the_two_nodes(mode, kwargs, spectrum, gen):
    """In float32, on the CPU with stand-in graphs (the same ops run eagerly), the one-node path and the two-node
    path give every gradient within float32's tolerance of the float64 gradients on the same inputs."""
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    layer = SSMLayer(16, 16, mode=mode, transposed=True, backend="torch", **kwargs)
    u = torch.randn(3, 16, 200)  # (B, H, L)
    g = torch.randn(3, layer.channels, 16, 200, dtype=torch.float64)  # (B, C, H, L), the output's layout
    names, one, two, exact, _ = one_node_float32_gradients(layer, spectrum, u, g)
    _float32_paths_against_float64(names, one, two, exact)


def test_one_node_path_is_for_cuda_with_graphs():
    """On the CPU the layer takes the two-node path (nothing is captured)."""
    layer = SSMLayer(4, 8, mode="s4d", backend="torch")
    layer(torch.randn(2, 16, 4)).sum().backward()
    assert captured(layer) == 0 and layer._replayed_conv(torch.randn(2, 4, 16), 1.0, "bchl") is None


#: the one-node path's output against the two-node one's, relative to its largest entry
ONE_NODE_OUTPUT_TOL = {torch.float32: 1e-6, torch.float64: 1e-12}
#: float64: the one-node path's gradients against the two-node one's (float32: each against float64, see above)
ONE_NODE_GRADIENT_TOL64 = 1e-10


@needs_cuda
@pytest.mark.parametrize("mode,kwargs", [("s4d", {}), ("s4", {}), ("dss", {}), ("s4d", {"bidirectional": True}),
                                         ("s4", {"channels": 2, "output": "linear"})])
@pytest.mark.parametrize("spectrum", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_node_path_on_cuda_matches_eager(mode, kwargs, spectrum, dtype, monkeypatch, gen):
    """On CUDA with graphs on, from the second call the layer's kernel and convolution run as one node with the
    kernel (or, below SPECTRUM_IN_GRAPH_MAX, its spectrum with D) replayed from the layer's graph: outputs and
    gradients of the input and every parameter equal the eager two-node path, across in-place parameter updates,
    with earlier outputs held (not overwritten), and under no_grad. In float64 the gradients of the two paths
    agree to 1e-10; in float32 each path's gradients are held to float32's tolerance of the float64 gradients (a
    float64 copy of the layer, eager), as the two float32 paths' rounding of log_dt's gradient can differ by more
    than 1e-5 (_float32_paths_against_float64). A fault (a buffer read after it was overwritten) fails either."""
    import copy

    from ssm_core import layers

    out_tol = ONE_NODE_OUTPUT_TOL[dtype]
    monkeypatch.setattr(layers, "SPECTRUM_IN_GRAPH_MAX", 2 ** 19 if spectrum else 0)
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    layer = SSMLayer(16, 16, mode=mode, transposed=True, **kwargs).cuda()
    layer = layer.double() if dtype == torch.float64 else layer
    names, params = zip(*[(n, p) for n, p in layer.named_parameters() if p.requires_grad])
    held = []
    for call in range(4):  # call 1: two nodes (first sight), call 2 captures, calls 3 and 4 replay
        with torch.no_grad():
            for p in params:
                p.add_(0.01 * torch.randn_like(p))
        x = torch.randn(3, 16, 200, device="cuda", dtype=dtype, requires_grad=True)
        monkeypatch.setenv("SSM_KERNEL_GRAPHS", "1")
        y = layer(x)
        assert len(cache_of(layer)) == (call > 0) and captured(layer.kernel) == 0  # the layer's one graph
        g = torch.randn_like(y)
        grads = torch.autograd.grad(y, [x, *params], g)
        monkeypatch.setenv("SSM_KERNEL_GRAPHS", "0")
        y_ref = layer(x)
        ref = torch.autograd.grad(y_ref, [x, *params], g)
        assert rel_error(y, y_ref) < out_tol, f"call {call}: output {rel_error(y, y_ref):.3g} from the eager one"
        if dtype == torch.float64:
            errors = {name: rel_error(a, b) for name, a, b in zip(("input", *names), grads, ref)}
            assert max(errors.values()) < ONE_NODE_GRADIENT_TOL64, f"call {call}: gradients' relative errors {errors}"
        else:
            exact_layer = copy.deepcopy(layer).double()  # its own empty graph cache; graphs are off here
            x64 = x.detach().double().requires_grad_()
            exact = torch.autograd.grad(exact_layer(x64), [x64, *[p for p in exact_layer.parameters()
                                                                 if p.requires_grad]], g.double())
            try:
                _float32_paths_against_float64(("input", *names), grads, ref, exact)
            except AssertionError as failure:
                raise AssertionError(f"call {call}: {failure}") from None
        held.append((y, y_ref.detach()))
    assert captured(layer) == 1
    for y, y_ref in held:
        assert rel_error(y, y_ref) < out_tol
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", "1")
    with torch.no_grad():
        plain = [layer(x) for _ in range(3)]  # two nodes, capture (forward only), replay
        expected = layer(x)
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", "0")
    with torch.no_grad():
        eager = layer(x)
    assert all(rel_error(y, eager) < out_tol for y in plain + [expected])


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# ---------------------------------------------------------------------------------------------- pooling over padding

def _padded(tokens: list[list[int]], length: int) -> torch.Tensor:
    out = torch.zeros(len(tokens), length, dtype=torch.long)  # (B, L), pad id 0
    for b, seq in enumerate(tokens):
        out[b, :len(seq)] = torch.tensor(seq)
    return out


def test_pool_sequence_over_valid_positions_against_a_loop():
    torch.manual_seed(0)
    h = torch.randn(3, 7, 4, dtype=torch.float64)  # (B, L, D)
    lengths = [7, 3, 1]
    valid = torch.arange(7)[None, :] < torch.tensor(lengths)[:, None]  # (B, L)
    from ssm_core.blocks import pool_sequence

    mean = pool_sequence(h, "mean", valid)
    last = pool_sequence(h, "last", valid)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(mean[b], h[b, :n].mean(0))
        torch.testing.assert_close(last[b], h[b, n - 1])
    torch.testing.assert_close(pool_sequence(h, "mean"), h.mean(1))  # no mask: every position


@pytest.mark.parametrize("pool", ["mean", "last"])
def test_causal_models_pooled_over_valid_tokens_ignore_how_much_padding_follows(pool):
    """A causal model's outputs at the sequence's positions do not see the right padding, so with pad_id the pooled
    features are the same at any padded length; without it, they change (the padding is averaged in)."""
    from ssm_core.baselines.attention import TransformerModel

    torch.manual_seed(0)
    tokens = [[3, 5, 7, 2], [4, 4, 9, 11, 6, 2], [8, 2]]
    short, long = _padded(tokens, 8), _padded(tokens, 21)
    ssm = SequenceModel(0, 5, d_model=8, n_layers=2, vocab_size=12, norm="layer", pool=pool, pad_id=0,
                        layer=dict(mode="s4d", d_state=8, bidirectional=False)).double().eval()
    att = TransformerModel(12, 5, d_model=8, n_layers=1, n_heads=2, causal=True, pool=pool, pad_id=0).double().eval()
    with torch.no_grad():
        for model in (ssm, att):
            torch.testing.assert_close(model(short), model(long))
            model.pad_id = None
            assert not torch.allclose(model(short), model(long))
    with pytest.raises(ValueError, match="pad_id is for token inputs"):
        SequenceModel(3, 5, pad_id=0)


@pytest.mark.parametrize("prenorm", [True, False])
def test_bidirectional_model_with_mask_padding_ignores_how_much_padding_follows(prenorm):
    """A bidirectional layer's backward half reads the positions after each token: with mask_padding the layers'
    inputs are zero there, so the pooled features do not depend on the padded length (eval mode: BatchNorm uses its
    running statistics); without it, the padding leaks in."""
    torch.manual_seed(0)
    tokens = [[3, 5, 7, 2], [4, 4, 9, 11, 6, 2], [8, 2]]
    short, long = _padded(tokens, 8), _padded(tokens, 21)
    kwargs = dict(d_model=8, n_layers=2, vocab_size=12, norm="batch", prenorm=prenorm, pool="mean", pad_id=0,
                  layer=dict(mode="s4d", d_state=8, bidirectional=True))
    masked = SequenceModel(0, 5, mask_padding=True, **kwargs).double().eval()
    plain = SequenceModel(0, 5, **kwargs).double().eval()
    plain.load_state_dict(masked.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(masked(short), masked(long))
        assert not torch.allclose(plain(short), plain(long))
        unpadded = torch.tensor([tokens[1]])  # no padding at all: masking changes nothing
        torch.testing.assert_close(masked(unpadded), plain(unpadded))
    with pytest.raises(ValueError, match="mask_padding needs pad_id"):
        SequenceModel(0, 5, vocab_size=12, mask_padding=True)


@pytest.mark.parametrize("spectrum", [False, True])
def test_one_node_out_dtype_rounds_the_float32_result_once(spectrum, gen):
    """The one-node path with out_dtype=bfloat16 (what the layer asks under bf16 autocast): its output is the float32
    output rounded to bf16, and its gradients for a bf16 output gradient are those of the same gradient in float32."""
    from ssm_core.kernel_conv import kernel_conv

    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    layer = SSMLayer(6, 8, mode="s4d", bidirectional=True, backend="torch")
    length = 29
    u = torch.randn(4, 6, length, requires_grad=True)  # (B, H, L)
    d, entry, params, trainable = _one_node_parts(layer, u, spectrum)
    # (each call's backward before the next forward: the graph's static spectrum is the latest replay's)
    ref = kernel_conv(u, d, entry, params, "gelu", "blch", "torch")
    g = torch.randn(ref.shape).to(torch.bfloat16)
    ref_grads = torch.autograd.grad(ref, trainable, g.float())
    out = kernel_conv(u, d, entry, params, "gelu", "blch", "torch", out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref.detach().to(torch.bfloat16))
    for a, b in zip(torch.autograd.grad(out, trainable, g), ref_grads):
        assert a.dtype == torch.float32 and torch.equal(a, b)
