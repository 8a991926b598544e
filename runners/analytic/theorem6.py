"""S4D Theorem 6 (Appendix A.1): the S4-LegS basis kernels are K_n(t) = L_n(e^{-t}) e^{-t}.

K_n(t) = e_n^T e^{tA} B for HiPPO-LegS (A, B) (S4D eq. 4) computed by the matrix exponential (scipy expm,
stepping on a uniform grid) against the closed form with L_n the shifted Legendre polynomials orthonormal on
[0, 1], L_n(s) = sqrt(2n+1) P_n(2s - 1). Cell: max over t in [0, t_max] and all n < N of the absolute error,
relative to max |K|.
"""
from __future__ import annotations

from dataclasses import field
from pathlib import Path

from ssm_core.hippo import hippo_legs

from ..specs.registry import Cell, RunContext, RunOutput, register, register_plot
from ..specs.schema import MAX_GRID, MAX_STATE, Int, Ints, Num, settings
from .basis import dense_basis, legendre_formula, rel_max_error, thin, to_json, uniform_grid


@settings
class Theorem6Config:
    state_sizes: Ints(1, MAX_STATE)  # N values
    t_max: Num(0, 1e4, lo_open=True) = 5.0
    grid: Int(2, MAX_GRID) = 2001
    plot_basis: Ints(0, nonempty=False) = field(default_factory=lambda: [0, 1, 2, 3, 7])  # n in the plot (< min N)
    plot_points: Int(2, MAX_GRID) = 400

    def __post_init__(self) -> None:
        if any(not 0 <= n < min(self.state_sizes) for n in self.plot_basis):
            raise ValueError(f"plot_basis entries must be in [0, min(state_sizes)), got {self.plot_basis}")


def theorem6_cells(cfg: Theorem6Config) -> set[tuple[str, str]]:
    return {("max error", f"N={n}") for n in cfg.state_sizes}


@register("analytic.theorem6", config=Theorem6Config, kind="analytic", cells=theorem6_cells)
def run_theorem6(cfg: Theorem6Config, ctx: RunContext) -> RunOutput:
    ts = uniform_grid(cfg.t_max, cfg.grid)
    cells, errors = [], []
    k_plot = None
    sizes = [n for n in cfg.state_sizes if ctx.wants("max error", [f"N={n}"])]  # run --cells: the selected N
    for n in sizes:
        ctx.cell_started(f"N={n}", cells)
        a, b = hippo_legs(n)
        k = dense_basis(a, b, ts)  # (G, N)
        errors.append(rel_max_error(k, legendre_formula(n, ts)))
        cells.append(Cell("max error", f"N={n}", errors[-1], "rel",
                          "max_t,n |e^{tA}B - L_n(e^-t) e^-t| / max |K|"))
        if k_plot is None:
            k_plot = k[:, cfg.plot_basis]
        ctx.cell_finished(f"N={n}", cells)
    tp = thin(ts, cfg.plot_points)
    series = {"state_sizes": sizes, "errors": errors, "plot_basis": list(cfg.plot_basis),
              "t": to_json(tp), "k_expm": to_json(thin(k_plot, cfg.plot_points).T),  # (len(plot_basis), G')
              "k_formula": to_json(legendre_formula(max(cfg.plot_basis) + 1, tp)[:, cfg.plot_basis].T)}
    notes = [f"expm stepping on {cfg.grid} points over [0, {cfg.t_max:g}], all n < N."]
    return RunOutput(cells=cells, series=series, notes=notes)


@register_plot("theorem6_basis")
def plot_theorem6_basis(result: dict, path: Path, expected: dict | None = None) -> None:
    """S4-LegS basis by expm (lines) against L_n(e^-t) e^-t (markers)."""
    import matplotlib.pyplot as plt

    s = result["series"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, n in enumerate(s["plot_basis"]):
        ax.plot(s["t"], s["k_expm"][i], "-", color=f"C{i}", lw=1.2, label=f"$e_{{{n}}}^T e^{{tA}}B$")
        ax.plot(s["t"][::8], s["k_formula"][i][::8], "o", color=f"C{i}", ms=3.5, mfc="none")
    ax.plot([], [], "ko", mfc="none", ms=3.5, label="$L_n(e^{-t})e^{-t}$")
    ax.set_xlabel("t")
    ax.set_ylabel("$K_n(t)$")
    worst = max(s["errors"])
    ax.set_title(f"Theorem 6: S4-LegS basis = Legendre formula (max rel. error {worst:.1e})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
