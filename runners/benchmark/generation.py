"""Autoregressive generation throughput: S4 in recurrent step mode vs a Transformer with a key/value cache
(S4 Tables 7 and 8; protocol in S4 Appendix D.3.3).

Each model generates ``length`` tokens from scratch for a batch of sequences, one token per step, feeding its
greedy (argmax) prediction back in; the last token sees the whole context. Throughput = sequences (images)
or tokens per second of that loop. As in App. D.3.3 the batch is maximized to fit memory (optionally under a
memory limit: 16 GB for CIFAR): on a GPU the runner searches the largest batch that runs the last steps of a
full-length context, up to ``max_batch``. All models of a setting share width and depth. Speedup =
throughput / the Transformer's throughput, the ratio the paper prints next to Table 7 (65.1x) and 8 (60x).
A setting's ``timed_steps`` times the constant-state models over that many of its tokens: their step is the same
state update at every position, so its rate is the whole sequence's (the Transformer always runs every token).

Excluded from the timed loop: building the model, allocating the state (the Transformer's key/value cache)
and S4's one-time switch to recurrent mode (``setup_step``). Included for every model: embedding, all
layers, the output head and the argmax.

``step_graph: true`` (CUDA only) replays the whole per-token step (embedding, every layer, head, argmax, the
state update) of the constant-state models, S4, S4D and the Linear Transformer, from one CUDA graph captured
before the timed loop, so the host issues one launch per token instead of one per operation; the softmax
Transformer runs eagerly (its cached step changes shape with the context). Results say which. The Linear
Transformer's position is a device tensor here (``TransformerModel.step``), so its step is the same at every
position. S4 and S4D step their states in place; on CUDA (the 'triton' backend) each layer's state update and
output reduction is one fused kernel (ssm_core.ops.step_triton) that reads and writes each state once; the Linear
Transformer updates its running sums in place.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import field, fields
from typing import Any

import torch

from ssm_core import SequenceModel
from ssm_core.baselines import TransformerModel

from ..specs.model_schema import MAX_VOCAB, check_layer
from ..specs.registry import Cell, RunContext, RunOutput, register
from ..specs.schema import (MAX_LENGTH, MAX_WIDTH, Bool, Choice, Int, Mapping, Num, Opt, SettingsError, Text, one_line,
                             settings)
from .common import (
    cuda_memory_limit,
    float32_matmul,
    free_memory,
    is_out_of_memory,
    oom_note,
    synchronize,
)

ROWS = ("Transformer", "Linear Transformer", "S4", "S4D")
REFERENCE = "Transformer"
UNITS = {"images": "Images/s", "tokens": "Tokens/s"}
UNIT_NAMES = tuple(UNITS)
ATTENTION_IMPLS = ("materialized", "sdpa")


@settings(frozen=True)
class GenerationSetting:
    """One throughput table: e.g. name 'Table 7', unit 'images' -> columns 'Images/s (Table 7)', 'Speedup (Table 7)'."""

    name: Text
    unit: Choice(UNIT_NAMES)  # 'images' (one image = one generated sequence of `length` tokens) | 'tokens'
    length: Int(1, MAX_LENGTH)  # tokens generated per sequence = the longest context seen
    vocab_size: Int(1, MAX_VOCAB)
    d_model: Int(1, MAX_WIDTH)
    n_layers: Int(1, 1024)
    n_heads: Int(1, 1024)
    ffn_dim: Int(0, 1 << 18)  # FFN width of the Transformer blocks (S4 blocks have their GLU output projection instead)
    memory_limit_gib: Opt(Num(0, lo_open=True))
    max_batch: Int(1, 1 << 20)
    # constant-state models (S4, S4D, the Linear Transformer): time this many of the ``length`` tokens, whose cost
    # does not depend on the position (the same state update every step), and report the rate; None: every token.
    # The Transformer always generates the whole sequence (its step reads a cache that grows with the position).
    timed_steps: Opt(Int(1, MAX_LENGTH)) = None

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    @property
    def throughput_column(self) -> str:
        return f"{UNITS[self.unit]} ({self.name})"

    @property
    def speedup_column(self) -> str:
        return f"Speedup ({self.name})"

    @property
    def state_column(self) -> str:
        return f"State KB/seq ({self.name})"


def parse_setting(raw: Any, where: str) -> GenerationSetting:
    """One entry of ``settings`` as a :class:`GenerationSetting`; ValueError naming ``where`` and the key otherwise."""
    if not isinstance(raw, dict):
        raise TypeError(f"{where}: must be a mapping with keys {[f.name for f in fields(GenerationSetting)]}, "
                        f"got {raw!r}")
    try:
        return GenerationSetting(**raw)
    except SettingsError as exc:
        unknown = sorted(p.key for p in exc.problems if p.kind == "unknown")
        missing = sorted(p.key for p in exc.problems if p.kind == "missing")
        if unknown or missing:
            keys = [f.name for f in fields(GenerationSetting)]
            raise ValueError(f"{where}: unknown keys {unknown}, missing keys {missing}; allowed: {keys[:-1]}, "
                             f"optional: {keys[-1:]}") from None
        raise ValueError(one_line(exc.problems, where, sep=".")) from None


@settings
class GenerationConfig:
    settings: list[dict]  # each: the fields of GenerationSetting
    models: list[str] = field(default_factory=lambda: list(ROWS))
    s4_layer: Mapping = field(default_factory=lambda: {"mode": "s4", "d_state": 64, "output": "glu"})
    s4d_layer: Mapping = field(default_factory=lambda: {"mode": "s4d", "d_state": 64, "output": "glu"})
    attention_impl: Choice(ATTENTION_IMPLS) = "materialized"  # decoding step of the Transformer
    batch_search: Bool = True  # on CUDA: largest batch (<= max_batch) that fits; CPU: max_batch as given
    refine_steps: Int(0, 64) = 2  # bisection steps between the largest fitting power of two and twice it
    warmup_steps: Int(0, 10_000) = 8
    allow_tf32: Bool = False
    step_graph: Bool = False  # S4 / S4D: replay the whole per-token step from one CUDA graph (module docstring)

    def __post_init__(self) -> None:
        if not self.settings:
            raise ValueError("settings: give at least one setting")
        parsed = [parse_setting(s, f"settings[{i}]") for i, s in enumerate(self.settings)]
        names = [s.name for s in parsed]
        if len(set(names)) != len(names):
            raise ValueError(f"settings: names must be distinct, got {names}")
        unknown = [m for m in self.models if m not in ROWS]
        if unknown or REFERENCE not in self.models:
            raise ValueError(f"models: allowed {list(ROWS)} and must include {REFERENCE!r}; got {self.models}")
        for key in ("s4_layer", "s4d_layer"):
            if "d_model" in getattr(self, key):
                raise ValueError(f"{key}.d_model is set by the runner (from the setting's d_model)")
        check_layer("s4_layer", self.s4_layer)
        check_layer("s4d_layer", self.s4d_layer)

    @property
    def parsed_settings(self) -> list[GenerationSetting]:
        return [parse_setting(s, f"settings[{i}]") for i, s in enumerate(self.settings)]


# -- models and their step loops ---------------------------------------------------------------------------
def state_tensors(x: Any) -> list[torch.Tensor]:
    """The tensors of a (nested) generation state, in a fixed order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in state_tensors(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in state_tensors(v)]
    return []


