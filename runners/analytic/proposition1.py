"""S4D Proposition 1 / S4 Algorithm 1: the structured kernels equal the dense reference, in float64.

S4 (DPLR, S4 Algorithm 1: Cauchy product at the roots of unity, Woodbury, truncation correction) and S4D
(diagonal, S4D eq. 7: Vandermonde product) against the dense kernel C dA^l dB by explicit powers (S4D eq. 6,
ssm_core.kernels.dense_kernel). Cell: max |K - K_dense| / max |K_dense| over channels, H and l < L.

Columns: 'bilinear' / 'ZOH' against the dense kernel of the same (complex, both conjugate halves) state space;
'bilinear, HiPPO A' (S4 rows) against the dense kernel of the original real HiPPO matrix, with B and C mapped
out of the eigenbasis (C_orig = 2 Re(C V^*)): this also checks the DPLR form A = V (Lambda - P P^*) V^*
(LegT / FouT: A - 1e-4 I, the clamp of Re(Lambda) = 0 that S4 applies).
"""
from __future__ import annotations

from dataclasses import field

import torch
from torch import Tensor

from ssm_core.hippo import MEASURES, dplr, hippo
from ssm_core.inits import DIAGONAL_INITS
from ssm_core.kernels import DiagKernel, DPLRKernel, dense_kernel
from ssm_core.kernels.params import as_complex, real_part

from ..specs.registry import Cell, RunContext, RunOutput, register
from ..specs.schema import MAX_STATE, MAX_WIDTH, Choices, Int, Num, check_num, settings

S4_NAMES = {"legs": "S4-LegS", "legt": "S4-LegT", "fout": "S4-FouT"}
S4D_NAMES = {"legs": "S4D-LegS", "inv": "S4D-Inv", "lin": "S4D-Lin", "inv2": "S4D-Inv2", "quad": "S4D-Quad",
             "rand": "S4D-Rand", "real": "S4D-Real"}
COLUMNS = {"bilinear": "bilinear", "zoh": "ZOH"}
DPLR_MEASURES = tuple(m for m in MEASURES if m in S4_NAMES)
DIAG_INITS = tuple(i for i in DIAGONAL_INITS if i in S4D_NAMES)
DISCRETIZATIONS = tuple(COLUMNS)


@settings
class Proposition1Config:
    state_size: Int(2, MAX_STATE, even=True) = 64
    length: Int(1, 1 << 16) = 1024  # the dense reference takes L matrix powers
    d_model: Int(1, MAX_WIDTH) = 4  # H independent SSMs
    channels: Int(1, 64) = 2
    dt_min: Num(0, lo_open=True) = 1e-3
    dt_max: Num() = 1e-1  # >= dt_min
    dplr_inits: Choices(DPLR_MEASURES, nonempty=False) = field(default_factory=lambda: ["legs", "legt", "fout"])
    diag_inits: Choices(DIAG_INITS, nonempty=False) = field(default_factory=lambda: ["legs", "inv", "lin"])
    discretizations: Choices(DISCRETIZATIONS, nonempty=False) = field(default_factory=lambda: ["bilinear", "zoh"])

    def __post_init__(self) -> None:
        check_num("dt_max", self.dt_max, self.dt_min)


def rel_error(k: Tensor, ref: Tensor) -> float:
    return ((k - ref).abs().max() / ref.abs().max()).item()


