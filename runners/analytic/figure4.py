"""S4D Figure 4 (Appendix A.1): a random rank-1 perturbation of HiPPO-LegS makes the basis diverge.

Basis kernels of (A + P P^T, B) for HiPPO-LegS (A, B) (S4D eq. 4) and P = sigma * g, g ~ N(0, I_N) i.i.d.
(the same g for every sigma within a draw, so sigma alone sets the size). Per sigma, the (lower) median over
draws of
  log10 max |K|   max over t in [0, t_max] and n < N of |K_n(t)|
  deviation       max_t,n |K_sigma - K_0| / max |K_0|   (sigma > 0)
  max Re eig      the largest real part of the eigenvalues of A + P P^T (> 0: the kernels grow without bound)
"""
from __future__ import annotations

from dataclasses import field
from pathlib import Path

import numpy as np

from ssm_core.hippo import hippo_legs

from ..specs.registry import Cell, RunContext, RunOutput, register, register_plot
from ..specs.schema import MAX_GRID, MAX_STATE, Int, Ints, Num, settings
from .basis import dense_basis, thin, to_json, uniform_grid


@settings
class Figure4Config:
    state_size: Int(1, MAX_STATE) = 64
    sigmas: list[Num(0)] = field(default_factory=lambda: [0.0, 0.01, 0.1, 1.0])
    t_max: Num(0, 1e4, lo_open=True) = 5.0
    grid: Int(2, MAX_GRID) = 1001
    n_draws: Int(1, 10_000) = 8  # independent draws of g; cells are medians over draws
    plot_basis: Ints(0, nonempty=False) = field(default_factory=lambda: [0, 1, 2, 3])
    plot_points: Int(2, MAX_GRID) = 400

    def __post_init__(self) -> None:
        if not self.sigmas or self.sigmas[0] != 0 or sorted(set(self.sigmas)) != list(self.sigmas):
            raise ValueError(f"sigmas must be increasing and start at 0 (the unperturbed reference), got {self.sigmas}")
        if any(not 0 <= n < self.state_size for n in self.plot_basis):
            raise ValueError(f"plot_basis entries must be in [0, state_size), got {self.plot_basis}")


def col(sigma: float) -> str:
    return f"sigma={sigma:g}"


def median(x: np.ndarray) -> float:
    """The lower median: the value of an actual draw (an even count does not average two draws)."""
    return float(np.quantile(x, 0.5, method="lower"))


def figure4_cells(cfg: Figure4Config) -> set[tuple[str, str]]:
    return ({(r, col(s)) for r in ("log10 max |K|", "max Re eig") for s in cfg.sigmas}
            | {("deviation", col(s)) for s in cfg.sigmas if s > 0})


@register("analytic.figure4", config=Figure4Config, kind="analytic", cells=figure4_cells)
def run_figure4(cfg: Figure4Config, ctx: RunContext) -> RunOutput:
    rng = np.random.default_rng(ctx.seed)
    cells: list[Cell] = []
    ctx.cell_started("every sigma", cells)  # one pass of draws measures every column
    ts = uniform_grid(cfg.t_max, cfg.grid)
    a, b = hippo_legs(cfg.state_size)
    k0 = dense_basis(a, b, ts)  # (G, N)
    scale0 = np.abs(k0).max()
    log_max = np.empty((cfg.n_draws, len(cfg.sigmas)))
    dev = np.empty_like(log_max)
    re_eig = np.empty_like(log_max)
    plot_k = []
    for d in range(cfg.n_draws):
        g = rng.standard_normal(cfg.state_size)  # (N,)
        for i, sigma in enumerate(cfg.sigmas):
            p = sigma * g
            a_pert = a + np.outer(p, p)
            with np.errstate(over="ignore", invalid="ignore"):
                k = dense_basis(a_pert, b, ts) if sigma > 0 else k0
                log_max[d, i] = np.log10(np.abs(k).max())
                dev[d, i] = np.abs(k - k0).max() / scale0
            re_eig[d, i] = np.linalg.eigvals(a_pert).real.max()
            if d == 0:
                plot_k.append(thin(k[:, cfg.plot_basis], cfg.plot_points).T)
    for i, sigma in enumerate(cfg.sigmas):
        c = col(sigma)
        lm = median(log_max[:, i])
        finite = np.isfinite(lm)
        cells.append(Cell("log10 max |K|", c, lm if finite else "X", "log10",
                          None if finite else "float64 overflow of the kernel in the window"))
        if sigma > 0:
            dv = median(dev[:, i])
            cells.append(Cell("deviation", c, dv if np.isfinite(dv) else "X", "rel",
                              "max |K_sigma - K_0| / max |K_0|"))
        cells.append(Cell("max Re eig", c, median(re_eig[:, i]), "1/t", f"median over {cfg.n_draws} draws"))
    ctx.cell_finished("every sigma", cells)
    series = {
        "state_size": cfg.state_size, "sigmas": list(cfg.sigmas), "plot_basis": list(cfg.plot_basis),
        "t": to_json(thin(ts, cfg.plot_points)),
        "k": [to_json(k) for k in plot_k],  # per sigma: (len(plot_basis), G') of draw 0
        "log10_max": to_json(log_max), "deviation": to_json(dev), "max_re_eig": to_json(re_eig),  # (draws, sigmas)
    }
    notes = [f"N={cfg.state_size}, {cfg.n_draws} draws of g, window [0, {cfg.t_max:g}]; cells are medians over draws."]
    return RunOutput(cells=cells, series=series, notes=notes)


@register_plot("figure4_basis")
def plot_figure4_basis(result: dict, path: Path, expected: dict | None = None) -> None:
    """Like S4D Fig. 4: basis kernels of (A + P P^T, B) for each sigma (draw 0)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import SymmetricalLogLocator

    s = result["series"]
    sigmas = s["sigmas"]
    fig, axes = plt.subplots(1, len(sigmas), figsize=(4.2 * len(sigmas), 3.8))
    axes = np.atleast_1d(axes)
    base = np.array(s["log10_max"], dtype=float)[0, 0]  # log10 max |K| of the unperturbed basis
    for ax, sigma, ks, lm in zip(axes, sigmas, s["k"], np.array(s["log10_max"], dtype=float)[0]):
        for n, k in zip(s["plot_basis"], ks):
            ax.plot(s["t"], [np.nan if v is None else v for v in k], lw=1, label=f"$K_{n}$")
        if not np.isfinite(lm) or lm > base + 1:  # blown up: symlog shows the LegS shape and the growth together
            ax.set_yscale("symlog", linthresh=1.0)
            decades = max(1, int(np.ceil((lm if np.isfinite(lm) else 300) / 4)))  # about 4 ticks per sign
            ax.yaxis.set_major_locator(SymmetricalLogLocator(base=10.0 ** decades, linthresh=1.0))
        ax.set_title(f"$\\sigma$={sigma:g}   max|K| = {10 ** lm:.3g}", fontsize=10)
        ax.set_xlabel("t")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("$K_n(t)$")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Basis of $(A + PP^T, B)$, HiPPO-LegS N={s['state_size']}, $P \\sim \\sigma\\,N(0, I)$",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