class _Generator:
    """A model in generation mode: ``state(batch, start)`` and ``step(tokens, state)``."""

    def __init__(self, name: str, cfg: GenerationConfig, s: GenerationSetting, device: torch.device):
        self.name, self.length, self.device = name, s.length, device
        if name in ("S4", "S4D"):
            layer = dict(cfg.s4_layer if name == "S4" else cfg.s4d_layer)
            self.model: torch.nn.Module = SequenceModel(s.vocab_size, s.vocab_size, s.d_model, s.n_layers,
                                                        layer=layer, pool="none", vocab_size=s.vocab_size)
            self.recurrent = True
        else:
            attention = "softmax" if name == "Transformer" else "linear"
            self.model = TransformerModel(s.vocab_size, s.vocab_size, s.d_model, s.n_layers, s.n_heads,
                                          s.d_model, s.ffn_dim, attention=attention, impl=cfg.attention_impl,
                                          causal=True, pool="none")
            self.recurrent = attention != "softmax"
        self.model.to(device).eval()
        with torch.inference_mode():
            self.model.setup_step()  # S4: discretize once for recurrent mode (not timed)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.graphed = cfg.step_graph and self.recurrent
        if self.graphed and device.type != "cuda":
            raise ValueError(f"step_graph: true replays the step from a CUDA graph; the device here is {device}")

    def state(self, batch: int, start: int = 0) -> Any:
        """Fresh state; ``start`` > 0 puts the Transformer's cache at that position (for the batch probe)."""
        if isinstance(self.model, SequenceModel):
            return self.model.default_state(batch, self.device)
        state = self.model.default_state(batch, self.length, self.device)
        # the Linear Transformer's position as a tensor: its step is then the same at every position (graphable)
        state["pos"] = torch.full((1,), start, device=self.device) if self.recurrent else start
        for layer in state["layers"]:
            if "pos" in layer:
                layer["pos"] = start
        return state

    def state_bytes(self) -> int:
        """Bytes of one sequence's generation state at the full context: the key/value cache of ``length``
        positions (Transformer), the constant-size recurrent state (Linear Transformer, S4)."""
        with torch.inference_mode():
            state = self.state(1)
            if isinstance(state, dict):  # the Transformers' position counter is the batch's, not a sequence's
                state = {k: v for k, v in state.items() if k != "pos"}
            return sum(t.numel() * t.element_size() for t in state_tensors(state))

    def fits(self, batch: int) -> bool:
        """Does ``batch`` run the last two steps of a full-length context? (its peak memory is the run's peak)"""
        try:
            self.run(batch, 2, start=0 if self.recurrent else self.length - 2)
            ok = True
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            ok = False
        free_memory(self.device)
        return ok

    def step_in_place(self, tokens: torch.Tensor, state: Any) -> None:
        """One generation step that writes its results into its inputs (the body a CUDA graph replays): ``tokens``
        (B,) <- the argmax of the logits, every tensor of ``state`` <- the next state's."""
        if isinstance(self.model, SequenceModel):  # each layer writes its new state over the old one
            logits, new_state = self.model.step(tokens, state, inplace=True)  # (B, vocab)
        else:
            logits, new_state = self.model.step(tokens, state)
        old, new = state_tensors(state), state_tensors(new_state)
        if len(old) != len(new):
            raise RuntimeError(f"{self.name}: the step returned {len(new)} state tensors for {len(old)}")
        tokens.copy_(logits.argmax(dim=-1))
        for o, n in zip(old, new):
            if n is not o:
                o.copy_(n)

    def capture(self, tokens: torch.Tensor, state: Any) -> Callable[[], None]:
        """A CUDA graph of :meth:`step_in_place` on these tensors (warmed up on a side stream, then the state and
        tokens restored); returns its replay."""
        flat = state_tensors(state)
        saved, tokens0 = [t.clone() for t in flat], tokens.clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # allocator, kernel selection and autotuning before the capture
                self.step_in_place(tokens, state)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step_in_place(tokens, state)
        for t, s in zip(flat, saved):
            t.copy_(s)
        tokens.copy_(tokens0)
        return graph.replay

    def run(self, batch: int, steps: int, start: int = 0) -> float:
        """Generate ``steps`` tokens for ``batch`` sequences; return the seconds of the loop alone."""
        with torch.inference_mode():
            state = self.state(batch, start)
            tokens = torch.zeros(batch, dtype=torch.long, device=self.device)
            if self.graphed:
                replay = self.capture(tokens, state)  # not timed, like setup_step
                synchronize(self.device)
                t0 = time.perf_counter()
                for _ in range(steps):
                    replay()
                synchronize(self.device)
                return time.perf_counter() - t0
            synchronize(self.device)
            t0 = time.perf_counter()
            recurrent_ssm = isinstance(self.model, SequenceModel)
            for _ in range(steps):
                if recurrent_ssm:
                    logits, state = self.model.step(tokens, state, inplace=True)  # (B, vocab)
                else:
                    logits, state = self.model.step(tokens, state)
                tokens = logits.argmax(dim=-1)
            synchronize(self.device)
            return time.perf_counter() - t0


