"""The encoder bias of a pre-norm BatchNorm backbone: a direction the training loss cannot see.

In ``SequenceModel(norm="batch", prenorm=True)`` every path from the encoder's output to the loss starts with a
BatchNorm (each block's pre-norm, and the final norm after the residual stream): in training mode each subtracts its
batch mean per feature, so adding a constant vector to the encoder's output changes nothing. The exact gradient of
the encoder bias is zero; what a float32 backward gives it is rounding, and Adam divides that by its own running
size, so the bias takes steps of a fraction of the learning rate in directions that rounding chooses. Evaluation
does see it: eval-mode BatchNorm subtracts running means, which follow the bias a few steps late.

These tests hold that property, on the CPU in float64, for the kinds of backbone the specs train, and the contrast
cases where it does not hold (LayerNorm blocks, post-norm BatchNorm). A further test shows its consequence: a change
of rounding alone (the loss in float64 instead of float32) moves the encoder bias by percents within six AdamW
steps, and with it the running means and the eval-mode output, while every other parameter stays equal to rounding;
with the bias frozen, or left out (``SequenceModel(encoder_bias=False)``, which starts from the same parameters and
computes the same training-mode function), everything stays equal. That is the signature of a comparison that runs
the same model two ways (eager and CUDA graphs, say) and compares evaluations.
"""
from __future__ import annotations

import pytest
import torch

from ssm_core import SequenceModel

CASES = [  # (layer mode, bidirectional, pool, n_layers)
    ("s4d", True, "mean", 2),
    ("s4d", False, "last", 1),
    ("s4", True, "mean", 2),
    ("s4", False, "mean", 3),
]


def _model(mode: str, bidirectional: bool, pool: str, n_layers: int, norm: str = "batch", prenorm: bool = True,
           dtype: torch.dtype = torch.float64, seed: int = 0, encoder_bias: bool = True) -> SequenceModel:
    torch.manual_seed(seed)
    layer = {"mode": mode, "d_state": 8, "bidirectional": bidirectional, "output": "glu"}
    if mode == "s4":
        layer["l_max"] = 32
    model = SequenceModel(d_input=1, d_output=2, d_model=12, n_layers=n_layers, norm=norm, prenorm=prenorm,
                          pool=pool, layer=layer, encoder_bias=encoder_bias)
    return model.to(dtype)


