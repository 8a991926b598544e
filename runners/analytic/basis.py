"""SSM basis functions K(t) = e^{tA} B (S4D eq. 3) for the analytic tables, in float64 numpy.

Two kinds of state matrix appear:
  dense  any (A, B); the basis on a uniform time grid by stepping with expm(h A) (scipy), and the discrete
         kernels dA^l dB of S4D eq. 6 (bilinear or ZOH, S4D Section 3.1) by repeated multiplication;
  modal  a diagonal SSM given by its N/2 eigenvalues lam and coefficients coef[n, j] such that
         K_n(t) = Re sum_j coef[n, j] e^{t lam_j}  (the other half of each conjugate pair is implicit).
The HiPPO-LegS basis K_n, n < m, depends only on the leading m x m block of A (eq. 4 is lower triangular),
so the S4-LegS basis is computed once at size m whatever the state size N.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.special import eval_legendre

from ssm_core.hippo import dplr, hippo_legs

DISCRETIZATIONS = ("bilinear", "zoh")


def uniform_grid(t_max: float, points: int) -> np.ndarray:
    """t_0 = 0 < ... < t_{points-1} = t_max. -> (G,)"""
    if not (t_max > 0 and points >= 2):
        raise ValueError(f"time grid needs t_max > 0 and points >= 2, got t_max={t_max}, points={points}")
    return np.linspace(0.0, t_max, points)


def dense_basis(a: np.ndarray, b: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """e^{t A} B on a uniform grid ts (starting at 0) by stepping x <- expm(h A) x. a (n, n), b (n,) -> (G, n)."""
    h = ts[1] - ts[0]
    step = sla.expm(h * a)  # (n, n)
    out = np.empty((len(ts), len(b)))
    x = np.asarray(b, dtype=np.float64).copy()
    for i in range(len(ts)):
        out[i] = x
        x = step @ x
    return out


def dense_basis_integral(a: np.ndarray, b: np.ndarray, k: np.ndarray) -> np.ndarray:
    """int_0^t e^{sA} B ds = A^{-1} (e^{tA} - I) B from the basis values k (G, n) -> (G, n)."""
    return np.linalg.solve(a, (k - b[None, :]).T).T


def dense_discrete(a: np.ndarray, b: np.ndarray, dt: float, length: int, method: str) -> np.ndarray:
    """Discrete kernel dA^l dB, l < length (S4D eq. 6), divided by dt so it is on the scale of K(l dt).

    bilinear: dA = (I - dt/2 A)^-1 (I + dt/2 A), dB = (I - dt/2 A)^-1 dt B;  zoh: dA = exp(dt A),
    dB = A^-1 (exp(dt A) - I) B (S4D Section 3.1).  a (n, n), b (n,) -> (length, n)
    """
    eye = np.eye(len(b))
    if method == "bilinear":
        inv = np.linalg.inv(eye - dt / 2 * a)
        da, db = inv @ (eye + dt / 2 * a), inv @ (dt * b)
    elif method == "zoh":
        da = sla.expm(dt * a)
        db = np.linalg.solve(a, (da - eye) @ b)
    else:
        raise ValueError(f"discretization {method!r} not allowed; choose one of {DISCRETIZATIONS}")
    out = np.empty((length, len(b)))
    x = db
    for i in range(length):
        out[i] = x
        x = da @ x
    return out / dt


def modal_basis(lam: np.ndarray, coef: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """K_n(t) = Re sum_j coef[n, j] e^{t lam_j}. lam (J,), coef (n, J), ts (G,) -> (G, n)"""
    return (np.exp(ts[:, None] * lam[None, :]) @ coef.T).real


def modal_basis_integral(lam: np.ndarray, coef: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """int_0^t K_n(s) ds = Re sum_j coef[n, j] (e^{t lam_j} - 1) / lam_j. -> (G, n)"""
    return ((np.expm1(ts[:, None] * lam[None, :]) / lam[None, :]) @ coef.T).real


def modal_discrete(lam: np.ndarray, coef: np.ndarray, dt: float, length: int, method: str) -> np.ndarray:
    """The discrete kernel of the diagonal SSM (S4D eq. 6-7), divided by dt. -> (length, n)"""
    if method == "bilinear":
        log_da = np.log1p(dt * lam / 2) - np.log1p(-dt * lam / 2)
        db = dt / (1 - dt * lam / 2)
    elif method == "zoh":
        log_da = dt * lam
        db = np.expm1(dt * lam) / lam
    else:
        raise ValueError(f"discretization {method!r} not allowed; choose one of {DISCRETIZATIONS}")
    powers = np.exp(np.arange(length)[:, None] * log_da[None, :])  # (length, J): dA^l
    return ((powers * db[None, :]) @ coef.T).real / dt


def s4d_legs_modes(n: int, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Modes of (A^(N), B/2): the normal part of HiPPO-LegS (S4D eq. 5) with half of B (Theorem 3).

    A^(N) = V diag(Lambda) V^* (unitary, ssm_core.hippo.dplr); with both halves of each conjugate pair,
    e^{t A^(N)} B/2 = 2 Re[v e^{t lam} v^* B] / 2, so coef = v * (v^* B) over the stored half.
    Returns lam (N/2,) and coef (rows, N/2) for the first ``rows`` basis functions (default all N).
    """
    form = dplr("legs", n)
    v = form.v if rows is None else form.v[:rows]
    return form.lam, v * form.b[None, :]


def legs_basis(m: int, ts: np.ndarray) -> np.ndarray:
    """S4-LegS basis K_n(t) = e_n^T e^{tA} B, n < m, for HiPPO-LegS (S4D eq. 4), by expm. -> (G, m)"""
    a, b = hippo_legs(m)
    return dense_basis(a, b, ts)


def legendre_formula(m: int, ts: np.ndarray) -> np.ndarray:
    """L_n(e^{-t}) e^{-t}, n < m (S4D Theorem 6): L_n the shifted Legendre polynomials orthonormal on [0, 1],
    L_n(s) = sqrt(2n+1) P_n(2s - 1). -> (G, m)"""
    s = np.exp(-ts)  # (G,)
    k = np.arange(m)
    return np.sqrt(2 * k + 1)[None, :] * eval_legendre(k[None, :], 2 * s[:, None] - 1) * s[:, None]


def rel_max_error(x: np.ndarray, ref: np.ndarray) -> float:
    """max |x - ref| / max |ref| (the relative sup-norm error used by every analytic table)."""
    return float(np.abs(x - ref).max() / np.abs(ref).max())


def to_json(values: np.ndarray, digits: int = 6) -> list:
    """Nested lists of floats rounded to ``digits`` significant digits, non-finite values as None (plot data)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        return float(f"{arr:.{digits}g}") if np.isfinite(arr) else None  # type: ignore[return-value]
    return [to_json(v, digits) for v in arr]


def thin(values: np.ndarray, max_points: int) -> np.ndarray:
    """Every k-th row so that at most ``max_points`` rows remain (for the plot data in the results JSON)."""
    step = max(1, int(np.ceil(len(values) / max_points)))
    return values[::step]
