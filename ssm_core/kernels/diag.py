"""Diagonal SSM kernel: S4D (Vandermonde) and DSS (softmax-normalized) (S4D Section 3, Table 1)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..inits import diagonal_init
from ..ops import log_vandermonde
from .params import (DISCRETIZATIONS, REAL_TRANSFORMS, as_complex, check_choice, init_log_dt, real_param_from,
                     real_part, register)

NORMALIZATIONS = ("none", "softmax")


class DiagKernel(nn.Module):
    """K = 2 Re[(C o dB) . V_L(dA)] over N/2 conjugate-pair modes (S4D eq. 7, Listing 1).

    Knobs (S4D Table 1, Table 2): discretization 'bilinear' | 'zoh'; real_transform 'exp' | 'relu' | 'none'
    for Re(A); trainable_a / trainable_b (False freezes A / B: S4D Table 3b "frozen (A, B)");
    normalization 'softmax' divides each mode by its Vandermonde row sum (DSS).
    Parameters: log_dt (H,), A as (real param, imag) (n_ssm, N/2), B (n_ssm, N/2), C (channels, H, N/2).
    """

    def __init__(self, d_model: int, d_state: int = 64, channels: int = 1, init: str = "legs",
                 discretization: str = "bilinear", real_transform: str = "exp", normalization: str = "none",
                 trainable_a: bool = True, trainable_b: bool = True, tie_ab: bool = False, dt_min: float = 1e-3,
                 dt_max: float = 1e-1, lr: float | None = 1e-3, init_kwargs: dict | None = None,
                 backend: str | None = None):
        super().__init__()
        self.h, self.n, self.channels = d_model, d_state, channels
        self.discretization = check_choice("discretization", discretization, DISCRETIZATIONS)
        self.real_transform = check_choice("real_transform", real_transform, REAL_TRANSFORMS)
        self.normalization = check_choice("normalization", normalization, NORMALIZATIONS)
        self.backend = backend
        lam, b = diagonal_init(init, d_state, **(init_kwargs or {}))
        n_ssm = 1 if tie_ab else d_model
        lam_t = torch.as_tensor(lam).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        b_t = torch.as_tensor(b).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        c = torch.randn(channels, d_model, d_state // 2, 2, dtype=torch.float64) * (0.5 ** 0.5)  # unit variance
        register(self, "log_dt", init_log_dt(d_model, dt_min, dt_max), True, lr)
        if self.real_transform != "none" and (lam_t.real >= 0).any():
            raise ValueError(f"init {init!r} has eigenvalues with Re >= 0, which real_transform="
                             f"{real_transform!r} cannot represent; use real_transform='none'")
        register(self, "a_real", real_param_from(lam_t.real, self.real_transform), trainable_a, lr)
        register(self, "a_imag", lam_t.imag.clone(), trainable_a, lr)
        register(self, "b", b_t, trainable_b, lr)
        register(self, "c", as_complex(c), True, None)
        self._step: tuple[Tensor, Tensor, Tensor] | None = None
        self.float()

    def discrete(self, rate: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
        """dt (H,), dA (H, N/2), dB (H, N/2) for the step size dt * rate (S4D Section 3.1)."""
        dt = torch.exp(self.log_dt) * rate  # (H,)
        a = torch.complex(real_part(self.a_real, self.real_transform), self.a_imag)  # (n_ssm, N/2)
        b = as_complex(self.b)
        dta = dt[:, None] * a  # (H, N/2)
        if self.discretization == "zoh":
            log_da = dta
            db = b * (torch.exp(dta) - 1) / a  # (H, N/2): (dt A)^-1 (exp(dt A) - 1) dt B
        else:
            log_da = torch.log1p(dta / 2) - torch.log1p(-dta / 2)  # log of (1 + dtA/2) / (1 - dtA/2)
            db = b * dt[:, None] / (1 - dta / 2)
        return dt, log_da, db

    def forward(self, length: int, rate: float = 1.0) -> Tensor:
        """-> K: (channels, H, length) real."""
        _, log_da, db = self.discrete(rate)
        v = as_complex(self.c) * db  # (channels, H, N/2)
        if self.normalization == "softmax":
            # divide by the row sums of the Vandermonde matrix: sum_l dA^l = (1 - dA^L) / (1 - dA)
            v = v * (-torch.expm1(log_da)) / (-torch.expm1(length * log_da))
        x = log_da.expand_as(v)
        k = log_vandermonde(v.reshape(-1, v.shape[-1]), x.reshape(-1, x.shape[-1]), length,
                            backend=self.backend)  # (channels * H, L)
        return k.view(self.channels, self.h, length)

    # -- recurrent step mode: x_t = dA x_{t-1} + dB u_t, y_t = 2 Re(C x_t), O(N) per step -------------------
    def setup_step(self, rate: float = 1.0) -> None:
        if self.normalization == "softmax":
            raise NotImplementedError("recurrent step mode is not defined for the softmax-normalized (DSS) kernel: "
                                      "its normalization depends on the sequence length")
        with torch.no_grad():
            _, log_da, db = self.discrete(rate)
            self._step = (torch.exp(log_da), db, as_complex(self.c))  # (H, N/2), (H, N/2), (channels, H, N/2)

    def default_state(self, batch_size: int) -> Tensor:
        if self._step is None:
            self.setup_step()
        return torch.zeros(batch_size, self.h, self.n // 2, dtype=self._step[0].dtype, device=self.log_dt.device)

    def step(self, u: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """u (B, H) real, x (B, H, N/2) complex -> y (B, channels, H) real, new x."""
        if self._step is None:
            self.setup_step()
        da, db, c = self._step
        x = da * x + db * u.to(x.dtype)[..., None]
        return 2 * torch.einsum("chn,bhn->bch", c, x).real, x