def _batch(seed: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(6, 32, 1, generator=g, dtype=dtype) * 2 - 1  # (B, L, 1) pixels on [-1, 1]
    return x, torch.randint(0, 2, (6,), generator=g)


def _grads(model: SequenceModel, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    model.train()
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode, bidirectional, pool, n_layers", CASES)
def test_the_training_loss_has_no_gradient_along_the_encoder_bias(mode, bidirectional, pool, n_layers) -> None:
    model = _model(mode, bidirectional, pool, n_layers)
    x, y = _batch(1)
    grads = _grads(model, x, y)
    weight = float(grads["encoder.weight"].abs().max())
    assert weight > 1e-4  # the encoder does learn: its weight has a gradient
    assert float(grads["encoder.bias"].abs().max()) <= 1e-12 * max(weight, 1.0)


@pytest.mark.parametrize("mode, bidirectional, pool, n_layers", CASES)
def test_a_shift_of_the_encoder_bias_changes_evaluation_and_not_training(mode, bidirectional, pool,
                                                                          n_layers) -> None:
    model = _model(mode, bidirectional, pool, n_layers)
    x, y = _batch(2)
    for k in range(3):  # running statistics that fit the current bias
        model.train()
        model(_batch(3 + k)[0])
    outputs = {}
    for shift in (0.0, 0.05):
        with torch.no_grad():
            model.encoder.bias += shift
        running = {n: b.clone() for n, b in model.named_buffers()}
        model.train()
        with torch.no_grad():
            outputs["train", shift] = model(x)
        for n, b in model.named_buffers():  # the train-mode pass updated the running statistics: put them back
            b.copy_(running[n])
        model.eval()
        with torch.no_grad():
            outputs["eval", shift] = model(x)
    train_change = float((outputs["train", 0.05] - outputs["train", 0.0]).abs().max())
    eval_change = float((outputs["eval", 0.05] - outputs["eval", 0.0]).abs().max())
    assert train_change <= 1e-12 * float(outputs["train", 0.0].abs().max())
    assert eval_change >= 1e-3


@pytest.mark.parametrize("norm, prenorm", [("layer", True), ("layer", False), ("batch", False)])
def test_other_backbones_give_the_encoder_bias_a_gradient(norm, prenorm) -> None:
    model = _model("s4d", True, "mean", 2, norm=norm, prenorm=prenorm)
    x, y = _batch(4)
    grads = _grads(model, x, y)
    assert float(grads["encoder.bias"].abs().max()) >= 1e-4 * float(grads["encoder.weight"].abs().max())


def _six_adamw_steps(norm: str, loss_in_float64: bool, bias: str) -> dict[str, torch.Tensor]:
    """Float32 model, six AdamW steps (lr 0.01) on fixed batches; its state and eval-mode output afterwards.
    ``bias``: the encoder bias 'trained', 'frozen' or 'none' (``encoder_bias=False``)."""
    model = _model("s4d", True, "mean", 2, norm=norm, dtype=torch.float32, seed=5, encoder_bias=bias != "none")
    if bias == "frozen":
        model.encoder.bias.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01, weight_decay=0.01)
    for k in range(6):
        x, y = _batch(10 + k, torch.float32)
        model.train()
        out = model(x)  # (B, 2)
        loss = torch.nn.functional.cross_entropy(out.double() if loss_in_float64 else out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    state = {n: v.detach().clone() for n, v in model.state_dict().items() if v.is_floating_point()}
    model.eval()
    with torch.no_grad():
        state["eval_out"] = model(_batch(99, torch.float32)[0])
    return state


def _relative_differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    return {n: float((a[n] - v).abs().max() / v.abs().max().clamp_min(1e-6)) for n, v in b.items()}


@pytest.mark.parametrize("norm, bias", [("batch", "trained"), ("batch", "frozen"), ("batch", "none"),
                                        ("layer", "trained")])
def test_rounding_alone_moves_the_encoder_bias_and_what_evaluation_reads(norm, bias) -> None:
    differences = _relative_differences(_six_adamw_steps(norm, False, bias), _six_adamw_steps(norm, True, bias))
    follow_the_bias = {"encoder.bias", "eval_out"} | {n for n in differences if n.endswith("running_mean")}
    moved = {n for n, d in differences.items() if d > 1e-4}
    if norm == "batch" and bias == "trained":
        assert differences["encoder.bias"] > 1e-3 and differences["eval_out"] > 1e-3, differences
        assert moved <= follow_the_bias, sorted(moved - follow_the_bias)
    else:
        assert not moved, {n: differences[n] for n in moved}


@pytest.mark.parametrize("mode, bidirectional, pool, n_layers", CASES)
def test_without_the_encoder_bias_training_mode_computes_the_same_function(mode, bidirectional, pool,
                                                                            n_layers) -> None:
    """``encoder_bias=False``: from the same seed, the same initial parameters but the bias (nothing else is drawn
    otherwise), and the same train-mode output (float64), whatever the bias of the other model holds."""
    with_bias = _model(mode, bidirectional, pool, n_layers, seed=3)
    without = _model(mode, bidirectional, pool, n_layers, seed=3, encoder_bias=False)
    assert without.encoder.bias is None
    state, state_without = with_bias.state_dict(), without.state_dict()
    assert set(state) - set(state_without) == {"encoder.bias"}
    for name, value in state_without.items():
        assert torch.equal(value, state[name]), name
    with torch.no_grad():
        with_bias.encoder.bias.uniform_(-1, 1)
    x, _ = _batch(7)
    with_bias.train()
    without.train()
    with torch.no_grad():
        a, b = with_bias(x), without(x)  # (B, 2)
    assert float((a - b).abs().max()) <= 1e-12 * float(a.abs().max())


def test_a_token_embedding_has_no_bias_to_leave_out() -> None:
    with pytest.raises(ValueError, match="encoder_bias=False is for linear encoders"):
        SequenceModel(d_input=0, d_output=2, vocab_size=10, encoder_bias=False)
