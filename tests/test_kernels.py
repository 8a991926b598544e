"""The structured kernels against the dense reference (S4 Algorithm 1, S4D eq. 7), float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssm_core.hippo import dplr, hippo_legs, nplr
from ssm_core.inits import diagonal_init
from ssm_core.kernels import DiagKernel, DPLRKernel, dense_kernel
from ssm_core.kernels.params import as_complex, real_part


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def _diag_dense_parts(k: DiagKernel):
    """The full (both conjugate halves) diagonal state space of a DiagKernel, as dense matrices."""
    lam = torch.complex(real_part(k.a_real, k.real_transform), k.a_imag).expand(k.h, -1)
    a = torch.diag_embed(torch.cat([lam, lam.conj()], -1))
    b = as_complex(k.b).expand(k.h, -1)
    c = as_complex(k.c)
    return a, torch.cat([b, b.conj()], -1), torch.cat([c, c.conj()], -1), torch.exp(k.log_dt)


@pytest.mark.parametrize("init", ["legs", "legt", "fout", "legs/fout"])
@pytest.mark.parametrize("length", [1024, 1023])
def test_dplr_kernel_equals_dense_reference(init: str, length: int) -> None:
    torch.manual_seed(1)
    kern = DPLRKernel(d_model=2, d_state=64, channels=2, init=init).double()
    a, b, c, dt = kern.full_state()
    ref = dense_kernel(a, b, c, dt, length)
    assert _rel(kern(length), ref) < 1e-6


def test_mixed_measure_gives_half_the_copies_each_measure() -> None:
    """S4-(LegS/FouT): copies 0 .. H/2-1 start from LegS's DPLR form, the others from FouT's."""
    kern = DPLRKernel(d_model=4, d_state=16, init="legs/fout").double()
    for copies, measure in ((slice(0, 2), "legs"), (slice(2, 4), "fout")):
        form = dplr(measure, 16)
        lam = torch.complex(real_part(kern.a_real, kern.real_transform), kern.a_imag)[copies]
        assert torch.allclose(lam.imag, torch.as_tensor(form.lam.imag).expand(2, -1))
        assert torch.allclose(as_complex(kern.p)[:, copies], torch.as_tensor(form.p)[:, None].expand(-1, 2, -1))
    with pytest.raises(ValueError, match="divisible by 2"):
        DPLRKernel(d_model=3, d_state=16, init="legs/fout")
    with pytest.raises(ValueError, match="divisible by 2"):
        DPLRKernel(d_model=4, d_state=16, init="legs/fout", tie_ab=True)


@pytest.mark.parametrize("init", ["legs", "inv", "lin", "quad", "real"])
@pytest.mark.parametrize("disc", ["bilinear", "zoh"])
def test_diag_kernel_equals_dense_reference(init: str, disc: str) -> None:
    torch.manual_seed(2)
    kern = DiagKernel(d_model=2, d_state=64, channels=2, init=init, discretization=disc).double()
    a, b, c, dt = _diag_dense_parts(kern)
    assert _rel(kern(1024), dense_kernel(a, b, c, dt, 1024, disc)) < 1e-6


@pytest.mark.parametrize("disc", ["bilinear", "zoh"])
def test_s4d_legs_kernel_is_the_kernel_of_the_hippo_normal_part(disc: str) -> None:
    """S4D-LegS with the unclipped projected B is the SSM (A^(N), B, C) of S4D eq. 5 / eq. 4 in its eigenbasis:
    with C_n = (C V)_n for a real C, its kernel equals the dense kernel of (A^(N), B, C). The eigenvectors
    come from np.linalg.eig of the dense A^(N), phases fixed by a real positive first entry."""
    torch.manual_seed(5)
    n, h, length = 32, 2, 300
    kern = DiagKernel(d_model=h, d_state=n, channels=2, init="legs", discretization=disc,
                      init_kwargs={"legs_b_clip": None}).double()
    a_normal = nplr("legs", n)[0]  # (n, n) real: A + P P^T
    w, v = np.linalg.eig(a_normal)
    keep = np.flatnonzero(w.imag > 0)
    keep = keep[np.argsort(-w.imag[keep])]
    v = v[:, keep] / np.linalg.norm(v[:, keep], axis=0)
    v = v * (np.abs(v[0]) / v[0])[None, :]  # (n, n/2)
    c_real = torch.randn(2, h, n, dtype=torch.float64)  # (channels, H, n)
    lam, b_proj = (torch.as_tensor(t) for t in diagonal_init("legs", n, legs_b_clip=None))
    # the module holds float32 copies of the init; put the float64 values back to compare at float64 precision
    assert torch.allclose(as_complex(kern.b), b_proj.expand(h, -1), rtol=1e-6, atol=0)
    assert torch.allclose(kern.a_imag, lam.imag.expand(h, -1), rtol=1e-6, atol=0)
    with torch.no_grad():
        kern.b.copy_(torch.view_as_real(b_proj).expand(h, -1, -1))
        kern.a_imag.copy_(lam.imag.expand(h, -1))
        kern.c.copy_(torch.view_as_real(c_real.to(torch.complex128) @ torch.as_tensor(v)))
    a = torch.as_tensor(a_normal).expand(h, n, n)
    b = torch.as_tensor(hippo_legs(n)[1]).expand(h, n)
    ref = dense_kernel(a, b, c_real, torch.exp(kern.log_dt), length, disc)
    assert _rel(kern(length), ref) < 1e-9


def test_dss_kernel_is_the_zoh_kernel_with_c_over_twice_dA_minus_1_times_the_softmax_denominator() -> None:
    """DSS (S4D Section 3.4; DSS Proposition 1): K_l = Re sum_n (C_n B_n / A_n) softmax_eps(dt A_n l)_l. With the
    ZOH dB = B (dA - 1) / A this is the dense ZOH kernel (both conjugate halves, 2 Re) of C_n' = C_n
    reciprocal_eps(sum_l dA_n^l) / (2 (dA_n - 1)), reciprocal_eps(s) = conj(s) / (|s|^2 + 1e-7) (DSS's softmax_eps;
    Re(dt A) < 0 here, so its shift is by l = 0)."""
    torch.manual_seed(3)
    length = 257
    kern = DiagKernel(d_model=3, d_state=16, init="legs", discretization="zoh", real_transform="none",
                      normalization="softmax").double()
    a, b, c, dt = _diag_dense_parts(kern)
    da = torch.exp(dt[:, None] * torch.diagonal(a, dim1=-2, dim2=-1))  # (H, N)
    row_sums = torch.stack([da ** l for l in range(length)], -1).sum(-1)
    rec = row_sums.conj() / (row_sums.abs() ** 2 + 1e-7)
    assert _rel(kern(length), dense_kernel(a, b, c * rec / (2 * (da - 1)), dt, length, "zoh")) < 1e-9
    with pytest.raises(ValueError, match="needs discretization='zoh'"):
        DiagKernel(d_model=3, d_state=16, discretization="bilinear", normalization="softmax")


def test_rate_scales_the_step_size() -> None:
    """kernel(L, rate) is the dense kernel of the same continuous (A, B, C) discretized with dt * rate."""
    torch.manual_seed(4)
    diag, dplr_k = DiagKernel(2, 16).double(), DPLRKernel(2, 16).double()
    dplr_k(64)  # fixes l_kernel: its C~ parameter is defined for length 64
    for kern, parts in ((diag, _diag_dense_parts), (dplr_k, lambda k: k.full_state())):
        a, b, c, dt = parts(kern)
        for length in (64, 100):
            assert _rel(kern(length, rate=2.0), dense_kernel(a, b, c, 2 * dt, length)) < 1e-9


@pytest.mark.parametrize("l_kernel", [128, 512])
def test_truncation_correction_makes_the_kernel_exact_at_any_length(l_kernel: int) -> None:
    """C~ = C (I - dA^L) removes the aliasing of the infinite kernel's tail: the kernels for 128 and 512 agree
    on their first 128 taps, whichever length the C~ parameter is defined for."""
    kern = DPLRKernel(1, 16, init="legs", dt_min=1e-3, dt_max=1e-3, l_max=l_kernel).double()
    a, b, c, dt = kern.full_state()
    long = kern(512)
    assert _rel(kern(128), long[..., :128]) < 1e-9
    assert _rel(long, dense_kernel(a, b, c, dt, 512)) < 1e-9


def test_frozen_a_b_are_buffers() -> None:
    kern = DiagKernel(4, 8, trainable_a=False, trainable_b=False)
    names = {n for n, _ in kern.named_parameters()}
    assert names == {"log_dt", "c"}
    assert kern.a_imag.requires_grad is False


def test_ssm_parameters_carry_optimizer_settings() -> None:
    kern = DPLRKernel(4, 8, lr=5e-4)
    marked = {n for n, p in kern.named_parameters() if getattr(p, "_optim", None) == {"lr": 5e-4, "weight_decay": 0.0}}
    assert marked == {"log_dt", "a_real", "a_imag", "p", "b"}


@pytest.mark.parametrize("kernel", [DPLRKernel, DiagKernel])
def test_per_group_learning_rates_as_the_authors_configurations_give_them(kernel) -> None:
    """{dt: None, A: 0.001, B: 0.002}: dt at the global learning rate, A (and P) and B at theirs, none decayed."""
    from ssm_core.optim import param_groups

    kern = kernel(4, 8, lr={"dt": None, "A": 0.001, "B": 0.002})
    optim = {n: getattr(p, "_optim", None) for n, p in kern.named_parameters()}
    assert optim["log_dt"] == {"weight_decay": 0.0}
    assert optim["a_real"] == optim["a_imag"] == {"lr": 0.001, "weight_decay": 0.0}
    assert optim["b"] == {"lr": 0.002, "weight_decay": 0.0} and optim["c"] is None
    if kernel is DPLRKernel:
        assert optim["p"] == {"lr": 0.001, "weight_decay": 0.0}
    groups = param_groups(kern, lr=0.01, weight_decay=0.05)
    dt_group = next(g for g in groups if any(p is kern.log_dt for p in g["params"]))
    assert (dt_group["lr"], dt_group["weight_decay"]) == (0.01, 0.0)


@pytest.mark.parametrize("lr", [0.0, -1e-3, True, "0.001", {"dt": 0.001, "A": 0.001}, {"dt": 0.0, "A": 1e-3, "B": 1e-3},
                                {"dt": None, "A": 1e-3, "B": 1e-3, "C": 1e-3}])
def test_bad_learning_rates_are_refused_with_the_allowed_forms(lr) -> None:
    for kernel in (DPLRKernel, DiagKernel):
        with pytest.raises(ValueError, match=r"lr=.* is not allowed; expected a learning rate > 0 .* keys dt, A, B"):
            kernel(4, 8, lr=lr)


@pytest.mark.parametrize("kwargs, message", [
    (dict(discretization="euler"), "discretization"),
    (dict(real_transform="softplus"), "real_transform"),
    (dict(init="nope"), "unknown diagonal init"),
    (dict(d_state=7), "even"),
])
def test_bad_arguments_name_the_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DiagKernel(2, **{"d_state": 8, **kwargs})


@pytest.mark.parametrize("init", ["legs", "legt"])
def test_dplr_b_is_clipped_as_the_authors_code_and_exact_without_clip(init: str) -> None:
    """B = V^* B_HiPPO with Im clipped to [-2, 2] by default; b_clip=None keeps the exact projection."""
    form = dplr(init, 64)
    assert np.abs(form.v[0].imag).max() == 0 and (form.v[0].real > 0).all()  # the phase convention
    clipped = as_complex(DPLRKernel(d_model=2, d_state=64, init=init).double().b)[0]
    exact = as_complex(DPLRKernel(d_model=2, d_state=64, init=init, b_clip=None).double().b)[0]
    ref = torch.as_tensor(form.b)
    assert ref.imag.abs().max() > 2  # the clip acts at this size
    assert torch.allclose(exact, ref.to(exact.dtype), atol=1e-5)
    assert torch.allclose(clipped.real, ref.real.to(clipped.real.dtype), atol=1e-5)
    assert torch.allclose(clipped.imag, ref.imag.clamp(-2, 2).to(clipped.imag.dtype), atol=1e-5)
    with pytest.raises(ValueError, match="b_clip"):
        DPLRKernel(d_model=2, d_state=16, init=init, b_clip=0)


@pytest.mark.parametrize("b_clip", [2.0, None])
def test_s4d_legs_starts_as_s4_legs_with_the_low_rank_term_masked(b_clip) -> None:
    """S4D Section 3.4: base S4D is S4 with P = 0 -- the same Lambda and B at init, clipped or not."""
    diag = DiagKernel(d_model=2, d_state=64, init="legs", init_kwargs={"legs_b_clip": b_clip}).double()
    s4 = DPLRKernel(d_model=2, d_state=64, init="legs", b_clip=b_clip).double()
    assert torch.equal(as_complex(diag.b), as_complex(s4.b))
    assert torch.equal(diag.a_imag, s4.a_imag) and torch.allclose(real_part(diag.a_real, "exp"), s4.lam().real)
