"""The SSM layer: H independent SSMs, D skip, activation, position-wise output (S4 Section 3.4; S4D Appendix B).

Convolution mode computes the kernel (S4: DPLR / Cauchy, S4D: diagonal / Vandermonde, DSS: softmax) and
convolves by FFT; recurrent step mode runs the discretized recurrence one step at a time and gives the
same outputs (tested). ``rate`` scales the step size dt, for sampling-resolution change (S4 Table 5, 0.5x:
data at half the sampling rate -> rate 2).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fftconv import bidirectional_kernel, fft_conv
from .kernels import DiagKernel, DPLRKernel

MODES = ("s4", "s4d", "dss")
ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh, "identity": nn.Identity}
OUTPUTS = ("glu", "linear", "none")


class SSMLayer(nn.Module):
    """Sequence-to-sequence SSM layer. forward: (B, L, H) -> (B, L, H) ((B, H, L) if transposed).

    mode: 's4' (DPLR kernel, init = HiPPO measure 'legs' | 'legt' | 'fout'), 's4d' (diagonal, init = one of
    ssm_core.inits.DIAGONAL_INITS), 'dss' (diagonal with DSS's choices: ZOH, Re(A) unconstrained, B frozen,
    softmax normalization; S4D Table 1). d_state is N, the size of the real state (N/2 complex modes stored).
    channels: SSM output channels per feature (mixed by the output projection). kernel_kwargs go to the kernel
    (discretization, real_transform, normalization, trainable_a, trainable_b, tie_ab, init_kwargs).
    """

    def __init__(self, d_model: int, d_state: int = 64, mode: str = "s4d", init: str = "legs",
                 bidirectional: bool = False, channels: int = 1, activation: str = "gelu", output: str = "glu",
                 dropout: float = 0.0, transposed: bool = False, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 lr: float | None = 1e-3, backend: str | None = None, **kernel_kwargs: Any):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} not allowed; choose one of: {', '.join(MODES)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} not allowed; choose one of: {', '.join(ACTIVATIONS)}")
        if output not in OUTPUTS:
            raise ValueError(f"output={output!r} not allowed; choose one of: {', '.join(OUTPUTS)}")
        self.h, self.n, self.mode = d_model, d_state, mode
        self.bidirectional, self.channels, self.transposed = bidirectional, channels, transposed
        kernel_channels = channels * (2 if bidirectional else 1)
        common = dict(d_model=d_model, d_state=d_state, channels=kernel_channels, init=init, dt_min=dt_min,
                      dt_max=dt_max, lr=lr, backend=backend)
        if mode == "s4":
            self.kernel: nn.Module = DPLRKernel(**common, **kernel_kwargs)
        else:
            if mode == "dss":
                kernel_kwargs = {"discretization": "zoh", "real_transform": "none", "trainable_b": False,
                                 "normalization": "softmax", **kernel_kwargs}
            self.kernel = DiagKernel(**common, **kernel_kwargs)
        self.d = nn.Parameter(torch.randn(channels, d_model))  # D skip, (C, H)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output = output
        if output == "glu":  # (W1 y) o sigmoid(W2 y) (S4D Appendix B, "GLU feedforward")
            self.out_proj: nn.Module = nn.Linear(channels * d_model, 2 * d_model)
        elif output == "linear":
            self.out_proj = nn.Linear(channels * d_model, d_model)
        else:
            if channels != 1:
                raise ValueError("output='none' needs channels=1 (nothing would mix the channels)")
            self.out_proj = nn.Identity()
        self._step_cache: tuple[Tensor, Tensor, Tensor] | None = None

    # -- convolution mode -----------------------------------------------------------------------------------
    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        u = x if self.transposed else x.transpose(-1, -2)  # (B, H, L)
        length = u.shape[-1]
        k = self.kernel(length, rate=rate)  # (C', H, L)
        if self.bidirectional:
            k = bidirectional_kernel(k.view(2, self.channels, self.h, length))  # (C, H, 2L)
        y = fft_conv(u, k, self.d)  # (B, C, H, L)
        y = self._mix(y.flatten(1, 2).transpose(-1, -2))  # (B, L, C*H) -> (B, L, H)
        return y.transpose(-1, -2) if self.transposed else y

    def _mix(self, y: Tensor) -> Tensor:
        """activation, dropout, position-wise output (linear or GLU): (..., C*H) -> (..., H)."""
        y = self.out_proj(self.dropout(self.activation(y)))
        return F.glu(y, dim=-1) if self.output == "glu" else y

    # -- recurrent step mode --------------------------------------------------------------------------------
    def setup_step(self, rate: float = 1.0) -> None:
        """Discretize once for step mode (no gradients through the cached matrices)."""
        if self.bidirectional:
            raise NotImplementedError("a bidirectional layer has no recurrent step mode (it looks at the future)")
        with torch.no_grad():
            self._step_cache = self.kernel.step_matrices(rate)

    def default_state(self, batch_size: int, device: torch.device | None = None) -> Tensor:
        """Zero state: (B, H, N/2) complex for diagonal kernels, (B, H, N) for DPLR."""
        if self._step_cache is None:
            self.setup_step()
        da = self._step_cache[0]
        width = da.shape[-1]
        return torch.zeros(batch_size, self.h, width, dtype=da.dtype, device=device or da.device)

    def step(self, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step: u (B, H) -> y (B, H), new state. Same outputs as forward() on the whole sequence."""
        if self._step_cache is None:
            self.setup_step()
        da, db, c = self._step_cache
        uc = u.to(da.dtype)
        if da.dim() == 2:  # diagonal: x = dA o x + dB u; y = 2 Re(C x)
            state = da * state + db * uc[..., None]
            y = 2 * torch.einsum("chn,bhn->bch", c, state).real
        else:  # DPLR on the full complex state: x = dA x + dB u; y = Re(C x)
            state = torch.einsum("hij,bhj->bhi", da, state) + db * uc[..., None]
            y = torch.einsum("chn,bhn->bch", c, state).real
        y = y.to(u.dtype) + u[:, None, :] * self.d  # (B, C, H)
        return self._mix(y.flatten(1)), state
