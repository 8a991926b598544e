"""DPLR SSM kernel: S4 (S4 Algorithm 1; S4D Section 2 "S4").

A = Lambda - P P^* (diagonal plus low rank, in the unitary eigenbasis of the NPLR form), bilinear
discretization. The kernel's generating function at the L-th roots of unity omega is

    K^(omega) = 2 / (1 + omega) [k00 - k01 (I + k11)^-1 k10],   k_ij = sum_n dt L_i,n R_j,n / (z - dt Lambda_n)

with z = 2 (1 - omega) / (1 + omega) (a Cauchy product, Woodbury identity), and C replaced by
C~ = C (I - dA^L) (truncation correction), so that the inverse FFT gives exactly K_0 .. K_{L-1}.
As in S4, the trained parameter is C~ itself, defined for the kernel length ``l_kernel`` (fixed at the
first call, or by ``l_max``): the training path then costs one Cauchy product. Other lengths and step
sizes convert through the true C = C~ (I - dA^l_kernel)^-1 once (dense, O(N^3) per feature).
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
    B (n_ssm, N/2), C~ (channels, H, N/2) for the length in buffer ``l_kernel`` (0: set at the first call).
    """

    def __init__(self, d_model: int, d_state: int = 64, channels: int = 1, init: str = "legs",
                 real_transform: str = "exp", trainable_a: bool = True, trainable_b: bool = True,
                 tie_ab: bool = False, dt_min: float = 1e-3, dt_max: float = 1e-1, lr: float | None = 1e-3,
                 l_max: int | None = None, backend: str | None = None):
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
        register(self, "c", as_complex(c), True, None)  # C~ for length l_kernel
        self.register_buffer("l_kernel", torch.tensor(l_max or 0))
        self._step: dict[str, Tensor] | None = None
        self.float()

    # -- pieces ---------------------------------------------------------------------------------------------
    def lam(self) -> Tensor:
        return torch.complex(real_part(self.a_real, self.real_transform), self.a_imag)  # (n_ssm, N/2)

    def _full(self, rate: float = 1.0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Both halves of each conjugate pair: Lambda (H, N), P (rank, H, N), B (H, N) complex, dt (H,)."""
        dt = torch.exp(self.log_dt) * rate
        lam = self.lam().expand(self.h, -1)
        p = as_complex(self.p).expand(-1, self.h, -1)  # (rank, H, N/2)
        b = as_complex(self.b).expand(self.h, -1)
        return (torch.cat([lam, lam.conj()], -1), torch.cat([p, p.conj()], -1), torch.cat([b, b.conj()], -1), dt)

    def discrete_full(self, rate: float = 1.0) -> tuple[Tensor, Tensor]:
        """Dense bilinear dA (H, N, N) and dB (H, N) on the full complex state (S4D Section 3.1)."""
        lam, p, b, dt = self._full(rate)
        a = torch.diag_embed(lam) - torch.einsum("rhi,rhj->hij", p, p.conj())
        eye = torch.eye(self.n, dtype=a.dtype, device=a.device)
        half = (dt / 2)[:, None, None].to(a.dtype)
        inv = torch.linalg.inv(eye - half * a)
        return inv @ (eye + half * a), (inv @ (dt[:, None].to(a.dtype) * b)[..., None])[..., 0]

    def _length(self, length: int) -> int:
        if int(self.l_kernel) == 0:
            self.l_kernel.fill_(length)
        return int(self.l_kernel)

    def true_c(self) -> Tensor:
        """C = C~ (I - dA^l_kernel)^-1 on the full state: (channels, H, N) complex."""
        da, _ = self.discrete_full()
        c_t = as_complex(self.c)
        c_t = torch.cat([c_t, c_t.conj()], -1)  # (c, H, N)
        eye = torch.eye(self.n, dtype=da.dtype, device=da.device)
        m = eye - torch.linalg.matrix_power(da, self._length(1))  # (H, N, N)
        # row vector solve: C m = C~  <=>  m^T C^T = C~^T
        return torch.linalg.solve(m.transpose(-1, -2), c_t.permute(1, 2, 0)).permute(2, 0, 1)

    def full_state(self, rate: float = 1.0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Dense A (H, N, N), B (H, N), true C (channels, H, N), dt (H,): for the dense reference and tests."""
        lam, p, b, dt = self._full(rate)
        return torch.diag_embed(lam) - torch.einsum("rhi,rhj->hij", p, p.conj()), b, self.true_c(), dt

    def c_tilde(self, length: int, rate: float = 1.0) -> Tensor:
        """C~ for ``length`` and step dt * rate (S4 Algorithm 1, step 1), on the stored half: (channels, H, N/2)."""
        if rate == 1.0 and length == self._length(length):
            return as_complex(self.c)
        da, _ = self.discrete_full(rate)
        c = self.true_c()
        c_t = c - torch.einsum("chi,hij->chj", c, torch.linalg.matrix_power(da, length))
        return c_t[..., : self.n // 2]

    # -- kernel ---------------------------------------------------------------------------------------------
    def forward(self, length: int, rate: float = 1.0) -> Tensor:
        """-> K: (channels, H, length) real (S4 Algorithm 1)."""
        l_kernel = self._length(length)
        if rate == 1.0 and length <= l_kernel:  # K_0 .. K_{L-1} do not depend on L: truncate the stored one
            return self._kernel(l_kernel, as_complex(self.c), rate)[..., :length]
        return self._kernel(length, self.c_tilde(length, rate), rate)

    def _kernel(self, length: int, c: Tensor, rate: float) -> Tensor:
        dt = torch.exp(self.log_dt) * rate  # (H,)
        cdtype = c.dtype
        lam = self.lam().expand(self.h, -1)  # (H, N/2)
        p = as_complex(self.p).expand(-1, self.h, -1)  # (r, H, N/2)
        b = as_complex(self.b).expand(self.h, -1)  # (H, N/2)
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

    # -- recurrent step mode: O(N) per step through the Woodbury form of the bilinear step (S4 Lemma C.2) ----
    def setup_step(self, rate: float = 1.0) -> None:
        """x_t = A1 (A0 x_{t-1} + dt B u_t), A0 = I + dt/2 A, A1 = (I - dt/2 A)^-1, A = Lambda - P P^*; y = Re(C x)."""
        with torch.no_grad():
            lam, p, b, dt = self._full(rate)
            half = (dt / 2)[:, None].to(lam.dtype)  # (H, 1)
            d = 1 / (1 - half * lam)  # (H, N): (I - dt/2 Lambda)^-1
            # (I + dt/2 P^* D P)^-1, (H, r, r)
            inner = torch.einsum("rhn,hn,shn->hrs", p.conj(), d, p) * half[..., None]
            inner = torch.linalg.inv(torch.eye(p.shape[0], dtype=lam.dtype, device=lam.device) + inner)
            self._step = {"lam": lam, "p": p, "d": d, "inner": inner, "half": half,
                          "b": b * dt[:, None].to(lam.dtype), "c": self.true_c()}  # C does not depend on dt

    def _apply_a1(self, y: Tensor) -> Tensor:
        """(I - dt/2 (Lambda - P P^*))^-1 y by Woodbury: D y - D P (I + dt/2 P^* D P)^-1 dt/2 P^* D y."""
        s = self._step
        dy = s["d"] * y  # (B, H, N)
        t = torch.einsum("rhn,bhn->bhr", s["p"].conj(), dy) * s["half"]  # (B, H, r)
        t = torch.einsum("hrs,bhs->bhr", s["inner"], t)
        return dy - s["d"] * torch.einsum("rhn,bhr->bhn", s["p"], t)

    def default_state(self, batch_size: int) -> Tensor:
        if self._step is None:
            self.setup_step()
        return torch.zeros(batch_size, self.h, self.n, dtype=self._step["lam"].dtype, device=self.log_dt.device)

    def step(self, u: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """u (B, H) real, x (B, H, N) complex -> y (B, channels, H) real, new x."""
        if self._step is None:
            self.setup_step()
        s = self._step
        a0x = x + s["half"] * (s["lam"] * x - torch.einsum("rhn,bhr->bhn", s["p"],
                                                             torch.einsum("rhn,bhn->bhr", s["p"].conj(), x)))
        x = self._apply_a1(a0x + s["b"] * u.to(x.dtype)[..., None])
        return torch.einsum("chn,bhn->bch", s["c"], x).real, x
