"""Each state matrix initialization against its equation in the S4D paper, written out entry by entry."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ssm_core.hippo import B_CLIP, dplr, hippo_legs, nplr
from ssm_core.inits import (DIAGONAL_INITS, diagonal_init, s4d_inv, s4d_inv2, s4d_legs, s4d_legs_b,
                            s4d_lin, s4d_quad, s4d_real)

SIZES = [2, 8, 64]


def legs_eq4(n: int) -> tuple[np.ndarray, np.ndarray]:
    """S4D eq. 4, by the cases of the equation."""
    a = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            if i > k:
                a[i, k] = -math.sqrt(2 * i + 1) * math.sqrt(2 * k + 1)
            elif i == k:
                a[i, k] = -(i + 1)
    return a, np.array([math.sqrt(2 * i + 1) for i in range(n)])


def normal_eq5(n: int) -> np.ndarray:
    """S4D eq. 5: A^(N)_nk = -(n+1/2)^1/2 (k+1/2)^1/2 (n > k), -1/2 (n = k), +(n+1/2)^1/2 (k+1/2)^1/2 (n < k)."""
    a = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            r = math.sqrt(i + 0.5) * math.sqrt(k + 0.5)
            a[i, k] = -r if i > k else (-0.5 if i == k else r)
    return a


@pytest.mark.parametrize("n", SIZES)
def test_hippo_legs_is_eq4(n: int) -> None:
    a, b = hippo_legs(n)
    a_ref, b_ref = legs_eq4(n)
    np.testing.assert_allclose(a, a_ref, rtol=1e-14, atol=0)
    np.testing.assert_allclose(b, b_ref, rtol=1e-14)


@pytest.mark.parametrize("n", SIZES)
def test_normal_part_is_eq5_and_a_plus_ppt(n: int) -> None:
    a_normal, p, b = nplr("legs", n)
    np.testing.assert_allclose(a_normal, normal_eq5(n), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(p[0], [math.sqrt(i + 0.5) for i in range(n)], rtol=1e-14)
    # A^(N) = A + P P^T (S4D eq. 5 and Fig. 4's caption)
    np.testing.assert_allclose(a_normal, legs_eq4(n)[0] + np.outer(p[0], p[0]), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(b, legs_eq4(n)[1])


@pytest.mark.parametrize("n", [8, 64])
def test_s4d_legs_is_the_spectrum_of_eq5(n: int) -> None:
    """S4D-LegS = diagonalization of A^(N) (Section 4); Proposition 4: Re = -1/2; one of each conjugate pair."""
    lam = s4d_legs(n)
    eig = np.linalg.eigvals(normal_eq5(n))
    upper = np.sort(eig[eig.imag > 0].imag)[::-1]
    assert lam.shape == (n // 2,)
    np.testing.assert_allclose(lam.imag, upper, rtol=1e-10)
    np.testing.assert_allclose(lam.real, -0.5, atol=1e-12)
    assert np.all(np.diff(lam.imag) < 0)


def test_dplr_form_reconstructs_hippo_legs() -> None:
    """A = V (Lambda - P~ P~^*) V^* over both conjugate halves equals eq. 4 (S4D Section 2, 'S4')."""
    n = 16
    form = dplr("legs", n)
    v = np.concatenate([form.v, form.v.conj()], axis=1)  # (N, N) unitary
    lam = np.concatenate([form.lam, form.lam.conj()])
    p = np.concatenate([form.p, form.p.conj()], axis=1)  # (1, N)
    np.testing.assert_allclose(v.conj().T @ v, np.eye(n), atol=1e-12)
    a = v @ (np.diag(lam) - p.T @ p.conj()) @ v.conj().T
    np.testing.assert_allclose(a.real, legs_eq4(n)[0], atol=1e-11)
    np.testing.assert_allclose(a.imag, 0, atol=1e-11)


@pytest.mark.parametrize("n", SIZES)
def test_s4d_inv_is_eq8(n: int) -> None:
    ref = [-0.5 + 1j * n / math.pi * (n / (2 * k + 1) - 1) for k in range(n // 2)]
    np.testing.assert_allclose(s4d_inv(n), ref, rtol=1e-14)


@pytest.mark.parametrize("n", SIZES)
def test_s4d_lin_is_eq9(n: int) -> None:
    np.testing.assert_allclose(s4d_lin(n), [-0.5 + 1j * math.pi * k for k in range(n // 2)], rtol=1e-14)


@pytest.mark.parametrize("n", SIZES)
def test_s4d_inv2_is_eq12(n: int) -> None:
    ref = [-0.5 + 1j * n / math.pi * (n / (k + 1) - 1) for k in range(n // 2)]
    np.testing.assert_allclose(s4d_inv2(n), ref, rtol=1e-14)


@pytest.mark.parametrize("n", SIZES)
def test_s4d_quad_is_eq13(n: int) -> None:
    """Eq. 13 with the real part -1/2 stated in Section 5.2 ('Both S4D-Inv2 and S4D-Quad have real part -1/2')."""
    np.testing.assert_allclose(s4d_quad(n), [-0.5 + 1j * (1 + 2 * k) ** 2 / math.pi for k in range(n // 2)],
                               rtol=1e-14)


@pytest.mark.parametrize("n", SIZES)
def test_s4d_real(n: int) -> None:
    """S4D-Real (Section 5.2): A_n = -(n+1), the spectrum of HiPPO-LegS (the diagonal of eq. 4)."""
    lam = s4d_real(n)
    np.testing.assert_array_equal(lam, [-(k + 1) for k in range(n // 2)])
    np.testing.assert_array_equal(lam.real, np.diag(legs_eq4(n)[0])[: n // 2])


def test_inv2_and_quad_share_the_top_of_conjecture5() -> None:
    """Section 5.2: S4D-Inv2 and S4D-Quad have imaginary parts 'satisfying the same maximum value as Conjecture 5'."""
    n = 64
    inv2_top = s4d_inv2(n).imag.max()
    assert inv2_top == pytest.approx(n / math.pi * (n - 1))  # N^2/pi - N/pi, as S4D-Inv
    assert s4d_quad(n).imag.max() == pytest.approx((n - 1) ** 2 / math.pi)  # (1 + 2(N/2 - 1))^2 / pi


@pytest.mark.parametrize("name,law", [("inv", s4d_inv), ("lin", s4d_lin)])
def test_equally_spaced_nodes_recover_eq8_eq9(name: str, law) -> None:
    """Eq. 10 / 11 with u equally spaced (the nodes 0, 1, ..., N/2 - 1) are eq. 8 / 9."""
    n = 32
    np.testing.assert_allclose(law(n, np.arange(n // 2, dtype=np.float64)), law(n), rtol=1e-15)


@pytest.mark.parametrize("name,law", [("inv", s4d_inv), ("lin", s4d_lin)])
def test_random_imag_draws_nodes_in_the_range_of_n(name: str, law) -> None:
    """Table 3a 'Random Imag' (eq. 10, 11): the law at u ~ (N/2) U[0, 1], real part kept at -1/2."""
    n = 64
    lam, b = diagonal_init(name, n, random_imag=True, seed=3)
    again, _ = diagonal_init(name, n, random_imag=True, seed=3)
    other, _ = diagonal_init(name, n, random_imag=True, seed=4)
    np.testing.assert_array_equal(lam, again)
    assert not np.allclose(lam, other)
    np.testing.assert_allclose(lam.real, -0.5)
    ends = law(n, np.array([0.0, n / 2]))  # the law at u = 0 and u = N/2
    lo, hi = np.sort(ends.imag)
    assert np.all((lam.imag >= lo) & (lam.imag <= hi))
    assert not np.allclose(np.sort(lam.imag), np.sort(law(n).imag))  # not the equally spaced init
    np.testing.assert_array_equal(b, np.ones(n // 2))


@pytest.mark.parametrize("scale", [0.01, 100.0])
@pytest.mark.parametrize("name", ["inv", "lin", "legs"])
def test_imag_scale_multiplies_imaginary_parts_only(name: str, scale: float) -> None:
    """Table 3a 'Scale 0.01' / 'Scale 100'."""
    base, _ = diagonal_init(name, 32)
    lam, _ = diagonal_init(name, 32, imag_scale=scale)
    np.testing.assert_allclose(lam.imag, scale * base.imag, rtol=1e-14)
    np.testing.assert_array_equal(lam.real, base.real)


def test_random_real_is_minus_uniform() -> None:
    """Table 3a 'Random Real': Re(A_n) = -U[0, 1], imaginary parts unchanged; 'Random Both' combines the two."""
    base, _ = diagonal_init("inv", 64)
    lam, _ = diagonal_init("inv", 64, random_real=True, seed=0)
    assert np.all((lam.real <= 0) & (lam.real >= -1)) and np.std(lam.real) > 0.1
    np.testing.assert_array_equal(lam.imag, base.imag)
    both, _ = diagonal_init("inv", 64, random_real=True, random_imag=True, seed=0)
    assert not np.allclose(both.imag, base.imag) and np.all(both.real <= 0)


def test_rand_is_seeded_and_stable() -> None:
    lam, _ = diagonal_init("rand", 64, seed=1)
    np.testing.assert_array_equal(lam, diagonal_init("rand", 64, seed=1)[0])
    assert np.all(lam.real < 0)


@pytest.mark.parametrize("name", [i for i in DIAGONAL_INITS if i != "legs"])
def test_every_init_but_legs_has_b_one_and_half_the_state(name: str) -> None:
    """N/2 complex modes stand for N real states (Section 3.3); B = 1 (Section 3.3, 'B (set to 1)')."""
    lam, b = diagonal_init(name, 16, seed=0)
    assert lam.shape == b.shape == (8,) and lam.dtype == np.complex128
    np.testing.assert_array_equal(b, 1)


def _eig_eq5_upper(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues with Im > 0 of the dense eq. 5 matrix, largest Im first, and their unit eigenvectors with
    the first entry real and positive: (n/2,), (n, n/2). By np.linalg.eig, independent of ssm_core.hippo."""
    w, v = np.linalg.eig(normal_eq5(n))
    keep = np.flatnonzero(w.imag > 0)
    keep = keep[np.argsort(-w.imag[keep])]
    w, v = w[keep], v[:, keep] / np.linalg.norm(v[:, keep], axis=0)
    return w, v * (np.abs(v[0]) / v[0])[None, :]


