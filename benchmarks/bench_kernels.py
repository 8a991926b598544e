"""Benchmark of the Cauchy and Vandermonde products: time, peak memory, accuracy.

For each product, implementation (our Triton kernels; the naive torch reference, which
materializes B x N x L), batch 1024 and 4096, N/2 = 32 and 64, L = 1024, 4096, 16384:
forward and forward+backward time (median of triton.testing.do_bench) and the peak memory
of forward+backward (torch.cuda.max_memory_allocated above what was allocated before).
Torch configurations whose estimated peak exceeds --torch-limit-gb are recorded as "X".
Then the relative error of the Triton kernels (complex64) against float64 at L = 16384.

Writes results/bench-kernels/<UTC stamp>_gpu.json (environment and card included) and the
markdown table tables/bench-kernels.md, with the official CUDA extension's numbers on an
H200 and the suite's targets (runners/benchmark/official.py) beside ours.

    python -m benchmarks.bench_kernels                      # on a GPU
    python -m benchmarks.bench_kernels --official ~/s4      # + side by side with the official extension (GPU)
    python -m benchmarks.bench_kernels --quick --out-dir D  # toy sizes on the CPU (TRITON_INTERPRET=1), all into D

``--official PATH`` (``make bench-kernels OFFICIAL_S4=PATH``) builds the official extension from the user's
checkout of state-spaces/s4 (runners/benchmark/official_ext.py) and times it beside ours in the same process on
the same inputs, in interleaved rounds (section "Side by side with the official extension (same process)").

Sections are functions in SECTIONS (name -> fn(cfg, device) -> list of records). The whole
S4 / S4D layers are timed by benchmarks/bench_layers.py (`make bench-layers`).
"""
from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]

from runners.benchmark import official
from runners.benchmark.common import bench_ms, host_seconds, peak_mib
from runners.core.atomic import write_text_atomic

# the official extension's H200 numbers and the suite's targets (runners/benchmark/official.py)
OFFICIAL_H200, TARGETS = official.KERNELS_H200, official.KERNEL_TARGETS
LAYER_TARGETS = [  # measured by benchmarks/bench_layers.py (tables/bench-layers.md); listed so the table shows them
    (f"{mode.upper()} layer fwd+bwd, H {h}, B {b}, L {length}", f"{ms} ms, {mib} MiB", f"<= {t} ms, memory no more")
    for (mode, h, b, length), t in sorted(official.LAYER_TARGET_MS.items(), reverse=True)
    for ms, mib in [official.LAYERS_H200[(mode, h, b, length)]]]
# Bytes per materialized term of the naive torch reference, forward+backward (from the naive
# reference's measured H200 peaks: 12,321 MiB at 1024 x 32 x 4096 terms, 16,448 MiB at 1024 x 32 x 16384).
TORCH_BYTES_PER_TERM = {"cauchy": 96, "vandermonde": 32}
OPS = ("cauchy", "vandermonde")
OP_TITLE = {"cauchy": "Cauchy", "vandermonde": "Vandermonde"}


@dataclass
class BenchConfig:
    batches: list[int] = field(default_factory=lambda: [1024, 4096])
    n_halves: list[int] = field(default_factory=lambda: [32, 64])
    lengths: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    accuracy_length: int = 16384
    accuracy_batch: int = 256
    torch_limit_gb: float = 60.0
    impls: list[str] = field(default_factory=lambda: ["triton", "torch"])
    quick: bool = False
    seed: int = 0

    @classmethod
    def quick_config(cls) -> "BenchConfig":
        return cls(batches=[2], n_halves=[5], lengths=[37], accuracy_length=263, accuracy_batch=2, quick=True)


# ---------------------------------------------------------------------------------------------- inputs