def largest_batch(fits: Callable[[int], bool], max_batch: int, refine_steps: int) -> tuple[int, str]:
    """Largest batch <= max_batch with fits(batch): halve from max_batch until it fits, then bisect towards
    the smallest size known not to fit. Returns (batch, how it was limited); (0, ...) if even 1 does not fit."""
    b = max_batch
    while b >= 1 and not fits(b):
        b //= 2
    if b == 0:
        return 0, "batch 1 does not fit"
    if b == max_batch:
        return b, f"capped at max_batch={max_batch} (memory was not the limit)"
    lo, hi = b, min(2 * b, max_batch + 1)  # lo fits, hi does not (or is past the cap)
    for _ in range(refine_steps):
        mid = (lo + hi) // 2
        if mid in (lo, hi):
            break
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, f"largest batch that fits memory (searched up to {max_batch})"


def _measure(name: str, cfg: GenerationConfig, s: GenerationSetting, ctx: RunContext) -> dict[str, Any]:
    torch.manual_seed(ctx.seed)
    gen = _Generator(name, cfg, s, ctx.device)
    if ctx.device.type == "cuda" and cfg.batch_search:
        batch, how = largest_batch(gen.fits, s.max_batch, cfg.refine_steps)
    else:
        why = "no search on CPU" if ctx.device.type != "cuda" else "batch_search off"
        batch, how = s.max_batch, f"batch as configured ({why})"
    # a constant-state model's step costs the same at every position: timed_steps of them give its rate
    steps = s.length if not gen.recurrent or s.timed_steps is None else min(s.timed_steps, s.length)
    out: dict[str, Any] = {"params": gen.params, "batch": batch, "batch_limit": how, "seconds": None,
                           "tokens_timed": steps, "throughput": "X", "note": how,
                           "state_kb": gen.state_bytes() / 1024}
    while batch >= 1:
        try:
            if cfg.warmup_steps:
                gen.run(batch, min(cfg.warmup_steps, s.length))
            seconds = gen.run(batch, steps)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            out["note"] = f"{oom_note(exc, ctx.device)} at batch {batch}; retried at {batch // 2}"
            batch //= 2
            free_memory(ctx.device)
            continue
        tokens_per_s = batch * steps / seconds
        timed = (f"{steps} tokens in {seconds:.3g} s" if steps == s.length else
                 f"the first {steps} of {s.length} tokens in {seconds:.3g} s (the same state update at every "
                 f"position)")
        out.update(batch=batch, seconds=seconds,
                   throughput=tokens_per_s if s.unit == "tokens" else tokens_per_s / s.length,
                   note=f"batch {batch} ({out['note']}), {timed}, {tokens_per_s:,.0f} tokens/s, "
                        f"{gen.params:,} parameters")
        break
    return out


