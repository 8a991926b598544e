"""The SSM kernel replayed from its CUDA graph and the FFT convolution, as one autograd node.

An S4 / S4D layer's training step at short lengths waits for the host: the GPU work of a step at H = 128, B = 32,
L = 1024 is ~0.3 ms, issuing it ~1 ms or more. Apart from the ops themselves, each custom autograd node costs the
host its own dispatch, and a CUDA backward runs on the autograd engine's device thread, where the same Python
costs more than on the calling thread (on an H200 host the FFT convolution's backward node: 322 against 204 us).
Here the kernel generation (:mod:`ssm_core.kernels.graphs`) and the convolution (:mod:`ssm_core.fftconv`) share
one node: the forward replays the kernel's graph and convolves with its static output (no copy of K); the
backward computes the convolution's gradients, writes the kernel's into the graph's static input and replays the
kernel's backward graph. Same formulas and passes as the two nodes it replaces (:func:`ssm_core.fftconv.conv_forward`,
:func:`ssm_core.fftconv.conv_backward`, :meth:`ssm_core.kernels.graphs.Entry.gradients`), so the same values.

Used by :class:`ssm_core.layers.SSMLayer` where the kernel's graph is replayed (CUDA, SSM_KERNEL_GRAPHS on, the
key captured), the batch has more than one row and autocast is off; elsewhere the layer takes the two nodes.
Measured against the two nodes on an H200 (benchmarks/diagnostics/backward_thread_host.py, its log in
results/diagnostics/): S4D 1.100 -> 0.940 ms and S4 1.138 -> 0.945 ms per forward+backward at H = 128, B = 32,
L = 1024; the same time where the GPU work dominates.

For small kernels (up to :data:`ssm_core.layers.SPECTRUM_IN_GRAPH_MAX` values) the layer's graph computes the
kernel's spectrum with D folded in (:func:`spectrum_fn`), and its backward graph takes the spectrum's gradient
straight from the convolution's backward: two ops fewer in the forward and four in the backward, for larger graph
statics kept between steps (16.4 against 4.4 MiB at H = 512, L = 1024 on an H200, the layer benchmark's 'kept MiB').
Above it the graph gives K and this node takes its spectrum. Either way the layer's graphs replace the kernel's own,
and no copy of K is made.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .fftconv import conv_backward, conv_forward, kernel_gradient, kernel_spectrum
from .kernels.graphs import Entry


#: the arguments of _KernelConv.forward before the kernel's parameters
N_ARGS = 7


class _KernelConv(torch.autograd.Function):
    """u (B, H, L), d (C, H), the kernel's parameters -> act(u * K + D u), K from the entry's graphs. With d None
    the entry gives the spectrum of K + D delta_0 itself, D being its last parameter (:func:`spectrum_fn`)."""

    @staticmethod
    def forward(ctx, u: Tensor, d: Tensor | None, entry: Entry, activation: str, layout: str, impl: str,
                out_dtype: torch.dtype | None, *params: Tensor) -> Tensor:
        entry.fwd.replay()
        if d is None:
            kf = entry.out  # (C, H, n), static: the latest replay's (the same unless the parameters changed)
            lk = 2 * u.shape[-1]
        else:
            kf = kernel_spectrum(entry.out, d, 2 * u.shape[-1], impl)  # (C, H, n); entry.out (C, H, Lk)
            lk = entry.out.shape[-1]
        need_grad = any(ctx.needs_input_grad)
        if need_grad:
            ctx.save_for_backward(kf)
            ctx.entry, ctx.spectrum = entry, d is None
        return conv_forward(ctx, u, kf, None, activation, layout, impl, lk, need_grad, out_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        (kf,) = ctx.saved_tensors
        entry = ctx.entry
        need_u, need_d = ctx.needs_input_grad[:2]
        need_params = any(ctx.needs_input_grad[N_ARGS:])
        params_grads = (None,) * (len(ctx.needs_input_grad) - N_ARGS)
        grad_d = None
        if ctx.spectrum:  # the graph takes the spectrum's gradient (the kernel parameters' and D's)
            grad_u, _ = conv_backward(ctx, grad_out, kf, need_u, need_params, s_out=entry.grad_out)
            if need_params:
                params_grads = entry.gradients()
            return (grad_u, *(None,) * (N_ARGS - 1), *params_grads)
        grad_u, s = conv_backward(ctx, grad_out, kf, need_u, need_d or need_params)
        if need_d or need_params:
            grad_full = kernel_gradient(s)  # (C, H, n): the gradient of K + D delta_0
            grad_d = grad_full[..., 0] if need_d else None
            if need_params:
                entry.grad_out.copy_(grad_full[..., :ctx.meta[2]])
                params_grads = entry.gradients()
        return (grad_u, grad_d, *(None,) * (N_ARGS - 2), *params_grads)


def spectrum_fn(kernel_fn: Callable[..., Tensor], n: int) -> Callable[..., Tensor]:
    """For a graph of the kernel's spectrum: fn(*params, d) = the spectrum of K + d delta_0 over n points, over n,
    (C, H, n) complex, with K = kernel_fn(*params) (C, H, Lk) (torch ops: differentiable, captured with the
    kernel; what :func:`ssm_core.fftconv.kernel_spectrum` computes)."""
    return lambda *t: kernel_spectrum(kernel_fn(*t[:-1]), t[-1], n, "torch")


def kernel_conv(u: Tensor, d: Tensor | None, entry: Entry, params: list[Tensor], activation: str, layout: str,
                impl: str, out_dtype: torch.dtype | None = None) -> Tensor:
    """act(u * K + D u) for u (B, H, L) real (B > 1), with autograd to u, d and ``params``: (B, C, H, L) in
    ``layout`` ('bchl' | 'blch'). ``entry``: the graphs (:func:`ssm_core.kernels.graphs.lookup`) of K (C, H, Lk)
    from ``params``, with d (C, H); or, with d None, of :func:`spectrum_fn` (its last parameter is d). What
    :func:`ssm_core.fftconv.fft_conv` (u, K, d, ...) computes; d and K share one float dtype, u is of it or
    bfloat16 (read in place and upcast by the packing pass), and autocast is off (the caller checks). ``out_dtype``: as :func:`ssm_core.fftconv.fft_conv`'s."""
    return _KernelConv.apply(u, d, entry, activation, layout, impl, out_dtype, *params)