def s4_nodes(length: int, device: torch.device) -> torch.Tensor:
    """z = 2 (1 - omega) / (1 + omega) on the L-th roots of unity (omega = -1 replaced by 0, as the layer does)."""
    k = torch.arange(length, dtype=torch.float64)
    omega = torch.exp(torch.complex(torch.zeros_like(k), -2 * math.pi * k / length))
    if length % 2 == 0:
        omega[length // 2] = 0
    return (2 * (1 - omega) / (1 + omega)).to(torch.complex64).to(device)


def s4d_lin(batch: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """dt * (-1/2 + i pi n), dt log-uniform in [1e-3, 1e-1] (S4D-Lin), complex64 (batch, n)."""
    dt = torch.exp(torch.rand(batch, 1, generator=gen, dtype=torch.float64) * math.log(100)) * 1e-3
    lam = torch.complex(torch.full((n,), -0.5, dtype=torch.float64), math.pi * torch.arange(n, dtype=torch.float64))
    return (dt * lam).to(torch.complex64)


def make_inputs(op: str, batch: int, n: int, length: int, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    v = torch.complex(torch.randn(batch, n, generator=gen), torch.randn(batch, n, generator=gen)).to(device)
    w = s4d_lin(batch, n, gen).to(device)
    if op == "cauchy":
        z = s4_nodes(length, device)
        g = torch.complex(torch.randn(batch, length, generator=gen), torch.randn(batch, length, generator=gen))
    else:
        z = None
        g = torch.randn(batch, length, generator=gen)
    return v, w, z, g.to(device)


def product(op: str, impl: str, length: int) -> Callable:
    """fn(v, w, z) -> output, for impl 'triton' or 'torch' (naive reference, materializes B x N x L)."""
    from ssm_core.ops.reference import cauchy_terms, log_vandermonde_terms

    if impl == "triton":
        if op == "cauchy":
            from ssm_core.ops.cauchy_triton import cauchy_triton

            return lambda v, w, z: cauchy_triton(v, z, w)
        from ssm_core.ops.vandermonde_triton import log_vandermonde_triton

        return lambda v, w, z: log_vandermonde_triton(v, w, length)
    if op == "cauchy":
        return lambda v, w, z: cauchy_terms(v, z, w)
    return lambda v, w, z: log_vandermonde_terms(v, w, torch.arange(length, device=w.device, dtype=torch.float32))


# ---------------------------------------------------------------------------------------------- measurement

def graph_ms(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Median time of fn replayed from a CUDA graph: the GPU work alone, without Python dispatch."""
    if device.type != "cuda":
        return None
    from triton.testing import do_bench_cudagraph

    try:
        return float(do_bench_cudagraph(fn, rep=100, return_mode="median"))
    except Exception as exc:  # noqa: BLE001 - recorded in the output, the row keeps its other numbers
        print(f"  (CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:100]})", flush=True)
        return None


def bench_one(op: str, impl: str, batch: int, n: int, length: int, cfg: BenchConfig,
              device: torch.device) -> dict[str, Any]:
    row: dict[str, Any] = {"op": op, "impl": impl, "batch": batch, "n_half": n, "length": length,
                           "fwd_ms": None, "fwd_bwd_ms": None, "fwd_bwd_graph_ms": None, "peak_mib": None,
                           "skipped": None}
    if impl == "torch":
        est_gb = TORCH_BYTES_PER_TERM[op] * batch * n * length / 1e9
        row["torch_estimate_gb"] = round(est_gb, 1)
        limit = cfg.torch_limit_gb
        if device.type == "cuda":
            limit = min(limit, 0.9 * torch.cuda.get_device_properties(device).total_memory / 1e9)
        if est_gb > limit:
            row["skipped"] = f"X: would materialize ~{est_gb:.0f} GB (limit {limit:.0f} GB)"
            return row
    fn = product(op, impl, length)
    v, w, z, g = make_inputs(op, batch, n, length, device, cfg.seed)
    vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()

    def fwd():
        return fn(v, w, z)

    def fwd_bwd():
        return torch.autograd.grad(fn(vg, wg, z), [vg, wg], g)

    try:
        row["fwd_ms"] = bench_ms(fwd, device, warmup=100, rep=200)
        row["fwd_bwd_ms"] = bench_ms(fwd_bwd, device, warmup=100, rep=200)
        row["peak_mib"] = peak_mib(fwd_bwd, device, prime=True)
        if impl == "triton":
            row["fwd_bwd_graph_ms"] = graph_ms(fwd_bwd, device)
    except torch.cuda.OutOfMemoryError as exc:  # recorded, not hidden: the table shows "X"
        row.update(fwd_ms=None, fwd_bwd_ms=None, peak_mib=None, skipped=f"X: out of memory ({str(exc)[:80]})")
    finally:
        if device.type == "cuda":  # the naive reference's cached blocks go back before the next row
            torch.cuda.empty_cache()
    return row


def warm_up_gpu(device: torch.device, seconds: float = 1.0) -> None:
    """Run matrix products for a while so that the clocks are up before timing (an idle GPU clocks down)."""
    if device.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize(device)


def kernel_section(cfg: BenchConfig, device: torch.device, rows: list | None = None,
                   on_row: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Every configuration, our kernels first (appended to ``rows``; ``on_row`` called after each one)."""
    warm_up_gpu(device)
    rows = [] if rows is None else rows
    for impl in cfg.impls:
        for op in OPS:
            for batch in cfg.batches:
                for n in cfg.n_halves:
                    for length in cfg.lengths:
                        row = bench_one(op, impl, batch, n, length, cfg, device)
                        print(_row_line(row), flush=True)
                        rows.append(row)
                        if on_row is not None:
                            on_row()
    return rows


def accuracy_section(cfg: BenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """Relative error (norm-wise per row, max over rows) of the complex64 kernels vs float64 autograd."""
    from ssm_core.ops.reference import cauchy_torch, log_vandermonde_torch

    records = []
    length, batch = cfg.accuracy_length, cfg.accuracy_batch
    c128 = torch.complex128
    for op in OPS:
        for n in cfg.n_halves:
            v, w, z, g = make_inputs(op, batch, n, length, device, cfg.seed + 1)
            fn = product(op, "triton", length)
            vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()
            out = fn(vg, wg, z)
            dv, dw = torch.autograd.grad(out, [vg, wg], g)
            v64, w64 = v.to(c128).requires_grad_(), w.to(c128).requires_grad_()
            if op == "cauchy":
                ref = cauchy_torch(v64, z.to(c128), w64)
            else:
                ref = log_vandermonde_torch(v64, w64, length)
            rv, rw = torch.autograd.grad(ref, [v64, w64], g.to(ref.dtype))
            records.append({"op": op, "batch": batch, "n_half": n, "length": length,
                            "rel_err_out": _max_row_rel(out, ref), "rel_err_grad_v": _max_row_rel(dv, rv),
                            "rel_err_grad_w_or_x": _max_row_rel(dw, rw)})
            print(f"accuracy {op:12s} N/2={n:3d} L={length}: out {records[-1]['rel_err_out']:.2e} "
                  f"grad_v {records[-1]['rel_err_grad_v']:.2e} grad_w/x {records[-1]['rel_err_grad_w_or_x']:.2e}",
                  flush=True)
    return records


def _max_row_rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.detach().to(torch.complex128), ref.detach().to(torch.complex128)
    err = (a - ref).abs().norm(dim=-1) / ref.abs().norm(dim=-1).clamp_min(1e-300)
    return float(err.max())


class _Floor(torch.autograd.Function):
    """The least an autograd op can cost the host: a custom Function with the given inputs around one tiny op
    forward and one per input backward (no kernel of ours)."""

    @staticmethod
    def forward(ctx, first, *rest):
        ctx.n_inputs = 1 + len(rest)
        return first * 2.0

    @staticmethod
    def backward(ctx, g):
        return tuple(g * 2.0 for _ in range(ctx.n_inputs))


def host_section(cfg: BenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """Host time per call at a size where the GPU work is negligible (B = 8, N/2 = 32, L = 64): what issuing a
    forward / forward+backward costs the host, whatever the size. A do_bench median above the GPU time (the CUDA
    graph column) is this host time showing. Also the floor: a custom autograd Function around one tiny op."""
    batch, n, length = (2, 5, 37) if cfg.quick else (8, 32, 64)
    reps = 1 if cfg.quick else 300
    records = []
    for op in OPS:
        fn = product(op, "triton", length)
        v, w, z, g = make_inputs(op, batch, n, length, device, cfg.seed + 3)
        vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()
        records.append({"what": f"{OP_TITLE[op]} forward", "us": host_seconds(lambda: fn(v, w, z), device, reps) * 1e6})
        records.append({"what": f"{OP_TITLE[op]} forward+backward",
                        "us": host_seconds(lambda: torch.autograd.grad(fn(vg, wg, z), [vg, wg], g), device, reps) * 1e6})
    x = torch.randn(16, device=device)
    xg = x.clone().requires_grad_()
    gx = torch.randn(16, device=device)
    records.append({"what": "tiny torch op (x.add_(1))", "us": host_seconds(lambda: x.add_(1.0), device, reps) * 1e6})
    records.append({"what": "autograd Function around one tiny op, forward+backward (floor)",
                    "us": host_seconds(lambda: torch.autograd.grad(_Floor.apply(xg), [xg], gx), device, reps) * 1e6})
    for r in records:
        r["us"] = round(r["us"], 1)
        print(f"host {r['what']}: {r['us']} us", flush=True)
    return records


def autograd_section(cfg: BenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """At the sizes of the targets: do_bench of forward+backward through autograd (what the table reports), of the
    same forward and backward kernels launched directly (no autograd), and of the floor, a custom autograd
    Function with the same inputs around tiny ops. Separates what the kernels cost from what autograd costs."""
    from ssm_core.ops import cauchy_triton as ct
    from ssm_core.ops import vandermonde_triton as vt

    warm_up_gpu(device)
    records = []
    targets = [(op, b, n, length) for (op, b, n, length) in TARGETS]
    if cfg.quick:
        targets = [(op, 2, 5, 37) for op in OPS]
    for op, batch, n, length in targets:
        v, w, z, g = make_inputs(op, batch, n, length, device, cfg.seed + 4)
        vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()
        fn = product(op, "triton", length)
        if op == "cauchy":
            direct = lambda: (ct._forward(v, w, z), ct._backward(v, w, z, g))  # noqa: E731
        else:
            direct = lambda: (vt._forward(v, w, length), vt._backward(v, w, g))  # noqa: E731
        gf = torch.randn(batch, n, dtype=v.dtype, device=device)
        cases = {"autograd": lambda: torch.autograd.grad(fn(vg, wg, z), [vg, wg], g),
                 "direct": direct,
                 "floor": lambda: torch.autograd.grad(_Floor.apply(vg, wg), [vg, wg], gf)}
        rec: dict[str, Any] = {"op": op, "batch": batch, "n_half": n, "length": length}
        for name, case in cases.items():
            rec[f"{name}_ms"] = round(bench_ms(case, device, warmup=100, rep=200), 4)
        records.append(rec)
        print(f"autograd {op} B={batch} N/2={n} L={length}: " + ", ".join(f"{k} {rec[k + '_ms']} ms" for k in cases),
              flush=True)
    return records


def precision_section(cfg: BenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """Vandermonde forward with tl.dot in 'ieee' vs 'tf32x3' precision: time and error (--variants)."""
    from ssm_core.ops import vandermonde_triton as vt
    from ssm_core.ops.reference import log_vandermonde_torch

    records, saved = [], (vt.FWD_PRECISION, vt.BWD_PRECISION)
    batch, n = cfg.batches[0], cfg.n_halves[0]
    try:
        for length in cfg.lengths[1:]:
            v, w, _, g = make_inputs("vandermonde", batch, n, length, device, cfg.seed + 2)
            ref = log_vandermonde_torch(v[:16].to(torch.complex128), w[:16].to(torch.complex128), length)
            for fwd_p, bwd_p in (("ieee", "tf32x3"), ("tf32x3", "tf32x3")):
                vt.FWD_PRECISION, vt.BWD_PRECISION = fwd_p, bwd_p
                vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()
                rec = {"batch": batch, "n_half": n, "length": length, "fwd_precision": fwd_p, "bwd_precision": bwd_p,
                       "fwd_ms": bench_ms(lambda: vt.log_vandermonde_triton(v, w, length), device, warmup=100,
                                          rep=200),
                       "fwd_bwd_ms": bench_ms(lambda: torch.autograd.grad(
                           vt.log_vandermonde_triton(vg, wg, length), [vg, wg], g), device, warmup=100, rep=200),
                       "rel_err_out": _max_row_rel(vt.log_vandermonde_triton(v[:16], w[:16], length), ref)}
                print(f"precision fwd={fwd_p} bwd={bwd_p} L={length}: fwd {rec['fwd_ms']:.4f} ms "
                      f"fwd+bwd {rec['fwd_bwd_ms']:.4f} ms err {rec['rel_err_out']:.2e}", flush=True)
                records.append(rec)
    finally:
        vt.FWD_PRECISION, vt.BWD_PRECISION = saved
    return records


#: Sections of the benchmark, run in order; each returns JSON-able records stored under its name.
#: The whole layers (S4 and S4D forward+backward) are measured by benchmarks/bench_layers.py.
SECTIONS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "host": host_section,
    "autograd": autograd_section,
    "accuracy": accuracy_section,
    "kernels": kernel_section,
}


#: interleaved rounds of the side-by-side section: each round takes one do_bench median of each implementation
SIDE_BY_SIDE_ROUNDS = 5


def side_by_side_section(cfg: BenchConfig, device: torch.device, official: Any,
                         rounds: int = SIDE_BY_SIDE_ROUNDS) -> list[dict[str, Any]]:
    """Ours (Triton) and ``official`` (:class:`runners.benchmark.official_ext.OfficialProducts`, or any object with
    its ``product(op, length)``) on the same inputs at batch cfg.batches[0], every N/2 and L of ``cfg``: forward
    and forward+backward, ``rounds`` interleaved rounds (the order alternates), medians over the rounds; and the
    largest difference of the two outputs relative to the official output's largest entry."""
    import statistics

    warm_up_gpu(device)
    rows: list[dict[str, Any]] = []
    batch = cfg.batches[0]
    for op in OPS:
        for n in cfg.n_halves:
            for length in cfg.lengths:
                v, w, z, g = make_inputs(op, batch, n, length, device, cfg.seed)
                fns = {"ours": product(op, "triton", length), "official": official.product(op, length)}
                with torch.no_grad():
                    out = {k: fn(v, w, z) for k, fn in fns.items()}  # (B, L) each
                rel_diff = float((out["ours"] - out["official"]).abs().max() / out["official"].abs().max())
                calls = {}
                for k, fn in fns.items():
                    vg, wg = v.clone().requires_grad_(), w.clone().requires_grad_()
                    calls[k] = {"fwd": (lambda fn=fn: fn(v, w, z)),
                                "fwd_bwd": (lambda fn=fn, vg=vg, wg=wg: torch.autograd.grad(fn(vg, wg, z), [vg, wg],
                                                                                             g))}
                times: dict[str, dict[str, list[float]]] = {k: {"fwd": [], "fwd_bwd": []} for k in fns}
                for r in range(rounds):
                    for k in (("ours", "official") if r % 2 == 0 else ("official", "ours")):
                        for what in ("fwd", "fwd_bwd"):
                            times[k][what].append(bench_ms(calls[k][what], device, warmup=50, rep=100))
                med = {k: {what: statistics.median(ts) for what, ts in t.items()} for k, t in times.items()}
                row = {"op": op, "batch": batch, "n_half": n, "length": length, "rounds": rounds,
                       "ours_fwd_ms": med["ours"]["fwd"], "official_fwd_ms": med["official"]["fwd"],
                       "ours_fwd_bwd_ms": med["ours"]["fwd_bwd"], "official_fwd_bwd_ms": med["official"]["fwd_bwd"],
                       "ratio_fwd": med["ours"]["fwd"] / med["official"]["fwd"],
                       "ratio_fwd_bwd": med["ours"]["fwd_bwd"] / med["official"]["fwd_bwd"],
                       "max_rel_diff": rel_diff, "times": times}
                print(f"{op:12s} side by side B={batch} N/2={n:3d} L={length:6d}: fwd+bwd ours "
                      f"{row['ours_fwd_bwd_ms']:.4f} / official {row['official_fwd_bwd_ms']:.4f} ms = "
                      f"{row['ratio_fwd_bwd']:.2f} (fwd {row['ratio_fwd']:.2f}); outputs differ by {rel_diff:.1e}",
                      flush=True)
                rows.append(row)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


#: the near-singular Cauchy case: (batch, N/2, L), poles w = -0.5 U(0, 1) + 10i N(0, 1), nodes z = i linspace(0, 50, L)
NEAR_SINGULAR = (1024, 32, 4096)
#: ours may be at most this many times the official's error on it
NEAR_SINGULAR_FACTOR = 10.0


def near_singular_section(device: torch.device, official: Any, size: tuple[int, int, int] = NEAR_SINGULAR,
                          seed: int = 0) -> list[dict[str, Any]]:
    """The Cauchy product next to its poles (S4's own nodes are of this kind): ours and ``official`` in complex64
    against complex128 on the same inputs, as max |err| / max |ref| of the output and of the gradients of v and w
    (the incoming gradient standard normal)."""
    from ssm_core.ops.reference import cauchy_torch

    batch, n, length = size
    gen = torch.Generator().manual_seed(seed)
    z = 1j * torch.linspace(0, 50, length, dtype=torch.float64)  # (L,)
    w = torch.complex(-0.5 * torch.rand(batch, n, generator=gen, dtype=torch.float64),
                      10 * torch.randn(batch, n, generator=gen, dtype=torch.float64))  # (B, N/2)
    v = torch.complex(torch.randn(batch, n, generator=gen, dtype=torch.float64),
                      torch.randn(batch, n, generator=gen, dtype=torch.float64))
    g = torch.complex(torch.randn(batch, length, generator=gen, dtype=torch.float64),
                      torch.randn(batch, length, generator=gen, dtype=torch.float64))
    v, w = v.to(torch.complex64).to(torch.complex128), w.to(torch.complex64).to(torch.complex128)  # same inputs
    z, g = z.to(torch.complex64).to(torch.complex128), g.to(torch.complex64).to(torch.complex128)

    def evaluate(fn: Callable, dtype: torch.dtype) -> list[torch.Tensor]:
        vv = v.to(device, dtype).requires_grad_()
        ww = w.to(device, dtype).requires_grad_()
        out = fn(vv, ww, z.to(device, dtype))
        gv, gw = torch.autograd.grad(out, [vv, ww], g.to(device, dtype))
        return [t.detach().to("cpu", torch.complex128) for t in (out, gv, gw)]

    ref = evaluate(lambda vv, ww, zz: cauchy_torch(vv, zz, ww), torch.complex128)
    row: dict[str, Any] = {"batch": batch, "n_half": n, "length": length}
    for name, fn in (("ours", product("cauchy", "triton", length)), ("official", official.product("cauchy", length))):
        got = evaluate(fn, torch.complex64)
        for what, a, r in zip(("out", "grad_v", "grad_w"), got, ref):
            row[f"{name}_{what}"] = float((a - r).abs().max() / r.abs().max())
    row["within_factor"] = all(row[f"ours_{k}"] <= NEAR_SINGULAR_FACTOR * row[f"official_{k}"]
                               for k in ("out", "grad_v", "grad_w"))
    print(f"cauchy near poles B={batch} N/2={n} L={length}: out ours {row['ours_out']:.2e} / official "
          f"{row['official_out']:.2e}", flush=True)
    return [row]


def side_by_side_markdown(record: dict[str, Any]) -> list[str]:
    """The section "Side by side with the official extension (same process)" (empty list without one)."""
    from tabulate import tabulate

    rows = record.get("side_by_side") or []
    if not rows:
        return []
    info = record.get("official") or {}
    lines = ["## Side by side with the official extension (same process)", "",
             f"The official CUDA extension built from the checkout `{info.get('checkout')}` (commit "
             f"{info.get('commit') or 'unknown'}) with its setup.py's flags, called through its own autograd "
             f"wrappers (`cauchy_mult`, `log_vandermonde_cuda`), and ours, on the same inputs in the same process: "
             f"medians of {rows[0]['rounds']} interleaved rounds of do_bench medians. `ours / official` below 1 "
             "means ours is faster. `outputs differ` is max |ours - official| / max |official| (both complex64).",
             ""]
    table = []
    for r in rows:
        target = official.SIDE_BY_SIDE_TARGETS.get(r["length"])
        met = "-" if target is None else ("yes" if r["ratio_fwd_bwd"] <= target else "no")
        table.append([OP_TITLE[r["op"]], r["batch"], r["n_half"], r["length"], f"{r['ours_fwd_ms']:.4f}",
                      f"{r['official_fwd_ms']:.4f}", f"{r['ratio_fwd']:.2f}", f"{r['ours_fwd_bwd_ms']:.4f}",
                      f"{r['official_fwd_bwd_ms']:.4f}", f"{r['ratio_fwd_bwd']:.2f}",
                      "-" if target is None else f"<= {target}", met, f"{r['max_rel_diff']:.1e}"])
    lines.append(tabulate(table, headers=["op", "batch", "N/2", "L", "ours fwd ms", "official fwd ms",
                                          "ours / official (fwd)", "ours fwd+bwd ms", "official fwd+bwd ms",
                                          "ours / official (fwd+bwd)", "target", "met", "outputs differ"],
                          tablefmt="github", disable_numparse=True))
    lines.append("")
    for r in record.get("near_singular") or []:
        lines += [f"Next to the poles (Cauchy, batch {r['batch']}, N/2 {r['n_half']}, L {r['length']}; poles w = "
                  "-0.5 U(0, 1) + 10i N(0, 1), nodes z = i linspace(0, 50, L), complex64 against complex128, "
                  f"max |err| / max |ref|; target: ours within {NEAR_SINGULAR_FACTOR:g}x of the official):", ""]
        lines.append(tabulate([[what, f"{r[f'ours_{what}']:.2e}", f"{r[f'official_{what}']:.2e}"]
                               for what in ("out", "grad_v", "grad_w")],
                              headers=["", "ours", "official"], tablefmt="github", disable_numparse=True))
        lines += ["", f"Within {NEAR_SINGULAR_FACTOR:g}x: {'yes' if r['within_factor'] else 'no'}.", ""]
    return lines


# ---------------------------------------------------------------------------------------------- reporting

def _fmt(x: float | None, digits: int = 3) -> str:
    return "X" if x is None else f"{x:.{digits}f}"


def _row_line(row: dict[str, Any]) -> str:
    if row["skipped"]:
        return (f"{row['op']:12s} {row['impl']:7s} B={row['batch']:5d} N/2={row['n_half']:3d} "
                f"L={row['length']:6d}: {row['skipped']}")
    mem = "" if row["peak_mib"] is None else f" {row['peak_mib']:.1f} MiB"
    if row.get("fwd_bwd_graph_ms") is not None:
        mem += f" (graph fwd+bwd {row['fwd_bwd_graph_ms']:.4f} ms)"
    return (f"{row['op']:12s} {row['impl']:7s} B={row['batch']:5d} N/2={row['n_half']:3d} L={row['length']:6d}: "
            f"fwd {row['fwd_ms']:.4f} ms  fwd+bwd {row['fwd_bwd_ms']:.4f} ms{mem}")


def markdown_table(record: dict[str, Any]) -> str:
    from tabulate import tabulate

    env = record["environment"]
    card = env["device_name"]
    rows = {(r["op"], r["impl"], r["batch"], r["n_half"], r["length"]): r for r in record["kernels"]}
    lines = [
        "# Kernel benchmark: Cauchy and Vandermonde products",
        "",
        f"Card: **{card}** (torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, commit "
        f"{env['git_commit']}). Results file: `{record['results_file']}`. Medians of "
        "`triton.testing.do_bench`; peak = max memory allocated during forward+backward above what was "
        "allocated before (inputs and the incoming gradient excluded). complex64, N/2 = halves of "
        "conjugate pairs. The official CUDA extension's numbers were measured on an **NVIDIA H200** "
        "(runners/benchmark/official.py): compare like with like only where the card matches.",
        "",
    ]
    for note in record.get("notes", []):
        lines += [f"Note: {note}", ""]
    lines += side_by_side_markdown(record)
    lines += ["## Targets", ""]
    target_rows = []
    for (op, b, n, length), (t_ms, t_mib) in TARGETS.items():
        off = OFFICIAL_H200[(op, b, n, length)]
        r = rows.get((op, "triton", b, n, length))
        ours = "not run" if r is None or r["fwd_bwd_ms"] is None else \
            f"{r['fwd_bwd_ms']:.3f} ms, {_fmt(r['peak_mib'], 1)} MiB"
        if r is not None and r.get("fwd_bwd_graph_ms") is not None:
            ours += f" (GPU alone: {r['fwd_bwd_graph_ms']:.3f} ms)"
        met, met_gpu = "-", "-"
        if r is not None and r["fwd_bwd_ms"] is not None:
            mem_ok = t_mib is None or (r["peak_mib"] is not None and r["peak_mib"] <= t_mib)
            met = "yes" if r["fwd_bwd_ms"] <= t_ms and mem_ok else "no"
            if r.get("fwd_bwd_graph_ms") is not None:
                met_gpu = "yes" if r["fwd_bwd_graph_ms"] <= t_ms and mem_ok else "no"
        target = f"<= {t_ms} ms" + (f", <= {t_mib} MiB" if t_mib is not None else "")
        target_rows.append([f"{OP_TITLE[op]} fwd+bwd, bs {b}, N/2 {n}, L {length}", f"{off[1]} ms, {off[2]} MiB",
                            target, ours, met, met_gpu])
    for what, off, target in LAYER_TARGETS:
        target_rows.append([what, off, target, "see tables/bench-layers.md", "-", "-"])
    lines.append(tabulate(target_rows, headers=["what", "official CUDA ext., H200", "target", f"ours ({card})",
                                                "met (do_bench)", "met (GPU alone)"], tablefmt="github"))
    host = {r["what"]: r["us"] for r in record.get("host", [])}
    floor = host.get("autograd Function around one tiny op, forward+backward (floor)")
    lines += ["", "`met (do_bench)` judges the do_bench median, the method of the official numbers; "
              "`met (GPU alone)` judges the CUDA-graph replay of the same forward+backward. Where the two "
              "differ, the GPU waited for the host (see 'Host time per call' below"
              + (f": on this machine autograd alone costs {floor} us per forward+backward of a custom Function "
                 "around one tiny op" if floor is not None else "") + ")."]
    lines += ["", "## All configurations", ""]
    table = []
    for r in sorted(record["kernels"], key=lambda r: (r["op"], r["impl"] != "triton", r["batch"], r["n_half"],
                                                     r["length"])):
        off = OFFICIAL_H200.get((r["op"], r["batch"], r["n_half"], r["length"])) if r["impl"] == "triton" else None
        graph = r.get("fwd_bwd_graph_ms")
        table.append([OP_TITLE[r["op"]], r["impl"], r["batch"], r["n_half"], r["length"],
                      r["skipped"] or _fmt(r["fwd_ms"], 4), "X" if r["skipped"] else _fmt(r["fwd_bwd_ms"], 4),
                      "-" if graph is None else f"{graph:.4f}",
                      "X" if r["skipped"] else ("-" if r["peak_mib"] is None else f"{r['peak_mib']:.1f}"),
                      "" if off is None else f"{off[0]} / {off[1]} / {off[2]}"])
    lines.append(tabulate(table, headers=["op", "impl", "batch", "N/2", "L", "fwd ms", "fwd+bwd ms",
                                          "fwd+bwd GPU ms (graph)", "peak MiB",
                                          "official H200 fwd / fwd+bwd ms / MiB"], tablefmt="github"))
    lines += ["", "`fwd+bwd GPU ms (graph)`: the same forward+backward replayed from a CUDA graph, i.e. the "
              "GPU work without Python and autograd dispatch (the do_bench columns include whatever part of "
              "that dispatch the GPU waits for).", "",
              "`torch` is the naive reference (`cauchy_terms` / `log_vandermonde_terms`), which "
              "materializes batch x N x L; X = not run (reason given). The CPU path of the library uses "
              "the chunked reference instead.", "",
              f"## Accuracy: complex64 kernels vs float64 autograd (max over {record['accuracy'][0]['batch']} rows "
              "of the per-row relative error)" if record["accuracy"] else "## Accuracy", ""]
    acc = [[OP_TITLE[a["op"]], a["n_half"], a["length"], f"{a['rel_err_out']:.2e}", f"{a['rel_err_grad_v']:.2e}",
            f"{a['rel_err_grad_w_or_x']:.2e}"] for a in record["accuracy"]]
    lines.append(tabulate(acc, headers=["op", "N/2", "L", "output", "grad v", "grad w / x"], tablefmt="github"))
    lines += ["", "Target: within 1e-4 at L = 16384. Inputs: S4D-Lin poles dt (-1/2 + i pi n), dt log-uniform "
              "in [1e-3, 1e-1]; S4's bilinear nodes on the roots of unity; v and the incoming gradient standard "
              "normal.", ""]
    if record.get("autograd"):
        lines += ["## What autograd costs at the target sizes", "",
                  "do_bench medians (ms) of one forward+backward: through autograd (as in the tables above), the "
                  "same forward and backward kernels launched directly (no autograd), and the floor: a custom "
                  "autograd Function with the same two complex inputs around tiny ops (no kernel of ours). "
                  "A target below the floor cannot be met by any op called through autograd on this machine.", ""]
        lines.append(tabulate([[OP_TITLE[r["op"]], r["batch"], r["n_half"], r["length"], r["autograd_ms"],
                                r["direct_ms"], r["floor_ms"], TARGETS.get((r["op"], r["batch"], r["n_half"],
                                                                             r["length"]), ("-",))[0]]
                               for r in record["autograd"]],
                              headers=["op", "batch", "N/2", "L", "autograd ms", "direct ms", "floor ms",
                                       "target ms"], tablefmt="github"))
        lines.append("")
    if record.get("host"):
        lines += ["## Host time per call", "",
                  "Wall time per call at B = 8, N/2 = 32, L = 64 (GPU work negligible), best of 5 rounds of 300 calls "
                  "without synchronization: what issuing the call costs the host at any size.", ""]
        lines.append(tabulate([[r["what"], r["us"]] for r in record["host"]], headers=["call", "host us"],
                              tablefmt="github"))
        lines.append("")
    return "\n".join(lines)


def render(json_path: Path, table_path: Path) -> None:
    """Rewrite the markdown table from a results file (e.g. after copying GPU results into the repo)."""
    import json

    write_text_atomic(table_path, markdown_table(json.loads(json_path.read_text())))


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="toy sizes on the CPU under TRITON_INTERPRET=1; JSON and table go to --out-dir")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="results root (default: results/; with --quick: a new temporary directory)")
    parser.add_argument("--tables-dir", type=Path, default=None,
                        help="where bench-kernels.md goes (default: tables/; with --quick: --out-dir)")
    parser.add_argument("--torch-limit-gb", type=float, default=60.0,
                        help="skip naive torch configurations estimated above this many GB")
    parser.add_argument("--impls", default="triton,torch",
                        help="comma-separated implementations to time: triton, torch (default both)")
    parser.add_argument("--variants", action="store_true",
                        help="also time the Vandermonde kernels with other tl.dot precisions")
    parser.add_argument("--official", type=Path, default=None, metavar="S4_CHECKOUT",
                        help="also time the official CUDA extension built from this checkout of state-spaces/s4, "
                             "side by side in this process (needs CUDA, nvcc and ninja)")
    parser.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                        help="only rewrite the table (--tables-dir, default tables/) from an existing results file")
    args = parser.parse_args(argv)
    if args.render is not None:
        table_path = (args.tables_dir or REPO / "tables") / "bench-kernels.md"
        render(args.render, table_path)
        print(f"wrote {table_path}")
        return {"json": str(args.render), "table": str(table_path)}

    if args.quick:
        import tempfile

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are imported
        cfg = BenchConfig.quick_config()
        out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-kernels-"))
        tables_dir = args.tables_dir or out_dir
    else:
        if not torch.cuda.is_available():
            parser.error("the full benchmark needs a CUDA device; use --quick for a CPU smoke run")
        cfg = BenchConfig()
        out_dir = args.out_dir or REPO / "results"
        tables_dir = args.tables_dir or REPO / "tables"
    cfg.torch_limit_gb = args.torch_limit_gb
    cfg.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not cfg.impls or not set(cfg.impls) <= {"triton", "torch"}:
        parser.error(f"--impls must name triton and/or torch, got {args.impls!r}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    official_products = None
    if args.official is not None:  # built before anything is timed: a checkout that fails stops the run here
        from runners.benchmark.official_ext import OfficialExtensionError, load_official
        from runners.core.layout import RUNS_DIR

        try:
            official_products = load_official(args.official, REPO / RUNS_DIR / "official-extension-build")
        except OfficialExtensionError as exc:
            parser.error(str(exc))

    from runners.core.provenance import environment, utc_now
    from runners.store.write import new_result_path
    from runners.core.atomic import write_json_atomic

    record: dict[str, Any] = {"spec": "bench-kernels", "created": utc_now(), "environment": environment(device),
                              "config": asdict(cfg), "official_h200": {"|".join(map(str, k)): v
                                                                        for k, v in OFFICIAL_H200.items()}}
    sections = dict(SECTIONS, **({"precision_variants": precision_section} if args.variants else {}))
    if official_products is not None:
        record["official"] = {"checkout": Path(official_products.checkout).name, "commit": official_products.commit}
        sections = {"side_by_side": lambda c, d: side_by_side_section(c, d, official_products),
                    "near_singular": lambda c, d: near_singular_section(
                        d, official_products, (2, 5, 37) if c.quick else NEAR_SINGULAR), **sections}
    path = new_result_path("bench-kernels", "quick" if cfg.quick else "gpu", root=out_dir)
    # where the file is committed (results/bench-kernels/), whatever --out-dir it was first written to
    record["results_file"] = str(path) if cfg.quick else f"results/bench-kernels/{path.name}"
    table_path = tables_dir / "bench-kernels.md"
    for name in sections:
        record[name] = []

    def save() -> None:  # after every row and section: a cut-off run keeps what it measured
        write_json_atomic(path, record)
        write_text_atomic(table_path, markdown_table(record))

    write_json_atomic(path, record)  # the reserved file holds the record from the start

    for name, section in sections.items():
        if name == "kernels":
            section(cfg, device, rows=record[name], on_row=save)
        else:
            record[name] = section(cfg, device)
        save()
    print(f"wrote {path} and {table_path}")
    return {"json": str(path), "table": str(table_path)}


if __name__ == "__main__":
    main()
