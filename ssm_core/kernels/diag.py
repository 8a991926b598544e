"""Diagonal SSM kernel: S4D (Vandermonde) and DSS (softmax-normalized) (S4D Section 3, Table 1)."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..inits import diagonal_init
from ..ops import log_vandermonde
from .graphs import cache_of
from .graphs import run as run_graphed
from .params import (DISCRETIZATIONS, REAL_TRANSFORMS, as_complex, check_choice, init_log_dt, real_param_from,
                     real_part, register)

NORMALIZATIONS = ("none", "softmax")


def discretize(log_dt: Tensor, a_real: Tensor, a_imag: Tensor, b: Tensor, rate: float, discretization: str,
               real_transform: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Discretize a diagonal SSM with step dt = exp(log_dt) * rate (S4D Section 3.1, Listing 1).

    ZOH: dA = exp(dt A), dB = (exp(dt A) - 1) / A B.  Bilinear: dA = (1 + dt A / 2) / (1 - dt A / 2),
    dB = dt B / (1 - dt A / 2). log_dt (H,); a_real, a_imag (n_ssm, N/2) (Re A through ``real_transform``);
    b (n_ssm, N/2) complex. Returns dt (H,), A (n_ssm, N/2), dt A (H, N/2), aux (H, N/2) (ZOH: (exp(dt A) - 1) / A,
    bilinear: 1 - dt A / 2), log dA (H, N/2), dB (H, N/2). Differentiable (autograd); the kernel's training path
    runs it without autograd and differentiates by hand (:class:`_Coefficients`).
    """
    dt = torch.exp(log_dt)
    if rate != 1.0:
        dt = dt * rate
    a = torch.complex(real_part(a_real, real_transform), a_imag)
    dtc = dt[:, None]
    q = a * dtc  # dt A
    if discretization == "zoh":
        aux = (torch.exp(q) - 1) / a
        return dt, a, q, aux, q, b * aux
    aux = torch.rsub(q, 1.0, alpha=0.5)  # 1 - dt A / 2
    log_da = torch.log1p(q / aux)  # log((1 + dt A / 2) / (1 - dt A / 2)), accurate for small dt A
    return dt, a, q, aux, log_da, (b * dtc) / aux


