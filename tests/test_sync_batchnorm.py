"""BatchNorm statistics over every process's batch (ssm_core.blocks.sync_batch_norms; TrainConfig.sync_batchnorm).

On the CPU: the replacement keeps the model (parameters, buffers, modes, outputs outside a process group) and the
option is checked where the config is built. The two-process runs (gloo: refused; NCCL on two GPUs: one GPU's
training at the same global batch) are in tests/test_train.py."""
from __future__ import annotations

import pytest
import torch

from runners.train import TrainConfig
from ssm_core import SequenceModel
from ssm_core.blocks import SyncBatchNormOverLength, _BatchNormOverLength, sync_batch_norms


def _model(norm: str = "batch", seed: int = 0) -> SequenceModel:
    torch.manual_seed(seed)
    return SequenceModel(d_input=3, d_output=2, d_model=16, n_layers=2, norm=norm, prenorm=True, pool="mean",
                         layer={"mode": "s4d", "d_state": 8, "bidirectional": True})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_replacement_keeps_parameters_buffers_modes_and_outputs(seed) -> None:
    """Every BatchNorm over length (two blocks and the final norm) becomes the synchronized one with the same state;
    outside a process group it computes what the plain one computes, in train mode (output and the running
    statistics it updates) and in eval mode, on fresh random inputs (B, L, H) and one recurrent step (B, H)."""
    plain, synced = _model(seed=seed), _model(seed=seed)
    plain.blocks[1].norm.weight.requires_grad_(False)
    synced.blocks[1].norm.weight.requires_grad_(False)
    with torch.no_grad():  # statistics and affine parameters that are not the defaults
        for m in (plain, synced):
            for norm in (mod for mod in m.modules() if isinstance(mod, _BatchNormOverLength)):
                g = torch.Generator().manual_seed(seed)
                for t in (norm.weight, norm.bias, norm.running_mean):
                    t.copy_(torch.randn(t.shape, generator=g))
                norm.running_var.copy_(torch.rand(norm.running_var.shape, generator=g) + 0.5)
                norm.num_batches_tracked.fill_(7)
    synced.blocks[0].norm.eval()
    assert sync_batch_norms(synced) == 3
    norms = [m for m in synced.modules() if isinstance(m, torch.nn.modules.batchnorm._NormBase)]
    assert len(norms) == 3 and all(type(m) is SyncBatchNormOverLength for m in norms)
    assert [m.training for m in norms] == [False, True, True]
    assert not synced.blocks[1].norm.weight.requires_grad and synced.blocks[0].norm.weight.requires_grad
    before = plain.state_dict()
    assert synced.state_dict().keys() == before.keys()
    assert all(torch.equal(synced.state_dict()[k], v) for k, v in before.items())
    synced.blocks[0].norm.train()
    x = torch.randn(4, 32, 3, generator=torch.Generator().manual_seed(100 + seed))  # (B, L, d_input)
    for mode in ("train", "eval"):
        plain.train(mode == "train"), synced.train(mode == "train")
        torch.testing.assert_close(synced(x), plain(x), rtol=0, atol=0)
        after = plain.state_dict()
        assert all(torch.equal(synced.state_dict()[k], v) for k, v in after.items()), mode
    step_in = torch.randn(5, 16, generator=torch.Generator().manual_seed(200 + seed))  # (B, H)
    torch.testing.assert_close(synced.final_norm(step_in), plain.final_norm(step_in), rtol=0, atol=0)


def test_a_model_without_batchnorm_is_left_as_it_is() -> None:
    model = _model(norm="layer")
    kinds = [type(m) for m in model.modules()]
    assert sync_batch_norms(model) == 0
    assert [type(m) for m in model.modules()] == kinds


def test_the_optimizer_built_after_sees_the_new_parameters() -> None:
    model = _model()
    old = {id(p) for p in model.parameters()}
    sync_batch_norms(model)
    new = {id(p) for n, p in model.named_parameters() if "norm" in n}
    assert new and not new & old


@pytest.mark.parametrize("value", ["yes", 1, None, 0.0, "true"])
def test_sync_batchnorm_is_true_or_false(value) -> None:
    with pytest.raises(ValueError, match=rf"TrainConfig\.sync_batchnorm = {value!r} is not allowed; expected true or "
                                         "false"):
        TrainConfig(lr=0.01, epochs=1, batch_size=8, sync_batchnorm=value)


def test_one_process_trains_as_without_it(tmp_path) -> None:
    """With one process the option changes nothing: the same history and parameters, bit for bit."""
    from runners.train import train
    from test_train import CPU, VOCAB, majority_task, without_time

    def make() -> SequenceModel:
        return SequenceModel(d_input=1, d_output=2, d_model=8, n_layers=1, norm="batch", vocab_size=VOCAB,
                             layer={"mode": "s4d", "d_state": 4})

    runs = {}
    for flag in (False, True):
        cfg = TrainConfig(lr=0.01, epochs=2, batch_size=32, sync_batchnorm=flag)
        runs[flag] = train(make, majority_task(n_train=128, n_eval=32), cfg, tmp_path / str(flag), CPU,
                           progress=False)
    assert without_time(runs[True].history) == without_time(runs[False].history)
    a, b = (torch.load(tmp_path / str(f) / "checkpoint.pt", weights_only=True)["model"] for f in (False, True))
    assert all(torch.equal(a[k], b[k]) for k in a)
