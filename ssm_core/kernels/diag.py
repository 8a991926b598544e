"""Diagonal SSM kernel: S4D (Vandermonde) and DSS (softmax-normalized) (S4D Section 3, Table 1).

DSS (S4D Section 3.4; Gupta et al. 2022, "Diagonal State Spaces", Proposition 1) computes, with the ZOH step,

    K_l = Re sum_n (C_n B_n / Lambda_n) softmax_eps(dt Lambda_n * (0, 1, .., L-1))_l

(DSS's W = B o C, S4D Section 3.3). softmax_eps is DSS's stable complex softmax: shift by the entry of largest
real part (l = 0 if Re(dt Lambda) <= 0, l = L-1 otherwise) and divide by reciprocal_eps(s) = conj(s) / (|s|^2 +
eps), eps = 1e-7, of the shifted sum s. Only the real part is taken (no factor 2 for the conjugate pairs); per mode
this is the S4D ZOH kernel with C o dB divided by 2 (dA^L - 1) = 2 (dA - 1) sum_{l<L} dA^l (not by the Vandermonde
row sum alone).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..inits import diagonal_init
from ..ops import log_vandermonde, resolve_backend
from .graphs import cache_of
from .graphs import run as run_graphed
from .params import (DISCRETIZATIONS, REAL_TRANSFORMS, as_complex, check_choice, check_lr, init_log_dt, optim_of,
                     real_param_from, real_part, register)

NORMALIZATIONS = ("none", "softmax")
#: eps of DSS's reciprocal_eps(s) = conj(s) / (|s|^2 + eps) in its stable softmax (DSS Section 3)
DSS_EPS = 1e-7


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


def _dss_parts(q: Tensor, length: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The pieces of DSS's softmax_eps over l of q l (q = dt Lambda, (H, N/2)), without overflow.

    flip: Re q > 0, where DSS shifts by q (L-1) and the mode runs backwards in time; xs = -q there, q elsewhere
    (Re xs <= 0, so exp(xs l) <= 1); s = sum_{r<L} exp(xs r) = expm1(L xs) / expm1(xs), the shifted sum;
    rec = reciprocal_eps(s). softmax_eps(q l)_l = exp(xs l') rec with l' = l, or L-1-l where flip.
    Returns flip (bool), xs, em1 = expm1(xs), eml = expm1(L xs), s, rec.
    """
    flip = q.real > 0
    xs = torch.where(flip, -q, q)
    em1, eml = torch.expm1(xs), torch.expm1(length * xs)
    s = eml / em1
    rec = s.conj() / ((s * s.conj()).real + DSS_EPS)
    return flip, xs, em1, eml, s, rec


def _grad_a(ga: Tensor, a: Tensor, a_real: Tensor, real_transform: str, tied: bool, need_ar: bool,
            need_ai: bool) -> tuple[Tensor | None, Tensor | None]:
    """Gradients of the stored (a_real, a_imag) from G = conj(grad) of A (H, N/2); tied: A shared by the H features."""
    if tied:
        ga = ga.sum(0, keepdim=True)
    grad_ar = grad_ai = None
    if need_ar:  # Re A = T(a_real): exp -> -exp(p) (= Re A), relu -> -relu(p), none -> p
        if real_transform == "exp":
            grad_ar = ga.real * a.real
        elif real_transform == "relu":
            grad_ar = ga.real * -(a_real > 0).to(a_real.dtype)
        else:
            grad_ar = ga.real.clone()
    if need_ai:
        grad_ai = -ga.imag  # Im(conj G)
    return grad_ar, grad_ai


