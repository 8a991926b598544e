"""The fused recurrent steps (ssm_core.ops.step_triton) against complex128 references on fresh random inputs: the
diagonal step directly, S4's rank-1 step on half the conjugate pairs (and its diagonal-plus-rank-one parts, in
torch) against the dense bilinear step on all N modes, x' = (I - dt/2 A)^-1 ((I + dt/2 A) x + dt B u); with and
without the skip term D u; in place and into a new tensor; the layers' Triton step equal to their torch step."""
from __future__ import annotations

import pytest
import torch

from ssm_core import SSMLayer
from ssm_core.ops.step_triton import diag_step, dplr_rank1_step, dplr_step, dplr_step_parts

C128 = torch.complex128
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: under TRITON_INTERPRET=1 (conftest)


def _c(gen: torch.Generator, *shape: int, dtype: torch.dtype = C128) -> torch.Tensor:
    return torch.complex(torch.randn(*shape, generator=gen, dtype=torch.float64),
                         torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype).to(DEVICE)


def _relative(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """max |out - ref| over max |ref|, or over ``scale``: for a sum, the size of its terms (a sum that cancels to
    near zero is still rounded at the scale of what was added)."""
    return ((out.to(ref.dtype) - ref).abs().max() / (ref.abs().max() if scale is None else scale)).item()


@pytest.mark.parametrize("dtype, tol", [(torch.complex64, 1e-5), (C128, 1e-12)])
@pytest.mark.parametrize("batch, h, n, channels", [(3, 5, 7, 1), (2, 70, 32, 2), (1, 1, 1, 1),
                                                (37, 3, 4, 1), (67, 20, 32, 1)])
def test_diag_step_equals_the_recurrence(gen, dtype, tol, batch, h, n, channels) -> None:
    x, da, db, c = _c(gen, batch, h, n), _c(gen, h, n) * 0.5, _c(gen, h, n), _c(gen, channels, h, n)
    u = torch.randn(batch, h, generator=gen, dtype=torch.float64).to(DEVICE)
    new = da * x + db * u[..., None]  # S4D's recurrence, x_t = dA x_{t-1} + dB u_t
    y_ref = 2 * torch.einsum("chn,bhn->bch", c, new).real
    args = [t.to(dtype) for t in (da, db, c)]
    terms = 2 * torch.einsum("chn,bhn->bch", c.abs(), new.abs()).max()  # the size of what y sums
    y, out = diag_step(x.to(dtype), u.to(torch.float32 if dtype == torch.complex64 else torch.float64), *args)
    assert _relative(out, new) < tol and _relative(y, y_ref, terms) < tol
    skip = torch.randn(channels, h, generator=gen, dtype=torch.float64).to(DEVICE)  # D (C, H)
    y3, _ = diag_step(x.to(dtype), u.to(y.dtype), *args, skip=skip.to(y.dtype))
    assert _relative(y3, y_ref + skip * u[:, None, :], terms + (skip * u[:, None, :]).abs().max()) < tol
    state = x.to(dtype).clone()
    y2, same = diag_step(state, u.to(y.dtype), *args, out=state)  # in place
    assert same is state and torch.equal(same, out) and torch.equal(y2, y)


def _dplr_inputs(gen: torch.Generator, batch: int, h: int, m: int, channels: int) -> dict:
    """One mode of each conjugate pair (m = N/2) of Lambda, P, B, C and the state, with D and inner as the layer
    makes them (sums over all N modes: twice the real part of the kept half's)."""
    lam = torch.complex(-torch.rand(h, m, generator=gen, dtype=torch.float64) - 0.1,
                        3 * torch.randn(h, m, generator=gen, dtype=torch.float64)).to(DEVICE)
    p, b, c = _c(gen, h, m) * 0.3, _c(gen, h, m), _c(gen, channels, h, m)
    half = ((torch.rand(h, generator=gen, dtype=torch.float64) * 0.1 + 1e-3) / 2).to(DEVICE)  # dt / 2
    d = 1 / (1 - half[:, None] * lam)
    inner = 1 / (1 + half * 2 * (p.conj() * d * p).sum(-1).real)
    return {"x": _c(gen, batch, h, m), "u": torch.randn(batch, h, generator=gen, dtype=torch.float64).to(DEVICE),
            "lam": lam, "p": p, "d": d, "b": b, "c": c, "half": half, "inner": inner}


def _pairs(t: torch.Tensor) -> torch.Tensor:
    """Both modes of each conjugate pair: (..., m) -> (..., 2m)."""
    return torch.cat([t, t.conj()], -1)


@pytest.mark.parametrize("dtype, tol", [(torch.complex64, 1e-5), (C128, 1e-12)])
@pytest.mark.parametrize("batch, h, m, channels", [(3, 5, 7, 1), (2, 40, 32, 2), (37, 3, 4, 1), (67, 20, 32, 1)])
def test_dplr_step_equals_the_dense_bilinear_step(gen, dtype, tol, batch, h, m, channels) -> None:
    a = _dplr_inputs(gen, batch, h, m, channels)
    lam, p, b, c, x = (_pairs(a[k]) for k in ("lam", "p", "b", "c", "x"))  # the full state of N = 2m modes
    eye = torch.eye(2 * m, dtype=C128, device=DEVICE)
    mat = torch.diag_embed(lam) - p[:, :, None] * p.conj()[:, None, :]  # A = Lambda - P P^* (H, N, N)
    half = a["half"][:, None, None]
    a0, a1 = eye + half * mat, torch.linalg.inv(eye - half * mat)
    new = torch.einsum("hij,bhj->bhi", a1, torch.einsum("hij,bhj->bhi", a0, x) + b * a["u"][..., None])
    assert torch.allclose(new[..., m:], new[..., :m].conj(), atol=1e-12)  # the dropped half is the conjugate
    y_ref = torch.einsum("chn,bhn->bch", c, new).real  # y = Re(C x) over all N modes
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    args = [a[k].to(dtype) for k in ("lam", "p", "d", "b", "c")]
    y, out = dplr_step(a["x"].to(dtype), a["u"].to(real), *args, a["half"].to(real), a["inner"].to(real))
    assert _relative(out, new[..., :m]) < tol and _relative(y, y_ref) < tol
    skip = torch.randn(channels, h, generator=gen, dtype=torch.float64).to(DEVICE)  # D (C, H)
    parts = dplr_step_parts(*args[:4], a["half"].to(real), a["inner"].to(real))
    y3, out3 = dplr_rank1_step(a["x"].to(dtype), a["u"].to(real), parts, args[4], skip=skip.to(real))
    assert _relative(out3, new[..., :m]) < tol and _relative(y3, y_ref + skip * a["u"][:, None, :]) < tol
    state = a["x"].to(dtype).clone()
    y2, same = dplr_step(state, a["u"].to(real), *args, a["half"].to(real), a["inner"].to(real), out=state)
    assert same is state and torch.equal(same, out) and torch.equal(y2, y)


@pytest.mark.parametrize("batch, h, m", [(3, 5, 7), (4, 2, 32)])
def test_dplr_step_parts_are_the_dense_bilinear_step(gen, batch, h, m) -> None:
    """The diagonal-plus-rank-one form in torch, complex128: E x + G u + F (k1 2 Re sum W x + k2 u) is the dense
    bilinear step of A = Lambda - P P^* on all N modes (its kept half)."""
    a = _dplr_inputs(gen, batch, h, m, 1)
    e, g, w, f, k = dplr_step_parts(a["lam"], a["p"], a["d"], a["b"], a["half"], a["inner"])
    assert e.dtype == C128 and k.shape == (h, 2) and k.dtype == torch.float64
    x, u = a["x"], a["u"]
    r = k[:, 0] * 2 * (w * x).sum(-1).real + k[:, 1] * u  # (B, H)
    fused = e * x + g * u[..., None] + f * r[..., None]
    lam, p, b, xf = (_pairs(a[key]) for key in ("lam", "p", "b", "x"))
    eye = torch.eye(2 * m, dtype=C128, device=DEVICE)
    mat = torch.diag_embed(lam) - p[:, :, None] * p.conj()[:, None, :]
    half = a["half"][:, None, None]
    dense = torch.einsum("hij,bhj->bhi", torch.linalg.inv(eye - half * mat),
                         torch.einsum("hij,bhj->bhi", eye + half * mat, xf) + b * u[..., None])
    assert _relative(fused, dense[..., :m]) < 1e-12


def test_bad_inputs_are_named(gen) -> None:
    x, da, db, c = _c(gen, 2, 3, 4), _c(gen, 3, 4), _c(gen, 3, 4), _c(gen, 1, 3, 4)
    u = torch.randn(2, 3, dtype=torch.float64, device=DEVICE)
    with pytest.raises(ValueError, match="state x must be a contiguous complex"):
        diag_step(x.transpose(0, 1), u.t(), da, db, c)
    with pytest.raises(ValueError, match=r"input u must be real \(B, H\)"):
        diag_step(x, u[:, :2], da, db, c)
    with pytest.raises(ValueError, match="dB must be contiguous"):
        diag_step(x, u, da, db.to(torch.complex64), c)
    with pytest.raises(ValueError, match="out must be contiguous"):
        diag_step(x, u, da, db, c, out=torch.empty(2, 3, 5, dtype=C128, device=DEVICE))
    a = _dplr_inputs(gen, 2, 3, 4, 1)
    with pytest.raises(ValueError, match="half"):
        dplr_step(a["x"], a["u"], a["lam"], a["p"], a["d"], a["b"], a["c"], a["half"].to(C128), a["inner"])
    with pytest.raises(ValueError, match="inner must be real"):
        dplr_step(a["x"], a["u"], a["lam"], a["p"], a["d"], a["b"], a["c"], a["half"], a["inner"][:2])
    with pytest.raises(ValueError, match=r"skip \(D\) must be real \(1, 3\)"):
        diag_step(x, u, da, db, c, skip=torch.ones(3, dtype=torch.float64, device=DEVICE))
    parts = dplr_step_parts(a["lam"], a["p"], a["d"], a["b"], a["half"], a["inner"])
    with pytest.raises(ValueError, match=r"k must be real \(3, 2\)"):
        dplr_rank1_step(a["x"], a["u"], (*parts[:4], parts[4][:, :1]), a["c"])
    with pytest.raises(ValueError, match="W must be contiguous"):
        dplr_rank1_step(a["x"], a["u"], (*parts[:2], parts[2][:, :2], *parts[3:]), a["c"])


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("mode, init", [("s4d", "legs"), ("s4d", "lin"), ("s4", "legs"), ("s4", "legt")])
def test_layer_triton_step_equals_its_torch_step(gen, mode: str, init: str, grad: bool) -> None:
    """Over several steps, in place (generation) and not; LegT (rank 2) takes the torch operations. Without
    gradients the skip term D u is fused into the step; with them it stays a torch operation, so D gets its
    gradient."""
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    ref = SSMLayer(6, 8, mode=mode, init=init, channels=2, backend="torch").double().eval().to(DEVICE)
    fused = SSMLayer(6, 8, mode=mode, init=init, channels=2, backend="triton").double().eval().to(DEVICE)
    fused.load_state_dict(ref.state_dict())
    s_ref, s_fused, s_new = ref.default_state(3), fused.default_state(3), fused.default_state(3)
    with torch.set_grad_enabled(grad):
        for _ in range(5):
            u = torch.randn(3, 6, generator=gen, dtype=torch.float64).to(DEVICE)
            y_ref, s_ref = ref.step(u, s_ref)
            held = s_fused
            y_fused, s_fused = fused.step(u, s_fused, inplace=True)
            y_new, s_new = fused.step(u, s_new)
            assert s_fused is held
            assert torch.allclose(y_fused, y_ref, atol=1e-12) and torch.allclose(s_fused, s_ref, atol=1e-12)
            assert torch.equal(y_new, y_fused) and torch.equal(s_new, s_fused)
        assert y_fused.requires_grad == grad
    if grad:
        y_fused.sum().backward()
        y_ref.sum().backward()
        assert torch.allclose(fused.d.grad, ref.d.grad, atol=1e-12)


@pytest.mark.parametrize("setting", [(1, 1, 1, 1), (16, 3, 2, 2), (64, 64, 8, 3), (2048, 5, 4, 1)])
def test_steps_agree_under_every_block_setting(gen, monkeypatch, setting) -> None:
    """Blocks of one feature and one batch row up to many rows per program, pipelined or not: the same states and
    outputs as the default blocks, for both steps (batch 37, 5 features, 7 modes: every block edge is ragged)."""
    from ssm_core.ops import step_triton

    a = _dplr_inputs(gen, 37, 5, 7, 2)
    da = _c(gen, 5, 7) * 0.5
    diag_args = (a["x"], a["u"], da, a["b"], a["c"])
    dplr_args = (a["x"], a["u"], a["lam"], a["p"], a["d"], a["b"], a["c"], a["half"], a["inner"])
    ref = diag_step(*diag_args), dplr_step(*dplr_args)
    monkeypatch.setattr(step_triton, "BLOCKS", {"diag": setting, "dplr": setting})
    for (y, x), (y_ref, x_ref) in zip((diag_step(*diag_args), dplr_step(*dplr_args)), ref):
        assert _relative(y, y_ref) < 1e-13 and _relative(x, x_ref) < 1e-13


def test_step_kernels_compile_to_vector_accesses_without_spills() -> None:
    """Static check of the code an H100 runs (sm_90, triton's own ptxas; no GPU needed): at the generation sizes the
    state is loaded and stored in 128-bit vectors and no register spills, for the diagonal and the DPLR step
    (benchmarks/diagnostics/step_kernel_ptx.py)."""
    import os
    import subprocess
    import sys

    import triton

    if not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")):
        pytest.skip("this triton build ships no ptxas")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.diagnostics.step_kernel_ptx"],
                         capture_output=True, text=True, env=env, cwd=root, check=True).stdout
    lines = [line for line in out.splitlines() if "warps" in line]
    assert len(lines) == 2, out
    for line in lines:
        assert "spill stores 0 B" in line and "(0 of 128 bits)" not in line, line