def diag_dense_parts(kern: DiagKernel) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A (H, N, N), B (H, N), C (channels, H, N) of both conjugate halves, and dt (H,), of a DiagKernel."""
    lam = torch.complex(real_part(kern.a_real, kern.real_transform), kern.a_imag).expand(kern.h, -1)
    b = as_complex(kern.b).expand(kern.h, -1)
    c = as_complex(kern.c)
    a = torch.diag_embed(torch.cat([lam, lam.conj()], -1))
    return a, torch.cat([b, b.conj()], -1), torch.cat([c, c.conj()], -1), torch.exp(kern.log_dt)


def exact_dplr_kernel(measure: str, common: dict) -> tuple[DPLRKernel, float]:
    """A float64 DPLRKernel whose Lambda, P, B are the float64 DPLR form of ``measure`` (ssm_core.hippo.dplr).

    The module initializes in float32; .double() alone would keep that rounding (~1e-7), which the comparison
    with the HiPPO matrix would see. Re(Lambda) = 0 (LegT, FouT) is clamped to -1e-4 as DPLRKernel does (a zero
    eigenvalue is a removable singularity of the Cauchy form at omega = 1); the clamp shifts A by a multiple of
    the identity, returned as ``shift``.
    """
    kern = DPLRKernel(init=measure, real_transform="none", **common).double()
    form = dplr(measure, kern.n)
    lam = torch.as_tensor(form.lam)  # (N/2,)
    real = lam.real.clamp(max=-1e-4)
    shifts = (real - lam.real).unique()
    if len(shifts) != 1:
        raise RuntimeError(f"{measure}: clamping Re(Lambda) is not a uniform shift of A")
    with torch.no_grad():
        kern.a_real.copy_(real.expand_as(kern.a_real))
        kern.a_imag.copy_(lam.imag.expand_as(kern.a_imag))
        kern.p.copy_(torch.view_as_real(torch.as_tensor(form.p))[:, None].expand_as(kern.p))
        kern.b.copy_(torch.view_as_real(torch.as_tensor(form.b)).expand_as(kern.b))
    return kern, shifts.item()


def hippo_dense_parts(kern: DPLRKernel, measure: str, shift: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The real HiPPO (A + shift I, B) of ``measure``, the kernel's true C mapped out of the eigenbasis: 2 Re(C V^*).

    The kernel stores C~ = C (I - dA^L) (S4's truncation correction); ``true_c`` undoes it."""
    n = kern.n
    a_np, b_np = hippo(measure, n)
    v = torch.as_tensor(dplr(measure, n).v)  # (N, N/2)
    c_half = kern.true_c()[..., : n // 2]  # (channels, H, N/2)
    c_orig = 2 * (c_half @ v.conj().T).real  # (channels, H, N)
    a = (torch.as_tensor(a_np) + shift * torch.eye(n, dtype=torch.float64)).expand(kern.h, n, n)
    b = torch.as_tensor(b_np).expand(kern.h, n)
    return a, b, c_orig, torch.exp(kern.log_dt)


def proposition1_cells(cfg: Proposition1Config) -> set[tuple[str, str]]:
    return ({(S4_NAMES[m], c) for m in cfg.dplr_inits for c in ("bilinear", "bilinear, HiPPO A")}
            | {(S4D_NAMES[i], COLUMNS[d]) for i in cfg.diag_inits for d in cfg.discretizations})


@register("analytic.proposition1", config=Proposition1Config, kind="analytic", cells=proposition1_cells)
def run_proposition1(cfg: Proposition1Config, ctx: RunContext) -> RunOutput:
    common = {"d_model": cfg.d_model, "d_state": cfg.state_size, "channels": cfg.channels, "dt_min": cfg.dt_min,
              "dt_max": cfg.dt_max, "backend": "torch"}
    length = cfg.length
    threads = torch.get_num_threads()
    # the dense reference is ~L tiny batched mat-vecs: one thread avoids oversubscription (10x faster on 2 cores)
    torch.set_num_threads(1)
    ctx.cell_started("every cell", [])  # one pass measures them all
    try:
        cells = _measure(cfg, common, length, ctx.seed)
    finally:
        torch.set_num_threads(threads)
    ctx.cell_finished("every cell", cells)
    notes = [(f"float64, N={cfg.state_size}, L={length}, H={cfg.d_model}, channels={cfg.channels}, "
              f"dt log-uniform in [{cfg.dt_min:g}, {cfg.dt_max:g}], Cauchy / Vandermonde backend 'torch'.")]
    return RunOutput(cells=cells, series={}, notes=notes)


def _measure(cfg: Proposition1Config, common: dict, length: int, seed: int) -> list[Cell]:
    cells = []
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        for measure in cfg.dplr_inits:
            kern, shift = exact_dplr_kernel(measure, common)
            k = kern(length)  # (channels, H, L)
            a, b, c, dt = kern.full_state()
            cells.append(Cell(S4_NAMES[measure], "bilinear", rel_error(k, dense_kernel(a, b, c, dt, length)), "rel",
                              "S4 Algorithm 1 vs dense powers of the DPLR state"))
            a, b, c, dt = hippo_dense_parts(kern, measure, shift)
            cells.append(Cell(S4_NAMES[measure], "bilinear, HiPPO A", rel_error(k, dense_kernel(a, b, c, dt, length)),
                              "rel", "vs dense powers of the real HiPPO matrix" + (f" + {shift:g} I" if shift else "")))
        for init in cfg.diag_inits:
            for disc in cfg.discretizations:
                kern = DiagKernel(init=init, discretization=disc, **common).double()
                a, b, c, dt = diag_dense_parts(kern)
                cells.append(Cell(S4D_NAMES[init], COLUMNS[disc],
                                  rel_error(kern(length), dense_kernel(a, b, c, dt, length, disc)), "rel",
                                  "Vandermonde (eq. 7) vs dense powers"))
    return cells
