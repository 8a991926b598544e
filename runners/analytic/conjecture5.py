"""S4D Conjecture 5 / Figure 3 (and Proposition 4): the spectrum of HiPPO-LegS-D.

A^(D) = diagonalization of A^(N), the normal part of HiPPO-LegS (S4D eq. 5); Im(A)_n is the n-th largest
positive imaginary part (n < N/2). Conjecture 5: Im(A)_0 -> N^2/pi + c with c ~ 0.5236, and the others follow
an inverse law Im(A)_n = Theta(1/n), which S4D-Inv (eq. 8) approximates. Proposition 4: Re(A) = -1/2.

Cells per N:
  Im(A)_0 - N^2/pi         the offset the conjecture calls c
  |Im(A)_0 - N^2/pi|
  top rel. error           |Im(A)_0 - (N^2/pi + c)| / (N^2/pi + c)
  max |Re(A) + 1/2|        Proposition 4
  log dist. <law>          sqrt(mean_n log(Im(A)_n / law_n)^2) over the n with law_n != 0: how far the spectrum is
                           from S4D-Inv (eq. 8), S4D-Inv2 (eq. 12), S4D-Lin (eq. 9), S4D-Quad (eq. 13), in
                           the log scale of Fig. 3 (a distance of log 2 is a factor 2 throughout).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ssm_core.inits import s4d_inv, s4d_inv2, s4d_legs, s4d_lin, s4d_quad

from ..specs.registry import Cell, RunContext, RunOutput, register, register_plot
from ..specs.schema import MAX_STATE, Int, Ints, settings
from .basis import to_json

#: Conjecture 5's constant (S4D Section 4: "c ~ 0.5236").
PAPER_C = 0.5236
LAWS = {"S4D-Inv": s4d_inv, "S4D-Inv2": s4d_inv2, "S4D-Lin": s4d_lin, "S4D-Quad": s4d_quad}


@settings
class Conjecture5Config:
    state_sizes: Ints(4, MAX_STATE, even=True, increasing=True)  # N values (even)
    plot_state_size: Int(4, MAX_STATE, even=True) = 64  # N of the Fig. 3 plot


def log_distance(im: np.ndarray, law: np.ndarray) -> float:
    """sqrt(mean log(im / law)^2) over the entries where the law is nonzero (S4D-Lin's n = 0 is 0)."""
    keep = law > 0
    return float(np.sqrt(np.mean(np.log(im[keep] / law[keep]) ** 2)))


def conjecture5_cells(cfg: Conjecture5Config) -> set[tuple[str, str]]:
    rows = ("Im(A)_0 - N^2/pi", "|Im(A)_0 - N^2/pi|", "top rel. error", "max |Re(A) + 1/2|",
            *(f"log dist. {name}" for name in LAWS))
    return {(r, f"N={n}") for r in rows for n in cfg.state_sizes}


@register("analytic.conjecture5", config=Conjecture5Config, kind="analytic", cells=conjecture5_cells)
def run_conjecture5(cfg: Conjecture5Config, ctx: RunContext) -> RunOutput:
    cells, offsets, ratios = [], [], {}
    for n in cfg.state_sizes:
        ctx.cell_started(f"N={n}", cells)
        lam = s4d_legs(n)  # (N/2,) sorted by decreasing imaginary part
        im = lam.imag
        if np.any(np.diff(im) > 0) or im.min() <= 0:
            raise RuntimeError(f"S4D-LegS eigenvalues at N={n} are not sorted positive imaginary parts")
        col = f"N={n}"
        top = n * n / np.pi
        offset = float(im[0] - top)
        offsets.append(offset)
        cells += [
            Cell("Im(A)_0 - N^2/pi", col, offset, "1/t", "Conjecture 5 says -> c = +0.5236"),
            Cell("|Im(A)_0 - N^2/pi|", col, abs(offset), "1/t", None),
            Cell("top rel. error", col, float(abs(im[0] - (top + PAPER_C)) / (top + PAPER_C)), "rel",
                 "|Im(A)_0 - (N^2/pi + 0.5236)| / (N^2/pi + 0.5236)"),
            Cell("max |Re(A) + 1/2|", col, float(np.abs(lam.real + 0.5).max()), "1/t", "Proposition 4"),
        ]
        for name, law in LAWS.items():
            cells.append(Cell(f"log dist. {name}", col, log_distance(im, law(n).imag), "ln",
                              "rms of log(Im(A)_n / law_n) over n"))
        ratios[str(n)] = to_json(im / s4d_inv(n).imag)
        ctx.cell_finished(f"N={n}", cells)

    n_plot = cfg.plot_state_size
    series = {
        "state_sizes": list(cfg.state_sizes), "offsets": offsets, "paper_c": PAPER_C, "plot_state_size": n_plot,
        "imag": {"S4D-LegS": to_json(s4d_legs(n_plot).imag),
                 **{name: to_json(law(n_plot).imag) for name, law in LAWS.items()}},
        "ratio_to_inv": ratios,
    }
    limit = offsets[-1]
    notes = [(f"Im(A)_0 - N^2/pi at N={cfg.state_sizes[-1]}: {limit:.6f} (Conjecture 5: +{PAPER_C}; "
              f"-pi/6 = {-np.pi / 6:.6f})."),
             (f"Im(A)_n / S4D-Inv_n ranges over [{min(min(r) for r in ratios.values()):.3f}, "
              f"{max(max(r) for r in ratios.values()):.3f}] across the N measured.")]
    return RunOutput(cells=cells, series=series, notes=notes)


# ------------------------------------------------------------------------------------------------ plots


@register_plot("conjecture5_eigs")
def plot_conjecture5_eigs(result: dict, path: Path, expected: dict | None = None) -> None:
    """Like S4D Fig. 3: imaginary parts of the diagonal inits at one N; and S4D-LegS / S4D-Inv per N."""
    import matplotlib.pyplot as plt

    s = result["series"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8))
    styles = {"S4D-LegS": ("C0", "-", 2.5), "S4D-Inv": ("C1", "--", 1.5), "S4D-Lin": ("C2", "-", 1.5),
              "S4D-Quad": ("C3", "-", 1.5), "S4D-Inv2": ("C4", "-", 1.5)}
    for name, im in s["imag"].items():
        color, ls, lw = styles.get(name, (None, "-", 1.0))
        n = np.arange(len(im))
        ax.plot(n, np.maximum(im, 1e-3), ls, color=color, lw=lw, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("n (eigenvalue index, sorted)")
    ax.set_ylabel("Im$(A_n)$")
    ax.set_title(f"S4D eigenvalues $-1/2 + i\\lambda_n$, N={s['plot_state_size']} (cf. Fig. 3)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    for n_str, r in s["ratio_to_inv"].items():
        x = (np.arange(len(r)) + 0.5) / len(r)
        bx.plot(x, r, lw=1, label=f"N={n_str}")
    bx.axhline(1.0, color="k", lw=0.8, ls=":")
    bx.set_xlabel("(n + 1/2) / (N/2)")
    bx.set_ylabel("Im(S4D-LegS)$_n$ / Im(S4D-Inv)$_n$")
    bx.set_title("S4D-LegS against the inverse law (eq. 8)", fontsize=10)
    bx.grid(alpha=0.3)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@register_plot("conjecture5_top")
def plot_conjecture5_top(result: dict, path: Path, expected: dict | None = None) -> None:
    """Im(A)_0 - N^2/pi against N, with Conjecture 5's constant."""
    import matplotlib.pyplot as plt

    s = result["series"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.semilogx(s["state_sizes"], s["offsets"], "o-", label="measured $\\Im(A)_0 - N^2/\\pi$")
    ax.axhline(s["paper_c"], color="C3", ls="--", label=f"Conjecture 5: c = +{s['paper_c']}")
    ax.axhline(-np.pi / 6, color="k", ls=":", label="$-\\pi/6$")
    ax.set_xticks(s["state_sizes"], [str(n) for n in s["state_sizes"]])
    ax.minorticks_off()
    ax.set_xlabel("state size N")
    ax.set_ylabel("offset")
    ax.set_title("Largest imaginary part of HiPPO-LegS-D", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