class _Coefficients(torch.autograd.Function):
    """(v, x) of the kernel's Vandermonde product, K = 2 Re sum_n v_n exp(x_n l) (S4D eq. 7, Listing 1).

    S4D: v = C o dB, x = log dA, rows (channel, feature) -> (C * H, N/2) each.
    DSS (softmax=True, ZOH; module docstring): v = C B rec / (2 Lambda) and x = xs of :func:`_dss_parts`, in two
    row blocks (2 * C * H, N/2): the modes that run forwards (first block) and those that run backwards in time
    (second block, zero elsewhere); the caller adds the second block's output reversed in l.
    The backward is written out (PyTorch's convention for complex gradients: for a holomorphic y = f(z),
    grad_z = grad_y conj(f'(z)); for a real t, the real part of that) so that the whole kernel generation is a
    handful of large ops rather than autograd through a hundred small ones. Backward math in terms of
    G = conj(grad) (see the comments); checked against autograd through :func:`discretize` in tests/test_ops.py.
    """

    @staticmethod
    def forward(ctx, log_dt, a_real, a_imag, b, c, rate, length, discretization, real_transform, softmax):
        ctx.set_materialize_grads(False)
        b_c, c_c = torch.view_as_complex(b), torch.view_as_complex(c)  # (n_ssm, N/2), (C, H, N/2)
        dt, a, q, aux, log_da, db = discretize(log_dt, a_real, a_imag, b_c, rate, discretization, real_transform)
        nc, h, half = c_c.shape
        ctx.conf = (discretization, real_transform, length, nc, h, half, softmax)
        if softmax:
            if discretization != "zoh":
                raise ValueError("the softmax (DSS) kernel is defined for discretization='zoh' only")
            flip, xs, em1, eml, s, rec = _dss_parts(q, length)
            u = b_c * rec / (2 * a)  # (H, N/2): v = C u
            v = c_c * u  # (C, H, N/2)
            v = torch.stack([v.masked_fill(flip, 0), v.masked_fill(~flip, 0)])  # (2, C, H, N/2)
            ctx.save_for_backward(a_real, a, b_c, c_c, dt, flip, xs, em1, eml, s, rec, u)
            return v.view(2 * nc * h, half), xs.repeat(2 * nc, 1)
        ctx.save_for_backward(a_real, a, b_c, c_c, dt, q, aux, db)
        x = log_da if nc == 1 else log_da.repeat(nc, 1)
        return (c_c * db).view(nc * h, half), x

    @staticmethod
    @once_differentiable
    def backward(ctx, gv, gx):
        if ctx.conf[-1]:
            return _Coefficients._backward_dss(ctx, gv, gx)
        a_real, a, b_c, c_c, dt, q, aux, db = ctx.saved_tensors
        discretization, real_transform, length, nc, h, half, _ = ctx.conf
        need_log_dt, need_ar, need_ai, need_b, need_c = ctx.needs_input_grad[:5]
        # G = conj(grad): then every factor below is the plain (holomorphic) derivative. One channel: (H, N/2)
        # tensors throughout (no size-1 axis for autograd to reduce away).
        if nc == 1:
            c_c = c_c[0]
        gvc = None if gv is None else torch.conj_physical(gv.view(h, half) if nc == 1 else gv.view(nc, h, half))
        gxc = None
        if gx is not None:
            gxc = torch.conj_physical(gx if nc == 1 else gx.view(nc, h, half).sum(0))  # (H, N/2)
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
            grad_ar, grad_ai = _grad_a(ga, a, a_real, real_transform, tied, need_ar, need_ai)
        if need_b and gdb is not None:
            if tied:
                gb = gb.sum(0, keepdim=True)
            grad_b = torch.view_as_real(torch.conj_physical(gb))
        return grad_log_dt, grad_ar, grad_ai, grad_b, grad_c, None, None, None, None, None

    @staticmethod
    def _backward_dss(ctx, gv, gx):
        """Backward of the DSS coefficients: v = C u, u = B rec / (2 A), rec = reciprocal_eps(s(xs)), xs = +-dt A."""
        a_real, a, b_c, c_c, dt, flip, xs, em1, eml, s, rec, u = ctx.saved_tensors
        _, real_transform, length, nc, h, half, _ = ctx.conf
        need_log_dt, need_ar, need_ai, need_b, need_c = ctx.needs_input_grad[:5]
        sign = 1.0 - 2.0 * flip.to(dt.dtype)  # (H, N/2): xs = sign dt A
        gvc = gxc = grad_c = grad_log_dt = grad_ar = grad_ai = grad_b = None
        if gv is not None:  # v = (v * forwards, v * backwards): G of v is the block the mode sits in
            gv = gv.view(2, nc, h, half)
            gvc = torch.conj_physical(torch.where(flip, gv[1], gv[0]))  # (C, H, N/2)
        if gx is not None:
            gxc = torch.conj_physical(gx.view(2 * nc, h, half).sum(0))  # (H, N/2), G of xs
        if need_c and gvc is not None:  # d v / d C = u
            grad_c = torch.view_as_real(torch.conj_physical(gvc * u))
        if not (need_log_dt or need_ar or need_ai or need_b) or (gvc is None and gxc is None):
            return grad_log_dt, grad_ar, grad_ai, grad_b, grad_c, None, None, None, None, None
        gxs = gxc
        ga = None
        gb = None
        if gvc is not None:
            gu = (gvc * c_c).sum(0)  # (H, N/2)
            gb = gu * rec / (2 * a)  # d u / d B = rec / (2 A)
            ga = -gu * u / a  # d u / d A at fixed rec = -u / A
            grec = gu * b_c / (2 * a)  # d u / d rec
            # rec(s) = conj(s) / (|s|^2 + eps) is not holomorphic: G_s = G_rec d rec/d s + conj(G_rec) conj(d rec/d conj(s))
            # with d rec / d s = -conj(s)^2 / den^2 and d rec / d conj(s) = eps / den^2 (real)
            den2 = ((s * s.conj()).real + DSS_EPS) ** 2
            gs = (grec * -(s.conj() ** 2) + torch.conj_physical(grec) * DSS_EPS) / den2
            # s = expm1(L xs) / expm1(xs): d s / d xs = (L exp(L xs) - s exp(xs)) / expm1(xs)
            t = gs * (length * (eml + 1) - s * (em1 + 1)) / em1
            gxs = t if gxs is None else gxs + t
        gq = gxs * sign  # xs = sign q, q = dt A
        if need_log_dt:
            grad_log_dt = (gq * a).real.sum(-1) * dt  # d q / d dt = A, d dt / d log_dt = dt
        if need_ar or need_ai:
            t = gq * dt[:, None]  # d q / d A = dt
            ga = t if ga is None else ga + t
            grad_ar, grad_ai = _grad_a(ga, a, a_real, real_transform, a.shape[0] != h, need_ar, need_ai)
        if need_b and gb is not None:
            if a.shape[0] != h:
                gb = gb.sum(0, keepdim=True)
            grad_b = torch.view_as_real(torch.conj_physical(gb))
        return grad_log_dt, grad_ar, grad_ai, grad_b, grad_c, None, None, None, None, None