def state_traffic(got: dict[str, dict[str, Any]], length: int) -> dict[str, dict[str, float]]:
    """What bounds each model's step: the bytes of state it moves per generated token and the rate it moved them.

    Per token a recurrent model (S4, S4D, the Linear Transformer) reads and writes its whole state (2 x its state
    bytes); the Transformer reads its key/value cache, on average half full over a generated sequence (half its
    full-context state bytes). ``bound_speedup``: a recurrent model's speed-up over the Transformer if both moved
    their state at the same bandwidth (the Transformer's traffic / the model's); ``state_gbs``: the rate each one
    moved its state in the run (tokens/s x bytes per token). Models that did not run (throughput 'X') are left out.
    """
    out: dict[str, dict[str, float]] = {}
    ref = got.get(REFERENCE)
    for name, m in got.items():
        if m.get("throughput") == "X" or not m.get("seconds"):
            continue
        per_token = m["state_kb"] * 1024 * (0.5 if name == REFERENCE else 2.0)  # bytes moved per generated token
        tokens_per_s = m["batch"] * m.get("tokens_timed", length) / m["seconds"]
        out[name] = {"traffic_kb_per_token": per_token / 1024, "state_gbs": tokens_per_s * per_token / 1e9}
        if name != REFERENCE and ref is not None:
            out[name]["bound_speedup"] = ref["state_kb"] * 0.5 / (m["state_kb"] * 2.0)
    return out


