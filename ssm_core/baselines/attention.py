"""Attention baselines for S4 Table 3 and the generation benchmarks (S4 Tables 7 and 8).

Three token mixers, each a multi-head attention with query/key/value projections:

- ``softmax``: softmax(Q K^T / sqrt(d)) V (Vaswani et al. 2017, eq. 1). ``impl='materialized'`` forms the
  (L x L) score matrix as the 2020 baselines of Tay et al. did; ``impl='sdpa'`` calls PyTorch's fused
  ``scaled_dot_product_attention`` (today's baseline).
- ``performer``: FAVOR+ (Choromanski et al. 2021): positive orthogonal random features
  phi(x) = exp(W x - |x|^2 / 2) / sqrt(m), an unbiased estimate of the softmax kernel exp(q . k).
- ``linear``: Linear Transformer (Katharopoulos et al. 2020, eq. 7): phi(x) = elu(x) + 1.

The kernelized mixers compute phi(Q) (phi(K)^T V) / (phi(Q) sum_j phi(K_j)) in O(L) (Katharopoulos eq. 5-6);
causally with prefix sums (eq. 8-9), whose recurrent form (eq. 10-12) is the generation step. The softmax
mixer generates with a key/value cache.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks import POOLS, pool_sequence, valid_positions

ATTENTIONS = ("softmax", "performer", "linear")
IMPLS = ("materialized", "sdpa")


def _check(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of: {', '.join(allowed)}")
    return value


# -- mixers on (B, heads, L, d) ------------------------------------------------------------------------------
def softmax_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, impl: str = "materialized",
                      dropout: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d)) v (Vaswani et al. 2017, eq. 1). q: (B, h, Lq, d), k, v: (B, h, Lk, d).

    causal: query i (the last Lq of Lk positions) sees keys j <= Lk - Lq + i.
    """
    _check("impl", impl, IMPLS)
    lq, lk = q.shape[-2], k.shape[-2]
    if impl == "sdpa":
        if causal and lq != lk:
            raise ValueError("softmax_attention(impl='sdpa'): causal needs Lq == Lk (decode steps pass causal=False)")
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)  # (B, h, Lq, Lk), materialized
    if causal:
        future = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(lk - lq + 1)  # (Lq, Lk)
        scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout > 0:
        probs = F.dropout(probs, dropout)
    return probs @ v  # (B, h, Lq, d)


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1 (Katharopoulos et al. 2020, eq. 7)."""
    return F.elu(x) + 1


def orthogonal_random_features(m: int, d: int, generator: torch.Generator | None = None) -> Tensor:
    """W (m, d): blocks of d orthogonal rows (QR of a Gaussian matrix), each row rescaled to the norm of a
    d-dimensional Gaussian vector, so the rows are marginally N(0, I_d) but exactly orthogonal within a block
    (Performer, Choromanski et al. 2021, Section 2.4, "orthogonal random features")."""
    gauss = torch.randn(math.ceil(m / d), d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gauss)  # batched over blocks
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[..., None, :]  # sign fix: Haar (plain QR is not)
    w = q.transpose(-1, -2).reshape(-1, d)[:m]  # (m, d): rows orthonormal within each block of d
    norms = torch.randn(m, d, generator=generator, dtype=torch.float64).norm(dim=-1, keepdim=True)
    return (w * norms).float()


def favor_feature_map(x: Tensor, w: Tensor, is_query: bool, stabilize_keys: bool = True) -> Tensor:
    """Positive random features phi(x) = exp(w . x' - |x'|^2 / 2) / sqrt(m), x' = x / d^(1/4), so that
    E[phi(q) . phi(k)] = exp(q . k / sqrt(d)) (Performer FAVOR+, Lemma 1). x: (..., L, d), w: (m, d) -> (..., L, m).

    A constant subtracted in the exponent cancels between numerator and denominator: per query row for
    queries; for keys one constant over all positions and features (only where every key is seen at once,
    i.e. not causal: ``stabilize_keys=False`` there).
    """
    x = x * x.shape[-1] ** -0.25
    logits = x @ w.to(x.dtype).T - (x * x).sum(-1, keepdim=True) / 2  # (..., L, m)
    if is_query:
        logits = logits - logits.amax(dim=-1, keepdim=True).detach()  # largest feature of each row: 1/sqrt(m)
    elif stabilize_keys:
        logits = logits - logits.amax(dim=(-1, -2), keepdim=True).detach()
    return torch.exp(logits) * w.shape[0] ** -0.5


def kernel_attention(qf: Tensor, kf: Tensor, v: Tensor, causal: bool = False) -> Tensor:
    """phi(Q) (phi(K)^T V) / (phi(Q) . sum_j phi(K_j)) (Katharopoulos et al. eq. 5-6; causal: eq. 8-9 with
    prefix sums over j <= i). qf, kf: (B, h, L, m) features, v: (B, h, L, d) -> (B, h, L, d)."""
    if causal:
        kv = torch.cumsum(kf.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # (B, h, L, m, d): S_i
        num = (qf.unsqueeze(-2) @ kv).squeeze(-2)  # (B, h, L, d)
        den = (qf * kf.cumsum(dim=-2)).sum(-1)  # (B, h, L)
    else:
        kv = kf.transpose(-1, -2) @ v  # (B, h, m, d)
        num = qf @ kv  # (B, h, L, d)
        den = qf @ kf.sum(dim=-2).unsqueeze(-1)  # (B, h, L, 1)
        den = den.squeeze(-1)
    return num / _guard(den).unsqueeze(-1)


def _guard(den: Tensor) -> Tensor:
    """Both feature maps are strictly positive, so the denominator is > 0 unless it underflows; clamp at the
    smallest normal number only (an additive eps, as Katharopoulos et al.'s 1e-6, would bias the stabilized
    FAVOR+ features, whose sums can be that small)."""
    return den.clamp_min(torch.finfo(den.dtype).tiny)


# -- multi-head attention module -----------------------------------------------------------------------------
class MultiHeadAttention(nn.Module):
    """Q, K, V projections to qkv_dim (split into n_heads), a mixer, output projection back to d_model.

    forward: (B, L, d_model) -> (B, L, d_model). Step mode (causal only): ``default_state(batch, max_len)``,
    ``step(x_t (B, d_model), state) -> (y_t, state)``: a preallocated key/value cache for softmax, the
    running sums (S_i, z_i) of Katharopoulos eq. 10-12 for the kernelized mixers.
    n_features: random features m of the Performer (default round(d_head * ln d_head), the Performer paper's).
    """

    def __init__(self, d_model: int, n_heads: int, qkv_dim: int | None = None, attention: str = "softmax",
                 impl: str = "materialized", causal: bool = False, n_features: int | None = None,
                 dropout: float = 0.0, feature_seed: int = 0):
        super().__init__()
        self.attention = _check("attention", attention, ATTENTIONS)
        self.impl = _check("impl", impl, IMPLS)
        qkv_dim = qkv_dim or d_model
        if qkv_dim % n_heads:
            raise ValueError(f"qkv_dim={qkv_dim} must be divisible by n_heads={n_heads}")
        self.n_heads, self.d_head, self.causal, self.dropout = n_heads, qkv_dim // n_heads, causal, dropout
        self.q_proj = nn.Linear(d_model, qkv_dim)
        self.k_proj = nn.Linear(d_model, qkv_dim)
        self.v_proj = nn.Linear(d_model, qkv_dim)
        self.out_proj = nn.Linear(qkv_dim, d_model)
        if attention == "performer":
            m = n_features or max(1, round(self.d_head * math.log(self.d_head)))
            gen = torch.Generator().manual_seed(feature_seed)
            self.register_buffer("features", orthogonal_random_features(m, self.d_head, gen))  # fixed, not trained
        elif n_features is not None:
            raise ValueError(f"n_features applies to attention='performer' only (got attention={attention!r})")

    def _heads(self, x: Tensor) -> Tensor:  # (..., L, h*d) -> (..., h, L, d)
        return x.unflatten(-1, (self.n_heads, self.d_head)).transpose(-2, -3)

    def _features(self, x: Tensor, is_query: bool) -> Tensor:
        if self.attention == "linear":
            return elu_feature_map(x)
        return favor_feature_map(x, self.features, is_query, stabilize_keys=not self.causal)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        if self.attention == "softmax":
            o = softmax_attention(q, k, v, self.causal, self.impl, self.dropout if self.training else 0.0)
        else:
            o = kernel_attention(self._features(q, True), self._features(k, False), v, self.causal)
        return self.out_proj(o.transpose(-2, -3).flatten(-2))  # (B, L, d_model)

    def default_state(self, batch_size: int, max_len: int, device: torch.device | None = None,
                      dtype: torch.dtype | None = None) -> dict[str, Any]:
        if not self.causal:
            raise ValueError("step mode needs a causal attention (causal=True)")
        p = self.q_proj.weight
        kw = {"device": device or p.device, "dtype": dtype or p.dtype}
        if self.attention == "softmax":  # preallocated key/value cache: memory O(max_len) per sequence
            shape = (batch_size, self.n_heads, max_len, self.d_head)
            return {"k": torch.zeros(shape, **kw), "v": torch.zeros(shape, **kw), "pos": 0}
        m = self.d_head if self.attention == "linear" else self.features.shape[0]
        return {"s": torch.zeros(batch_size, self.n_heads, m, self.d_head, **kw),  # S = sum phi(k) v^T
                "z": torch.zeros(batch_size, self.n_heads, m, **kw)}  # z = sum phi(k)

    def step(self, x: Tensor, state: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        """x: (B, d_model) -> (B, d_model); the same outputs as forward() on the whole prefix (tested). The state's
        tensors are updated in place (the key/value cache; the linear attentions' running sums S and z)."""
        q = self._heads(self.q_proj(x).unsqueeze(-2))  # (B, h, 1, d)
        k = self._heads(self.k_proj(x).unsqueeze(-2))
        v = self._heads(self.v_proj(x).unsqueeze(-2))
        if self.attention == "softmax":
            t = state["pos"]
            if t >= state["k"].shape[-2]:
                raise ValueError(f"key/value cache full: max_len={state['k'].shape[-2]} positions")
            state["k"][:, :, t] = k[:, :, 0]  # in place: the cache is preallocated
            state["v"][:, :, t] = v[:, :, 0]
            state["pos"] = t + 1
            o = softmax_attention(q, state["k"][:, :, : t + 1], state["v"][:, :, : t + 1], False, self.impl)
        else:
            qf, kf = self._features(q, True), self._features(k, False)  # (B, h, 1, m)
            # in place, like the softmax cache, in one pass over S without materializing the outer product
            state["s"].addcmul_(kf.transpose(-1, -2), v)  # S += phi(k) v^T: (B, h, m, d) (Katharopoulos eq. 10)
            state["z"].add_(kf[:, :, 0])  # (B, h, m) (eq. 11)
            num = qf @ state["s"]  # (B, h, 1, d)
            den = (qf[:, :, 0] * state["z"]).sum(-1)  # (B, h)
            o = num / _guard(den)[..., None, None]  # (eq. 12)
        return self.out_proj(o.transpose(-2, -3).flatten(-2)).squeeze(-2), state


# -- blocks and models ---------------------------------------------------------------------------------------
def sinusoidal_positions(positions: Tensor, d_model: int) -> Tensor:
    """Fixed sinusoidal position encoding (Vaswani et al. 2017, Section 3.5): (L,) -> (L, d_model). No
    parameters, so the parameter count does not depend on the length (Tay et al.'s ~600k model)."""
    half = d_model // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angle = positions.float()[:, None] * freq[None]  # (L, d/2)
    pe = torch.cat([angle.sin(), angle.cos()], dim=-1)
    return F.pad(pe, (0, d_model - 2 * half))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + Attn(LN(x)), then x + FFN(LN(x)) with FFN = Linear-GELU-Linear (skipped if ffn_dim=0)."""

    def __init__(self, d_model: int, n_heads: int, qkv_dim: int | None = None, ffn_dim: int = 0,
                 dropout: float = 0.0, **attn_kwargs: Any):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, qkv_dim, dropout=dropout, **attn_kwargs)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        if ffn_dim < 0:
            raise ValueError(f"ffn_dim must be >= 0, got {ffn_dim}")
        self.ffn: nn.Module | None = None
        if ffn_dim:
            self.norm2 = nn.LayerNorm(d_model)
            self.ffn = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.GELU(), self.drop, nn.Linear(ffn_dim, d_model))

    def forward(self, x: Tensor) -> Tensor:  # (B, L, D)
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.ffn(self.norm2(x))) if self.ffn is not None else x

    def step(self, x: Tensor, state: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:  # (B, D)
        y, state = self.attn.step(self.norm1(x), state)
        x = x + y
        return (x + self.ffn(self.norm2(x)) if self.ffn is not None else x), state


class TransformerModel(nn.Module):
    """Token embedding + sinusoidal positions -> n_layers TransformerBlocks -> final LayerNorm -> pooling ->
    decoder, the same outer structure as ssm_core.blocks.SequenceModel.

    forward: (B, L) token ids (vocab_size set) or (B, L, d_input) floats (vocab_size None: a linear encoder, as
    the LRA image / Pathfinder baselines use) -> (B, d_output), or (B, L, d_output) with pool='none'.
    Generation (causal=True, pool='none'): ``default_state(batch, max_len)``, ``step(tokens (B,), state)``.
    The S4 Appendix D.1 benchmark model (Tay et al.): d_model=256, n_layers=4, n_heads=4, qkv_dim=128.
    """

    def __init__(self, vocab_size: int | None, d_output: int, d_model: int = 256, n_layers: int = 4,
                 n_heads: int = 4, qkv_dim: int | None = None, ffn_dim: int = 0, attention: str = "softmax",
                 impl: str = "materialized", causal: bool = False, pool: str = "mean",
                 n_features: int | None = None, dropout: float = 0.0, feature_seed: int = 0, d_input: int = 1,
                 pad_id: int | None = None):
        super().__init__()
        self.pool = _check("pool", pool, POOLS)
        if pad_id is not None and not vocab_size:
            raise ValueError("pad_id is for token inputs: give vocab_size too")
        self.pad_id = pad_id  # pooling leaves out the right padding (attention still sees it)
        self.d_model, self.causal = d_model, causal
        self.embedding = nn.Embedding(vocab_size, d_model) if vocab_size else nn.Linear(d_input, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, qkv_dim, ffn_dim, dropout, attention=attention, impl=impl,
                             causal=causal, n_features=n_features, feature_seed=feature_seed + i)
            for i in range(n_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.decoder = nn.Linear(d_model, d_output)

    def features(self, x: Tensor) -> Tensor:
        """(B, L) tokens or (B, L, d_input) floats -> pooled (B, D), or (B, L, D) with pool='none'."""
        tokens = isinstance(self.embedding, nn.Embedding)
        if tokens and (x.dim() != 2 or x.is_floating_point()):
            raise ValueError(f"TransformerModel: expected (B, L) integer tokens, got {tuple(x.shape)} {x.dtype}")
        if not tokens and (x.dim() != 3 or not x.is_floating_point()):
            raise ValueError(f"TransformerModel: expected (B, L, d_input) floats, got {tuple(x.shape)} {x.dtype}")
        pos = torch.arange(x.shape[1], device=x.device)
        h = self.embedding(x) + sinusoidal_positions(pos, self.d_model).to(self.embedding.weight.dtype)
        for block in self.blocks:
            h = block(h)  # (B, L, D)
        valid = valid_positions(x, self.pad_id) if self.pool != "none" else None  # (B, L) or None
        return pool_sequence(self.final_norm(h), self.pool, valid)

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.features(x))

    def setup_step(self) -> None:
        """Nothing to precompute (present for symmetry with SequenceModel)."""
        if not self.causal or self.pool != "none":
            raise ValueError("step mode needs causal=True and pool='none'")

    def default_state(self, batch_size: int, max_len: int, device: torch.device | None = None) -> dict[str, Any]:
        return {"pos": 0, "layers": [b.attn.default_state(batch_size, max_len, device) for b in self.blocks]}

    def step(self, tokens: Tensor, state: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        """tokens (B,) -> logits (B, d_output) of the next position. ``state["pos"]`` is the position, a Python int
        (as ``default_state`` makes it) or a (1,) integer tensor on the tokens' device (then the step issues the
        same operations at every position, so a CUDA graph can replay the linear attentions' step)."""
        if not self.causal or self.pool != "none":
            raise ValueError("step mode needs causal=True and pool='none'")
        p = state["pos"]
        pos = p if isinstance(p, Tensor) else torch.full((1,), p, device=tokens.device)  # (1,)
        h = self.embedding(tokens) + sinusoidal_positions(pos, self.d_model).to(self.embedding.weight.dtype)
        layers = []
        for block, s in zip(self.blocks, state["layers"]):
            h, s = block.step(h, s)
            layers.append(s)
        return self.decoder(self.final_norm(h)), {"pos": p + 1, "layers": layers}
