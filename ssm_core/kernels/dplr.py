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
from typing import Callable

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..hippo import B_CLIP, MEASURES, clip_imag, dplr
from ..ops import cauchy, resolve_backend
from .graphs import cache_of
from .graphs import run as run_graphed
from .params import (REAL_TRANSFORMS, as_complex, check_choice, check_lr, init_log_dt, optim_of, real_param_from,
                     real_part, register)


#: mixed inits: measures given to consecutive equal shares of the n_ssm copies (S4D Tables 3b and 4, row
#: S4-(LegS/FouT): half the SSMs of a layer LegS, half FouT)
MIXED_MEASURES = {"legs/fout": ("legs", "fout")}
INITS = MEASURES + tuple(MIXED_MEASURES)


def _dplr_copies(init: str, d_state: int, n_ssm: int, b_clip: float | None = B_CLIP
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """Lambda (n_ssm, N/2), P (rank, n_ssm, N/2), B (n_ssm, N/2) of ``init`` for each SSM copy; the imaginary part of
    B clipped to [-b_clip, b_clip] (None: the exact V^* B)."""
    measures = MIXED_MEASURES.get(init, (init,))
    if n_ssm % len(measures):
        raise ValueError(f"init={init!r} splits the SSM copies between {measures}: needs a number of copies "
                         f"divisible by {len(measures)} (d_model, without tie_ab), got {n_ssm}")
    forms = [dplr(m, d_state) for m in measures]
    if len({f.p.shape[0] for f in forms}) > 1:
        raise ValueError(f"init={init!r}: the measures {measures} have low-rank terms of different ranks")
    share = n_ssm // len(measures)
    lam = torch.cat([torch.as_tensor(f.lam).expand(share, -1) for f in forms])  # (n_ssm, N/2)
    p = torch.cat([torch.as_tensor(f.p)[:, None, :].expand(-1, share, -1) for f in forms], 1)  # (rank, n_ssm, N/2)
    b = torch.cat([torch.as_tensor(clip_imag(f.b, b_clip)).expand(share, -1) for f in forms])  # (n_ssm, N/2)
    return lam.clone(), p.clone(), b.clone()


class DPLRKernel(nn.Module):
    """S4 kernel for HiPPO measures 'legs', 'legt', 'fout' (S4D Table 3b rows S4-LegS, S4-LegT, S4-FouT), or
    'legs/fout': half the SSM copies LegS, half FouT (row S4-(LegS/FouT)).

    Parameters: log_dt (H,), Lambda as (real param, imag) (n_ssm, N/2), P (rank, n_ssm, N/2),
    B (n_ssm, N/2), C~ (channels, H, N/2) for the length in buffer ``l_kernel`` (0: set at the first call).

    B starts as V^* B_HiPPO with its imaginary parts clipped to [-b_clip, b_clip] (default 2, eigenvector phases
    with a real positive first entry, :func:`ssm_core.hippo.dplr`): the S4 paper is silent on this and we follow
    the authors' code, whose HiPPO diagonalization clips B so by default. ``b_clip=None`` keeps the exact V^* B,
    with which (Lambda, P, B) is unitarily equivalent to the HiPPO matrices (Proposition 1's check).
    """

    def __init__(self, d_model: int, d_state: int = 64, channels: int = 1, init: str = "legs",
                 real_transform: str = "exp", trainable_a: bool = True, trainable_b: bool = True,
                 tie_ab: bool = False, dt_min: float = 1e-3, dt_max: float = 1e-1, lr: float | dict | None = 1e-3,
                 l_max: int | None = None, backend: str | None = None, b_clip: float | None = B_CLIP):
        super().__init__()
        check_choice("init", init, INITS)
        check_lr(lr)
        self.real_transform = check_choice("real_transform", real_transform, REAL_TRANSFORMS)
        self.h, self.n, self.channels, self.backend = d_model, d_state, channels, backend
        n_ssm = 1 if tie_ab else d_model
        lam, p, b = _dplr_copies(init, d_state, n_ssm, b_clip)  # (n_ssm, N/2), (rank, n_ssm, N/2), (n_ssm, N/2)
        if self.real_transform != "none" and (lam.real >= 0).any():
            # LegT / FouT normal parts have Re(Lambda) = 0: keep a tiny negative real part representable by exp/relu
            lam = torch.complex(lam.real.clamp(max=-1e-4), lam.imag)
        c = torch.randn(channels, d_model, d_state // 2, 2, dtype=torch.float64) * (0.5 ** 0.5)
        register(self, "log_dt", init_log_dt(d_model, dt_min, dt_max), True, optim_of(lr, "dt"))
        register(self, "a_real", real_param_from(lam.real, self.real_transform), trainable_a, optim_of(lr, "A"))
        register(self, "a_imag", lam.imag.clone(), trainable_a, optim_of(lr, "A"))
        register(self, "p", p, trainable_a, optim_of(lr, "A"))
        register(self, "b", b, trainable_b, optim_of(lr, "B"))
        register(self, "c", as_complex(c), True, None)  # C~ for length l_kernel
        self.register_buffer("l_kernel", torch.tensor(l_max or 0))
        self._l_kernel: int | None = None
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
        """The length C~ is defined for (set by the first call if l_max was not given); read from the buffer
        once and cached as a Python int, so a forward on the GPU does not synchronize to read it."""
        if self._l_kernel is None:
            self._l_kernel = int(self.l_kernel)
            if self._l_kernel == 0:
                self.l_kernel.fill_(length)
                self._l_kernel = length
        return self._l_kernel

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._l_kernel = None  # a loaded l_kernel replaces the cached one

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

    def graph_parts(self, length: int, rate: float = 1.0) -> tuple[tuple, Callable[..., Tensor], list[Tensor]] | None:
        """(key, fn, params) with fn(*params) = K (channels, H, length) for :mod:`.graphs` to capture and replay, or
        None where K is not replayed (C~ computed for another length or rate, or rank > 1)."""
        length = int(length)
        l_kernel = self._length(length)
        if rate != 1.0 or length > l_kernel or self.p.shape[0] != 1:
            return None
        return ((l_kernel, 1.0, self.backend, length),
                lambda *t: self._kernel_eager(l_kernel, as_complex(t[-1]), 1.0, *t[:-1])[..., :length],
                [self.log_dt, self.a_real, self.a_imag, self.p, self.b, self.c])

    def _kernel(self, length: int, c: Tensor, rate: float) -> Tensor:
        """K (channels, H, length) from C~ (channels, H, N/2) (S4 Algorithm 1, steps 2-5).

        k_ij(z) = sum_n dt L_i,n R_j,n / (z - dt Lambda_n) for L = (C~, P^*), R = (B, P): one Cauchy product over all
        (i, j, feature) rows, dt folded into its numerators; then the Woodbury identity per frequency (rank 1: by
        :class:`_Woodbury1`, whose backward is written out), times 2 / (1 + omega), and the inverse real FFT.
        The training path (C~ the parameter itself, rank 1) is replayed from a CUDA graph on a GPU
        (:mod:`.graphs`; SSM_KERNEL_GRAPHS=0 turns it off).
        """
        params = [self.log_dt, self.a_real, self.a_imag, self.p, self.b]
        if c._base is self.c and self.p.shape[0] == 1:
            return run_graphed(cache_of(self), (length, float(rate), self.backend),
                               lambda *t: self._kernel_eager(length, as_complex(t[-1]), rate, *t[:-1]),
                               [*params, self.c])
        return self._kernel_eager(length, c, rate, *params)

    def _kernel_eager(self, length: int, c: Tensor, rate: float, log_dt: Tensor, a_real: Tensor, a_imag: Tensor,
                      p_param: Tensor, b_param: Tensor) -> Tensor:
        """K from C~ (complex) and the other parameters passed in (the module's, or aliases of them)."""
        dt = torch.exp(log_dt)  # (H,)
        if rate != 1.0:
            dt = dt * rate
        cdtype = c.dtype
        lam = torch.complex(real_part(a_real, self.real_transform), a_imag)  # (n_ssm, N/2)
        p = as_complex(p_param)  # (r, n_ssm, N/2)
        b = as_complex(b_param)  # (n_ssm, N/2)
        rank, half, nc, h = p.shape[0], self.n // 2, c.shape[0], self.h
        z, scale = _nodes(length, cdtype, dt.device)  # (L',), L' = length // 2 + 1
        left = torch.cat([c, torch.conj_physical(p).expand(rank, h, half)], 0)  # (c + r, H, N/2)
        right = torch.cat([b.expand(1, h, half), p.expand(rank, h, half)], 0) * dt[:, None]  # (1 + r, H, N/2)
        v = left[:, None] * right[None]  # (c + r, 1 + r, H, N/2)
        w = (lam * dt[:, None]).to(cdtype).expand(v.shape).reshape(-1, half)
        r = cauchy(v.reshape(-1, half), z, w, backend=self.backend).view(nc + rank, 1 + rank, h, -1)  # (.., H, L')
        # omega = -1 (even length): z is infinite there; the Woodbury term vanishes and 2 / (1 + omega) k00 tends to
        # dt/2 * 2 Re sum_n C~_n B_n (scale is 0 there and this value is put in instead)
        nyq = (dt * (c * b).sum(-1).real) if length % 2 == 0 else None  # (c, H)
        if rank == 1:
            khat = _Woodbury1.apply(r, scale, nyq)  # (c, H, L')
        else:  # (I + k11)^-1 k10 solved per frequency
            k00, k01, k10, k11 = r[:nc, 0], r[:nc, 1:], r[nc:, 0], r[nc:, 1:]
            eye = torch.eye(rank, dtype=r.dtype, device=r.device)
            m = (eye[:, :, None, None] + k11).permute(2, 3, 0, 1)  # (H, L', r, r)
            sol = torch.linalg.solve(m, k10.permute(1, 2, 0)[..., None])[..., 0]  # (H, L', r)
            khat = (k00 - torch.einsum("crhl,hlr->chl", k01, sol)) * scale
            if nyq is not None:
                khat = torch.cat([khat[..., :-1], nyq[..., None].to(cdtype)], -1)
        return torch.fft.irfft(khat, n=length)  # (c, H, L)

    # -- recurrent step mode: O(N) per step, the Woodbury form of the bilinear step (S4 Theorem 3, App. C.2) --
    def setup_step(self, rate: float = 1.0) -> None:
        """x_t = A1 (A0 x_{t-1} + dt B u_t), A0 = I + dt/2 A, A1 = (I - dt/2 A)^-1, A = Lambda - P P^*; y = Re(C x).

        The state keeps one mode of each conjugate pair (N/2 of N): Lambda, P, B and C come in conjugate pairs
        and the input is real, so the other half of the state is the conjugate of the kept one, and every sum over
        the N modes (P^* x, C x) is twice the real part of the sum over the kept half (the conjugate symmetry of
        S4D Section 3.3)."""
        with torch.no_grad():
            lam, p, b, dt = self._full(rate)
            m = self.n // 2
            lam, p, b = lam[:, :m], p[..., :m], b[:, :m]  # (H, N/2), (r, H, N/2), (H, N/2)
            half = (dt / 2)[:, None]  # (H, 1) real
            d = 1 / (1 - half * lam)  # (H, N/2): (I - dt/2 Lambda)^-1
            # (I + dt/2 P^* D P)^-1 with the sum over all N modes: real (H, r, r)
            pdp = 2 * torch.einsum("rhn,hn,shn->hrs", p.conj(), d, p).real * half[..., None]
            inner = torch.linalg.inv(torch.eye(p.shape[0], dtype=pdp.dtype, device=pdp.device) + pdp)
            self._step = {"lam": lam.contiguous(), "p": p.contiguous(), "d": d.contiguous(), "inner": inner,
                          "half": half, "b": (b * dt[:, None]).contiguous(),
                          "c": self.true_c()[..., :m].contiguous()}  # C does not depend on dt

    def _pstar(self, x: Tensor) -> Tensor:
        """P^* x summed over all N modes from the kept half: 2 Re sum_n conj(P_rn) x_n, (B, H, N/2) -> (B, H, r)."""
        return 2 * torch.einsum("rhn,bhn->bhr", self._step["p"].conj(), x).real

    def _apply_a1(self, y: Tensor) -> Tensor:
        """(I - dt/2 (Lambda - P P^*))^-1 y by Woodbury: D y - D P (I + dt/2 P^* D P)^-1 dt/2 P^* D y."""
        s = self._step
        dy = s["d"] * y  # (B, H, N/2)
        t = torch.einsum("hrs,bhs->bhr", s["inner"], self._pstar(dy) * s["half"])  # (B, H, r) real
        return dy - s["d"] * torch.einsum("rhn,bhr->bhn", s["p"], t.to(dy.dtype))

    def default_state(self, batch_size: int) -> Tensor:
        """Zero state (B, H, N/2) complex: one mode of each conjugate pair."""
        if self._step is None:
            self.setup_step()
        return torch.zeros(batch_size, self.h, self.n // 2, dtype=self._step["lam"].dtype,
                           device=self.log_dt.device)

    def step(self, u: Tensor, x: Tensor, out: Tensor | None = None, skip: Tensor | None = None
             ) -> tuple[Tensor, Tensor]:
        """u (B, H) real, x (B, H, N/2) complex -> y (B, channels, H) real (plus ``skip`` (channels, H) times u when
        given: the D u of S4 eq. (1)), new x (written into ``out`` when given; ``out=x`` steps in place). The
        'triton' backend runs the fused step (ssm_core.ops.step_triton) for rank 1 (LegS, FouT), from its
        diagonal-plus-rank-one parts computed on its first call after each setup_step; a higher rank (LegT: 2)
        runs these torch operations on every backend."""
        if self._step is None:
            self.setup_step()
        s = self._step
        if s["p"].shape[0] == 1 and resolve_backend(self.backend, x.device) == "triton":
            from ..ops.step_triton import dplr_rank1_step, dplr_step_parts

            if "rank1" not in s:
                s["rank1"] = dplr_step_parts(s["lam"], s["p"][0], s["d"], s["b"], s["half"][:, 0],
                                             s["inner"][:, 0, 0])
            return dplr_rank1_step(x, u, s["rank1"], s["c"], out=out, skip=skip)
        a0x = x + s["half"] * (s["lam"] * x - torch.einsum("rhn,bhr->bhn", s["p"], self._pstar(x).to(x.dtype)))
        x = self._apply_a1(a0x + s["b"] * u.to(x.dtype)[..., None])
        y = 2 * torch.einsum("chn,bhn->bch", s["c"], x).real
        if skip is not None:
            y = y + skip * u[:, None, :]
        return y, (x if out is None else out.copy_(x))


_NODES: dict[tuple, tuple[Tensor, Tensor]] = {}


def _nodes(length: int, cdtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """S4 Algorithm 1's nodes for the rfft half k = 0 .. L//2: omega_k = exp(-2 pi i k / L), z = 2 (1 - omega) /
    (1 + omega), and the factor 2 / (1 + omega); at omega = -1 (even L) omega is replaced by 0 in z (finite, unused)
    and the factor is 0 (the layer puts in the limit). Computed in float64 once per (L, dtype, device)."""
    key = (length, cdtype, device)
    hit = _NODES.get(key)
    if hit is None:
        k = torch.arange(length // 2 + 1, dtype=torch.float64)
        omega = torch.exp(torch.complex(torch.zeros_like(k), -2 * math.pi * k / length))
        scale = 2 / (1 + omega)
        if length % 2 == 0:
            omega[-1] = 0
            scale[-1] = 0
        z = 2 * (1 - omega) / (1 + omega)
        hit = _NODES[key] = (z.to(cdtype).to(device), scale.to(cdtype).to(device))
    return hit


class _Woodbury1(torch.autograd.Function):
    """Rank-1 Woodbury combination per frequency (S4 Algorithm 1 step 4, Lemma C.3):

        khat = scale (k00 - k01 k10 / (1 + k11)),   r = [[k00, k01], [k10, k11]] of shape (c + 1, 2, H, L'),

    rows 0..c-1 of r the C~ rows (k00, k01: (c, H, L')), row c the P^* row (k10, k11: (H, L')); the last frequency
    is set to ``nyq`` (c, H) real when given. Backward (PyTorch's convention; G = conj(grad), holomorphic factors):
    G00 = G s, G01 = G s m, G10 = S / n, G11 = S m / n with s = scale, n = -(1 + k11), m = k10 / n,
    S = sum_c G s k01.
    """

    @staticmethod
    def forward(ctx, r: Tensor, scale: Tensor, nyq: Tensor | None) -> Tensor:
        nc = r.shape[0] - 1
        k00, k01, k10, k11 = r[:nc, 0], r[:nc, 1], r[nc, 0], r[nc, 1]
        neg_d = torch.rsub(k11, -1.0)  # -(1 + k11)
        m = k10 / neg_d
        khat = torch.addcmul(k00, k01, m) * scale  # (c, H, L')
        if nyq is not None:
            khat[..., -1] = nyq
        ctx.save_for_backward(k01, neg_d, m, scale)
        ctx.has_nyq = nyq is not None
        return khat

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        k01, neg_d, m, scale = ctx.saved_tensors
        nc = k01.shape[0]
        gr = torch.empty((nc + 1, 2, *k01.shape[1:]), dtype=grad.dtype, device=grad.device)
        a = torch.mul(torch.conj_physical(grad), scale, out=gr[:nc, 0])  # G00 = G scale (zero at omega = -1)
        torch.mul(a, m, out=gr[:nc, 1])  # G01
        s = a * k01 if nc == 1 else (a * k01).sum(0, keepdim=True)  # (1, H, L')
        torch.div(s, neg_d, out=gr[nc:, 0])  # G10
        torch.mul(s, m / neg_d, out=gr[nc:, 1])  # G11
        grad_nyq = grad[..., -1].real if ctx.has_nyq and ctx.needs_input_grad[2] else None
        return gr.conj_physical_(), None, grad_nyq
