"""Torch reference for the two structured products behind S4 and S4D kernels.

Both products are sums over the state index n of a term that depends on (n, l). Written
naively they materialize a (batch, N, L) tensor; here the length axis is cut into chunks so
that at most ``max_elements`` terms exist at once, forward and backward (the backward pass
recomputes each chunk under autograd instead of storing it).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

#: Default bound on the number of (batch x N x chunk) terms materialized at once.
DEFAULT_MAX_ELEMENTS = 1 << 22


def cauchy_terms(v: Tensor, z: Tensor, w: Tensor) -> Tensor:
    """Symmetric Cauchy product at the nodes z (S4 Algorithm 1, step 3; S4 Lemma C.3).

    out[..., l] = sum_n v[..., n] / (z[l] - w[..., n]) + conj(v[..., n]) / (z[l] - conj(w[..., n]))

    v, w: (..., N) complex; z: (L,) complex -> (..., L) complex. Materializes (..., N, L).
    """
    zz = z.unsqueeze(-2)  # (1, L)
    vv, ww = v.unsqueeze(-1), w.unsqueeze(-1)  # (..., N, 1)
    return (vv / (zz - ww) + vv.conj() / (zz - ww.conj())).sum(dim=-2)  # (..., L)


def log_vandermonde_terms(v: Tensor, x: Tensor, positions: Tensor) -> Tensor:
    """Log-Vandermonde product (S4D eq. 7 with dA = exp(x); S4D Listing 1, last line).

    out[..., l] = 2 * Re( sum_n v[..., n] * exp(x[..., n] * l) )

    v, x: (..., N) complex; positions: (L,) real -> (..., L) real. Materializes (..., N, L).
    """
    # Re(v e^{x l}) = e^{Re(x) l} (Re(v) cos(Im(x) l) - Im(v) sin(Im(x) l)): real exp / cos / sin are much
    # cheaper on the CPU than a complex exp of the whole (..., N, L) grid
    decay = torch.exp(x.real.unsqueeze(-1) * positions)  # (..., N, L)
    phase = x.imag.unsqueeze(-1) * positions  # (..., N, L)
    terms = decay * (v.real.unsqueeze(-1) * torch.cos(phase) - v.imag.unsqueeze(-1) * torch.sin(phase))
    return 2 * terms.sum(dim=-2)  # (..., L)


def _cauchy_nodes_last(v: Tensor, w: Tensor, z: Tensor) -> Tensor:
    return cauchy_terms(v, z, w)


class _ChunkedOverLength(torch.autograd.Function):
    """Evaluate ``term_fn(*inputs, nodes[l0:l1])`` chunk by chunk along the last axis.

    Forward keeps only the (..., L) output; backward recomputes each chunk under autograd, so
    peak memory is one chunk's terms rather than the whole (batch, N, L) tensor.
    """

    @staticmethod
    def forward(ctx, term_fn: Callable[..., Tensor], nodes: Tensor, chunk: int, *inputs: Tensor) -> Tensor:
        ctx.term_fn, ctx.chunk = term_fn, chunk
        ctx.save_for_backward(nodes, *inputs)
        with torch.no_grad():
            pieces = [term_fn(*inputs, nodes[s : s + chunk]) for s in range(0, nodes.shape[0], chunk)]
        return torch.cat(pieces, dim=-1)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        nodes, *inputs = ctx.saved_tensors
        wanted = [i for i, t in enumerate(inputs) if ctx.needs_input_grad[3 + i]]
        grads: list[Tensor | None] = [None] * len(inputs)
        if wanted:
            leaves = [t.detach().requires_grad_(i in wanted) for i, t in enumerate(inputs)]
            acc = [torch.zeros_like(inputs[i]) for i in wanted]
            for s in range(0, nodes.shape[0], ctx.chunk):
                with torch.enable_grad():
                    out = ctx.term_fn(*leaves, nodes[s : s + ctx.chunk])
                    parts = torch.autograd.grad(out, [leaves[i] for i in wanted], grad_out[..., s : s + ctx.chunk])
                for a, p in zip(acc, parts):
                    a.add_(p)
            for i, a in zip(wanted, acc):
                grads[i] = a
        return (None, None, None, *grads)


def _chunk_for(batch_shape: Sequence[int], n: int, length: int, max_elements: int) -> int:
    per_position = max(1, n * int(torch.Size(batch_shape).numel()))
    return max(1, min(length, max_elements // per_position))


def cauchy_torch(v: Tensor, z: Tensor, w: Tensor, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Tensor:
    """Chunked torch evaluation of :func:`cauchy_terms`; gradients flow to v and w."""
    if z.requires_grad:
        raise ValueError("cauchy: gradients with respect to the nodes z are not supported (z must not require grad)")
    chunk = _chunk_for(v.shape[:-1], v.shape[-1], z.shape[-1], max_elements)
    return _ChunkedOverLength.apply(_cauchy_nodes_last, z, chunk, v, w)


def log_vandermonde_torch(v: Tensor, x: Tensor, length: int, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Tensor:
    """Chunked torch evaluation of :func:`log_vandermonde_terms`; gradients flow to v and x."""
    positions = torch.arange(length, device=x.device, dtype=x.real.dtype)
    chunk = _chunk_for(v.shape[:-1], v.shape[-1], length, max_elements)
    return _ChunkedOverLength.apply(log_vandermonde_terms, positions, chunk, v, x)
