"""S4D Theorem 3 / Figure 2: the basis of (A^(N), B/2) approaches the S4-LegS basis of (A, B) as N grows.

A = HiPPO-LegS (S4D eq. 4), A^(N) = A + P P^T its normal part (eq. 5). For each state size N we compare the
first ``n_basis`` basis functions K_n(t) = e_n^T e^{tA} B (eq. 3) on [0, t_max]:

  weak error   max_{t, n} |int_0^t (K^D_n - K_n)| / max_{t, n} |int_0^t K_n|. The proof of Theorem 3 (Appendix
               A.1) is about the SSM's action on inputs (the reconstruction u(t) = B^T x(t)); this norm
               measures exactly that (the responses to step inputs) and is the sense in which the limit holds.
  sup error    max_{t, n} |K^D_n - K_n| / max_{t, n} |K_n| on the grid. At t = 0, K^D(0) = B/2 while K(0) = B,
               so this is >= 1/2 for every N: the convergence cannot be uniform. The error is an oscillation
               at the top frequency ~N^2/pi whose amplitude does not shrink (S4D-LegS is a "noisy
               approximation", Section 4); the sup over t >= t_min is in the series and notes.
  bilinear / ZOH error
               the discrete kernels dA^l dB / dt (eq. 6) at step dt, S4D-LegS against S4-LegS with the same
               rule, max over l < t_max / dt and n < n_basis, relative. Fig. 2c: "the bilinear transform ...
               smooths out the kernel to exactly match S4-LegS as N grows".
"""
from __future__ import annotations

from dataclasses import field
from pathlib import Path

import numpy as np

from ssm_core.hippo import hippo_legs

from ..specs.registry import Cell, RunContext, RunOutput, register, register_plot
from ..specs.schema import MAX_GRID, MAX_STATE, Int, Ints, Num, settings
from .basis import (
    dense_basis_integral,
    dense_discrete,
    legs_basis,
    modal_basis,
    modal_basis_integral,
    modal_discrete,
    rel_max_error,
    s4d_legs_modes,
    thin,
    to_json,
    uniform_grid,
)


@settings
class Theorem3Config:
    state_sizes: Ints(2, MAX_STATE, even=True, increasing=True)  # N values (even)
    t_max: Num(0, 1e4, lo_open=True) = 5.0  # the time window [0, t_max]
    grid: Int(2, MAX_GRID) = 2001  # time points on [0, t_max]
    n_basis: Int(1) = 8  # M: the first M basis functions are compared
    t_min: Num(0) = 0.5  # the sup error away from t = 0 (series and notes) is over t >= t_min
    dt: Num(0, lo_open=True) = 0.1  # step of the discrete kernels (bilinear vs ZOH, Fig. 2c)
    plot_basis: Ints(0, nonempty=False) = field(default_factory=lambda: [0, 1, 2, 3])  # n shown in the basis plot
    plot_points: Int(2, MAX_GRID) = 1000  # at most this many time points per curve in the results JSON

    def __post_init__(self) -> None:
        if self.t_max / self.dt > MAX_GRID:
            raise ValueError(f"dt: {self.dt!r} not allowed; t_max / dt (the discrete kernels' length) must be <= "
                             f"{MAX_GRID}")
        if not 1 <= self.n_basis <= self.state_sizes[0]:
            raise ValueError(f"n_basis must be in [1, min(state_sizes)={self.state_sizes[0]}], got {self.n_basis}")
        if any(not 0 <= n < self.n_basis for n in self.plot_basis):
            raise ValueError(f"plot_basis entries must be in [0, n_basis={self.n_basis}), got {self.plot_basis}")
        if not (0 < self.dt < self.t_max and 0 <= self.t_min < self.t_max):
            raise ValueError(f"need 0 < dt < t_max and 0 <= t_min < t_max, got dt={self.dt}, t_min={self.t_min}, "
                             f"t_max={self.t_max}")


def col(n: int) -> str:
    return f"N={n}"