@pytest.mark.parametrize("n", SIZES + [256])
def test_s4d_legs_b_is_eq4_b_projected_on_the_eigenvectors_of_eq5(n: int) -> None:
    """S4D-LegS: B_n = v_n^* B (B of eq. 4, v_n the eigenvector of eq. 5 for Lambda_n), then Im clipped to +-2."""
    w, v = _eig_eq5_upper(n)
    lam, b = diagonal_init("legs", n)
    np.testing.assert_allclose(lam, w, rtol=1e-10)
    projected = v.conj().T @ legs_eq4(n)[1]  # (n/2,)
    scale = np.abs(projected).max()
    np.testing.assert_allclose(s4d_legs_b(n, clip=None), projected, rtol=0, atol=1e-11 * scale)
    inside = np.abs(projected.imag) <= B_CLIP - 1e-6
    np.testing.assert_allclose(b[inside], projected[inside], rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(b.real, projected.real, rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(b.imag[~inside], B_CLIP * np.sign(projected.imag[~inside]), rtol=1e-12)
    if n >= 64:  # the clip acts at the sizes the experiments use (B_0 ~ N/sqrt(pi) before clipping)
        assert (~inside).sum() >= n // 8
    # the ablations of Table 3a keep the projected B
    np.testing.assert_array_equal(diagonal_init("legs", n, imag_scale=100.0)[1], b)


def test_s4d_legs_b_clip_is_checked() -> None:
    with pytest.raises(ValueError, match="legs_b_clip must be a number > 0 or None"):
        diagonal_init("legs", 8, legs_b_clip=0.0)


def test_bad_arguments_are_reported() -> None:
    with pytest.raises(ValueError, match="even"):
        diagonal_init("inv", 7)
    with pytest.raises(ValueError, match="unknown diagonal init"):
        diagonal_init("nope", 8)
    with pytest.raises(ValueError, match="random_imag"):
        diagonal_init("legs", 8, random_imag=True)


def test_dss_keeps_b_one_while_s4d_legs_projects_it() -> None:
    """DSS learns W = B o C from a random C (B = 1, frozen); S4D-LegS starts from the projected HiPPO B."""
    import torch

    from ssm_core import SSMLayer
    from ssm_core.kernels.params import as_complex

    dss = SSMLayer(d_model=2, d_state=16, mode="dss", init="legs").kernel
    s4d = SSMLayer(d_model=2, d_state=16, mode="s4d", init="legs").kernel
    assert torch.equal(as_complex(dss.b), torch.ones_like(as_complex(dss.b)))
    assert not dss.b.requires_grad
    assert not torch.allclose(as_complex(s4d.b), torch.ones_like(as_complex(s4d.b)))
    with pytest.raises(ValueError, match="legs_b"):
        diagonal_init("legs", 16, legs_b="random")
