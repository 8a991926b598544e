"""Diagonal initializations of the state matrix (S4D Section 4, Section 5.2, Table 3a).

Every initializer returns (lam, b): the N/2 complex eigenvalues that stand for a real state of size N
(the other half are their conjugates, S4D Section 3.3) and the matching B.
"""
from __future__ import annotations

import numpy as np

from .hippo import B_CLIP, clip_imag, dplr

#: B of the 'legs' init: the projected HiPPO B (S4D-LegS, the authors' code) or ones (DSS, whose W = B o C is learned
#: from a random C: its B is 1)
LEGS_B = ("projected", "ones")
DIAGONAL_INITS = ("legs", "inv", "lin", "inv2", "quad", "rand", "real")


def _check_state_size(n: int) -> int:
    if n < 2 or n % 2:
        raise ValueError(f"state size N must be an even integer >= 2 (N/2 conjugate pairs), got {n}")
    return n // 2


def s4d_legs(n: int) -> np.ndarray:
    """S4D-LegS / HiPPO-D: the eigenvalues of A^(N), the normal part of HiPPO-LegS (S4D eq. 5, Theorem 3)."""
    return dplr("legs", n).lam


def s4d_legs_b(n: int, clip: float | None = B_CLIP) -> np.ndarray:
    """B of S4D-LegS: the HiPPO-LegS B (S4D eq. 4) in the eigenbasis of A^(N) (eq. 5), B_n = (V^* B)_n.

    -> (n/2,) complex128, matching the eigenvalues of :func:`s4d_legs` (same order).

    The paper fixes B = 1 for S4D in general (Section 3.3) but also states that base S4D "would be exactly
    the same as masking out the low-rank component of S4's DPLR representation" (Section 3.4), which for
    LegS means S4's B in the eigenbasis, V^* B. It is silent on the scale and on clipping; we follow the
    authors' code: V^* B without the factor 1/2 of Theorem 3 (K_{A^(N), B/2} -> K_{A, B}), and the imaginary
    part of each entry clipped to [-clip, clip] (``clip=None``: no clipping; then the diagonal system is
    unitarily equivalent to (A^(N), B)). S4's DPLR init clips its B the same way (:mod:`ssm_core.kernels.dplr`),
    so S4D-LegS is S4-LegS with the low-rank term masked out, clipped or not. Clipping depends on the phase of
    each eigenvector; :func:`ssm_core.hippo.dplr` makes the first entry real and positive (LAPACK's
    convention in the authors' code up to sign; the clipped value does not depend on that sign).
    """
    return clip_imag(dplr("legs", n).b, clip, "legs_b_clip").astype(np.complex128)


