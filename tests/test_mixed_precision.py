"""The backbone's BatchNorm layout and its mixed-precision rule (the SSM convolution and the residual stream stay in
the parameters' dtype under autocast; the position-wise output follows autocast)."""
from __future__ import annotations

import torch
from torch import nn

from ssm_core import SequenceModel
from ssm_core.blocks import make_norm


def _transposed_reference(norm: nn.BatchNorm1d, x: torch.Tensor) -> torch.Tensor:
    """BatchNorm1d over (B, H, L), the layout the statistics are defined on (over batch and length)."""
    return nn.functional.batch_norm(x.transpose(-1, -2), norm.running_mean, norm.running_var, norm.weight, norm.bias,
                                    norm.training, norm.momentum, norm.eps).transpose(-1, -2)


def test_batch_norm_over_length_equals_batchnorm1d_on_the_transpose():
    """Output, input and parameter gradients, and running statistics: equal (float64, fresh inputs) to BatchNorm1d
    on the (B, H, L) transpose, in training and in evaluation mode."""
    g = torch.Generator().manual_seed(11)
    for shape in [(3, 17, 8), (2, 64, 5), (1, 9, 4)]:
        norm = make_norm("batch", shape[-1]).double()
        ref = make_norm("batch", shape[-1]).double()
        with torch.no_grad():
            for p in (norm.weight, norm.bias):
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
        ref.load_state_dict(norm.state_dict())
        for training in (True, False):
            norm.train(training)
            ref.train(training)
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1).requires_grad_()
            x_ref = x.detach().clone().requires_grad_()
            dy = torch.randn(shape, generator=g, dtype=torch.float64)
            y, y_ref = norm(x), _transposed_reference(ref, x_ref)
            assert y.shape == x.shape
            torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
            (y * dy).sum().backward()
            (y_ref * dy).sum().backward()
            torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(norm.weight.grad, ref.weight.grad, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(norm.bias.grad, ref.bias.grad, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(norm.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(norm.running_var, ref.running_var, rtol=1e-12, atol=1e-12)
            norm.zero_grad()
            ref.zero_grad()


def test_batch_norm_over_length_reads_a_non_contiguous_input():
    norm = make_norm("batch", 6).double()
    x = torch.randn(4, 6, 10, dtype=torch.float64).transpose(-1, -2)  # (4, 10, 6), not contiguous
    torch.testing.assert_close(norm(x), _transposed_reference(norm, x), rtol=1e-12, atol=1e-12)


def _model(output: str, prenorm: bool) -> SequenceModel:
    torch.manual_seed(0)
    return SequenceModel(d_input=1, d_output=3, d_model=16, n_layers=2, norm="batch", prenorm=prenorm,
                         layer=dict(mode="s4d", d_state=8, bidirectional=True, output=output))


def test_autocast_keeps_the_convolution_and_the_residual_stream_in_float32():
    """Under bf16 autocast: every block's input and output are float32; the convolution runs in float32 and its
    last pass writes bf16 for the projection (the projection's input is the float32 convolution of the block's
    normalized input, rounded once); the projection's output is bf16; the model's output and gradients are those
    of float32 within bf16 rounding."""
    for output, prenorm in [("glu", True), ("linear", False)]:
        model = _model(output, prenorm)
        seen: dict[str, list[torch.dtype]] = {"block_in": [], "block_out": [], "proj_in": [], "proj_out": []}
        def record(name_in: str, name_out: str):
            def hook(module, inputs, out) -> None:
                seen[name_in].append(inputs[0].dtype)
                seen[name_out].append(out.dtype)
            return hook

        for block in model.blocks:
            block.register_forward_hook(record("block_in", "block_out"))
            block.layer.out_proj.register_forward_hook(record("proj_in", "proj_out"))
        x = torch.randn(4, 64, 1, generator=torch.Generator().manual_seed(3))
        y_ref = model(x)
        grads_ref = torch.autograd.grad(y_ref.square().sum(), list(model.parameters()), allow_unused=True)
        for v in seen.values():
            v.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        grads = torch.autograd.grad(y.float().square().sum(), list(model.parameters()), allow_unused=True)
        assert set(seen["block_in"]) == set(seen["block_out"]) == {torch.float32}
        assert set(seen["proj_in"]) == set(seen["proj_out"]) == {torch.bfloat16}
        # the first block's convolution, recomputed in float32 without autocast, rounded once = what it gave
        block = model.blocks[0]
        captured: list[torch.Tensor] = []
        block.layer.out_proj.register_forward_pre_hook(lambda m, i: captured.append(i[0].detach()))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        with torch.no_grad():
            h0 = model.encoder(x)
            u = block.norm(h0) if block.prenorm else h0
            expected = block.layer._convolve(u, 1.0)
        assert torch.equal(captured[0], expected.to(torch.bfloat16))
        err = (y.float() - y_ref).norm() / y_ref.norm()
        assert 0 < err < 3e-2, err  # bf16 rounding, not float32's identity
        # all gradients as one vector (a bias feeding a BatchNorm has a gradient of rounding size only)
        flat = torch.cat([g.float().flatten() for g in grads if g is not None])
        flat_ref = torch.cat([g.flatten() for g in grads_ref if g is not None])
        assert (flat - flat_ref).norm() / flat_ref.norm() < 3e-2


def test_training_with_bf16_autocast_runs_the_float32_convolution(tmp_path):
    """The loop's amp='bf16' trains through the mixed-precision rule (CPU autocast) and the loss stays finite."""
    from runners.train.config import TrainConfig
    from runners.train.loop import train
    from runners.data.base import TaskData

    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(32, 32, 1, generator=g), torch.randint(0, 3, (32,), generator=g)
    data = list(zip(xs, ys))
    task = TaskData(name="toy", train=data, val=data[:8], test=data[:8], seq_len=32, d_output=3, d_input=1)
    cfg = TrainConfig(lr=0.01, epochs=1, batch_size=8, amp="bf16")
    res = train(lambda: _model("glu", True), task, cfg, tmp_path, torch.device("cpu"), progress=False)
    assert all(torch.isfinite(torch.tensor(e["train_loss"])) for e in res.history)


def _image_task(n: int = 48, side: int = 6):
    from runners.data.base import TaskData
    from runners.data.lra.common import ImageSequenceDataset, stack_collate

    g = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (n, side, side), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 3, (n,), generator=g)
    perm = torch.randperm(n, generator=g)
    parts = {"train": perm[:32], "val": perm[32:40], "test": perm[40:]}
    ds = {k: ImageSequenceDataset(images, labels, v, shift=127.5, scale=127.5) for k, v in parts.items()}
    return TaskData(name="images", train=ds["train"], val=ds["val"], test=ds["test"], seq_len=side * side,
                    d_output=3, d_input=1, collate_fn=stack_collate)


def test_device_data_gathers_the_loaders_batches(tmp_path):
    """device_data: the same batches in the same order as the DataLoader's, so the same training (history and
    weights equal); a batch gathered equals the stacked items."""
    from runners.train.config import TrainConfig
    from runners.train.loop import train
    from runners.data.lra.common import stack_collate

    task = _image_task()
    positions = torch.tensor([3, 0, 7, 7, 31])
    x, y = task.train.gather(positions, torch.device("cpu"))
    x_ref, y_ref = stack_collate([task.train[int(i)] for i in positions])
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    runs = {}
    for device_data in (False, True):
        cfg = TrainConfig(lr=0.01, epochs=2, batch_size=8, grad_accum=2, device_data=device_data)
        torch.manual_seed(0)
        models: list = []

        def make():
            models.append(_model("glu", True))
            return models[-1]

        res = train(make, task, cfg, tmp_path / str(device_data), torch.device("cpu"), progress=False)
        runs[device_data] = (res.history, models[-1].state_dict())
    for a, b in zip(runs[False][0], runs[True][0]):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    for k, v in runs[False][1].items():
        assert torch.equal(v, runs[True][1][k]), k


def test_device_data_is_refused_for_a_dataset_that_cannot_gather(tmp_path):
    import pytest
    from runners.data.base import TaskData
    from runners.train.config import TrainConfig
    from runners.train.loop import train

    data = [(torch.randn(8, 1), torch.tensor(0))] * 16
    task = TaskData(name="toy", train=data, val=data, test=data, seq_len=8, d_output=3, d_input=1)
    with pytest.raises(ValueError, match=r"device_data = True: the training set of task 'toy' \(list\) cannot"):
        train(lambda: _model("glu", True), task, TrainConfig(lr=0.01, epochs=1, batch_size=8, device_data=True),
              tmp_path, torch.device("cpu"), progress=False)
    with pytest.raises(ValueError, match=r"TrainConfig.device_data = 'yes'"):
        TrainConfig(lr=0.01, epochs=1, batch_size=8, device_data="yes")


def test_cuda_layer_under_autocast_gives_the_float32_convolution_rounded_once(monkeypatch):
    """On a GPU (the kernel replayed from its CUDA graph, the Triton passes): under bf16 autocast the projection's
    input is the float32 convolution (graphs off: the two-node path) rounded to bf16, for several calls; the
    gradients agree with float32 training within bf16 rounding."""
    import pytest

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from ssm_core import SSMLayer
    from ssm_core.kernels import graphs

    assert graphs.enabled()
    torch.manual_seed(1)
    layer = SSMLayer(64, 16, mode="s4d", bidirectional=True).cuda()
    seen: list[torch.Tensor] = []
    layer.out_proj.register_forward_pre_hook(lambda m, i: seen.append(i[0].detach()))
    for _ in range(3):
        x = torch.randn(8, 512, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = layer(x)
        assert y.dtype == torch.bfloat16 and seen[-1].dtype == torch.bfloat16
        with torch.no_grad(), monkeypatch.context() as m:
            m.setenv(graphs.ENV_VAR, "0")  # the eager two-node path
            expected = layer._convolve(x, 1.0)
        # within one bf16 step: the graph computes the kernel's spectrum with torch ops, the eager path with the
        # Triton pass, so the float32 values may differ in their last bits before the rounding
        torch.testing.assert_close(seen[-1].float(), expected.to(torch.bfloat16).float(), rtol=2 ** -7, atol=1e-5)
        grads = torch.autograd.grad(y.float().square().sum(), list(layer.parameters()))
        ref = torch.autograd.grad(layer(x).square().sum(), list(layer.parameters()))
        flat, flat_ref = (torch.cat([g.flatten() for g in gs]) for gs in (grads, ref))
        assert (flat - flat_ref).norm() / flat_ref.norm() < 3e-2
