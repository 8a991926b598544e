"""LSSL layer: a dense-state SSM whose convolution kernel is computed by powers of the state matrix.

The Linear State-Space Layer (Gu et al. 2021, "Combining Recurrent, Convolutional, and Continuous-time
Models with Linear State-Space Layers") is the baseline of S4 Table 2. As benchmarked there (S4 Appendix
D.1): one layer with H features, state size N = H, one dense HiPPO-LegS state matrix A (N x N) shared by
H independent SSMs that each have their own step size dt and output projection C. Each SSM is
discretized with the bilinear transform and its kernel

    K_h[l] = C_h dA_h^l dB_h,   l < L                                  (S4 eq. 4-5; S4D eq. 6)

is built from the Krylov matrix [dB, dA dB, ..., dA^(L-1) dB] by repeated squaring, the LSSL paper's
algorithm: O(H N^3 log L + H N^2 L) work and O(H N^2 log L + H N L) memory, the cost that S4's
structured (DPLR) kernel removes (S4 Section 3.1, Table 2). The kernel is applied by FFT convolution
(ssm_core.fftconv, shared with SSMLayer).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..fftconv import FUSED_ACTIVATIONS, fft_conv
from ..hippo import hippo_legs
from ..kernels.dense import discretize_dense
from ..kernels.params import init_log_dt

KRYLOV_METHODS = ("doubling", "sequential")
ACTIVATIONS = FUSED_ACTIVATIONS


def krylov(length: int, a: Tensor, b: Tensor, method: str = "doubling") -> Tensor:
    """Krylov matrix [b, a b, a^2 b, ..., a^(length-1) b] (S4 Section 3.1: the naive kernel's powers of dA).

    a: (..., N, N), b: (..., N) -> (..., N, length).
    doubling: given the first w columns and a^w, the next w columns are a^w @ (first w columns); then
    a^(2w) = a^w @ a^w. log2(length) dense matrix squarings (the LSSL paper's algorithm).
    sequential: length - 1 matrix-vector products (less work per step, no parallelism over l).
    """
    if length < 1:
        raise ValueError(f"krylov: length must be >= 1, got {length}")
    if method not in KRYLOV_METHODS:
        raise ValueError(f"krylov: method {method!r} not allowed; choose one of {KRYLOV_METHODS}")
    if method == "sequential":
        cols = [b]
        for _ in range(length - 1):
            cols.append((a @ cols[-1].unsqueeze(-1)).squeeze(-1))  # (..., N)
        return torch.stack(cols, dim=-1)  # (..., N, L)
    x = b.unsqueeze(-1)  # (..., N, 1)
    power = a  # a^w with w = x.shape[-1]
    while x.shape[-1] < length:
        w = x.shape[-1]
        take = min(w, length - w)
        x = torch.cat([x, power @ x[..., :take]], dim=-1)  # (..., N, w + take)
        if x.shape[-1] < length:
            power = power @ power  # a^(2w)
    return x


class LSSL(nn.Module):
    """One LSSL layer with H features and a dense N x N state matrix (S4 Table 2 baseline, Appendix D.1).

    Parameters: A (N, N) and B (N,) shared by the H copies (HiPPO-LegS init, trainable unless frozen),
    C (H, N), D (H,), log_dt (H,), then a position-wise output Linear(H, H) after the activation (the
    same surroundings as ``SSMLayer(output='linear')``). forward: (B, L, H) -> (B, L, H), or with
    ``transposed=True`` (B, H, L) -> (B, H, L).
    """

    def __init__(self, d_model: int, d_state: int | None = None, dt_min: float = 1e-3, dt_max: float = 1e-1,
                 trainable_a: bool = True, trainable_b: bool = True, krylov_method: str = "doubling",
                 activation: str = "gelu", dropout: float = 0.0, transposed: bool = False):
        super().__init__()
        if d_model < 1:
            raise ValueError(f"LSSL: d_model must be >= 1, got {d_model}")
        n = d_model if d_state is None else d_state  # S4 App. D.1: N = H, as in the LSSL paper
        if n < 1:
            raise ValueError(f"LSSL: d_state must be >= 1, got {d_state}")
        if krylov_method not in KRYLOV_METHODS:
            raise ValueError(f"LSSL: krylov_method {krylov_method!r} not allowed; choose one of {KRYLOV_METHODS}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"LSSL: activation {activation!r} not allowed; choose one of {ACTIVATIONS}")
        self.h, self.n, self.transposed, self.krylov_method = d_model, n, transposed, krylov_method
        a, b = hippo_legs(n)  # float64 numpy: A (N, N), B (N,)
        a_t = torch.tensor(a, dtype=torch.float32)
        b_t = torch.tensor(b, dtype=torch.float32)
        if trainable_a:
            self.A = nn.Parameter(a_t)
        else:
            self.register_buffer("A", a_t)
        if trainable_b:
            self.B = nn.Parameter(b_t)
        else:
            self.register_buffer("B", b_t)
        self.C = nn.Parameter(torch.randn(d_model, n) / math.sqrt(n))  # (H, N)
        self.D = nn.Parameter(torch.randn(d_model))  # (H,)
        self.log_dt = nn.Parameter(init_log_dt(d_model, dt_min, dt_max).float())  # (H,)
        self.activation_name = activation  # fused into the FFT convolution
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output_linear = nn.Linear(d_model, d_model)

    def discrete(self) -> tuple[Tensor, Tensor]:
        """dA (H, N, N), dB (H, N): bilinear discretization of (A, B) with each copy's dt (S4 eq. 3)."""
        dt = torch.exp(self.log_dt)  # (H,)
        a = self.A.expand(self.h, self.n, self.n)  # (H, N, N)
        b = self.B.expand(self.h, self.n)  # (H, N)
        return discretize_dense(a, b, dt, "bilinear")

    def kernel(self, length: int) -> Tensor:
        """K (H, L) with K[h, l] = C_h dA_h^l dB_h (S4 eq. 5), the Krylov matrix by powers of dA."""
        da, db = self.discrete()
        x = krylov(length, da, db, self.krylov_method)  # (H, N, L)
        return torch.einsum("hn,hnl->hl", self.C, x)  # (H, L)

    def forward(self, u: Tensor) -> Tensor:
        if u.dim() != 3:
            raise ValueError(f"LSSL.forward: expected a 3-d input, got shape {tuple(u.shape)}")
        if not self.transposed:
            u = u.transpose(-1, -2)  # (B, H, L)
        if u.shape[1] != self.h:
            raise ValueError(f"LSSL.forward: expected {self.h} features, got input of shape {tuple(u.shape)}")
        k = self.kernel(u.shape[-1])  # (H, L)
        # FFT convolution with the D skip and the activation fused (ssm_core.fftconv, as SSMLayer): S4 Section 2.4
        y = fft_conv(u, k[None], self.D[None], activation=self.activation_name,
                     layout="bchl" if self.transposed else "blch")  # (B, 1, H, L)
        if self.transposed:
            y = self.dropout(y[:, 0])  # (B, H, L)
            return self.output_linear(y.transpose(-1, -2)).transpose(-1, -2)
        return self.output_linear(self.dropout(y.permute(0, 3, 1, 2).flatten(2)))  # (B, L, H)
