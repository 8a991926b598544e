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

from .fftconv import bidirectional_kernel, fft_conv, input_spectrum, resolve_impl
from .kernel_conv import kernel_conv, spectrum_fn
from .kernels import DiagKernel, DPLRKernel, graphs

MODES = ("s4", "s4d", "dss")
#: kernel sizes (channels x H x L) up to which the layer's CUDA graph also computes the kernel's spectrum (and D):
#: two ops fewer per forward and four per backward where the step waits for the host, for graph statics of about
#: 8 times the kernel's bytes kept between steps (16 MiB at this bound in float32, against 4 MiB for the kernel's
#: graph alone); above it only the kernel is replayed
SPECTRUM_IN_GRAPH_MAX = 2 ** 19
ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh, "identity": nn.Identity}
OUTPUTS = ("glu", "linear", "none")


class SSMLayer(nn.Module):
    """Sequence-to-sequence SSM layer. forward: (B, L, H) -> (B, L, H) ((B, H, L) if transposed).

    mode: 's4' (DPLR kernel, init = HiPPO measure 'legs' | 'legt' | 'fout', or 'legs/fout'), 's4d' (diagonal, init = one of
    ssm_core.inits.DIAGONAL_INITS), 'dss' (diagonal with DSS's choices: ZOH, Re(A) unconstrained, B frozen,
    softmax normalization; S4D Table 1). d_state is N, the size of the real state (N/2 complex modes stored).
    channels: SSM output channels per feature (mixed by the output projection). kernel_kwargs go to the kernel
    (discretization, real_transform, normalization, trainable_a, trainable_b, tie_ab, init_kwargs).
    lr: the SSM parameters' learning rate (dt, A, B; no weight decay on them), None for the optimizer's settings, or
    one per group as {dt: ..., A: ..., B: ...} with None for the global rate (ssm_core.kernels.params.optim_of).
    """

    def __init__(self, d_model: int, d_state: int = 64, mode: str = "s4d", init: str = "legs",
                 bidirectional: bool = False, channels: int = 1, activation: str = "gelu", output: str = "glu",
                 dropout: float = 0.0, transposed: bool = False, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 lr: float | dict | None = 1e-3, backend: str | None = None, **kernel_kwargs: Any):
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
            if mode == "dss":  # B = 1 frozen: DSS learns W = B o C from a random C, so its B is not HiPPO's
                kernel_kwargs = {"discretization": "zoh", "real_transform": "none", "trainable_b": False,
                                 "normalization": "softmax", **kernel_kwargs,
                                 "init_kwargs": {"legs_b": "ones", **(kernel_kwargs.get("init_kwargs") or {})}}
            self.kernel = DiagKernel(**common, **kernel_kwargs)
        self.d = nn.Parameter(torch.randn(channels, d_model))  # D skip, (C, H)
        self.activation = ACTIVATIONS[activation]()  # step mode; forward fuses the same function into fft_conv
        self.activation_name = activation
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
        self._step_ready = False

    # -- convolution mode -----------------------------------------------------------------------------------
    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """Under autocast (mixed precision) the kernel and the FFT convolution run in the parameters' dtype
        (float32) with autocast off, the input cast to it: only the position-wise output (linear or GLU) follows
        the caller's autocast. A bfloat16 input (a bf16 residual stream, :func:`ssm_core.blocks.residual_stream`)
        is not cast: the convolution's first pass reads it and upcasts it to float32 (the same values as the cast,
        without its pass), and its gradient comes back in bfloat16."""
        if torch.is_autocast_enabled(x.device.type):
            # the convolution's last pass writes the dtype the projection computes in (one rounding, no cast pass)
            out_dtype = torch.get_autocast_dtype(x.device.type) if self.output != "none" else None
            with torch.autocast(x.device.type, enabled=False):
                u = x if self._reads_bf16(x) else x.to(self.d.dtype)  # (B, L, H) or (B, H, L)
                y = self._convolve(u, rate, out_dtype)
        else:
            y = self._convolve(x, rate)
        if self.transposed:  # y: (B, C*H, L)
            return y if self.output == "none" else self._project(y.transpose(-1, -2)).transpose(-1, -2)
        return self._project(y)  # (B, L, C*H) -> (B, L, H)

    def _reads_bf16(self, x: Tensor) -> bool:
        """Whether the convolution reads x as it is though it is not of the parameters' dtype: a bfloat16 x with
        float32 parameters (upcast by the convolution's first pass)."""
        return x.dtype == torch.bfloat16 and self.d.dtype == torch.float32

    def _convolve(self, x: Tensor, rate: float, out_dtype: torch.dtype | None = None) -> Tensor:
        """act(u * k + D u) with dropout: (B, L, H) -> (B, L, C*H), or (B, H, L) -> (B, C*H, L) if transposed;
        in ``out_dtype`` if given (computed in x's dtype, or in float32 for a bfloat16 x with float32 parameters,
        rounded by the last pass; default the computation's dtype)."""
        u = x if self.transposed else x.transpose(-1, -2)  # (B, H, L), a view: fft_conv reads any strides
        length = u.shape[-1]
        # the D skip and the activation are fused into the FFT convolution; the output is laid out for what
        # follows: (B, C, H, L) memory for the transposed layer, (B, L, C, H) for the position-wise projection
        layout = "bchl" if self.transposed else "blch"
        y = self._replayed_conv(u, rate, layout, out_dtype)  # (B, C, H, L)
        if y is None:
            # the input's FFT first: on a GPU it runs while the host is still issuing the kernel's many small ops
            spectrum = input_spectrum(u) if u.dtype == self.d.dtype or self._reads_bf16(u) else None
            k = self._conv_kernel(self.kernel(length, rate=rate))  # (C, H, L) or (C, H, 2L)
            y = fft_conv(u, k, self.d, activation=self.activation_name, layout=layout, u_spectrum=spectrum,
                         out_dtype=out_dtype)
        if self.transposed:
            return self.dropout(y.flatten(1, 2))  # (B, C*H, L)
        return self.dropout(y.permute(0, 3, 1, 2).flatten(2))  # (B, L, C*H)

    def _conv_kernel(self, k: Tensor) -> Tensor:
        """The kernel (C', H, L) as the convolution takes it: itself, or for a bidirectional layer its two halves
        back to back, (C, H, 2L)."""
        if self.bidirectional:
            return bidirectional_kernel(k.view(2, self.channels, self.h, k.shape[-1]))
        return k

    def _replayed_conv(self, u: Tensor, rate: float, layout: str,
                       out_dtype: torch.dtype | None = None) -> Tensor | None:
        """The convolution as one autograd node with the kernel replayed from its CUDA graph
        (:mod:`ssm_core.kernel_conv`), or None where the two-node path runs (CPU, graphs off or not captured yet,
        one row, a kernel computed eagerly)."""
        if not (u.is_cuda and u.shape[0] > 1 and (u.dtype == self.d.dtype or self._reads_bf16(u))
                and self.d.dtype in (torch.float32, torch.float64) and graphs.enabled()):
            return None
        length = u.shape[-1]
        parts = self.kernel.graph_parts(length, rate)
        if parts is None:
            return None
        key, kernel_fn, params = parts
        conv_kernel = lambda *t: self._conv_kernel(kernel_fn(*t))  # noqa: E731 - (C, H, L) or (C, H, 2L)
        d: Tensor | None = self.d
        if self.channels * self.h * length <= SPECTRUM_IN_GRAPH_MAX:  # the kernel's spectrum and D in the graph too
            conv_kernel, params, d = spectrum_fn(conv_kernel, 2 * length), [*params, self.d], None
        entry = graphs.lookup(graphs.cache_of(self), ("conv", self.bidirectional, d is None, key), conv_kernel,
                              params)
        if entry is None:
            return None
        return kernel_conv(u, d, entry, params, self.activation_name, layout, resolve_impl(None, u.device),
                           out_dtype)

    def _project(self, y: Tensor) -> Tensor:
        """position-wise output (linear, GLU, or none): (..., C*H) -> (..., H)."""
        y = self.out_proj(y)
        return F.glu(y, dim=-1) if self.output == "glu" else y

    def _mix(self, y: Tensor) -> Tensor:
        """activation, dropout, position-wise output (linear or GLU): (..., C*H) -> (..., H)."""
        return self._project(self.dropout(self.activation(y)))

    # -- recurrent step mode --------------------------------------------------------------------------------
    def setup_step(self, rate: float = 1.0) -> None:
        """Discretize once for step mode (no gradients through the cached matrices)."""
        if self.bidirectional:
            raise NotImplementedError("a bidirectional layer has no recurrent step mode (it looks at the future)")
        self.kernel.setup_step(rate)
        self._step_ready = True

    def default_state(self, batch_size: int, device: torch.device | None = None) -> Tensor:
        """Zero state: (B, H, N/2) complex, one mode of each conjugate pair (diagonal and DPLR kernels)."""
        if not self._step_ready:
            self.setup_step()
        state = self.kernel.default_state(batch_size)
        return state if device is None else state.to(device)

    def step(self, u: Tensor, state: Tensor, inplace: bool = False) -> tuple[Tensor, Tensor]:
        """One step: u (B, H) -> y (B, H), new state. Same outputs as forward() on the whole sequence.
        ``inplace``: the new state is written over ``state`` (and returned): no new tensor per step."""
        if not self._step_ready:
            self.setup_step()
        fused = not (torch.is_grad_enabled() and self.d.requires_grad)  # the fused step gives D no gradient
        y, state = self.kernel.step(u, state, out=state if inplace else None,
                                    skip=self.d if fused else None)  # (B, C, H): C x (+ D u)
        y = y.to(u.dtype) if fused else y.to(u.dtype) + u[:, None, :] * self.d
        return self._mix(y.flatten(1)), state
