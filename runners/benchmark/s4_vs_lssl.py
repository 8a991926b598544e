"""S4 Table 2: training step time and memory of one LSSL layer vs one S4 layer with H features.

Protocol (S4 Appendix D.1): a single layer with H hidden features; the LSSL's state size is N = H (as in the
LSSL paper), S4's state size is parameter-matched to it, "a state size of N/2" (``s4_state_fraction``);
one forward + backward pass. Rows LSSL, S4 and Ratio = LSSL / S4 for time and for memory.
The paper gives neither batch nor length: the spec chooses them (reproductions/s4-table-2.yaml says why).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import torch

from ssm_core import SSMLayer
from ssm_core.baselines import LSSL

from ..specs.model_schema import check_layer, check_lssl
from ..specs.registry import Cell, RunContext, RunOutput, register
from ..specs.schema import MAX_LENGTH, MAX_WIDTH, Bool, Int, Ints, Mapping, Num, Opt, settings
from .common import cuda_memory_limit, float32_matmul, fmt, measure_training_step, ratio


@settings
class S4VsLSSLConfig:
    dims: Ints(1, MAX_WIDTH) = field(default_factory=lambda: [128, 256, 512])  # the paper's H: column labels
    dim_divisor: Int(1, MAX_WIDTH) = 1  # run at H / dim_divisor (smoke tier: CPU-sized layers under the paper's labels)
    batch: Int(1, 1 << 16) = 1
    length: Int(1, MAX_LENGTH) = 1024
    s4_state_fraction: Num(0, 16, lo_open=True) = 0.5  # S4 d_state = fraction * H (App. D.1: "a state size of N/2")
    s4_layer: Mapping = field(default_factory=lambda: {"mode": "s4", "output": "linear"})  # more SSMLayer kwargs
    lssl: Mapping = field(default_factory=dict)  # more LSSL kwargs (e.g. krylov_method)
    warmup: Int(0, 10_000) = 3
    reps: Int(1, 10_000) = 10
    allow_tf32: Bool = False
    memory_limit_gib: Opt(Num(0, lo_open=True)) = None

    def __post_init__(self) -> None:
        if any(h % self.dim_divisor for h in self.dims):
            raise ValueError(f"dim_divisor={self.dim_divisor} must divide every entry of dims {self.dims}")
        for key in ("d_model", "d_state", "transposed"):
            if key in self.s4_layer:
                raise ValueError(f"s4_layer.{key} is set by the runner (from dims and s4_state_fraction)")
        if "d_model" in self.lssl or "d_state" in self.lssl:
            raise ValueError("lssl.d_model / lssl.d_state are set by the runner (N = H, App. D.1)")
        check_layer("s4_layer", self.s4_layer)
        check_lssl("lssl", self.lssl)


def _s4_state(h: int, fraction: float) -> int:
    n = max(2, round(fraction * h))
    return n + (n % 2)  # even: N/2 complex modes are stored


def _layer_step(make: Callable[[], torch.nn.Module], cfg: S4VsLSSLConfig, h: int, device: torch.device,
                seed: int) -> Callable[[], tuple[Callable[[], None], torch.nn.Module]]:
    def build() -> tuple[Callable[[], None], torch.nn.Module]:
        torch.manual_seed(seed)
        layer = make().to(device)
        u = torch.randn(cfg.batch, cfg.length, h, device=device, requires_grad=True)  # (B, L, H)
        grad = torch.randn(cfg.batch, cfg.length, h, device=device)  # upstream gradient

        def step() -> None:
            layer.zero_grad(set_to_none=True)
            u.grad = None
            layer(u).backward(grad)

        return step, layer

    return build


def s4_vs_lssl_cells(cfg: S4VsLSSLConfig) -> set[tuple[str, str]]:
    return {(row, f"{what} H={h}") for row in ("LSSL", "S4", "Ratio") for what in ("Step ms", "Memory MB")
            for h in cfg.dims}


@register("benchmark.s4_vs_lssl", config=S4VsLSSLConfig, kind="benchmark", cells=s4_vs_lssl_cells)
def run_s4_vs_lssl(cfg: S4VsLSSLConfig, ctx: RunContext) -> RunOutput:
    """S4 Table 2 cells: 'Step ms H=..', 'Memory MB H=..' (in MiB, as the paper's MB) for rows LSSL, S4, Ratio."""
    cells: list[Cell] = []
    series: dict[str, Any] = {"dims": [], "run_dims": [], "s4_d_state": [], "LSSL": [], "S4": []}
    notes = [(f"batch {cfg.batch}, length {cfg.length}, one forward + backward (input gradient included), "
              f"TF32 {'on' if cfg.allow_tf32 else 'off'}; device {ctx.device}")]
    with float32_matmul(cfg.allow_tf32), cuda_memory_limit(cfg.memory_limit_gib, ctx.device) as limit_note:
        if limit_note:
            notes.append(limit_note)
        for label in cfg.dims:
            ctx.cell_started(f"H={label}", cells)
            h = label // cfg.dim_divisor
            n_s4 = _s4_state(h, cfg.s4_state_fraction)
            where = f"measured at H={h} (smoke size for the H={label} column); " if h != label else ""
            makers = {
                "LSSL": lambda h=h: LSSL(h, **cfg.lssl),
                "S4": lambda h=h, n=n_s4: SSMLayer(h, n, **cfg.s4_layer),
            }
            got = {}
            for row, make in makers.items():
                m = measure_training_step(_layer_step(make, cfg, h, ctx.device, ctx.seed), ctx.device,
                                          cfg.warmup, cfg.reps)
                got[row] = m
                state = f"N={h}" if row == "LSSL" else f"d_state={n_s4}"
                note = f"{where}{state}, {m.params} parameters; {m.note}" if m.ok else f"{where}{m.note}"
                cells.append(Cell(row, f"Step ms H={label}", m.ms, "ms", note))
                cells.append(Cell(row, f"Memory MB H={label}", m.mb, "MiB", note))
                series[row].append({"ms": m.ms, "mb": m.mb, "params": m.params})
            lssl, s4 = got["LSSL"], got["S4"]
            cells.append(Cell("Ratio", f"Step ms H={label}", ratio(lssl.ms, s4.ms), "ratio",
                              f"{where}LSSL / S4: {fmt(lssl.ms, 'ms')} / {fmt(s4.ms, 'ms')}"))
            cells.append(Cell("Ratio", f"Memory MB H={label}", ratio(lssl.mb, s4.mb), "ratio",
                              f"{where}LSSL / S4: {fmt(lssl.mb, 'MiB')} / {fmt(s4.mb, 'MiB')}"))
            series["dims"].append(label)
            series["run_dims"].append(h)
            series["s4_d_state"].append(n_s4)
            ctx.cell_finished(f"H={label}", cells)
            if lssl.params and s4.params:
                notes.append(f"H={h}: parameters LSSL {lssl.params:,} (N={h}) vs S4 {s4.params:,} "
                             f"(d_state={n_s4}), ratio {s4.params / lssl.params:.3f}")
    return RunOutput(cells=cells, series=series, notes=notes)