def _rate(gbs: float) -> str:
    return f"{gbs:,.0f}" if gbs >= 10 else f"{gbs:.3g}"


def state_traffic_note(setting: str, traffic: dict[str, dict[str, float]]) -> str:
    """The note that reads :func:`state_traffic` for one setting."""
    if not traffic:
        return f"{setting}: state traffic not computed (no model ran)"
    moved = ", ".join(f"{name} {t['traffic_kb_per_token']:,.0f} KB per token at {_rate(t['state_gbs'])} GB/s"
                      for name, t in traffic.items())
    bounds = ", ".join(f"{name} {t['bound_speedup']:.1f}x" for name, t in traffic.items() if "bound_speedup" in t)
    return (f"{setting}: state moved per generated token (a recurrent model reads and writes its state; the "
            f"Transformer reads its cache, half full on average) and the rate it was moved: {moved}. The speed-up "
            f"over the Transformer if every model moved its state at the same bandwidth: "
            f"{bounds or 'no recurrent model ran'}")


def generation_cells(cfg: GenerationConfig) -> set[tuple[str, str]]:
    return {(m, col) for s in cfg.parsed_settings for m in cfg.models
            for col in (s.throughput_column, s.speedup_column, s.state_column)}


@register("benchmark.generation", config=GenerationConfig, kind="benchmark", cells=generation_cells)
def run_generation(cfg: GenerationConfig, ctx: RunContext) -> RunOutput:
    """Cells: per setting, '<Images|Tokens>/s (<name>)', 'Speedup (<name>)', 'State KB/seq (<name>)' per row."""
    cells: list[Cell] = []
    series: dict[str, Any] = {}
    notes = [(f"greedy decoding from a zero token; Transformer decode attention '{cfg.attention_impl}'; "
              + ("S4 / S4D / Linear Transformer step replayed from one CUDA graph per token (the Transformer eager); "
                 if cfg.step_graph
                 else "every model's step run eagerly; ")
              + f"S4 layer {cfg.s4_layer}; S4D layer {cfg.s4d_layer}; TF32 {'on' if cfg.allow_tf32 else 'off'}; "
              f"device {ctx.device}")]
    with float32_matmul(cfg.allow_tf32):
        for s in cfg.parsed_settings:
            if not any(ctx.wants(m, [s.throughput_column, s.speedup_column, s.state_column]) for m in cfg.models):
                continue  # no cell of this setting selected (run --cells): a setting's models run together
            ctx.cell_started(s.name, cells)
            with cuda_memory_limit(s.memory_limit_gib, ctx.device) as limit_note:
                got = {}
                for name in cfg.models:
                    got[name] = _measure(name, cfg, s, ctx)
                    free_memory(ctx.device)  # the model and its states are gone with _measure's frame
            ref = got[REFERENCE]["throughput"]
            for name, m in got.items():
                lim = f"; {limit_note}" if limit_note else ""
                cells.append(Cell(name, s.throughput_column, m["throughput"], UNITS[s.unit].lower(),
                                  m["note"] + lim))
                speedup = "X" if "X" in (m["throughput"], ref) else m["throughput"] / ref
                cells.append(Cell(name, s.speedup_column, speedup, "ratio",
                                  f"{name} / {REFERENCE} throughput at context {s.length}, width {s.d_model}, "
                                  f"depth {s.n_layers}"))
                cells.append(Cell(name, s.state_column, m["state_kb"], "KB",
                                  f"bytes of one sequence's state after {s.length} tokens / 1024 (S4 Section 4.3: "
                                  f"constant per step for recurrent models, growing with the context for attention)"))
            traffic = state_traffic(got, s.length)
            series[s.name] = {name: {**{k: v for k, v in m.items() if k != "note"}, **traffic.get(name, {})}
                              for name, m in got.items()}
            ctx.cell_finished(s.name, cells)
            notes.append(f"{s.name}: " + ", ".join(
                f"{name} batch {m['batch']} ({m['params']:,} params)" for name, m in got.items()))
            notes.append(state_traffic_note(s.name, traffic))
    return RunOutput(cells=cells, series=series, notes=notes)
