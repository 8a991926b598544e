"""The model's training-mode forward and backward replayed from CUDA graphs (opt-in: SSM_STEP_GRAPHS=1).

A full-configuration Pathfinder step (6 layers, H 256, batch 64, length 1,024) is made of many small kernels, and
the host that issues them is part of what the step waits for: two such runs sharing one H100 finished 1.35 times as
many epochs as one run alone (results/diagnostics/longrange_campaign_20261127T1859.log). Captured once by
``torch.cuda.make_graphed_callables`` and replayed, the model's forward is one graph launch and its backward
another. The loss, the optimizer step and the evaluation stay eager. The captured ops are the eager ones: the
same computation, nothing reimplemented.

Kept as the eager loop has it:
- the BatchNorm running statistics and batch counters: the capture's warm-up passes update them, so they are saved
  before and put back after (other buffers are left as the warm-up leaves them, as the eager first step would);
- the gradients: the parameters' ``.grad`` are filled by autograd from the graph's outputs, as usual;
- evaluation: it runs eagerly (eval mode) on the same parameters, which the optimizer updates in place;
- batches of another shape (a short last batch): eager.

The SSM kernels' own graphs (``ssm_core.kernels.graphs``) switch off inside the capture, which takes their ops as
they are.

Refused, with the reason, rather than silently skipped when the variable asks for it:
- without a CUDA device;
- under DDP (more than one process);
- with gradient accumulation, a dual-input task, fp16 (its gradient scaler) or the bf16 residual stream.

On a GPU, tests/test_step_graph.py compares it with the eager loop over several epochs (evaluated in between) and
step by step: the losses, the parameters and the running statistics. Its first run on an H100
(results/diagnostics/longrange_campaign_20261127T2109.log) failed: the training losses matched the eager loop's
within 1e-5 (float32), the validation losses differed by 0.4-2.2 %. The step-by-step comparison
(results/diagnostics/longrange_campaign_20261127T2233.log) found the first difference at step 3 in the encoder bias
(then the BatchNorm running means and the eval-mode output), only with the SSM kernels' own graphs on in the eager
side, and only with BatchNorm blocks. In these pre-norm BatchNorm models the training loss has no gradient along the
encoder bias, so its float32 gradient is rounding, which Adam scales to steps of a fraction of the learning rate,
and evaluation reads the bias through the running means (tests/test_encoder_bias_null_direction.py: rounding alone
does this on the CPU). The kernels' graphs round differently from the captured ops, so the eager side now runs
without them, or the bias is frozen.

With rounding held so, on an H100 (results/diagnostics/longrange_campaign_20261128T0206.log):
- float32 passed: the four comparisons over three epochs (S4D and S4; the kernels' graphs off, or on with the bias
  frozen) within 1e-5 in every loss, and the five step-by-step ones within 1e-4 in every tensor;
- bf16 autocast passed with the bias frozen, and failed with it trained and the kernels' graphs off: the training
  losses within 1e-3, the validation losses 0.5 % (S4) and 2.1 % (S4D) apart. Only evaluation differs and a
  frozen bias removes the difference, as with the bias's rounding walk (inside a capture cuBLAS may choose other
  bf16 kernels, whose rounding the bias would follow).
Step by step under bf16, on an H200 (results/diagnostics/longrange_campaign_20261128T0342.log): with the bias frozen,
and with LayerNorm blocks, every tensor of six steps stayed within 1e-2; with it trained only the eval-mode output
and the encoder bias differed (1.1 % at step 4, 1.4 % at step 5). The captured bf16 step departs from the eager one
along the bias's null direction alone, but the comparison with the bias trained still fails.
So the switch warns at every capture under bf16 autocast (STILL_FAILS), whose runs are not for results; in float32
it does not.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import nn

from ssm_core.ops.backend import env_switch

ENV_VAR = "SSM_STEP_GRAPHS"
STILL_FAILS = (f"{ENV_VAR}=1 with bf16 autocast: the graphed training step has not passed its GPU test "
               "(tests/test_step_graph.py against the eager loop; float32 has); do not use its runs for results")


def requested() -> bool:
    """Whether SSM_STEP_GRAPHS asks for graphs ('1'); '0' or unset: the eager loop."""
    return env_switch(ENV_VAR, False, "replays the model's training forward and backward from CUDA graphs",
                      "runs them eagerly")


def refusal(device: torch.device, world_size: int, grad_accum: int, dual: bool, amp: str) -> Optional[str]:
    """Why the training step cannot be graphed here (None: it can)."""
    if device.type != "cuda":
        return f"it needs a CUDA device (this run trains on {device.type})"
    if world_size > 1:
        return f"it runs in one process (this run has {world_size}: DDP)"
    if grad_accum > 1:
        return f"it needs grad_accum = 1 (got {grad_accum})"
    if dual:
        return "it takes one input (this task is dual-input)"
    if amp in ("fp16", "bf16_stream"):
        return f"it does not support amp = {amp!r} (use 'none' or 'bf16')"
    return None


class GraphedForward:
    """``model``'s training forward and backward replayed from CUDA graphs for inputs like ``sample`` (shape,
    dtype, device); anything else, and eval mode, runs the model eagerly."""

    def __init__(self, model: nn.Module, sample: torch.Tensor, amp_dtype: Optional[torch.dtype],
                 warmup: int = 3):
        if not model.training:
            raise ValueError("GraphedForward: the model must be in training mode when it is captured")
        if amp_dtype is not None:
            warnings.warn(STILL_FAILS, RuntimeWarning, stacklevel=2)
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._NormBase)]
        stats = [b for m in norms for b in m.buffers(recurse=False)]  # running mean / var, batch counters
        saved = [b.detach().clone() for b in stats]
        with torch.autocast("cuda", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None,
                            cache_enabled=False):
            torch.cuda.make_graphed_callables(model, (sample,), num_warmup_iters=warmup)
        # make_graphed_callables puts the graphed forward on the instance; keep it here and give the module back its
        # own forward, so that evaluation and other shapes run eagerly
        if "forward" not in model.__dict__:
            raise RuntimeError("GraphedForward: torch.cuda.make_graphed_callables did not leave a graphed forward on "
                               f"the module (torch {torch.__version__}); run with {ENV_VAR}=0")
        self._graphed = model.__dict__.pop("forward")
        with torch.no_grad():
            for buffer, value in zip(stats, saved):
                buffer.copy_(value)
        self.shape, self.dtype, self.device = sample.shape, sample.dtype, sample.device

    def __call__(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if model.training and x.shape == self.shape and x.dtype == self.dtype and x.device == self.device:
            return self._graphed(x)
        return model(x)