def theorem3_cells(cfg: Theorem3Config) -> set[tuple[str, str]]:
    rows = ("weak error", "sup error", "bilinear error", "ZOH error")
    return {(r, col(n)) for r in rows for n in cfg.state_sizes} | {("weak error", "log-log slope")}


@register("analytic.theorem3", config=Theorem3Config, kind="analytic", cells=theorem3_cells)
def run_theorem3(cfg: Theorem3Config, ctx: RunContext) -> RunOutput:
    m = cfg.n_basis
    ts = uniform_grid(cfg.t_max, cfg.grid)  # (G,)
    length = round(cfg.t_max / cfg.dt)
    a, b = hippo_legs(m)  # the leading m x m block determines K_n for n < m (eq. 4 is lower triangular)
    k_s4 = legs_basis(m, ts)  # (G, m)
    i_s4 = dense_basis_integral(a, b, k_s4)  # (G, m)
    far = ts >= cfg.t_min
    disc_s4 = {meth: dense_discrete(a, b, cfg.dt, length, meth) for meth in ("bilinear", "zoh")}  # (L, m)

    cells, errs = [], {"weak": [], "sup": [], "sup_far": [], "bilinear": [], "zoh": []}
    plot = {}
    for n in cfg.state_sizes:
        ctx.cell_started(col(n), cells)
        lam, coef = s4d_legs_modes(n, rows=m)  # (N/2,), (m, N/2)
        k_d = modal_basis(lam, coef, ts)
        errs["weak"].append(rel_max_error(modal_basis_integral(lam, coef, ts), i_s4))
        errs["sup"].append(rel_max_error(k_d, k_s4))
        errs["sup_far"].append(float(np.abs(k_d - k_s4)[far].max() / np.abs(k_s4).max()))
        disc_d = {meth: modal_discrete(lam, coef, cfg.dt, length, meth) for meth in ("bilinear", "zoh")}
        for meth in ("bilinear", "zoh"):
            errs[meth].append(rel_max_error(disc_d[meth], disc_s4[meth]))
        if n == cfg.state_sizes[-1]:
            plot = {"k_s4d": k_d, **{f"disc_{meth}": disc_d[meth] for meth in disc_d}}
        cells += [
            Cell("weak error", col(n), errs["weak"][-1], "rel",
                 "max_t,n |int_0^t (K^D_n - K_n)| / max |int_0^t K_n|"),
            Cell("sup error", col(n), errs["sup"][-1], "rel", "max_t,n |K^D_n - K_n| / max |K_n| on [0, t_max]"),
            Cell("bilinear error", col(n), errs["bilinear"][-1], "rel", f"discrete kernels at dt={cfg.dt:g}"),
            Cell("ZOH error", col(n), errs["zoh"][-1], "rel", f"discrete kernels at dt={cfg.dt:g}"),
        ]
        ctx.cell_finished(col(n), cells)
    slope = float(np.polyfit(np.log(cfg.state_sizes), np.log(errs["weak"]), 1)[0]) if len(cfg.state_sizes) > 1 \
        else float("nan")
    cells.append(Cell("weak error", "log-log slope", slope, "-",
                      f"least-squares slope of log(weak error) vs log N over N = {cfg.state_sizes}"))

    pick = cfg.plot_basis
    series = {
        "state_sizes": list(cfg.state_sizes), "n_basis": m, "t_max": cfg.t_max, "dt": cfg.dt, "t_min": cfg.t_min,
        "errors": errs, "weak_slope": slope, "plot_state_size": cfg.state_sizes[-1], "plot_basis": list(pick),
        "t": to_json(thin(ts, cfg.plot_points)),
        "k_s4": to_json(thin(k_s4[:, pick], cfg.plot_points).T),  # (len(pick), G')
        "k_s4d": to_json(thin(plot["k_s4d"][:, pick], cfg.plot_points).T),
        "t_disc": to_json(np.arange(length) * cfg.dt),
        "disc_s4_bilinear": to_json(disc_s4["bilinear"][:, pick].T),  # (len(pick), L)
        "disc_s4d_bilinear": to_json(plot["disc_bilinear"][:, pick].T),
        "disc_s4d_zoh": to_json(plot["disc_zoh"][:, pick].T),
    }
    notes = [
        (f"K^D = basis of (A^(N), B/2) (S4D-LegS), K = basis of (A, B) (S4-LegS); first {m} basis functions "
         f"on a grid of {cfg.grid} points over [0, {cfg.t_max:g}]."),
        f"sup error over t >= {cfg.t_min:g} (away from the t = 0 jump B/2 vs B): "
        + ", ".join(f"N={n}: {e:.3g}" for n, e in zip(cfg.state_sizes, errs["sup_far"]))
        + ". The pointwise error is an oscillation at the top frequency ~N^2/pi that does not shrink; the "
        "limit of Theorem 3 holds in the weak sense (weak error) and, discretized, for the bilinear rule.",
    ]
    return RunOutput(cells=cells, series=series, notes=notes)