class DiagKernel(nn.Module):
    """K = 2 Re[(C o dB) . V_L(dA)] over N/2 conjugate-pair modes (S4D eq. 7, Listing 1).

    Knobs (S4D Table 1, Table 2): discretization 'bilinear' | 'zoh'; real_transform 'exp' | 'relu' | 'none'
    for Re(A); trainable_a / trainable_b (False freezes A / B: S4D Table 3b "frozen (A, B)");
    normalization 'softmax' is DSS's kernel (module docstring; needs discretization 'zoh').
    Parameters: log_dt (H,), A as (real param, imag) (n_ssm, N/2), B (n_ssm, N/2), C (channels, H, N/2).
    """

    def __init__(self, d_model: int, d_state: int = 64, channels: int = 1, init: str = "legs",
                 discretization: str = "bilinear", real_transform: str = "exp", normalization: str = "none",
                 trainable_a: bool = True, trainable_b: bool = True, tie_ab: bool = False, dt_min: float = 1e-3,
                 dt_max: float = 1e-1, lr: float | dict | None = 1e-3, init_kwargs: dict | None = None,
                 backend: str | None = None):
        super().__init__()
        check_lr(lr)
        self.h, self.n, self.channels = d_model, d_state, channels
        self.discretization = check_choice("discretization", discretization, DISCRETIZATIONS)
        self.real_transform = check_choice("real_transform", real_transform, REAL_TRANSFORMS)
        self.normalization = check_choice("normalization", normalization, NORMALIZATIONS)
        self.backend = backend
        if self.normalization == "softmax" and self.discretization != "zoh":
            raise ValueError(f"normalization='softmax' (DSS's kernel, S4D Section 3.4) needs discretization='zoh', "
                             f"got discretization={discretization!r}")
        lam, b = diagonal_init(init, d_state, **(init_kwargs or {}))
        n_ssm = 1 if tie_ab else d_model
        lam_t = torch.as_tensor(lam).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        b_t = torch.as_tensor(b).expand(n_ssm, -1).clone()  # (n_ssm, N/2)
        c = torch.randn(channels, d_model, d_state // 2, 2, dtype=torch.float64) * (0.5 ** 0.5)  # unit variance
        register(self, "log_dt", init_log_dt(d_model, dt_min, dt_max), True, optim_of(lr, "dt"))
        if self.real_transform != "none" and (lam_t.real >= 0).any():
            raise ValueError(f"init {init!r} has eigenvalues with Re >= 0, which real_transform="
                             f"{real_transform!r} cannot represent; use real_transform='none'")
        register(self, "a_real", real_param_from(lam_t.real, self.real_transform), trainable_a, optim_of(lr, "A"))
        register(self, "a_imag", lam_t.imag.clone(), trainable_a, optim_of(lr, "A"))
        register(self, "b", b_t, trainable_b, optim_of(lr, "B"))
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
        return run_graphed(cache_of(self), *self.graph_parts(length, rate))

    def graph_parts(self, length: int, rate: float = 1.0) -> tuple[tuple, Callable[..., Tensor], list[Tensor]]:
        """(key, fn, params) with fn(*params) = K (channels, H, length): what :mod:`.graphs` captures and replays."""
        length, rate = int(length), float(rate)
        return ((length, rate, self.backend), lambda *t: self._kernel(length, rate, *t),
                [self.log_dt, self.a_real, self.a_imag, self.b, self.c])

    def _kernel(self, length: int, rate: float, log_dt: Tensor, a_real: Tensor, a_imag: Tensor, b: Tensor,
                c: Tensor) -> Tensor:
        """K from the parameters passed in (the module's, or aliases of them while a CUDA graph is captured)."""
        v, x = _Coefficients.apply(log_dt, a_real, a_imag, b, c, rate, length, self.discretization,
                                   self.real_transform, self.normalization == "softmax")
        k = log_vandermonde(v, x, length, backend=self.backend)  # (channels * H, L); DSS: (2 * channels * H, L)
        if self.normalization == "softmax":  # the modes with Re(dt A) > 0 run backwards in time (_dss_parts)
            k = k.view(2, -1, length)
            k = k[0] + k[1].flip(-1)
        return k.view(self.channels, self.h, length)

    # -- recurrent step mode: x_t = dA x_{t-1} + dB u_t, y_t = 2 Re(C x_t), O(N) per step -------------------
    def setup_step(self, rate: float = 1.0) -> None:
        if self.normalization == "softmax":
            raise NotImplementedError("recurrent step mode is not defined for the softmax-normalized (DSS) kernel: "
                                      "its normalization depends on the sequence length")
        with torch.no_grad():
            _, log_da, db = self.discrete(rate)
            # (H, N/2), (H, N/2), (channels, H, N/2)
            self._step = (torch.exp(log_da).contiguous(), db.contiguous(), as_complex(self.c).contiguous())

    def default_state(self, batch_size: int) -> Tensor:
        if self._step is None:
            self.setup_step()
        return torch.zeros(batch_size, self.h, self.n // 2, dtype=self._step[0].dtype, device=self.log_dt.device)

    def step(self, u: Tensor, x: Tensor, out: Tensor | None = None, skip: Tensor | None = None
             ) -> tuple[Tensor, Tensor]:
        """u (B, H) real, x (B, H, N/2) complex -> y (B, channels, H) real (plus ``skip`` (channels, H) times u when
        given: the D u of S4 eq. (1)), new x (written into ``out`` when given; ``out=x`` steps in place). The
        'triton' backend runs the fused step (ssm_core.ops.step_triton)."""
        if self._step is None:
            self.setup_step()
        da, db, c = self._step
        if resolve_backend(self.backend, x.device) == "triton":
            from ..ops.step_triton import diag_step

            return diag_step(x, u, da, db, c, out=out, skip=skip)
        x = da * x + db * u.to(x.dtype)[..., None]
        y = 2 * torch.einsum("chn,bhn->bch", c, x).real
        if skip is not None:
            y = y + skip * u[:, None, :]
        return y, (x if out is None else out.copy_(x))
