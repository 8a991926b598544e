"""HiPPO state matrices and their normal-plus-low-rank (NPLR) / DPLR forms.

References: S4D paper eq. (4) (HiPPO-LegS), eq. (5) (the normal part A^(N) and P), Theorem 3;
"How to Train Your HiPPO" for LegT and FouT (S4D Appendix A, Fig. 5). Everything here is
float64 numpy: these are initializations, computed once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MEASURES = ("legs", "legt", "fout")


def hippo_legs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """HiPPO-LegS (S4D eq. 4): A_nk = -sqrt(2n+1) sqrt(2k+1) (n > k), -(n+1) (n = k), 0 (n < k); B_n = sqrt(2n+1).

    Returns A (n, n), B (n,).
    """
    r = np.sqrt(2 * np.arange(n, dtype=np.float64) + 1)  # (n,)
    a = -np.tril(r[:, None] * r[None, :], k=-1) - np.diag(np.arange(n, dtype=np.float64) + 1)
    return a, r.copy()


def hippo_legt(n: int) -> tuple[np.ndarray, np.ndarray]:
    """HiPPO-LegT (translated Legendre; measure on a sliding window), with the timescale halved as in S4.

    A_nk = -1/2 sqrt(2n+1) sqrt(2k+1) * (1 if n >= k else (-1)^(n-k)); B_n = 1/2 sqrt(2n+1).
    """
    r = np.sqrt(2 * np.arange(n, dtype=np.float64) + 1)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    sign = np.where(i >= j, 1.0, (-1.0) ** (i - j))
    return -0.5 * r[:, None] * sign * r[None, :], 0.5 * r


def hippo_fout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """HiPPO-FouT (truncated Fourier basis; S4D Fig. 5a): A = pi * J - B B^T, J skew with frequencies k.

    State pairs (2k, 2k+1) hold cos / sin of frequency k; B = (1, 0, sqrt2, 0, sqrt2, 0, ...). The basis
    e^{tA} B is a truncated Fourier series that vanishes after t = 2 (checked in tests).
    """
    if n % 2:
        raise ValueError(f"hippo_fout: state size must be even, got {n}")
    freqs = np.arange(n // 2, dtype=np.float64)
    d = np.stack([np.zeros(n // 2), freqs], axis=-1).reshape(-1)[1:]  # (n-1,) couplings on the off-diagonals
    b = np.zeros(n)
    b[0::2] = np.sqrt(2.0)
    b[0] = 1.0
    a = np.pi * (-np.diag(d, 1) + np.diag(d, -1)) - b[:, None] * b[None, :]
    return a, b


def hippo(measure: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of the named HiPPO measure ('legs', 'legt', 'fout')."""
    table = {"legs": hippo_legs, "legt": hippo_legt, "fout": hippo_fout}
    if measure not in table:
        raise ValueError(f"unknown HiPPO measure {measure!r}; allowed: {', '.join(MEASURES)}")
    return table[measure](n)


def low_rank_correction(measure: str, n: int) -> np.ndarray:
    """P (rank, n) with A = A_normal - P^T P and A_normal normal (S4D eq. 5).

    LegS: P_n = sqrt(n + 1/2) (rank 1). LegT: rank 2, the even / odd entries of sqrt(2n+1) / sqrt2 (this
    cancels the symmetric part). FouT: P = B (rank 1).
    """
    if measure == "legs":
        return np.sqrt(np.arange(n, dtype=np.float64) + 0.5)[None, :]
    if measure == "legt":
        r = np.sqrt(2 * np.arange(n, dtype=np.float64) + 1)
        p0, p1 = r.copy(), r.copy()
        p0[1::2] = 0.0
        p1[0::2] = 0.0
        return np.stack([p0, p1]) * np.sqrt(0.5)
    if measure == "fout":
        return hippo_fout(n)[1][None, :]
    raise ValueError(f"unknown HiPPO measure {measure!r}; allowed: {', '.join(MEASURES)}")


