"""The training step's forward and backward replayed from CUDA graphs (runners/train/step_graph.py, SSM_STEP_GRAPHS=1):
the switch and its refusals (CPU), and on a GPU the eager loop's losses, parameters and BatchNorm statistics."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Optional

import pytest
import torch

from runners.data.base import TaskData
from runners.data.lra.common import ImageSequenceDataset
from runners.train import TrainConfig, train
from runners.train import step_graph
from runners.train.checkpoint import load as load_checkpoint
from runners.train.loop import code_segments
from runners.train.table import segments_note
from ssm_core import SequenceModel
from ssm_core.blocks import make_norm

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("value, wanted", [(None, False), ("0", False), ("1", True)])
def test_the_switch_reads_zero_or_one(monkeypatch, value, wanted) -> None:
    if value is None:
        monkeypatch.delenv(step_graph.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(step_graph.ENV_VAR, value)
    assert step_graph.requested() is wanted


@pytest.mark.parametrize("value", ["yes", "2", "", "true", " 1"])
def test_any_other_value_is_refused_by_name(monkeypatch, value) -> None:
    monkeypatch.setenv(step_graph.ENV_VAR, value)
    with pytest.raises(ValueError, match=f"{step_graph.ENV_VAR}={value!r} not allowed"):
        step_graph.requested()


CUDA = torch.device("cuda")


@pytest.mark.parametrize("device, world, accum, dual, amp, words", [
    (torch.device("cpu"), 1, 1, False, "none", "CUDA device"),
    (CUDA, 2, 1, False, "bf16", "DDP"),
    (CUDA, 1, 2, False, "bf16", "grad_accum"),
    (CUDA, 1, 1, True, "bf16", "dual-input"),
    (CUDA, 1, 1, False, "fp16", "'fp16'"),
    (CUDA, 1, 1, False, "bf16_stream", "'bf16_stream'"),
])
def test_what_cannot_be_graphed_says_why(device, world, accum, dual, amp, words) -> None:
    assert words in step_graph.refusal(device, world, accum, dual, amp)


@pytest.mark.parametrize("amp", ["none", "bf16"])
def test_what_can_be_graphed_has_no_refusal(amp) -> None:
    assert step_graph.refusal(CUDA, 1, 1, False, amp) is None


def _task(n_train: int = 48, n_eval: int = 16, side: int = 8, seed: int = 0) -> TaskData:
    """8 x 8 uint8 images read as sequences (B, 64, 1) in [-1, 1], as Pathfinder's are (batches gathered on the
    device with ``device_data``); label: whether the top half is brighter than the bottom half."""
    g = torch.Generator().manual_seed(seed)

    def split(n: int) -> ImageSequenceDataset:
        images = torch.randint(0, 256, (n, side, side), generator=g, dtype=torch.uint8)
        labels = (images[:, : side // 2].float().mean((1, 2)) > images[:, side // 2:].float().mean((1, 2))).long()
        return ImageSequenceDataset(images, labels, shift=127.5, scale=127.5)

    return TaskData(name="halves", train=split(n_train), val=split(n_eval), test=split(n_eval),
                    seq_len=side * side, d_output=2)


def _model(mode: str = "s4d", freeze_encoder_bias: bool = False) -> SequenceModel:
    """A small Pathfinder-style model (BatchNorm pre-norm, bidirectional, mean pooling); S4's kernel length is the
    task's, as the runner sets it. ``freeze_encoder_bias``: the encoder bias is not trained (the training loss has
    no gradient along it: tests/test_encoder_bias_null_direction.py)."""
    layer = {"mode": mode, "d_state": 8, "bidirectional": True, "output": "glu"}
    if mode == "s4":
        layer["l_max"] = 64
    model = SequenceModel(d_input=1, d_output=2, d_model=16, n_layers=2, norm="batch", prenorm=True, pool="mean",
                          layer=layer)
    model.encoder.bias.requires_grad_(not freeze_encoder_bias)
    return model


#: How the GPU comparisons hold the rounding of the two sides equal. Inside a capture the SSM kernels' own graphs are
#: off, so the eager side runs them off too ('0'); with them on in the eager side ('1') the kernels' rounding
#: differs, and the encoder bias, which in these pre-norm BatchNorm models the loss has no gradient along, takes
#: Adam steps of rounding's choosing that evaluation reads (tests/test_encoder_bias_null_direction.py): then the
#: bias is frozen.
SAME_ROUNDING = [("0", False), ("1", True)]  # (SSM_KERNEL_GRAPHS, freeze the encoder bias)


def test_asking_for_graphs_on_the_cpu_stops_before_anything_is_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(step_graph.ENV_VAR, "1")
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=f"{step_graph.ENV_VAR}=1 .* CUDA device .* {step_graph.ENV_VAR}=0"):
        train(_model, _task(), TrainConfig(lr=0.01, epochs=1, batch_size=8), run_dir=run_dir, device="cpu",
              progress=False)
    assert not run_dir.exists()


def test_a_call_with_graphs_is_a_segment_of_its_own() -> None:
    eager = code_segments([], 0, "GPU")
    assert code_segments(eager, 10, "GPU") == eager
    graphed = code_segments(eager, 10, "GPU", step_graphs=True)
    assert len(graphed) == 2 and graphed[-1]["step_graphs"] is True and "step_graphs" not in graphed[0]
    assert "(forward and backward from CUDA graphs) from step 10" in segments_note(graphed)


def test_the_loop_with_a_stand_in_capture_is_the_eager_loop(tmp_path, monkeypatch) -> None:
    """The plumbing on the CPU: a stand-in for make_graphed_callables runs its warm-up passes (forward and backward,
    which move BatchNorm's statistics) and installs a forward that counts its calls. The run must equal the eager run
    exactly (so the statistics were put back), the training steps must go through the installed forward, and the
    evaluations must not."""
    calls = {"graphed": 0}

    def stand_in(module, sample_args, num_warmup_iters=3):
        for _ in range(num_warmup_iters):
            out = module(*sample_args)
            torch.autograd.grad(out.float().sum(), [q for q in module.parameters() if q.requires_grad])
        eager_forward = module.forward

        def graphed_forward(*args):
            calls["graphed"] += 1
            return eager_forward(*args)

        module.forward = graphed_forward
        return module

    monkeypatch.setattr(step_graph, "refusal", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", stand_in)
    cfg = TrainConfig(epochs=2, batch_size=8, lr=0.01, weight_decay=0.01, device_data=True, seed=3)
    monkeypatch.setenv(step_graph.ENV_VAR, "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = train(_model, _task(), cfg, run_dir=tmp_path / "g", device="cpu", progress=False)
    assert not [w for w in caught if str(w.message) == step_graph.STILL_FAILS]  # float32 passed its GPU test
    monkeypatch.setenv(step_graph.ENV_VAR, "0")
    eager = train(_model, _task(), cfg, run_dir=tmp_path / "e", device="cpu", progress=False)
    assert calls["graphed"] == 2 * (48 // 8)  # every training step, no evaluation
    keys = ("train_loss", "val_loss", "test_loss", "val_metric")
    assert [[h[k] for k in keys] for h in graphed.history] == [[h[k] for k in keys] for h in eager.history]
    g_state = load_checkpoint(tmp_path / "g" / "checkpoint.pt")["model"]
    e_state = load_checkpoint(tmp_path / "e" / "checkpoint.pt")["model"]
    assert all(torch.equal(g_state[k], v) for k, v in e_state.items())


@pytest.mark.parametrize("amp_dtype, warned", [(None, False), (torch.bfloat16, True)])
def test_the_capture_warns_under_bf16_only(monkeypatch, amp_dtype, warned) -> None:
    """float32 passed the GPU comparisons below, bf16 autocast not yet: only a bf16 capture warns."""
    monkeypatch.setattr(torch.cuda, "make_graphed_callables",
                        lambda module, sample_args, num_warmup_iters=3: setattr(module, "forward", module.forward))
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step_graph.GraphedForward(model, torch.zeros(8, 64, 1), amp_dtype)
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == ([step_graph.STILL_FAILS] if warned
                                                                               else [])
    assert "bf16" in step_graph.STILL_FAILS and "not use its runs for results" in step_graph.STILL_FAILS


def _train(run_dir: Path, graphs: bool, amp: str, mode: str, freeze_encoder_bias: bool,
           monkeypatch) -> tuple[list[dict], dict]:
    monkeypatch.setenv(step_graph.ENV_VAR, "1" if graphs else "0")
    cfg = TrainConfig(epochs=3, batch_size=8, lr=0.01, weight_decay=0.01, amp=amp, device_data=True, seed=3)
    result = train(lambda: _model(mode, freeze_encoder_bias), _task(), cfg, run_dir=run_dir, device="cuda",
                   progress=False)
    state = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    return result.history, state


#: (amp, tolerance, SSM_KERNEL_GRAPHS, freeze the encoder bias): each precision at each SAME_ROUNDING setting, and
#: bf16 also with the kernels' graphs off and the bias frozen, which tells whether bf16's difference with the bias
#: trained and the graphs off goes through the bias alone.
EPOCH_CASES = ([("none", 1e-5, *r) for r in SAME_ROUNDING] + [("bf16", 1e-3, *r) for r in SAME_ROUNDING]
               + [("bf16", 1e-3, "0", True)])


@needs_cuda
@pytest.mark.parametrize("mode", ["s4d", "s4"])
@pytest.mark.parametrize("amp, tol, kernel_graphs, freeze_encoder_bias", EPOCH_CASES)
def test_graphed_training_matches_the_eager_loop(tmp_path, monkeypatch, mode, amp, tol, kernel_graphs,
                                                 freeze_encoder_bias) -> None:
    """Three epochs of six steps, evaluated after each: the training and validation losses, the final parameters and
    the BatchNorm running statistics of the graphed run are the eager run's, to rounding (the same kernels; cuBLAS
    and cuFFT may pick other algorithms inside a capture). The two sides' rounding is held equal as SAME_ROUNDING
    says."""
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", kernel_graphs)
    graphed, g_state = _train(tmp_path / "graphed", True, amp, mode, freeze_encoder_bias, monkeypatch)
    eager, e_state = _train(tmp_path / "eager", False, amp, mode, freeze_encoder_bias, monkeypatch)
    for key in ("train_loss", "val_loss", "test_loss"):
        worst = max(abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(graphed, eager))
        assert worst <= tol, (key, worst, [(a[key], b[key]) for a, b in zip(graphed, eager)])
    assert g_state.keys() == e_state.keys()
    for name, value in e_state.items():
        if value.is_floating_point():
            scale = value.abs().max().clamp_min(1e-6)
            assert float((g_state[name] - value).abs().max() / scale) <= 10 * tol, name
        else:  # BatchNorm's batch counters
            assert torch.equal(g_state[name], value), name
    segments = json.loads(json.dumps(load_checkpoint(tmp_path / "graphed" / "checkpoint.pt")["segments"]))
    assert segments[-1].get("step_graphs") is True


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class _PlainNormModel(torch.nn.Module):
    """No SSM layer: (B, L, 1) -> linear -> the suite's BatchNorm over (B L, H) -> GELU -> mean over L -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.norm, self.decoder = torch.nn.Linear(1, 16), make_norm("batch", 16), torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.nn.functional.gelu(self.norm(self.encoder(x))).mean(1))