# ------------------------------------------------------------------------------------------------ plots


@register_plot("theorem3_basis")
def plot_theorem3_basis(result: dict, path: Path, expected: dict | None = None) -> None:
    """Like S4D Fig. 2: S4-LegS basis; S4D-LegS in continuous time, discretized by ZOH and by bilinear."""
    import matplotlib.pyplot as plt

    s = result["series"]
    n_plot = s["plot_state_size"]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4), sharey=True)
    panels = [
        ("(a) S4-LegS  $e^{tA}B$", s["t"], s["k_s4"], "-"),
        (f"(b) S4D-LegS $(A^{{(N)}}, B/2)$, continuous, N={n_plot}", s["t"], s["k_s4d"], "-"),
        (f"(c) S4D-LegS, ZOH, dt={s['dt']:g}", s["t_disc"], s["disc_s4d_zoh"], ".-"),
        (f"(d) S4D-LegS, bilinear, dt={s['dt']:g}", s["t_disc"], s["disc_s4d_bilinear"], ".-"),
    ]
    for ax, (title, t, ks, style) in zip(axes, panels):
        for n, k in zip(s["plot_basis"], ks):
            ax.plot(t, k, style, lw=0.8, ms=3, label=f"$K_{n}$")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("t")
        ax.grid(alpha=0.3)
    for n, k in zip(s["plot_basis"], s["disc_s4_bilinear"]):  # S4-LegS bilinear as reference in (c), (d)
        for ax in axes[2:]:
            ax.plot(s["t_disc"], k, "k:", lw=0.8)
    axes[0].set_ylabel("$K_n(t)$  (discrete: $\\bar K_l / dt$)")
    axes[0].legend(fontsize=8)
    axes[3].plot([], [], "k:", label="S4-LegS, same rule")
    axes[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@register_plot("theorem3_error")
def plot_theorem3_error(result: dict, path: Path, expected: dict | None = None) -> None:
    """The errors of Theorem 3 against N, log-log."""
    import matplotlib.pyplot as plt

    s = result["series"]
    ns, e = s["state_sizes"], s["errors"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.loglog(ns, e["weak"], "o-", label=f"weak (integrated), slope {s['weak_slope']:.2f}")
    ax.loglog(ns, e["sup"], "s-", label="sup over [0, T]")
    ax.loglog(ns, e["sup_far"], "s--", label=f"sup over [{s['t_min']:g}, T]")
    ax.loglog(ns, np.maximum(e["bilinear"], 1e-17), "^-", label=f"discrete bilinear, dt={s['dt']:g}")
    ax.loglog(ns, np.maximum(e["zoh"], 1e-17), "v-", label=f"discrete ZOH, dt={s['dt']:g}")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("state size N")
    ax.set_ylabel("relative error vs S4-LegS")
    ax.set_title(f"Theorem 3: basis of $(A^{{(N)}}, B/2)$ vs $(A, B)$, first {s['n_basis']} functions", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
