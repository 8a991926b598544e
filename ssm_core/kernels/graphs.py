"""Replay an SSM kernel's generation (parameters -> K) and its backward from CUDA graphs (on by default on CUDA).

The kernel generation is a few dozen small ops on (H, N/2)-sized tensors around one Cauchy or Vandermonde
product. On a GPU each op costs the host more time (~6-30 us to issue) than the GPU spends on it, so a training
step of an S4 / S4D layer waits for the host. Captured once per (length, rate, parameter storage, grad mode) and
replayed, the forward is one graph launch and one copy, the backward one copy in, one graph launch and one copy
out. The ops are the eager ones (:func:`run`'s ``fn``), captured as they are: there is no second implementation.

Measured (NVIDIA H200, torch 2.11, tables/bench-layers.md): host time of one forward+backward of the kernel
generation 1.0-1.1 -> 0.20-0.27 ms (S4D) and 2.4-3.0 -> 0.27-0.36 ms (S4) at H = 256, N = 64; the layer at
H = 256, B = 32, L = 4096 2.1-2.5 -> 1.6-1.7 ms (S4D) and 3.4-3.9 -> 1.85 ms (S4). Checked on that GPU:
tests/test_ops.py::test_kernel_graph_replay_matches_eager (kernel and gradients equal eager autograd across in-place
updates, with earlier outputs alive, accumulation, no-grad; LegS, FouT, LegS/FouT and S4D),
tests/test_layers.py::test_training_with_kernel_graphs_matches_eager (24 AdamW steps of two-layer S4 / S4D / DSS /
bidirectional models, several lengths, evaluation in between: the eager run's losses),
tests/test_layers.py::test_one_node_path_on_cuda_matches_eager (the layer's replay inside the convolution's node:
outputs and gradients of eager autograd), and under DDP on two GPUs (tests/test_train.py). Captures go through
detached aliases of the parameters (same storage, fresh autograd leaves): a capture through the parameters
themselves fails while an earlier autograd graph through them is alive.

Semantics kept: every call returns fresh tensors (the graph's static output and gradients are copied out), so
results held across calls are never overwritten; the parameters are read where they live, so in-place optimizer
updates are seen; gradients flow to the parameters through a custom autograd Function (accumulation, hooks and
DDP work as usual). The backward uses the intermediates of the latest forward replay of the same key, which equal
those of the call being differentiated unless the parameters were changed in place in between (which eager
autograd would reject). Not differentiable twice. Memory: each captured key keeps its graph's intermediates
(8 MiB per layer at H = 256, L = 4096, 64 MiB at H = 512, L = 16384; at most CAPACITY keys per module).

Callers: the kernels' forward (:func:`run`, one autograd node of its own), and :class:`ssm_core.layers.SSMLayer`,
which puts the replay inside the FFT convolution's node (:func:`lookup`, :mod:`ssm_core.kernel_conv`): one node
less per step, the host's time being what a short-sequence step waits for.

Off: with SSM_KERNEL_GRAPHS=0; on the CPU; while a CUDA graph is being captured by the caller; and for a key
seen for the first time (that call runs eagerly, so that Triton compiles / autotunes and the FFT plans exist
before the capture, which happens on the second call). A capture that fails falls back to eager for that key
with a RuntimeWarning that gives the reason.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..ops.backend import env_switch

ENV_VAR = "SSM_KERNEL_GRAPHS"
#: Captured keys kept per module (least recently used dropped first).
CAPACITY = 4
_FAILED = object()


def enabled() -> bool:
    """Graph replay is on unless SSM_KERNEL_GRAPHS=0 (it applies to CUDA tensors only)."""
    return env_switch(ENV_VAR, True, "replays the SSM kernel generation from CUDA graphs", "runs it eagerly")


class Entry:
    """One captured key: forward (and backward) graphs and their static tensors."""

    __slots__ = ("fwd", "bwd", "out", "grad_out", "flat", "sizes", "shapes", "mask")

    def gradients(self) -> tuple[Tensor | None, ...]:
        """Replay the backward graph on the gradient in ``grad_out``: fresh gradients of the parameters, in their
        order (None for those that do not require grad)."""
        self.bwd.replay()
        parts = iter(torch.split(self.flat.clone(), self.sizes))
        shapes = iter(self.shapes)
        return tuple(next(parts).view(next(shapes)) if need else None for need in self.mask)


class GraphCache:
    """Per-module cache: key -> None (seen once, ran eagerly), an Entry, or _FAILED (eager from now on).

    Copies and pickles of a module get an empty cache (graphs belong to one set of parameter storages).
    """

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()

    def __deepcopy__(self, memo) -> "GraphCache":
        return GraphCache()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.entries = OrderedDict()

    def __len__(self) -> int:
        return sum(isinstance(e, Entry) for e in self.entries.values())


def cache_of(module: torch.nn.Module) -> GraphCache:
    """The module's GraphCache, made on first use (kept out of the module's state: not a parameter or buffer)."""
    cache = module.__dict__.get("_kernel_graphs")
    if cache is None:
        cache = module.__dict__["_kernel_graphs"] = GraphCache()
    return cache


def captured(module: torch.nn.Module) -> int:
    """How many keys of the module and its submodules are replayed from CUDA graphs now."""
    return sum(len(m.__dict__.get("_kernel_graphs", ())) for m in module.modules())


def run(cache: GraphCache, key: tuple, fn: Callable[..., Tensor], params: list[Tensor]) -> Tensor:
    """fn(*params) computes a tensor from ``params`` (and constants fixed by ``key``) with torch / Triton ops, using
    no other tensor with autograd history; return the same value, with autograd to the parameters, from a graph
    replay where possible."""
    entry = lookup(cache, key, fn, params)
    if entry is None:
        return fn(*params)
    if entry.bwd is not None:
        return _Replay.apply(entry, *params)
    entry.fwd.replay()
    return entry.out.clone()


def lookup(cache: GraphCache, key: tuple, fn: Callable[..., Tensor], params: list[Tensor]) -> Entry | None:
    """The captured graphs of fn(*params) for this call (captured on the key's second call), or None where the
    caller computes fn eagerly this time (graphs off or unusable, first sight of the key, a failed capture).

    For callers that put the replay inside an autograd node of their own: ``entry.fwd.replay()`` leaves the value
    in ``entry.out`` (static: read it before the next replay of the key); with ``entry.bwd`` (captured when grad
    mode is on and a parameter requires grad), write the output's gradient into ``entry.grad_out`` and call
    ``entry.gradients()`` for the parameters'."""
    if not _usable(params):
        return None
    grad = torch.is_grad_enabled() and any(p.requires_grad for p in params)
    full = (key, grad, torch.is_autocast_enabled("cuda"), torch.cuda.current_device(),
            *[(p.data_ptr(), p.dtype, p.shape, p.requires_grad) for p in params])
    entries = cache.entries
    if full not in entries:  # first sight: eager (compiles, autotunes, fills plan caches); capture next time
        entries[full] = None
        while len(entries) > 2 * CAPACITY:
            entries.popitem(last=False)
        return None
    state = entries[full]
    if state is None:
        try:
            state = _capture(fn, params, grad)
        except Exception as exc:  # noqa: BLE001 - any capture problem: eager for this key, said once
            warnings.warn(f"ssm_core.kernels.graphs: CUDA graph capture of the kernel generation failed "
                          f"({type(exc).__name__}: {str(exc)[:200]}); computing it eagerly", RuntimeWarning)
            torch.cuda.synchronize()
            state = _FAILED
        entries[full] = state
        _trim(entries)
    if state is _FAILED:
        return None
    entries.move_to_end(full)
    return state


def _usable(params: list[Tensor]) -> bool:
    return enabled() and bool(params) and params[0].is_cuda and not torch.cuda.is_current_stream_capturing()


def _trim(entries: OrderedDict) -> None:
    kept = [k for k, e in entries.items() if isinstance(e, Entry)]
    for k in kept[:max(0, len(kept) - CAPACITY)]:
        del entries[k]


def _aliases(params: list[Tensor], grad: bool) -> tuple[list[Tensor], list[Tensor]]:
    """Fresh autograd leaves on the parameters' storage (all inputs, and those to differentiate): the capture never
    touches the parameters' own AccumulateGrad nodes, which an earlier graph may hold on another stream."""
    inputs = [p.detach().requires_grad_(grad and p.requires_grad) for p in params]
    return inputs, [a for a in inputs if a.requires_grad]


def _capture(fn: Callable[..., Tensor], params: list[Tensor], grad: bool) -> Entry:
    # warm-up on a side stream, as torch.cuda.make_graphed_callables does (lazy initializations stay out)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            inputs, trainable = _aliases(params, grad)
            out = fn(*inputs)
            if trainable:
                torch.autograd.grad(out, trainable, torch.ones_like(out), allow_unused=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    del out, inputs, trainable
    entry = Entry()
    pool = torch.cuda.graph_pool_handle()
    inputs, trainable = _aliases(params, grad)
    entry.fwd = torch.cuda.CUDAGraph()
    with torch.cuda.graph(entry.fwd, pool=pool):
        out = fn(*inputs)
    entry.bwd = None
    if trainable:
        entry.grad_out = torch.empty_like(out)
        entry.bwd = torch.cuda.CUDAGraph()
        with torch.cuda.graph(entry.bwd, pool=pool):
            grads = torch.autograd.grad(out, trainable, entry.grad_out, allow_unused=True)
            grads = [torch.zeros_like(p) if g is None else g for p, g in zip(trainable, grads)]
            entry.flat = torch.cat([g.reshape(-1) for g in grads])  # one static buffer: one copy out per step
        entry.sizes = [p.numel() for p in trainable]
        entry.shapes = [p.shape for p in trainable]
        entry.mask = [a.requires_grad for a in inputs]
    entry.out = out.detach()
    return entry


class _Replay(torch.autograd.Function):
    """Forward: replay, copy the output out. Backward: copy the gradient in, replay, copy the gradients out."""

    @staticmethod
    def forward(ctx, entry: Entry, *params: Tensor) -> Tensor:
        ctx.entry = entry
        entry.fwd.replay()
        return entry.out.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        ctx.entry.grad_out.copy_(grad)
        return (None, *ctx.entry.gradients())