def nplr(measure: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normal plus low rank form A = A_normal - P^T P (S4D eq. 5 for LegS: A_normal = A^(N)).

    Returns A_normal (n, n), P (rank, n), B (n,).
    """
    a, b = hippo(measure, n)
    p = low_rank_correction(measure, n)
    return a + p.T @ p, p, b


#: bound on |Im B_n| of the projected HiPPO B at init (the authors' code clips V^* B so by default; the papers are
#: silent) -- used by S4's DPLR init and S4D-LegS
B_CLIP = 2.0


def clip_imag(b: np.ndarray, clip: float | None, name: str = "b_clip") -> np.ndarray:
    """b (any shape, complex) with its imaginary parts clipped to [-clip, clip]; ``clip=None``: b unchanged.

    ``name`` is the caller's argument, named in the error for a bad ``clip``.
    """
    if clip is None:
        return b
    if not clip > 0:
        raise ValueError(f"{name} must be a number > 0 or None, got {clip!r}")
    return b.real + 1j * np.clip(b.imag, -clip, clip)


@dataclass
class DPLR:
    """A = V (Lambda - P~ P~^*) V^* restricted to one half of each conjugate pair.

    lam: (n/2,) complex eigenvalues of A_normal (imaginary part >= 0, decreasing);
    p: (rank, n/2) complex, V^* P; b: (n/2,) complex, V^* B; v: (n, n/2) complex eigenvectors.
    The other half of the state is the complex conjugate of this one (S4D Section 3.3, conjugate symmetry).
    """

    lam: np.ndarray
    p: np.ndarray
    b: np.ndarray
    v: np.ndarray


def dplr(measure: str, n: int) -> DPLR:
    """Diagonalize the normal part of the NPLR form unitarily and keep one of each conjugate pair.

    A_normal = c I + S with S skew-symmetric (checked); i S is Hermitian, so eigh gives a unitary V.
    Eigenvalues of a real skew matrix come in pairs +-i w; an eigenvalue 0 occurs twice with real
    eigenvectors u1, u2, which are recombined into the conjugate pair (u1 -+ i u2)/sqrt2.
    """
    if n % 2:
        raise ValueError(f"dplr: state size must be even (conjugate pairs), got {n}")
    a_normal, p, b = nplr(measure, n)
    sym = (a_normal + a_normal.T) / 2
    c = float(np.mean(np.diag(sym)))
    if not np.allclose(sym, c * np.eye(n), atol=1e-8):
        raise ValueError(f"dplr: the normal part of {measure} is not (c I + skew); symmetric residue "
                         f"{np.abs(sym - c * np.eye(n)).max():.2e}")
    skew = a_normal - sym
    w, vecs = np.linalg.eigh(1j * skew)  # i S = V diag(w) V^*  =>  S = V diag(-i w) V^*
    lam_all = c - 1j * w  # (n,)
    order = np.argsort(-lam_all.imag, kind="stable")
    lam_all, vecs = lam_all[order], vecs[:, order]
    half = n // 2
    zero = np.abs(lam_all.imag) < 1e-9
    if zero.sum() not in (0, 2):
        raise ValueError(f"dplr: {zero.sum()} zero-frequency modes in {measure}; expected 0 or 2")
    if zero.sum() == 2:
        idx = np.flatnonzero(zero)
        # a real orthonormal basis of the (real) null space of S, then the conjugate pair built from it
        parts = np.concatenate([vecs[:, idx].real, vecs[:, idx].imag], axis=1)  # (n, 4), rank 2
        u = np.linalg.svd(parts, full_matrices=False)[0][:, :2]
        vecs[:, idx[0]] = (u[:, 0] - 1j * u[:, 1]) / np.sqrt(2)
        vecs[:, idx[1]] = (u[:, 0] + 1j * u[:, 1]) / np.sqrt(2)
    v = vecs[:, :half]  # (n, n/2)
    # phase of each eigenvector: first entry real and positive where it is non-zero (LAPACK's eigh gives it real;
    # the DPLR system does not depend on the phase, but clipping B does -- see ssm_core.kernels.dplr)
    first = v[0]
    v = v * np.where(np.abs(first) > 1e-12, np.abs(first) / np.where(first == 0, 1, first), 1)[None, :]
    lam = lam_all[:half]
    return DPLR(lam=lam, p=p @ v.conj(), b=v.conj().T @ b, v=v)
