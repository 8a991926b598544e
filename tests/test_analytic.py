"""The analytic runners (S4D Theorem 3, Conjecture 5, Theorem 6, Figure 4, Proposition 1) at their smoke config,
their plots, and the basis helpers they rest on, each against an independent float64 computation."""
from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla
import torch
import yaml
from scipy.integrate import cumulative_trapezoid

from runners.analytic import basis, conjecture5, figure4, proposition1, theorem3, theorem6
from runners.specs.registry import PLOTS, RunContext, RunOutput, get
from ssm_core.hippo import hippo_legs, nplr

SPECS = Path(__file__).resolve().parents[1] / "reproductions"
RUNNERS = {
    "s4d-theorem-3": (theorem3.run_theorem3, theorem3.Theorem3Config),
    "s4d-conjecture-5": (conjecture5.run_conjecture5, conjecture5.Conjecture5Config),
    "s4d-theorem-6": (theorem6.run_theorem6, theorem6.Theorem6Config),
    "s4d-figure-4": (figure4.run_figure4, figure4.Figure4Config),
    "s4d-proposition-1": (proposition1.run_proposition1, proposition1.Proposition1Config),
}


def smoke_config(spec: str):
    """The dataclass of the spec's smoke tier (framework keys device / seed dropped)."""
    tier = yaml.safe_load((SPECS / f"{spec}.yaml").read_text())["tiers"]["smoke"]
    cls = RUNNERS[spec][1]
    return cls(**{k: v for k, v in tier.items() if k not in ("device", "seed")})


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunOutput]:
    tmp = tmp_path_factory.mktemp("analytic")
    ctx = RunContext(spec_id="test", tier="smoke", device=torch.device("cpu"), seed=0, work_dir=tmp, data_dir=tmp,
                     progress=False)
    return {spec: fn(smoke_config(spec), ctx) for spec, (fn, _) in RUNNERS.items()}


def cells(out: RunOutput) -> dict[tuple[str, str], object]:
    return {(c.row, c.column): c.value for c in out.cells}


# ------------------------------------------------------------------------------------------- basis helpers


def test_modal_basis_of_normal_hippo_equals_expm() -> None:
    """(A^(N), B/2) through the unitary eigendecomposition equals expm of the dense eq.-5 matrix."""
    n = 16
    a_normal, _, b = nplr("legs", n)
    ts = basis.uniform_grid(3.0, 301)
    lam, coef = basis.s4d_legs_modes(n)
    dense = np.stack([sla.expm(t * a_normal) @ (b / 2) for t in ts[::30]])
    np.testing.assert_allclose(basis.modal_basis(lam, coef, ts[::30]), dense, atol=1e-11)
    np.testing.assert_allclose(basis.dense_basis(a_normal, b / 2, ts)[::30], dense, atol=1e-11)


def test_basis_integrals_match_quadrature() -> None:
    ts = basis.uniform_grid(2.0, 40001)
    a, b = hippo_legs(6)
    k = basis.dense_basis(a, b, ts)
    np.testing.assert_allclose(basis.dense_basis_integral(a, b, k), cumulative_trapezoid(k, ts, axis=0, initial=0),
                               atol=1e-7)
    lam, coef = basis.s4d_legs_modes(8, rows=4)
    km = basis.modal_basis(lam, coef, ts)
    np.testing.assert_allclose(basis.modal_basis_integral(lam, coef, ts),
                               cumulative_trapezoid(km, ts, axis=0, initial=0), atol=1e-5)


@pytest.mark.parametrize("method", ["bilinear", "zoh"])
def test_modal_discrete_equals_dense_discrete(method: str) -> None:
    """The diagonal discretization (S4D Section 3.1) of (A^(N), B/2) equals the dense one."""
    n, dt, length = 32, 0.05, 60
    a_normal, _, b = nplr("legs", n)
    lam, coef = basis.s4d_legs_modes(n)
    np.testing.assert_allclose(basis.modal_discrete(lam, coef, dt, length, method),
                               basis.dense_discrete(a_normal, b / 2, dt, length, method), atol=1e-10)


def test_legendre_formula_is_orthonormal_under_exp_measure() -> None:
    """Lemma A.1: int_0^inf L_n(e^-t) L_m(e^-t) e^-t dt = delta_nm, i.e. int K_n K_m e^t dt = delta_nm."""
    s, w = np.polynomial.legendre.leggauss(40)
    s, w = (s + 1) / 2, w / 2  # Gauss-Legendre on [0, 1]
    ts = -np.log(s)  # s = e^-t
    k = basis.legendre_formula(12, ts)  # (40, 12): L_n(s) s
    gram = (k / s[:, None]).T @ (w[:, None] * k / s[:, None])  # int_0^1 L_n L_m ds
    np.testing.assert_allclose(gram, np.eye(12), atol=1e-12)


def test_config_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="even"):
        theorem3.Theorem3Config(state_sizes=[16, 33])
    with pytest.raises(ValueError, match="increasing"):
        conjecture5.Conjecture5Config(state_sizes=[64, 16])
    with pytest.raises(ValueError, match="start at 0"):
        figure4.Figure4Config(sigmas=[0.1, 1.0])
    with pytest.raises(ValueError, match="diag_inits: .'nope'. not allowed"):
        proposition1.Proposition1Config(diag_inits=["nope"])


def test_runners_are_registered() -> None:
    for name in ("theorem3", "conjecture5", "theorem6", "figure4", "proposition1"):
        entry = get(f"analytic.{name}")
        assert entry.kind == "analytic" and dataclasses.is_dataclass(entry.config)