def s4d_inv(n: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """S4D-Inv (S4D eq. 8): A_n = -1/2 + i N/pi (N / (2n+1) - 1). ``nodes`` replaces n (eq. 10)."""
    k = np.arange(_check_state_size(n), dtype=np.float64) if nodes is None else nodes
    return -0.5 + 1j * n / np.pi * (n / (2 * k + 1) - 1)


def s4d_lin(n: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """S4D-Lin (S4D eq. 9): A_n = -1/2 + i pi n. ``nodes`` replaces n (eq. 11)."""
    k = np.arange(_check_state_size(n), dtype=np.float64) if nodes is None else nodes
    return -0.5 + 1j * np.pi * k


def s4d_inv2(n: int) -> np.ndarray:
    """S4D-Inv2 (S4D eq. 12): A_n = -1/2 + i N/pi (N / (n+1) - 1)."""
    k = np.arange(_check_state_size(n), dtype=np.float64)
    return -0.5 + 1j * n / np.pi * (n / (k + 1) - 1)


def s4d_quad(n: int) -> np.ndarray:
    """S4D-Quad (S4D eq. 13): real part -1/2, imaginary part (1 + 2n)^2 / pi."""
    k = np.arange(_check_state_size(n), dtype=np.float64)
    return -0.5 + 1j * (1 + 2 * k) ** 2 / np.pi


def s4d_real(n: int) -> np.ndarray:
    """S4D-Real (S4D Section 5.2): A_n = -(n+1), the spectrum of HiPPO-LegS, with no imaginary part."""
    k = np.arange(_check_state_size(n), dtype=np.float64)
    return -(k + 1) + 0j


def s4d_rand(n: int, rng: np.random.Generator) -> np.ndarray:
    """S4D-Rand (S4D Section 5.2): a randomly initialized diagonal A.

    The paper gives no formula; we follow the random diagonal initialization of the authors' S4 code base:
    Re(A_n) = -1/2 and Im(A_n) = exp(g), g ~ N(0, 1) -- random frequencies that follow no law.
    """
    half = _check_state_size(n)
    return -0.5 + 1j * np.exp(rng.standard_normal(half))


def diagonal_init(name: str, n: int, *, imag_scale: float = 1.0, random_imag: bool = False,
                  random_real: bool = False, seed: int | None = None,
                  legs_b_clip: float | None = B_CLIP, legs_b: str = "projected") -> tuple[np.ndarray, np.ndarray]:
    """(lam (N/2,) complex128, b (N/2,) complex128) for the named S4D initialization.

    Ablations of S4D Table 3a:
      imag_scale   multiply all imaginary parts by a constant (0.01 or 100 in the paper);
      random_imag  replace the equally spaced nodes n of S4D-Inv / S4D-Lin by u ~ (N/2) U[0, 1] (eq. 10, 11;
                   the paper writes N U[0,1]; (N/2) U[0,1] is the range of n, so equal spacing recovers eq. 8/9);
      random_real  real parts -U[0, 1] instead of -1/2.
    B is all ones (S4D Section 3.3: "B (set to 1)"), except for 'legs': the HiPPO-LegS B projected on the
    eigenvectors of A^(N), imaginary parts clipped to [-legs_b_clip, legs_b_clip] (:func:`s4d_legs_b`; the
    authors' code; None: no clipping), also under the ablations above; ``legs_b='ones'`` gives 'legs' B = 1 too
    (DSS, which learns W = B o C from a random C; SSMLayer(mode='dss') asks for it).
    A zero frequency is kept exactly 0 (S4D-Lin's n = 0, eq. 9; S4D-Real, Section 5.2): the authors' code
    raises |Im A_n| to 1e-4 when it registers the parameters, a detail the paper's equations do not have.
    """
    if name not in DIAGONAL_INITS:
        raise ValueError(f"unknown diagonal init {name!r}; allowed: {', '.join(DIAGONAL_INITS)}")
    half = _check_state_size(n)
    rng = np.random.default_rng(seed)
    if random_imag:
        if name not in ("inv", "lin"):
            raise ValueError(f"random_imag applies to the 'inv' and 'lin' inits (S4D eq. 10, 11), not {name!r}")
        nodes = np.sort(half * rng.uniform(0.0, 1.0, size=half))
        lam = s4d_inv(n, nodes) if name == "inv" else s4d_lin(n, nodes)
    elif name == "rand":
        lam = s4d_rand(n, rng)
    else:
        lam = {"legs": s4d_legs, "inv": s4d_inv, "lin": s4d_lin, "inv2": s4d_inv2, "quad": s4d_quad,
               "real": s4d_real}[name](n)
    lam = lam.real + 1j * imag_scale * lam.imag
    if random_real:
        lam = -rng.uniform(0.0, 1.0, size=half) + 1j * lam.imag
    if legs_b not in LEGS_B:
        raise ValueError(f"legs_b={legs_b!r} not allowed; choose one of {list(LEGS_B)}")
    projected = name == "legs" and legs_b == "projected"
    b = s4d_legs_b(n, legs_b_clip) if projected else np.ones(half, dtype=np.complex128)
    return lam.astype(np.complex128), b