def _steps(graphs: bool, arch: str, freeze_encoder_bias: bool = False, n_steps: int = 6,
           device: torch.device = CUDA, amp_dtype: Optional[torch.dtype] = None) -> list[dict[str, torch.Tensor]]:
    """The model's state after each of ``n_steps`` AdamW steps on the task's first batches (the same seed and
    batches either way); with ``graphs`` the forward and backward run through :class:`step_graph.GraphedForward`.
    Each state also holds 'eval_out': the eval-mode output on a fixed batch. ``arch``: 's4d/<norm>' (two S4D blocks
    with that norm) or 'plain/batch' (:class:`_PlainNormModel`). ``freeze_encoder_bias``: its encoder bias is not
    trained. ``amp_dtype``: the training forward and loss under that autocast, as the loop runs them (evaluation
    too)."""
    torch.manual_seed(5)
    kind, norm = arch.split("/")
    layer = {"mode": "s4d", "d_state": 8, "bidirectional": True, "output": "glu"}
    model = (SequenceModel(d_input=1, d_output=2, d_model=16, n_layers=2, norm=norm, prenorm=True, pool="mean",
                           layer=layer) if kind == "s4d" else _PlainNormModel()).to(device)
    model.encoder.bias.requires_grad_(not freeze_encoder_bias)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    task = _task()
    probe, _ = task.val.gather(torch.arange(8), device)
    graphed, states = None, []
    for k in range(n_steps):
        x, y = task.train.gather(torch.arange(8 * k, 8 * k + 8), device)
        model.train()
        if graphs and graphed is None:
            graphed = step_graph.GraphedForward(model, x, amp_dtype)
        with _autocast(amp_dtype):
            out = graphed(model, x) if graphed is not None else model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state = _state(model)
        model.eval()
        with torch.no_grad(), _autocast(amp_dtype):
            state["eval_out"] = model(probe).float().clone()
        states.append(state)
    return states