# ------------------------------------------------------------------------------------------- runners


def test_theorem3_cells(outputs: dict[str, RunOutput]) -> None:
    c = cells(outputs["s4d-theorem-3"])
    ns = smoke_config("s4d-theorem-3").state_sizes
    weak = [c[("weak error", f"N={n}")] for n in ns]
    assert all(x > y for x, y in itertools.pairwise(weak)), weak  # the weak error falls at every doubling
    assert c[("weak error", "log-log slope")] < -0.5
    assert all(c[("sup error", f"N={n}")] >= 0.5 for n in ns)  # K^D(0) = B/2: no uniform convergence
    top = f"N={ns[-1]}"
    assert c[("bilinear error", top)] < 1e-8 < c[("ZOH error", top)]  # Fig. 2c: bilinear matches exactly
    assert c[("bilinear error", "N=16")] > 0.1
    assert set(c) == {(r, f"N={n}") for r in ("weak error", "sup error", "bilinear error", "ZOH error")
                      for n in ns} | {("weak error", "log-log slope")}


def test_conjecture5_cells(outputs: dict[str, RunOutput]) -> None:
    c = cells(outputs["s4d-conjecture-5"])
    ns = smoke_config("s4d-conjecture-5").state_sizes
    for n in ns:
        col = f"N={n}"
        # measured: Im(A)_0 = N^2/pi - pi/6 + O(N^-2) -- the magnitude of Conjecture 5's c, the opposite sign
        assert c[("Im(A)_0 - N^2/pi", col)] == pytest.approx(-math.pi / 6, abs=1.0 / n ** 2)
        assert c[("max |Re(A) + 1/2|", col)] < 1e-12
        inv = c[("log dist. S4D-Inv", col)]
        assert inv < math.log(math.sqrt(2))
        assert all(c[(f"log dist. {law}", col)] > inv for law in ("S4D-Inv2", "S4D-Lin", "S4D-Quad"))
    rel = [c[("top rel. error", f"N={n}")] for n in ns]
    assert all(x > y for x, y in itertools.pairwise(rel))


def test_theorem6_cells(outputs: dict[str, RunOutput]) -> None:
    c = cells(outputs["s4d-theorem-6"])
    assert len(c) == len(smoke_config("s4d-theorem-6").state_sizes)
    assert all(v < 1e-10 for v in c.values())


def test_theorem6_detects_a_wrong_formula() -> None:
    """The check can fail: the unnormalized Legendre polynomials (no sqrt(2n+1)) are far from e^{tA}B."""
    ts = basis.uniform_grid(5.0, 201)
    k = basis.legs_basis(8, ts)
    wrong = basis.legendre_formula(8, ts) / np.sqrt(2 * np.arange(8) + 1)
    assert basis.rel_max_error(k, wrong) > 0.1


def test_figure4_cells(outputs: dict[str, RunOutput]) -> None:
    c = cells(outputs["s4d-figure-4"])
    assert c[("max Re eig", "sigma=0")] == pytest.approx(-1.0, abs=1e-12)
    assert c[("log10 max |K|", "sigma=0")] == pytest.approx(0.5 * math.log10(2 * 64 - 1), abs=1e-9)
    assert c[("deviation", "sigma=0.01")] < c[("deviation", "sigma=0.1")] < 1 <= c[("deviation", "sigma=1")]
    assert c[("max Re eig", "sigma=1")] > 0
    assert c[("log10 max |K|", "sigma=1")] > c[("log10 max |K|", "sigma=0.1")]
    assert ("deviation", "sigma=0") not in c


def test_proposition1_cells(outputs: dict[str, RunOutput]) -> None:
    c = cells(outputs["s4d-proposition-1"])
    assert len(c) == 3 * 2 + 3 * 2
    assert all(0 <= v < 1e-6 for v in c.values()), c


def test_proposition1_detects_a_float32_init() -> None:
    """The 'HiPPO A' column can fail: a DPLR kernel left with its float32-rounded init misses by ~1e-7."""
    torch.manual_seed(0)
    kern = proposition1.DPLRKernel(d_model=1, d_state=16, init="legs", real_transform="none",
                                   backend="torch").double()
    with torch.no_grad():
        a, b, c, dt = proposition1.hippo_dense_parts(kern, "legs", 0.0)
        err = proposition1.rel_error(kern(64), proposition1.dense_kernel(a, b, c, dt, 64))
    assert err > 1e-8  # float32 rounding of Lambda, P, B; the exact float64 form gives ~1e-14 (test above)


# ------------------------------------------------------------------------------------------- plots

PLOTS_OF = {"s4d-theorem-3": ["theorem3_basis", "theorem3_error"],
            "s4d-conjecture-5": ["conjecture5_eigs", "conjecture5_top"],
            "s4d-theorem-6": ["theorem6_basis"], "s4d-figure-4": ["figure4_basis"]}


@pytest.mark.parametrize("spec,plot", [(s, p) for s, ps in PLOTS_OF.items() for p in ps])
def test_plot_writes_png(spec: str, plot: str, outputs: dict[str, RunOutput], tmp_path: Path) -> None:
    spec_plots = yaml.safe_load((SPECS / f"{spec}.yaml").read_text())["plots"]
    assert plot in spec_plots
    result = {"spec_id": spec, "tier": "smoke", "series": outputs[spec].series,
              "cells": [dataclasses.asdict(c) for c in outputs[spec].cells]}
    path = tmp_path / f"{plot}.png"
    PLOTS[plot](result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
