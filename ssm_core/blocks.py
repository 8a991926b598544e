"""Residual blocks and backbones (S4 Table 11, S4D Table 12 knobs: depth, H, norm, pre-norm, dropout, pooling)."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from .layers import SSMLayer

NORMS = ("batch", "layer")
POOLS = ("mean", "last", "none")
#: the dtypes :func:`residual_stream` may keep a SequenceModel's residual stream in (besides the parameters')
STREAM_DTYPES = (torch.bfloat16,)
_STREAM_DTYPE: ContextVar[torch.dtype | None] = ContextVar("ssm_core_residual_stream_dtype", default=None)


@contextmanager
def residual_stream(dtype: torch.dtype | None) -> Iterator[None]:
    """Within it and under autocast, :class:`SequenceModel` keeps its residual stream in ``dtype`` (one of
    STREAM_DTYPES; None: the parameters' dtype, the default).

    With bfloat16: the encoder computes in float32 and its output is rounded once to bf16; every block's input and
    output, the norms' input and output (BatchNorm's statistics, running statistics and affine parameters stay
    float32, as torch computes a bf16 input with float32 parameters), the residual adds and their gradients are
    bf16; each SSM layer's convolution reads its bf16 input in place and computes in float32 (the kernel and the
    FFTs too: :func:`ssm_core.fftconv.fft_conv`), and its position-wise output follows autocast as without the
    option. The pooled features are reduced in float32. Outside autocast the setting has no effect. The setting
    is per thread / task (a context variable), like autocast's own.

    Precision: bf16 keeps a value to within 2^-9 of its size, so a feature whose mean is far larger than its spread
    (an encoder output with a large bias) keeps its spread only to within 2^-9 times that ratio, and the next
    BatchNorm scales the error up with the spread: how close training stays to float32 depends on the model and the
    data, and is to be measured on training runs (no spec uses it yet).
    """
    if dtype is not None and dtype not in STREAM_DTYPES:
        raise ValueError(f"residual_stream: dtype={dtype} not allowed; choose None or one of: "
                         f"{', '.join(str(d) for d in STREAM_DTYPES)}")
    token = _STREAM_DTYPE.set(dtype)
    try:
        yield
    finally:
        _STREAM_DTYPE.reset(token)


def active_stream_dtype(device_type: str) -> torch.dtype | None:
    """The residual stream's dtype that :func:`residual_stream` sets, where autocast is on for ``device_type``;
    None (the parameters' dtype) otherwise."""
    dtype = _STREAM_DTYPE.get()
    return dtype if dtype is not None and torch.is_autocast_enabled(device_type) else None


def pool_sequence(h: Tensor, pool: str, valid: Tensor | None = None) -> Tensor:
    """(B, L, D) -> (B, D): mean over positions or the last position; 'none' keeps (B, L, D).

    ``valid`` (B, L) bool, optional: the positions that hold the sequence (a prefix of each row: right padding
    after it). Then 'mean' averages the valid positions only and 'last' takes the last valid one, as the authors'
    LRA pipeline pools padded token sequences (its decoder restricted to each sequence's length); S4 Appendix D.2
    says "mean pooling along the length dimension" and is silent on padding.
    A half-precision h (a bf16 residual stream) is pooled into float32 (the sums accumulated in float32); 'none'
    returns h as it is.
    """
    wide = torch.float32 if h.dtype in (torch.bfloat16, torch.float16) else None
    if pool == "mean":
        if valid is None:
            return h.mean(dim=1) if wide is None else h.mean(dim=1, dtype=wide)
        weights = valid.to(wide or h.dtype).unsqueeze(-1)  # (B, L, 1)
        return (h * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    if pool == "last":
        if valid is None:
            out = h[:, -1]
        else:
            last = (valid.sum(dim=1) - 1).clamp_min(0)  # (B,)
            out = h[torch.arange(h.shape[0], device=h.device), last]
        return out if wide is None else out.to(wide)  # (B, D)
    return h


def valid_positions(x: Tensor, pad_id: int | None) -> Tensor | None:
    """(B, L) bool: the token positions of ``x`` (B, L) that are not ``pad_id``; None without a pad_id."""
    if pad_id is None:
        return None
    if x.dim() != 2 or x.is_floating_point():
        raise ValueError(f"pad_id={pad_id} is for (B, L) integer tokens, got {tuple(x.shape)} {x.dtype}")
    return x != pad_id


class _OverLength:
    """The forward of a BatchNorm over the features of (B, L, H) inputs (statistics over batch and length), mixed
    into a torch BatchNorm class.

    The input is normalized as the (B L, H) matrix it is in memory: the same statistics (per feature, over B L
    values) as BatchNorm1d on the (B, H, L) transpose, without the two transposed copies that layout needs in
    the forward and two more in the backward.
    """

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # (B, H): one step of recurrent mode
            return super().forward(x)
        return super().forward(x.reshape(-1, x.shape[-1])).view(x.shape)  # (B L, H) -> (B, L, H)


class _BatchNormOverLength(_OverLength, nn.BatchNorm1d):
    """BatchNorm over features of (B, L, H) inputs (statistics over batch and length; :class:`_OverLength`).

    A bfloat16 input (a bf16 residual stream, :func:`residual_stream`) gives a bfloat16 output; the statistics,
    the running statistics and the affine parameters stay float32 (torch's batch norm on a bf16 input with float32
    parameters, with or without autocast).
    """


class SyncBatchNormOverLength(_OverLength, nn.SyncBatchNorm):
    """The same BatchNorm with its training statistics over the batches of every process of the process group
    (torch's SyncBatchNorm): under data parallelism K processes of B / K examples each normalize as one process of
    B examples does. Outside a process group, and in eval mode, it is the plain BatchNorm. CUDA tensors only
    (torch's synchronization)."""


def sync_batch_norms(model: nn.Module) -> int:
    """Replace, in place, every BatchNorm over length in ``model`` by a :class:`SyncBatchNormOverLength` holding the
    same parameters, buffers, training mode and ``requires_grad``; returns how many were replaced. Build the
    optimizer after this (the parameters are new objects)."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not _BatchNormOverLength:
                continue
            synced = SyncBatchNormOverLength(child.num_features, eps=child.eps, momentum=child.momentum,
                                             affine=child.affine, track_running_stats=child.track_running_stats)
            held = [*child.parameters(), *child.buffers()]
            if held:
                synced.to(held[0].device)
            synced.load_state_dict(child.state_dict())
            for mine, theirs in zip(synced.parameters(), child.parameters()):
                mine.requires_grad_(theirs.requires_grad)
            synced.train(child.training)
            setattr(parent, name, synced)
            replaced += 1
    return replaced


def make_norm(kind: str, d_model: int) -> nn.Module:
    if kind == "batch":
        return _BatchNormOverLength(d_model)
    if kind == "layer":
        return nn.LayerNorm(d_model)
    raise ValueError(f"norm={kind!r} not allowed; choose one of: {', '.join(NORMS)}")


class ResidualBlock(nn.Module):
    """pre-norm: x + drop(layer(norm(x))); post-norm: norm(x + drop(layer(x))).

    Under :func:`residual_stream` (and autocast) the output is in the stream's dtype (already so for a bf16 x
    with BatchNorm and a linear / GLU output; otherwise rounded once at the end)."""

    def __init__(self, layer: SSMLayer, norm: str = "layer", prenorm: bool = True, dropout: float = 0.0):
        super().__init__()
        self.layer, self.prenorm = layer, prenorm
        self.norm = make_norm(norm, layer.h)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: Tensor, rate: float = 1.0, mask: Tensor | None = None) -> Tensor:  # (B, L, H)
        """``mask`` (B, L, 1), optional: the layer's input is multiplied by it (zero on padding), so the
        convolution reads no padded position; the residual path is left as it is."""
        u = self.norm(x) if self.prenorm else x  # (B, L, H)
        if mask is not None:
            u = u * mask
        y = self.dropout(self.layer(u, rate=rate))  # (B, L, H)
        out = x + y if self.prenorm else self.norm(x + y)  # (B, L, H)
        stream = active_stream_dtype(x.device.type)
        return out if stream is None else out.to(stream)  # (a no-op where out is in the stream's dtype already)

    def step(self, x: Tensor, state: Tensor, inplace: bool = False) -> tuple[Tensor, Tensor]:  # (B, H)
        if self.prenorm:
            y, state = self.layer.step(self.norm(x), state, inplace)
            return x + y, state
        y, state = self.layer.step(x, state, inplace)
        return self.norm(x + y), state


class SequenceModel(nn.Module):
    """Encoder (linear or embedding) -> n_layers residual SSM blocks -> [final norm] -> pooling -> decoder.

    forward: (B, L) token ids (vocab_size set) or (B, L, d_input) floats -> (B, d_output), or (B, L, d_output)
    with pool='none'. ``layer`` holds SSMLayer keyword arguments (mode, d_state, init, bidirectional, ...).
    ``pad_id`` (token inputs only): pooling leaves out the right padding (:func:`pool_sequence`); the layers still
    run over the whole padded sequence, unless ``mask_padding``: then every SSM layer's input is zeroed on the
    padding first, as the authors' code does (its S4 layer multiplies its input by the sequence mask; the papers
    are silent), so the bidirectional kernels' backward half reads no padding.
    Under autocast the encoder, the norms and the residual stream stay in the parameters' dtype; the SSM layers'
    position-wise projections and the decoder follow autocast (:meth:`SSMLayer.forward`). Within
    :func:`residual_stream` (torch.bfloat16) under autocast, the encoder's float32 output is rounded once to bf16
    and the residual stream, the norms' inputs and outputs and the SSM layers' inputs are bf16 (the kernels, the
    FFT convolutions and the norms' statistics still compute in float32); the pooled features are float32.
    ``encoder_bias`` (linear encoders): whether the encoder has a bias (the papers' models do). With pre-norm
    BatchNorm the training loss has no gradient along it (every path from the encoder starts with a BatchNorm that
    subtracts its batch mean), so a trained bias moves only by rounding, which Adam scales to full-size steps, and
    the first block's eval-mode running mean trails it; without the bias the model computes the same training-mode
    function, from the same initial parameters (the bias is drawn and dropped, so the random draws that follow are
    the ones the model with the bias gets).
    """

    def __init__(self, d_input: int, d_output: int, d_model: int = 128, n_layers: int = 4,
                 layer: dict[str, Any] | None = None, norm: str = "layer", prenorm: bool = True,
                 dropout: float = 0.0, pool: str = "mean", vocab_size: int | None = None,
                 pad_id: int | None = None, mask_padding: bool = False, encoder_bias: bool = True):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"pool={pool!r} not allowed; choose one of: {', '.join(POOLS)}")
        if pad_id is not None and not vocab_size:
            raise ValueError("pad_id is for token inputs: give vocab_size too")
        if mask_padding and pad_id is None:
            raise ValueError("mask_padding needs pad_id (token inputs with right padding)")
        if not encoder_bias and vocab_size:
            raise ValueError("encoder_bias=False is for linear encoders; a token embedding (vocab_size given) has no "
                             "bias")
        self.pad_id, self.mask_padding = pad_id, mask_padding
        layer_kwargs = {"dropout": dropout, **(layer or {})}
        self.encoder = nn.Embedding(vocab_size, d_model) if vocab_size else nn.Linear(d_input, d_model)
        if not encoder_bias:
            # Drawn and then dropped, so that every other parameter starts as it would with the bias.
            self.encoder.bias = None
        self.blocks = nn.ModuleList(
            ResidualBlock(SSMLayer(d_model, **layer_kwargs), norm=norm, prenorm=prenorm, dropout=dropout)
            for _ in range(n_layers))
        self.final_norm = make_norm(norm, d_model) if prenorm else nn.Identity()
        self.pool = pool
        self.decoder = nn.Linear(d_model, d_output)
        self.d_model = d_model

    def features(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """-> pooled features (B, H), or (B, L, H) with pool='none'."""
        valid = valid_positions(x, self.pad_id) if self.pool != "none" or self.mask_padding else None  # (B, L)
        with torch.autocast(x.device.type, enabled=False):  # the residual stream in the parameters' dtype
            h = self.encoder(x)  # (B, L, H)
        stream = active_stream_dtype(x.device.type)
        if stream is not None:  # the float32 encoder output rounded once
            h = h.to(stream)  # (B, L, H)
        mask = valid.unsqueeze(-1).to(h.dtype) if self.mask_padding else None  # (B, L, 1)
        for block in self.blocks:
            h = block(h, rate=rate, mask=mask)
        return pool_sequence(self.final_norm(h), self.pool, valid if self.pool != "none" else None)

    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        return self.decoder(self.features(x, rate=rate))

    # -- recurrent generation -------------------------------------------------------------------------------
    def setup_step(self, rate: float = 1.0) -> None:
        for block in self.blocks:
            block.layer.setup_step(rate)

    def default_state(self, batch_size: int, device: torch.device | None = None) -> list[Tensor]:
        return [block.layer.default_state(batch_size, device) for block in self.blocks]

    def step(self, x: Tensor, state: list[Tensor], inplace: bool = False) -> tuple[Tensor, list[Tensor]]:
        """x: (B,) tokens or (B, d_input) -> (B, d_output) per position (pool must be 'none'). ``inplace``: each
        layer's new state is written over its old one (the returned list holds the same tensors)."""
        if self.pool != "none":
            raise ValueError("step mode needs pool='none' (one output per position)")
        h = self.encoder(x)
        new_state = []
        for block, s in zip(self.blocks, state):
            h, s = block.step(h, s, inplace)
            new_state.append(s)
        return self.decoder(self.final_norm(h)), new_state


class DualSequenceClassifier(nn.Module):
    """Two-tower classifier for LRA Retrieval: one shared encoder, decoder on [x1, x2, x1 - x2, x1 * x2]."""

    def __init__(self, encoder: SequenceModel, d_output: int, d_hidden: int | None = None):
        super().__init__()
        h = encoder.d_model
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(4 * h, d_hidden or h), nn.GELU(), nn.Linear(d_hidden or h, d_output))

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        a, b = self.encoder.features(x1), self.encoder.features(x2)  # (B, H) each
        return self.head(torch.cat([a, b, a - b, a * b], dim=-1))