def _autocast(amp_dtype: Optional[torch.dtype]) -> torch.autocast:
    return torch.autocast("cuda", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None)


#: The largest difference allowed in a tensor, relative to its largest entry: float32 rounding grown over six steps;
#: under bf16 a few units of bf16's rounding (2 ** -8 = 3.9e-3) where cuBLAS picks other kernels inside the capture.
STEP_TOL = {None: 1e-4, torch.bfloat16: 1e-2}


@needs_cuda
@pytest.mark.parametrize("arch, kernel_graphs, freeze_encoder_bias, amp_dtype", [
    ("s4d/batch", "1", True, None), ("s4d/batch", "0", False, None), ("s4d/layer", "1", False, None),
    ("s4d/layer", "0", False, None), ("plain/batch", "1", False, None),
    ("s4d/batch", "0", False, torch.bfloat16), ("s4d/batch", "0", True, torch.bfloat16),
    ("s4d/layer", "0", False, torch.bfloat16)])
def test_each_graphed_step_leaves_the_eager_state(monkeypatch, arch, kernel_graphs, freeze_encoder_bias,
                                                  amp_dtype) -> None:
    """Step by step, every parameter and buffer (BatchNorm's statistics included) and the eval-mode output after
    each of six steps, graphed against eager: S4D blocks with BatchNorm and with LayerNorm, with the SSM kernels' own
    graphs on and off, and BatchNorm without an SSM layer. With BatchNorm blocks and the kernels' graphs on, the
    encoder bias is frozen (SAME_ROUNDING says why); LayerNorm gives it a gradient, and the model without SSM
    layers has no kernels to round differently. Under bf16 autocast: BatchNorm blocks with the bias trained and
    frozen, and LayerNorm blocks. The failure lists the first step and every tensor that differs, so that a mismatch
    says where it comes from."""
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", kernel_graphs)
    graphed = _steps(True, arch, freeze_encoder_bias, amp_dtype=amp_dtype)
    eager = _steps(False, arch, freeze_encoder_bias, amp_dtype=amp_dtype)
    tol = STEP_TOL[amp_dtype]
    bad = []
    for k, (g, e) in enumerate(zip(graphed, eager)):
        for name, value in e.items():
            if value.is_floating_point():
                err = float((g[name] - value).abs().max() / value.abs().max().clamp_min(1e-6))
                if err > tol:
                    bad.append(f"step {k + 1} {name}: relative {err:.2e}")
            elif not torch.equal(g[name], value):
                bad.append(f"step {k + 1} {name}: {g[name].tolist()} against {value.tolist()}")
    assert not bad, "\n".join(bad[:40])
