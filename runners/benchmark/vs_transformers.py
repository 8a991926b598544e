"""S4 Table 3: training speed and memory relative to the Transformer, at lengths 1024 and 4096.

Protocol (S4 Appendix D.1, following Tay et al.'s Long Range Arena): 4 layers, hidden dimension 256, 4 heads,
query/key/value dimension 128, batch 32, ~600k parameters; S4 parameter-tied at the same depth and width
(state size N = 256). Cells are ratios to the Transformer row: Speed = Transformer step time / model step
time, Mem. = model memory / Transformer memory. The Transformer row materializes its softmax attention as
the 2020 baselines did; the row "Transformer (fused SDPA)" uses torch's scaled_dot_product_attention.
A model that runs out of memory is recorded as X (and so are the ratios that need it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import torch
import torch.nn.functional as F

from ssm_core import SequenceModel
from ssm_core.baselines import TransformerModel

from ..specs.model_schema import MAX_VOCAB, check_layer
from ..specs.registry import Cell, RunContext, RunOutput, register
from ..specs.schema import MAX_LENGTH, MAX_WIDTH, Bool, Int, Ints, Mapping, Num, Opt, settings
from .common import cuda_memory_limit, float32_matmul, fmt, measure_training_step, ratio

#: Table 3 rows (names as in expected/s4-table-3.yaml) -> TransformerModel attention settings (None: S4).
MODELS: dict[str, dict | None] = {
    "Transformer": {"attention": "softmax", "impl": "materialized"},
    "Transformer (fused SDPA)": {"attention": "softmax", "impl": "sdpa"},
    "Performer": {"attention": "performer"},
    "Linear Trans.": {"attention": "linear"},
    "S4": None,
}
REFERENCE = "Transformer"


@settings
class VsTransformersConfig:
    lengths: Ints(1, MAX_LENGTH) = field(default_factory=lambda: [1024, 4096])  # the paper's lengths: column labels
    length_divisor: Int(1, MAX_LENGTH) = 1  # run at length / length_divisor (smoke tier)
    batch: Int(1, 1 << 16) = 32
    d_model: Int(1, MAX_WIDTH) = 256
    n_layers: Int(1, 1024) = 4
    n_heads: Int(1, 1024) = 4
    qkv_dim: Int(1, MAX_WIDTH) = 128
    ffn_dim: Int(0, 1 << 18) = 0  # 0: mixer-only blocks (see the spec: ~600k parameters leaves no room for an FFN)
    vocab_size: Int(1, MAX_VOCAB) = 256  # byte-level tokens, as LRA's text task
    n_classes: Int(2, 1 << 16) = 2
    performer_features: Opt(Int(1, 1 << 16)) = None  # None: round(d_head * ln d_head)
    s4_layer: Mapping = field(default_factory=lambda: {"mode": "s4", "d_state": 256, "output": "linear",
                                                       "tie_ab": True})
    models: list[str] = field(default_factory=lambda: list(MODELS))
    warmup: Int(0, 10_000) = 3
    reps: Int(1, 10_000) = 10
    allow_tf32: Bool = False
    memory_limit_gib: Opt(Num(0, lo_open=True)) = None
    step_graph: Bool = False  # CUDA: every model's whole training step replayed from one CUDA graph

    def __post_init__(self) -> None:
        if any(n % self.length_divisor for n in self.lengths):
            raise ValueError(f"length_divisor={self.length_divisor} must divide every length {self.lengths}")
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise ValueError(f"models: unknown {unknown}; allowed: {list(MODELS)}")
        if REFERENCE not in self.models:
            raise ValueError(f"models must include the reference row {REFERENCE!r} (every cell is relative to it)")
        if self.qkv_dim % self.n_heads:
            raise ValueError(f"qkv_dim={self.qkv_dim} must be divisible by n_heads={self.n_heads}")
        if "d_model" in self.s4_layer:
            raise ValueError("s4_layer.d_model is set by the runner (d_model)")
        check_layer("s4_layer", self.s4_layer)


def build_model(name: str, cfg: VsTransformersConfig) -> torch.nn.Module:
    """The Table 3 model named ``name``: a classifier over byte tokens with mean pooling."""
    if name == "S4":
        return SequenceModel(cfg.vocab_size, cfg.n_classes, cfg.d_model, cfg.n_layers, layer=dict(cfg.s4_layer),
                             norm="layer", prenorm=True, pool="mean", vocab_size=cfg.vocab_size)
    attn = dict(MODELS[name])
    if attn["attention"] == "performer":
        attn["n_features"] = cfg.performer_features
    return TransformerModel(cfg.vocab_size, cfg.n_classes, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.qkv_dim,
                            cfg.ffn_dim, pool="mean", **attn)


def _classifier_step(name: str, cfg: VsTransformersConfig, length: int, device: torch.device,
                     seed: int) -> Callable[[], tuple[Callable[[], None], torch.nn.Module]]:
    def build() -> tuple[Callable[[], None], torch.nn.Module]:
        torch.manual_seed(seed)
        model = build_model(name, cfg).to(device)
        tokens = torch.randint(0, cfg.vocab_size, (cfg.batch, length), device=device)  # (B, L)
        labels = torch.randint(0, cfg.n_classes, (cfg.batch,), device=device)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(tokens), labels).backward()

        return step, model

    return build


def vs_transformers_cells(cfg: VsTransformersConfig) -> set[tuple[str, str]]:
    return ({(m, f"{what} L={n}") for m in cfg.models for what in ("Speed", "Mem.") for n in cfg.lengths}
            | {(m, "Params") for m in cfg.models})


@register("benchmark.vs_transformers", config=VsTransformersConfig, kind="benchmark", cells=vs_transformers_cells)
def run_vs_transformers(cfg: VsTransformersConfig, ctx: RunContext) -> RunOutput:
    """S4 Table 3 cells: 'Speed L=..', 'Mem. L=..' per model (ratios to the Transformer), and 'Params'."""
    cells: list[Cell] = []
    series: dict[str, Any] = {"lengths": [], "run_lengths": [], "models": {m: [] for m in cfg.models}}
    notes = [(f"batch {cfg.batch}, d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, qkv "
              f"{cfg.qkv_dim}, ffn {cfg.ffn_dim}; S4 layer {cfg.s4_layer}; training step = forward + "
              f"cross-entropy + backward; TF32 {'on' if cfg.allow_tf32 else 'off'}; device {ctx.device}; "
              + ("every model's whole step replayed from one CUDA graph" if cfg.step_graph
                 else "every step run eagerly"))]
    params: dict[str, int] = {}
    with float32_matmul(cfg.allow_tf32), cuda_memory_limit(cfg.memory_limit_gib, ctx.device) as limit_note:
        if limit_note:
            notes.append(limit_note)
        for label in cfg.lengths:
            ctx.cell_started(f"L={label}", cells)
            length = label // cfg.length_divisor
            where = f"measured at L={length} (smoke size for the L={label} column); " if length != label else ""
            got = {}
            for name in cfg.models:
                got[name] = measure_training_step(_classifier_step(name, cfg, length, ctx.device, ctx.seed),
                                                  ctx.device, cfg.warmup, cfg.reps, step_graph=cfg.step_graph)
                if got[name].params:
                    params[name] = got[name].params
                series["models"][name].append({"ms": got[name].ms, "mb": got[name].mb})
            ref = got[REFERENCE]
            for name, m in got.items():
                raw = f"{fmt(m.ms, 'ms')}, {fmt(m.mb, 'MiB')}" if m.ok else m.note
                speed_note = f"{where}{REFERENCE} / {name} step time; {name}: {raw}; {REFERENCE}: {fmt(ref.ms, 'ms')}"
                mem_note = f"{where}{name} / {REFERENCE} memory; {name}: {raw}; {REFERENCE}: {fmt(ref.mb, 'MiB')}"
                if m.ok:
                    speed_note, mem_note = speed_note + f" ({m.note})", mem_note + f" ({m.note})"
                cells.append(Cell(name, f"Speed L={label}", ratio(ref.ms, m.ms), "ratio", speed_note))
                cells.append(Cell(name, f"Mem. L={label}", ratio(m.mb, ref.mb), "ratio", mem_note))
            series["lengths"].append(label)
            series["run_lengths"].append(length)
            ctx.cell_finished(f"L={label}", cells)
    for name in cfg.models:
        if name in params:
            cells.append(Cell(name, "Params", params[name], "parameters",
                              f"d_model {cfg.d_model}, {cfg.n_layers} layers, vocab {cfg.vocab_size}"))
    notes.append("parameters: " + ", ".join(f"{n} {p:,}" for n, p in params.items()))
    series["params"] = params
    return RunOutput(cells=cells, series=series, notes=notes)
