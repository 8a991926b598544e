"""DPLR SSM kernel: S4 (S4 Algorithm 1; S4D Section 2 "S4").

A = Lambda - P P^* (diagonal plus low rank, in the unitary eigenbasis of the NPLR form), bilinear
discretization. The kernel's generating function at the L-th roots of unity omega is

    K^(omega) = 2 / (1 + omega) [k00 - k01 (I + k11)^-1 k10],   k_ij = sum_n dt L_i,n R_j,n / (z - dt Lambda_n)

with z = 2 (1 - omega) / (1 + omega) (a Cauchy product, Woodbury identity), and C replaced by
C~ = C (I - dA^L) (truncation correction), so that the inverse FFT gives exactly K_0 .. K_{L-1}.
Conjugate symmetry: only one mode of each conjugate pair is stored; the symmetric Cauchy product adds the other.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..hippo import MEASURES, dplr
from ..ops import cauchy
from .params import REAL_TRANSFORMS, as_complex, check_choice, init_log_dt, real_param_from, real_part, register


class DPLRKernel(nn.Module):
    """S4 kernel for HiPPO measures 'legs', 'legt', 'fout' (S4D Table 3b rows S4-LegS, S4-LegT, S4-FouT).

    Parameters: log_dt (H,), Lambda as (real param, imag) (n_ssm, N/2), P (rank, n_ssm, N/2),
    B (n_ssm, N/2), C (channels, H, N/2) -- the true C; the truncation correction is applied per call.
    """

    def __init__(self, d_model: int, d_state: int = 64, channels: int = 1, init: str = "legs",
                 real_transform: str = "exp", trainable_a: bool = True, trainable_b: bool = True,
                 tie_ab: bool = False, dt_min: float = 1e-3, dt_max: float = 1e-1, lr: float | None = 1e-3,
                 backend: str | None = None):
        super().__init__()
        check_choice("init", init, MEASURES)
        self.real_transform = check_choice("real_transform", real_transform, REAL_TRANSFORMS)
        self.h, self.n, self.channels, self.backend = d_model, d_state, channels, backend
        form = dplr(init, d_state)
        n_ssm = 1 if tie_ab else d_model
        lam = torch.as_tensor(form.lam).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        if self.real_transform != "none" and (lam.real >= 0).any():
            # LegT / FouT normal parts have Re(Lambda) = 0: keep a tiny negative real part representable by exp/relu
            lam = torch.complex(lam.real.clamp(max=-1e-4), lam.imag)
        p = torch.as_tensor(form.p)[:, None, :].expand(-1, n_ssm, -1).clone()  # (rank, n_ssm, N/2)
        b = torch.as_tensor(form.b).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        c = torch.randn(channels, d_model, d_state // 2, 2, dtype=torch.float64) * (0.5 ** 0.5)
        register(self, "log_dt", init_log_dt(d_model, dt_min, dt_max), True, lr)
        register(self, "a_real", real_param_from(lam.real, self.real_transform), trainable_a, lr)
        register(self, "a_imag", lam.imag.clone(), trainable_a, lr)
        register(self, "p", p, trainable_a, lr)
        register(self, "b", b, trainable_b, lr)
        register(self, "c", as_complex(c), True, None)
        self.float()

    # -- pieces ---------------------------------------------------------------------------------------------
    def lam(self) -> Tensor:
        return torch.complex(real_part(self.a_real, self.real_transform), self.a_imag)  # (n_ssm, N/2)

    def full_state(self, rate: float = 1.0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Both halves of each conjugate pair: A (H, N, N), B (H, N), C (channels, H, N) complex, dt (H,)."""
        dt = torch.exp(self.log_dt) * rate
        lam = self.lam().expand(self.h, -1)
        p = as_complex(self.p).expand(-1, self.h, -1)  # (rank, H, N/2)
        lam_f = torch.cat([lam, lam.conj()], -1)  # (H, N)
        p_f = torch.cat([p, p.conj()], -1)  # (rank, H, N)
        a = torch.diag_embed(lam_f) - torch.einsum("rhi,rhj->hij", p_f, p_f.conj())
        b = as_complex(self.b).expand(self.h, -1)
        c = as_complex(self.c)
        return a, torch.cat([b, b.conj()], -1), torch.cat([c, c.conj()], -1), dt

    def discrete_full(self, rate: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
        """Bilinear dA (H, N, N), dB (H, N) and C (channels, H, N) on the full complex state."""
        a, b, c, dt = self.full_state(rate)
        eye = torch.eye(self.n, dtype=a.dtype, device=a.device)
        half = (dt / 2)[:, None, None].to(a.dtype)
        inv = torch.linalg.inv(eye - half * a)
        return inv @ (eye + half * a), (inv @ (dt[:, None].to(a.dtype) * b)[..., None])[..., 0], c

    def c_tilde(self, length: int, rate: float = 1.0) -> Tensor:
        """C~ = C (I - dA^L) (S4 Algorithm 1, step 1), on the stored half: (channels, H, N/2)."""
        da, _, c = self.discrete_full(rate)
        da_l = torch.linalg.matrix_power(da, length)  # (H, N, N)
        c_t = c - torch.einsum("chi,hij->chj", c, da_l)
        return c_t[..., : self.n // 2]

    # -- kernel ---------------------------------------------------------------------------------------------
    def forward(self, length: int, rate: float = 1.0) -> Tensor:
        """-> K: (channels, H, length) real (S4 Algorithm 1)."""
        dt = torch.exp(self.log_dt) * rate  # (H,)
        cdtype = as_complex(self.c).dtype
        lam = self.lam().expand(self.h, -1)  # (H, N/2)
        p = as_complex(self.p).expand(-1, self.h, -1)  # (r, H, N/2)
        b = as_complex(self.b).expand(self.h, -1)  # (H, N/2)
        c = self.c_tilde(length, rate)  # (c, H, N/2)
        rank, half = p.shape[0], self.n // 2
        # nodes: omega_k = exp(-2 pi i k / L) for the rfft half k = 0 .. L//2; z = 2 (1 - omega) / (1 + omega)
        k = torch.arange(length // 2 + 1, device=dt.device)
        omega = torch.exp(torch.complex(torch.zeros_like(k, dtype=dt.dtype), -2 * math.pi * k.to(dt.dtype) / length))
        nyquist = length % 2 == 0
        if nyquist:  # z is infinite at omega = -1; its limit is patched in below
            omega = torch.cat([omega[:-1], omega.new_zeros(1)])
        z = 2 * (1 - omega) / (1 + omega)  # (L', )
        left = torch.cat([c, p.conj()], 0)  # (c + r, H, N/2)
        right = torch.cat([b[None], p], 0)  # (1 + r, H, N/2)
        v = left[:, None] * right[None, :]  # (c + r, 1 + r, H, N/2)
        w = (dt[:, None] * lam).to(cdtype)  # (H, N/2)
        flat_v = v.reshape(-1, half)
        flat_w = w.expand_as(v).reshape(-1, half)
        r = cauchy(flat_v, z.to(cdtype), flat_w, backend=self.backend)  # (..., L')
        r = r.view(*v.shape[:-1], -1) * dt[:, None]  # (c + r, 1 + r, H, L')
        nc = c.shape[0]
        k00, k01, k10, k11 = r[:nc, 0], r[:nc, 1:], r[nc:, 0], r[nc:, 1:]
        if rank == 1:
            khat = k00 - k01[:, 0] * k10[0] / (1 + k11[0, 0])
        else:  # (I + k11)^-1 k10 solved per frequency
            eye = torch.eye(rank, dtype=r.dtype, device=r.device)
            m = (eye[:, :, None, None] + k11).permute(2, 3, 0, 1)  # (H, L', r, r)
            sol = torch.linalg.solve(m, k10.permute(1, 2, 0)[..., None])[..., 0]  # (H, L', r)
            khat = k00 - torch.einsum("crhl,hlr->chl", k01, sol)
        khat = khat * (2 / (1 + omega))
        if nyquist:  # omega = -1: the Woodbury term vanishes and 2/(1+omega) k00 -> dt/2 * 2 Re sum C~ B
            khat[..., -1] = (dt * (c * b).sum(-1).real).to(cdtype)
        return torch.fft.irfft(khat, n=length)  # (c, H, L)

    def step_matrices(self, rate: float = 1.0, length: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Recurrence on the full complex state: dA (H, N, N), dB (H, N), C (channels, H, N); y = Re(C x)."""
        return self.discrete_full(rate)