class _Coefficients(torch.autograd.Function):
    """(v, x) of the S4D kernel's Vandermonde product, K = 2 Re sum_n v_n exp(x_n l) (S4D eq. 7, Listing 1):
    v = C o dB (/ the Vandermonde row sums sum_l dA^l for DSS's softmax normalization), x = log dA, rows
    (channel, feature) -> (C * H, N/2) each. The backward is written out (PyTorch's convention for complex
    gradients: for a holomorphic y = f(z), grad_z = grad_y conj(f'(z)); for a real t, the real part of that) so that
    the whole kernel generation is a handful of large ops rather than autograd through a hundred small ones.
    Backward math in terms of G = conj(grad) (see the comments); checked against autograd through
    :func:`discretize` in tests/test_ops.py.
    """

    @staticmethod
    def forward(ctx, log_dt, a_real, a_imag, b, c, rate, length, discretization, real_transform, softmax):
        ctx.set_materialize_grads(False)
        b_c, c_c = torch.view_as_complex(b), torch.view_as_complex(c)  # (n_ssm, N/2), (C, H, N/2)
        dt, a, q, aux, log_da, db = discretize(log_dt, a_real, a_imag, b_c, rate, discretization, real_transform)
        nc, h, half = c_c.shape
        v0 = c_c * db  # (C, H, N/2)
        fac = None
        if softmax:  # divide by sum_l dA^l = (dA^L - 1) / (dA - 1)
            em1 = torch.expm1(log_da)
            eml = torch.expm1(length * log_da)
            fac = em1 / eml
            ctx.softmax_parts = (em1, eml)
            v = v0 * fac
        else:
            v = v0
        ctx.save_for_backward(a_real, a, b_c, c_c, dt, q, aux, db, v0 if softmax else None, fac)
        ctx.conf = (discretization, real_transform, length, nc, h, half)
        x = log_da if nc == 1 else log_da.repeat(nc, 1)
        return v.view(nc * h, half), x

    @staticmethod
    @once_differentiable
    def backward(ctx, gv, gx):
        a_real, a, b_c, c_c, dt, q, aux, db, v0, fac = ctx.saved_tensors  # v0, fac: softmax only (else None)
        discretization, real_transform, length, nc, h, half = ctx.conf
        need_log_dt, need_ar, need_ai, need_b, need_c = ctx.needs_input_grad[:5]
        # G = conj(grad): then every factor below is the plain (holomorphic) derivative. One channel: (H, N/2)
        # tensors throughout (no size-1 axis for autograd to reduce away).
        if nc == 1:
            c_c, v0 = c_c[0], v0[0] if v0 is not None else None
        gvc = None if gv is None else torch.conj_physical(gv.view(h, half) if nc == 1 else gv.view(nc, h, half))
        gxc = None
        if gx is not None:
            gxc = torch.conj_physical(gx if nc == 1 else gx.view(nc, h, half).sum(0))  # (H, N/2)
        if fac is not None and gvc is not None:  # v = v0 fac(x), fac = expm1(x) / expm1(L x)
            em1, eml = ctx.softmax_parts
            # fac'(x) = (exp(x) - L fac exp(L x)) / expm1(L x)
            dfac = ((em1 + 1) - length * fac * (eml + 1)) / eml
            t = gvc * v0 if nc == 1 else (gvc * v0).sum(0)
            t = t * dfac
            gxc = t if gxc is None else gxc + t
            gvc = gvc * fac
        grad_c = None
        if need_c and gvc is not None:  # grad_c = grad_v conj(dB)
            grad_c = torch.view_as_real(torch.conj_physical(gvc * db)).view(nc, h, half, 2)
        grad_log_dt = grad_ar = grad_ai = grad_b = None
        if not (need_log_dt or need_ar or need_ai or need_b) or (gvc is None and gxc is None):
            return grad_log_dt, grad_ar, grad_ai, grad_b, grad_c, None, None, None, None, None
        gdb = None if gvc is None else (gvc * c_c if nc == 1 else (gvc * c_c).sum(0))  # (H, N/2)
        dtc = dt[:, None]
        tied = a.shape[0] != h  # A, B shared by all features (n_ssm = 1): their gradients sum over H
        if discretization == "zoh":  # x = q = dt A, dB = B (exp(q) - 1) / A = B aux
            gq = gxc  # d x / d q = 1
            if gdb is not None:
                e = q.exp()
                # d dB / d A = B (dt exp(q) - aux) / A;  d dB / d dt = B exp(q);  d dB / d B = aux
                ga_db = gdb * b_c * (dtc * e - aux) / a
                gdt_db = gdb * b_c * e
                gb = gdb * aux
        else:  # x = log((1 + q/2) / (1 - q/2)), dB = B dt / (1 - q/2) with aux = 1 - q/2
            # d x / d q = 1 / ((1 + q/2)(1 - q/2));  d dB / d q = dB / (2 aux);  d dB / d B = dt / aux;  d dB / d dt = B / aux
            gq = None if gxc is None else gxc / (2.0 - aux)
            if gdb is not None:
                gq = gdb * db * 0.5 if gq is None else torch.add(gq, gdb * db, alpha=0.5)
            gq = gq / aux
            if gdb is not None:
                u = gdb / aux
                gb = u * dtc
                gdt_db = u * b_c
        # q = dt A: d q / d A = dt, d q / d dt = A
        if need_log_dt:
            s = gq * a if gq is not None else None
            if gdb is not None:
                s = gdt_db if s is None else s + gdt_db
            grad_log_dt = s.real.sum(-1) * dt  # d dt / d log_dt = dt (Re(conj G) = Re G)
        if need_ar or need_ai:
            ga = gq * dtc if gq is not None else None
            if discretization == "zoh" and gdb is not None:
                ga = ga_db if ga is None else ga + ga_db
            if tied:
                ga = ga.sum(0, keepdim=True)
            if need_ar:  # Re A = T(a_real): exp -> -exp(p) (= Re A), relu -> -relu(p), none -> p
                if real_transform == "exp":
                    grad_ar = ga.real * a.real
                elif real_transform == "relu":
                    grad_ar = ga.real * -(a_real > 0).to(a_real.dtype)
                else:
                    grad_ar = ga.real.clone()
            if need_ai:
                grad_ai = -ga.imag  # Im(conj G)
        if need_b and gdb is not None:
            if tied:
                gb = gb.sum(0, keepdim=True)
            grad_b = torch.view_as_real(torch.conj_physical(gb))
        return grad_log_dt, grad_ar, grad_ai, grad_b, grad_c, None, None, None, None, None


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
        """dt (H,), log dA (H, N/2), dB (H, N/2) for the step size dt * rate (S4D Section 3.1), through autograd."""
        dt, _, _, _, log_da, db = discretize(self.log_dt, self.a_real, self.a_imag, as_complex(self.b), rate,
                                             self.discretization, self.real_transform)
        return dt, log_da, db

    def forward(self, length: int, rate: float = 1.0) -> Tensor:
        """-> K: (channels, H, length) real (S4D eq. 7: K = 2 Re sum_n (C o dB)_n dA_n^l).

        On a GPU, replayed from a CUDA graph after the first call with these arguments (:mod:`.graphs`;
        SSM_KERNEL_GRAPHS=0 turns it off)."""
        length, rate = int(length), float(rate)
        return run_graphed(cache_of(self), (length, rate, self.backend), lambda *t: self._kernel(length, rate, *t),
                           [self.log_dt, self.a_real, self.a_imag, self.b, self.c])

    def _kernel(self, length: int, rate: float, log_dt: Tensor, a_real: Tensor, a_imag: Tensor, b: Tensor,
                c: Tensor) -> Tensor:
        """K from the parameters passed in (the module's, or aliases of them while a CUDA graph is captured)."""
        v, x = _Coefficients.apply(log_dt, a_real, a_imag, b, c, rate, length, self.discretization,
                                   self.real_transform, self.normalization == "softmax")
        k = log_vandermonde(v, x, length, backend=self.backend)  # (channels * H, L)
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
