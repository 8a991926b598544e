"""Benchmark of the whole S4 and S4D layers, forward+backward, on a GPU.

SSMLayer (N = 64, GELU, transposed (B, H, L) input like the official FFTConv) at H = 128, 256, 512 with
B = 32, L = 1024 and 4096, and B = 8, L = 16384: median time of one forward+backward
(triton.testing.do_bench) and its peak memory (torch.cuda.max_memory_allocated above what was allocated
before the step: parameters, input and output gradient). Rows: kernel backend 'triton' (the Cauchy /
Vandermonde Triton kernels) and 'torch' (the chunked reference); output 'none' (kernel + FFT convolution
+ D skip + activation: what the official FFTConv computes, so comparable to its numbers) and 'glu' (with
the position-wise GLU output, for information). At H = 256, B = 32, L = 4096 also: the default (B, L, H)
layout, the layer before this change (rfft / irfft, then D skip and activation as separate ops), the
kernel and the convolution alone, and the copy bandwidth of the card (the memory floor's ceiling).

Writes results/bench-layers/<UTC stamp>_gpu.json (environment and card included) and the markdown table
tables/bench-layers.md, with the official FFTConv's H200 numbers and the targets (runners/benchmark/official.py).

    python -m benchmarks.bench_layers                       # on a GPU
    python -m benchmarks.bench_layers --profile             # ... and a torch.profiler table (--profile-file)
    python -m benchmarks.bench_layers --quick --out-dir D   # toy sizes on the CPU, JSON and table into D
    python -m benchmarks.bench_layers --official ~/s4       # + the official FFTConv side by side (GPU)

``--official PATH`` (``make bench-layers OFFICIAL_S4=PATH``) builds the official extension from the user's checkout
of state-spaces/s4, imports its FFTConv (runners/benchmark/official_ext.py) and times it beside our layer (output
'none', the same computation) in the same process on the same inputs, in interleaved rounds (section "Side by side
with the official extension (same process)"), then, on a GPU, each side's whole forward+backward captured in one
CUDA graph and replayed (its second table; ``--no-graph-pass`` skips it).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]

from ssm_core import SSMLayer
from ssm_core.fftconv import fft_conv
from ssm_core.kernels.graphs import captured, enabled as graphs_enabled
from runners.benchmark import official
from runners.benchmark.common import bench_ms, graphed_step, host_seconds, kernel_graphs_off, peak_mib
from runners.core.atomic import write_text_atomic

D_STATE = 64
SHAPES = [(h, b, length) for h in (128, 256, 512) for b, length in ((32, 1024), (32, 4096), (8, 16384))]
KEY = (256, 32, 4096)  # H, B, L of the targets
# the official FFTConv's H200 numbers and the suite's targets (runners/benchmark/official.py)
OFFICIAL_H200, TARGET_MS = official.LAYERS_H200, official.LAYER_TARGET_MS
QUICK_SHAPES = [(8, 2, 64)]


# -- timing and memory ---------------------------------------------------------------------------------------------
# -- what is timed ---------------------------------------------------------------------------------------------------
def make_layer(mode: str, h: int, backend: str, output: str, transposed: bool, device: torch.device) -> SSMLayer:
    torch.manual_seed(0)
    return SSMLayer(h, D_STATE, mode=mode, output=output, transposed=transposed, backend=backend).to(device)


def unfused_before(layer: SSMLayer, x: torch.Tensor) -> torch.Tensor:
    """The layer's convolution path before this change (output='none', transposed): rfft(u, 2L), rfft(k, 2L),
    irfft of the product, slice, + D u, activation -- each a separate op, autograd through all of them."""
    length = x.shape[-1]
    k = layer.kernel(length)  # (1, H, L)
    y = torch.fft.irfft(torch.fft.rfft(x, n=2 * length) * torch.fft.rfft(k[0], n=2 * length), n=2 * length)
    return F.gelu(y[..., :length] + x * layer.d[0][:, None])


def bench_step(step: Callable[[], None], grads: list[torch.Tensor], device: torch.device) -> dict:
    """Median ms and peak MiB of one step. The first two steps are not measured (compile / autotune / FFT plans;
    with graph replay on, the kernel generation's CUDA graphs are captured on the second); the memory kept
    between steps (those graphs) is added to the peak (``graph_mib``), so the peak counts everything the step needs
    beyond parameters and data."""
    for t in grads:
        t.grad = None
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    step()
    for t in grads:
        t.grad = None
    step()
    for t in grads:
        t.grad = None
    kept = (torch.cuda.memory_allocated(device) - base) / 2**20 if device.type == "cuda" else None
    mib = peak_mib(step, device, grads=grads)
    ms = bench_ms(step, device, grads=grads)
    return {"ms": round(ms, 4), "peak_mib": None if mib is None else round(mib + max(kept, 0.0), 1),
            "graph_mib": None if kept is None else round(kept, 1)}


@contextlib.contextmanager
def kernel_graphs(on: bool | None) -> Iterator[bool]:
    """SSM_KERNEL_GRAPHS set to '1' / '0' for the block (None: left as it is); yields whether graphs are on."""
    from ssm_core.kernels import graphs

    old = os.environ.get(graphs.ENV_VAR)
    if on is not None:
        os.environ[graphs.ENV_VAR] = "1" if on else "0"
    try:
        yield graphs.enabled()
    finally:
        if on is not None:
            if old is None:
                os.environ.pop(graphs.ENV_VAR, None)
            else:
                os.environ[graphs.ENV_VAR] = old


def layer_row(mode: str, backend: str, output: str, h: int, b: int, length: int, device: torch.device,
              transposed: bool = True, variant: str = "layer", graphs: bool | None = None) -> dict[str, Any]:
    with kernel_graphs(graphs) as on:
        return _layer_row(mode, backend, output, h, b, length, device, transposed, variant, on)


def _layer_row(mode: str, backend: str, output: str, h: int, b: int, length: int, device: torch.device,
               transposed: bool, variant: str, graphs_on: bool) -> dict[str, Any]:
    row: dict[str, Any] = dict(mode=mode, backend=backend, output=output, layout="(B,H,L)" if transposed else
                               "(B,L,H)", variant=variant, H=h, B=b, L=length,
                               graphs=graphs_on and device.type == "cuda" and variant != "conv only")
    official = OFFICIAL_H200.get((mode, h, b, length)) if output == "none" and variant == "layer" else None
    row["official_ms"], row["official_mib"] = official if official else (None, None)
    row["target_ms"] = TARGET_MS.get((mode, h, b, length)) if official else None
    try:
        layer = make_layer(mode, h, backend, output, transposed, device)
        shape = (b, h, length) if transposed else (b, length, h)
        x = torch.randn(*shape, device=device, requires_grad=True)
        params = [p for p in layer.parameters() if p.requires_grad]
        grads = [x, *params]
        if variant == "layer":
            fwd = lambda: layer(x)  # noqa: E731
        elif variant == "before":
            fwd = lambda: unfused_before(layer, x)  # noqa: E731
        elif variant == "kernel only":
            grads = params
            fwd = lambda: layer.kernel(length)  # noqa: E731
        elif variant == "conv only":
            k = (torch.randn(1, h, length, device=device) / length ** 0.5).requires_grad_()
            grads = [x, k, layer.d]
            fwd = lambda: fft_conv(x, k, layer.d, activation="gelu")  # noqa: E731
        else:
            raise ValueError(f"unknown variant {variant!r}")
        g = torch.randn_like(fwd())

        def step() -> None:
            fwd().backward(g)

        row.update(bench_step(step, grads, device))
        if row["target_ms"] is not None:
            row["meets_target"] = bool(row["ms"] <= row["target_ms"] and row["peak_mib"] is not None
                                       and row["peak_mib"] <= row["official_mib"])
        del layer, x, g, grads, params
    except Exception as exc:  # recorded as "X" with the reason (e.g. out of memory, a kernel that fails)
        row.update(ms="X", peak_mib="X", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        traceback.print_exc()
    return row


#: interleaved rounds of the side-by-side section (each: one bench_step of each layer, the order alternating); the
#: host-bound rows (L 1024, H <= 256) moved by up to 50 % between rounds on an H100, so the median takes seven
SIDE_BY_SIDE_ROUNDS = 7


def side_by_side_inputs(make_official: Callable[[str, int, int], torch.nn.Module], mode: str, h: int, b: int,
                        length: int, device: torch.device) -> tuple[dict, torch.Tensor, torch.Tensor, dict, dict]:
    """Both layers, the shared input x (B, H, L) and output gradient g, each side's forward (its output (B, H, L))
    and the tensors whose .grad each side's backward fills."""
    layers = {"ours": make_layer(mode, h, "triton", "none", True, device),
              "official": make_official(mode, h, length).to(device)}
    torch.manual_seed(1)
    x = torch.randn(b, h, length, device=device, requires_grad=True)  # (B, H, L)
    g = torch.randn(b, h, length, device=device)
    fwd = {"ours": lambda: layers["ours"](x), "official": lambda: layers["official"](x)[0]}
    grads = {k: [x, *[p for p in layer.parameters() if p.requires_grad]] for k, layer in layers.items()}
    return layers, x, g, fwd, grads


def side_by_side_rows(make_official: Callable[[str, int, int], torch.nn.Module], device: torch.device,
                      shapes: list[tuple[int, int, int]], rounds: int = SIDE_BY_SIDE_ROUNDS) -> list[dict[str, Any]]:
    """Our layer (Triton backend, output 'none', (B, H, L)) and ``make_official(mode, H, L)`` (the official FFTConv,
    whose forward returns (y, state)) on the same input and output gradient, for S4 and S4D at each (H, B, L):
    forward+backward ms (median over ``rounds`` interleaved rounds) and peak MiB of each, and their ratio."""
    import statistics

    rows = []
    for mode in ("s4", "s4d"):
        for h, b, length in shapes:
            row: dict[str, Any] = {"mode": mode, "H": h, "B": b, "L": length, "rounds": rounds}
            try:
                layers, x, g, fwd, grads = side_by_side_inputs(make_official, mode, h, b, length, device)
                steps = {k: (lambda f=f: f().backward(g)) for k, f in fwd.items()}
                ms: dict[str, list[float]] = {"ours": [], "official": []}
                peak: dict[str, Any] = {}
                for r in range(rounds):
                    for k in (("ours", "official") if r % 2 == 0 else ("official", "ours")):
                        res = bench_step(steps[k], grads[k], device)
                        ms[k].append(res["ms"])
                        peak.setdefault(k, res["peak_mib"])
                for k in ms:
                    row[f"{k}_ms"] = round(statistics.median(ms[k]), 4)
                    row[f"{k}_mib"] = peak[k]
                row["ratio"] = row["ours_ms"] / row["official_ms"]
                row["times"] = ms
                # kernel-generation keys replayed from CUDA graphs (0: every step ran it eagerly, host-bound)
                row["ours_kernel_graphs"] = captured(layers["ours"])
                del layers, x, g
            except Exception as exc:  # recorded with the reason (e.g. out of memory); the other rows go on
                row.update(error=f"{type(exc).__name__}: {str(exc)[:300]}")
                traceback.print_exc()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(f"{mode:4s} side by side H={h:4d} B={b:3d} L={length:6d}: "
                  + (row["error"] if "error" in row else
                     f"ours {row['ours_ms']} ms / official {row['official_ms']} ms = {row['ratio']:.2f} "
                     f"(rounds: ours {row['times']['ours']}, official {row['times']['official']}; "
                     f"kernel graphs captured: {row['ours_kernel_graphs']})"),
                  flush=True)
            rows.append(row)
    return rows


def side_by_side_graph_pass(rows: list[dict[str, Any]], make_official: Callable[[str, int, int], torch.nn.Module],
                            device: torch.device, capture: Callable[..., Callable[[], None]] = graphed_step,
                            rounds: int = SIDE_BY_SIDE_ROUNDS) -> None:
    """Adds to each row of :func:`side_by_side_rows` the times of each side's whole forward+backward captured in
    one CUDA graph (``capture``: PyTorch's whole-network capture after a warm-up, as S4 Table 3's ``step_graph``;
    our kernel generation runs inside the capture) and replayed, in interleaved rounds: what is left when the host
    no longer issues the ops one by one. Row keys ``ours_graph_ms``, ``official_graph_ms`` (medians),
    ``graph_times``, ``graph_ratio`` (ours / official, both replayed) and ``graph_vs_eager_ratio`` (ours replayed /
    the official run as it ships, eagerly); a side whose capture fails gets ``<side>_graph_error`` and is not
    captured again in later rows. A step that synchronizes with the host (the official layer reads a tensor's value
    with ``.item()`` in every forward) is refused by :func:`graphed_step` before its capture starts; run this pass
    after everything else all the same: a capture that fails midway can leave the device unusable."""
    import statistics

    failed: dict[str, str] = {}  # side -> the row whose capture failed: not tried again (each try can poison the
    for row in rows:             # device for what follows)
        if "error" in row:
            continue
        try:
            layers, x, g, fwd, grads = side_by_side_inputs(make_official, row["mode"], row["H"], row["B"], row["L"],
                                                           device)

            def step_of(side: str) -> Callable[[], None]:
                def step() -> None:  # the gradients are made inside the captured step (the graph's own memory)
                    for t in grads[side]:
                        t.grad = None
                    fwd[side]().backward(g)
                return step

            replays: dict[str, Callable[[], None]] = {}
            with kernel_graphs_off():  # graphs do not nest: the kernel generation is captured with the rest
                for side in ("ours", "official"):
                    if side in failed:
                        row[f"{side}_graph_error"] = f"not tried: its capture failed at {failed[side]}"
                        continue
                    try:
                        replays[side] = capture(step_of(side), device)
                    except Exception as exc:
                        row[f"{side}_graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                        failed[side] = f"{row['mode'].upper()} H={row['H']} B={row['B']} L={row['L']}"
                        traceback.print_exc()
                        break  # a failed capture may leave the stream unusable: no second capture after it
            times: dict[str, list[float]] = {side: [] for side in replays}
            for r in range(rounds):
                for side in (("ours", "official") if r % 2 == 0 else ("official", "ours")):
                    if side in replays:
                        times[side].append(round(bench_ms(replays[side], device), 4))
            row["graph_times"] = times
            for side, ms in times.items():
                row[f"{side}_graph_ms"] = round(statistics.median(ms), 4)
            if "ours_graph_ms" in row:
                row["graph_vs_eager_ratio"] = row["ours_graph_ms"] / row["official_ms"]
                if "official_graph_ms" in row:
                    row["graph_ratio"] = row["ours_graph_ms"] / row["official_graph_ms"]
            del layers, replays, x, g
        except Exception as exc:
            row["ours_graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"{row['mode']:4s} graphed side by side H={row['H']:4d} B={row['B']:3d} L={row['L']:6d}: "
              f"ours {row.get('ours_graph_ms', row.get('ours_graph_error'))} ms, official "
              f"{row.get('official_graph_ms', row.get('official_graph_error'))} ms "
              f"(rounds: {row.get('graph_times')})", flush=True)


def side_by_side_markdown(record: dict[str, Any]) -> list[str]:
    """The section "Side by side with the official extension (same process)" (empty list without one)."""
    from tabulate import tabulate

    rows = record.get("side_by_side") or []
    if not rows:
        return []
    info = record.get("official") or {}
    lines = ["## Side by side with the official extension (same process)", "",
             f"The official `FFTConv` of the checkout `{info.get('checkout')}` "
             f"(commit {info.get('commit') or 'unknown'})"
             ", with the CUDA extension built from it, and our layer (output 'none', the same computation: kernel, "
             "FFT convolution, D skip, GELU), N = 64, on the same input and output gradient in the same process: "
             f"medians of {rows[0]['rounds']} interleaved rounds of one forward+backward. `ours / official` below 1 "
             f"means ours is faster (the ratio of the medians); target: <= {official.SIDE_BY_SIDE_LAYER_TARGET} at "
             f"every size. `rounds' ratios`: the lowest and highest of ours / official within one round (the two "
             f"measured one after the other), how far the host's noise moves a single pair.", ""]
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["mode"].upper(), r["H"], r["B"], r["L"], "X", "X", "X", "X", "X", "X", "-",
                          r["error"][:80]])
            continue
        met = "yes" if r["ratio"] <= official.SIDE_BY_SIDE_LAYER_TARGET else "no"
        table.append([r["mode"].upper(), r["H"], r["B"], r["L"], f"{r['ours_ms']:.3f}", f"{r['official_ms']:.3f}",
                      f"{r['ratio']:.3f}", _round_ratios(r), _fmt(r["ours_mib"], 4), _fmt(r["official_mib"], 4),
                      met, ""])
    lines.append(tabulate(table, headers=["layer", "H", "B", "L", "ours ms", "official ms", "ours / official",
                                          "rounds' ratios", "ours MiB", "official MiB", "met", "error"],
                          tablefmt="github", disable_numparse=True))
    graphed = [r for r in rows if any(k in r for k in ("ours_graph_ms", "ours_graph_error", "official_graph_error"))]
    if graphed:
        lines += ["", f"Each side's whole forward+backward captured in one CUDA graph after a warm-up and replayed "
                  f"(PyTorch's whole-network capture, as S4 Table 3's `step_graph`; our kernel generation inside the "
                  f"capture): medians of {graphed[0]['rounds']} interleaved rounds. The host no longer issues the ops "
                  f"one by one, so this compares the GPU work. `met`: ours / official, both replayed, <= "
                  f"{official.SIDE_BY_SIDE_LAYER_TARGET}; where the official step was not captured (it synchronizes "
                  f"with the host, or its capture failed: the error column says which), ours replayed against the "
                  f"official as it ships (eager, the table above), marked 'vs eager'.", ""]
        table = []
        for r in graphed:
            ours_ms, off_ms = r.get("ours_graph_ms"), r.get("official_graph_ms")
            ratio = r.get("graph_ratio")
            vs_eager = r.get("graph_vs_eager_ratio")
            error = "; ".join(f"{side}: {r[f'{side}_graph_error'][:70]}" for side in ("ours", "official")
                              if f"{side}_graph_error" in r)
            table.append([r["mode"].upper(), r["H"], r["B"], r["L"],
                          "X" if ours_ms is None else f"{ours_ms:.3f}", "X" if off_ms is None else f"{off_ms:.3f}",
                          "X" if ratio is None else f"{ratio:.3f}", "X" if vs_eager is None else f"{vs_eager:.3f}",
                          _graph_met(r),
                          error])
        lines.append(tabulate(table, headers=["layer", "H", "B", "L", "ours graph ms", "official graph ms",
                                              "ours / official (both graphs)", "ours graph / official eager", "met",
                                              "error"], tablefmt="github", disable_numparse=True))
    return lines + [""]


def _round_ratios(row: dict[str, Any]) -> str:
    """'lowest-highest' of ours / official over the interleaved rounds ('-' without per-round times)."""
    times = row.get("times") or {}
    pairs = list(zip(times.get("ours") or [], times.get("official") or []))
    if not pairs:
        return "-"
    ratios = [a / b for a, b in pairs]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _graph_met(row: dict[str, Any]) -> str:
    """The graph pass's verdict for one row: both sides replayed; or, where the official step was not captured
    (refused, failed, or not tried after an earlier failure), ours replayed against the official eager (the layer
    as it ships); '-' where ours has no replayed time."""
    target = official.SIDE_BY_SIDE_LAYER_TARGET
    if row.get("graph_ratio") is not None:
        return "yes" if row["graph_ratio"] <= target else "no"
    if row.get("graph_vs_eager_ratio") is not None and "official_graph_error" in row:
        return ("yes" if row["graph_vs_eager_ratio"] <= target else "no") + " (vs eager)"
    return "-"


def copy_bandwidth_gbs(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    from triton.testing import do_bench

    src = torch.randn(256 * 2**20, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    del src, dst
    torch.cuda.empty_cache()
    return round(2 * 2**30 / (ms * 1e-3) / 1e9, 1)


def launch_overhead_us(device: torch.device) -> dict[str, float] | None:
    """Host time per launch of a tiny torch op and of a tiny Triton pass (mean of 2000, after warm-up): what the
    many small ops of the kernel generation cost when the GPU has nothing else to do."""
    if device.type != "cuda":
        return None
    from ssm_core import fftconv_triton

    x = torch.randn(16, device=device)
    y = torch.randn(1, 1, 1, 8, dtype=torch.complex64, device=device)
    out = torch.empty(2, 1, 1, 4, device=device)
    result = {}
    for name, fn in (("torch_op", lambda: x.add_(1.0)), ("triton_launch", lambda: fftconv_triton.unpack(y, out))):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        result[f"{name}_us"] = round((time.perf_counter() - t0) / 2000 * 1e6, 2)
        torch.cuda.synchronize()
    return result


def host_ms(device: torch.device, quick: bool = False) -> list[dict[str, Any]]:
    """Host time of one forward+backward at a size where the GPU work is negligible (H = 256, B = 2, L = 64, N = 64):
    what issuing the step's ops costs, whatever the size. Kernel generation alone and the whole layer, with the
    kernel generation run eagerly and replayed from CUDA graphs (SSM_KERNEL_GRAPHS; CUDA only)."""
    h, b, length = (8, 2, 16) if quick else (256, 2, 64)
    rows = []
    for on in ((False, True) if device.type == "cuda" else (False,)):
        with kernel_graphs(on):
            for mode in ("s4d", "s4"):
                layer = make_layer(mode, h, "auto", "none", True, device)
                params = [p for p in layer.kernel.parameters() if p.requires_grad]
                gk = torch.randn(1, h, length, device=device)
                x = torch.randn(b, h, length, device=device, requires_grad=True)
                gy = torch.randn(b, h, length, device=device)
                for what, fn in (("kernel generation", lambda: torch.autograd.grad(layer.kernel(length), params, gk)),
                                 ("layer", lambda: layer(x).backward(gy))):
                    rows.append({"mode": mode, "what": what, "graphs": on, "H": h, "B": b, "L": length,
                                 "host_ms": round(host_seconds(fn, device, 1 if quick else 40) * 1e3, 4)})
                    print(f"host {mode} {what} graphs={on}: {rows[-1]['host_ms']} ms", flush=True)
    return rows


def run_profile(path: Path, device: torch.device) -> None:
    texts = []
    for mode in ("s4d", "s4"):
        try:
            texts.append(f"== {mode} H={KEY[0]} B={KEY[1]} L={KEY[2]}, 5 x forward+backward ==\n"
                         + profile_table(mode, device))
        except Exception as exc:  # the profiler may not see the GPU everywhere (e.g. no CUPTI)
            texts.append(f"== {mode}: profiler failed: {type(exc).__name__}: {exc}")
    write_text_atomic(path, "\n\n".join(texts))
    print("\n\n".join(texts), flush=True)


def profile_table(mode: str, device: torch.device, rows: int = 25) -> str:
    """torch.profiler: the top CUDA kernels of forward+backward at the key size (5 steps)."""
    from torch.profiler import ProfilerActivity, profile

    h, b, length = KEY
    layer = make_layer(mode, h, "auto", "none", True, device)
    x = torch.randn(b, h, length, device=device, requires_grad=True)
    g = torch.randn_like(x)
    for _ in range(2):
        layer(x).backward(g)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            layer(x).backward(g)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=70)


# -- the sweep -------------------------------------------------------------------------------------------------------
def plan(quick: bool) -> list[dict[str, Any]]:
    """Row specifications, the rows of the targets first (so that a cut-off run still has them)."""
    if quick:
        return [dict(mode=m, backend="torch", output=o, h=h, b=b, length=length, variant=v)
                for m in ("s4d", "s4") for (h, b, length) in QUICK_SHAPES for o in ("none", "glu")
                for v in ("layer",)] + [dict(mode="s4d", backend="torch", output="none", h=8, b=2, length=64,
                                             variant=v) for v in ("before", "kernel only", "conv only")]
    h, b, length = KEY
    specs = [dict(mode=m, backend="triton", output="none", h=h, b=b, length=length, graphs=on)
             for m in ("s4d", "s4") for on in (True, False)]
    for m in ("s4d", "s4"):
        specs += [dict(mode=m, backend="triton", output="none", h=h, b=b, length=length, variant=v)
                  for v in ("before", "kernel only", "conv only")]
        specs += [dict(mode=m, backend="triton", output=o, h=h, b=b, length=length, transposed=False)
                  for o in ("none", "glu")]
    for m in ("s4d", "s4"):
        for backend in ("triton", "torch"):
            for output in ("none", "glu"):
                for (hh, bb, ll) in SHAPES:
                    spec = dict(mode=m, backend=backend, output=output, h=hh, b=bb, length=ll)
                    if spec not in specs and not (backend == "triton" and output == "none" and (hh, bb, ll) == KEY):
                        specs.append(spec)  # (the target rows above measure both graph settings)
    return specs


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if x < 100 else f"{x:.0f}"
    return str(x)


def markdown_table(record: dict[str, Any]) -> str:
    from tabulate import tabulate

    env = record["environment"]
    lines = [
        "# S4 / S4D layer forward+backward",
        "",
        f"Card: **{env['device_name']}**; torch {env['torch']}, CUDA {env['cuda']}, triton {env['triton']}; "
        f"commit {env['git_commit']}; {record['created']}. Results file: `{record['results_file']}`.",
        "",
        "SSMLayer, N = 64, GELU, float32, median of `triton.testing.do_bench` of one forward+backward; peak = "
        "`torch.cuda.max_memory_allocated` during the step above what was allocated before it. Input (B, H, L) "
        "(transposed=True) unless the layout says (B, L, H). output 'none' = kernel + FFT convolution + D skip + "
        "activation, what the official `FFTConv` computes: compare those rows with the official numbers (NVIDIA "
        "H200, runners/benchmark/official.py). 'glu' adds the position-wise GLU output (information). backend = the "
        "Cauchy / Vandermonde implementation (the FFT convolution's passes run in Triton on CUDA in every row).",
        "",
    ]
    if record.get("code"):
        lines += [f"Code measured: {record['code']}", ""]
    lines += side_by_side_markdown(record)
    for note in record.get("notes", []):
        lines += [f"Note: {note}", ""]
    if record.get("copy_bandwidth_gbs"):
        lines += [f"Device-to-device copy bandwidth on this card: {record['copy_bandwidth_gbs']} GB/s "
                  "(read + write, 1 GiB).", ""]
    if record.get("launch_overhead_us"):
        lo = record["launch_overhead_us"]
        lines += [f"Host time per launch on this machine: {lo['torch_op_us']} us for a tiny torch op, "
                  f"{lo['triton_launch_us']} us for a tiny Triton pass (mean of 2000).", ""]
    if record.get("host"):
        hr = record["host"][0]
        lines += [f"Host time of one forward+backward where the GPU work is negligible (H = {hr['H']}, B = {hr['B']}, "
                  f"L = {hr['L']}): what "
                  "issuing the ops costs at any size; a step is host-bound when this exceeds its GPU time. 'graphs': "
                  "the kernel generation replayed from CUDA graphs (SSM_KERNEL_GRAPHS; the layer then runs the "
                  "kernel and the FFT convolution as one autograd node) or run eagerly.", ""]
        lines.append(tabulate([[r["mode"].upper(), r["what"], "yes" if r["graphs"] else "no", r["host_ms"]]
                               for r in record["host"]], headers=["layer", "what", "graphs", "host ms"],
                              tablefmt="github"))
        lines.append("")
    headers = ["layer", "output", "backend", "layout", "variant", "graphs", "H", "B", "L", "ms", "peak MiB", "kept MiB",
               "official ms", "official MiB", "target ms", "meets target"]
    body = []
    for r in record["rows"]:
        meets = r.get("meets_target")
        graphs_on = r.get("graphs")
        body.append([r["mode"].upper(), r["output"], r["backend"], r["layout"], r["variant"],
                     "-" if graphs_on is None else ("yes" if graphs_on else "no"), r["H"], r["B"], r["L"],
                     _fmt(r["ms"]), _fmt(r["peak_mib"], 4), _fmt(r.get("graph_mib"), 3), _fmt(r["official_ms"]),
                     _fmt(r["official_mib"]),
                     _fmt(r["target_ms"]), "-" if meets is None else ("yes" if meets else "NO")])
    lines.append(tabulate(body, headers=headers, tablefmt="github"))
    errors = [r for r in record["rows"] if r.get("error")]
    if errors:
        lines += ["", "Failed rows (X):", ""]
        lines += [f"- {r['mode']} {r['backend']} {r['output']} {r['variant']} H={r['H']} B={r['B']} L={r['L']}: "
                  f"{r['error']}" for r in errors]
    lines += ["", "Variants: 'layer' = SSMLayer forward+backward; 'before' = the convolution path before the fused "
              "FFT convolution (rfft / irfft, D skip and activation as separate ops); 'kernel only' = the SSM "
              "kernel's generation (Cauchy / Vandermonde and the rest) forward+backward; 'conv only' = the fused "
              "FFT convolution with a given kernel. 'graphs': the kernel generation replayed from CUDA graphs "
              "(SSM_KERNEL_GRAPHS, ssm_core/kernels/graphs.py; in 'layer' rows of more than one batch row with the "
              "kernel and the convolution in one autograd node, ssm_core/kernel_conv.py) or run eagerly. "
              "'kept MiB': memory kept between steps (with graphs, the static tensors of the kernel generation's CUDA graphs), included in the peak.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes on the CPU; JSON and table go to --out-dir")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="results root (default: results/; with --quick: a new temporary directory)")
    parser.add_argument("--tables-dir", type=Path, default=None,
                        help="where bench-layers.md goes (default: tables/; with --quick: --out-dir)")
    parser.add_argument("--profile", action="store_true", help="also write a torch.profiler table (CUDA only)")
    parser.add_argument("--profile-file", type=Path, default=None, help="default: <out-dir>/profile-layers.txt")
    parser.add_argument("--key-only", action="store_true", help="only the rows at H=256, B=32, L=4096")
    parser.add_argument("--official", type=Path, default=None, metavar="S4_CHECKOUT",
                        help="also time the official FFTConv of this checkout of state-spaces/s4, with its CUDA "
                             "extension built from it, side by side in this process (needs CUDA, nvcc and ninja)")
    parser.add_argument("--no-graph-pass", action="store_true",
                        help="with --official: skip the second pass that replays each side's whole forward+backward "
                             "from one CUDA graph")
    parser.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                        help="only rewrite the table (--tables-dir, default tables/) from an existing results file")
    args = parser.parse_args(argv)
    if args.render is not None:
        table_path = (args.tables_dir or REPO / "tables") / "bench-layers.md"
        write_text_atomic(table_path, markdown_table(json.loads(args.render.read_text())))
        print(f"wrote {table_path}")
        return {"json": str(args.render), "table": str(table_path)}
    official_module = None
    if args.official is not None:  # loaded before anything is timed: a checkout that fails stops the run here
        from runners.benchmark.official_ext import OfficialExtensionError, load_official_layer
        from runners.core.layout import RUNS_DIR

        try:
            official_module = load_official_layer(args.official, REPO / RUNS_DIR / "official-extension-build")
        except OfficialExtensionError as exc:
            parser.error(str(exc))

    from runners.core.provenance import environment, utc_now
    from runners.store.write import new_result_path
    from runners.core.atomic import write_json_atomic

    if args.quick:
        device = torch.device("cpu")
        out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-layers-"))
        tables_dir = args.tables_dir or out_dir
    else:
        if not torch.cuda.is_available():
            parser.error("the benchmark needs a CUDA device; use --quick for a CPU smoke run")
        device = torch.device("cuda")
        out_dir = args.out_dir or REPO / "results"
        tables_dir = args.tables_dir or REPO / "tables"
    path = new_result_path("bench-layers", "quick" if args.quick else "gpu", root=out_dir)
    table_path = tables_dir / "bench-layers.md"
    record: dict[str, Any] = {
        "spec": "bench-layers", "created": utc_now(), "environment": environment(device),
        # where the file is committed (results/bench-layers/), whatever --out-dir it was first written to
        "results_file": str(path) if args.quick else f"results/bench-layers/{path.name}",
        "config": {"d_state": D_STATE, "activation": "gelu", "dtype": "float32", "quick": args.quick,
                   "kernel_graphs_default": graphs_enabled() and device.type == "cuda"},
        "official_h200": {"|".join(map(str, k)): v for k, v in OFFICIAL_H200.items()},
        "targets_ms": {"|".join(map(str, k)): v for k, v in TARGET_MS.items()},
        "copy_bandwidth_gbs": copy_bandwidth_gbs(device), "launch_overhead_us": launch_overhead_us(device),
        "host": host_ms(device, args.quick), "rows": [],
    }
    write_json_atomic(path, record)  # the reserved file holds the record from the start
    if official_module is not None:
        from runners.benchmark.official_ext import checkout_commit, official_fftconv

        record["official"] = {"checkout": args.official.resolve().name, "commit": checkout_commit(args.official)}
        shapes = [KEY] if args.key_only else (QUICK_SHAPES if args.quick else SHAPES)
        make_official = lambda mode, h, length: official_fftconv(official_module, mode, h, length, D_STATE)  # noqa: E731
        record["side_by_side"] = side_by_side_rows(make_official, device, shapes)
        write_json_atomic(path, record)
        write_text_atomic(table_path, markdown_table(record))
    specs = plan(args.quick)
    if args.key_only:
        specs = [s for s in specs if (s["h"], s["b"], s["length"]) == KEY]
    profiled = not (args.profile and device.type == "cuda")
    for spec in specs:
        if not profiled and (spec["h"], spec["b"], spec["length"]) != KEY:  # after the rows at the key size
            run_profile(args.profile_file or out_dir / "profile-layers.txt", device)
            profiled = True
        row = layer_row(spec["mode"], spec["backend"], spec["output"], spec["h"], spec["b"], spec["length"],
                        device, transposed=spec.get("transposed", True), variant=spec.get("variant", "layer"),
                        graphs=spec.get("graphs"))
        record["rows"].append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"{row['mode']:4s} {row['backend']:6s} {row['output']:4s} {row['layout']} {row['variant']:12s} "
              f"H={row['H']:4d} B={row['B']:3d} L={row['L']:6d}  {row['ms']} ms  {row['peak_mib']} MiB"
              + (f"  (official {row['official_ms']} ms / {row['official_mib']} MiB, target {row['target_ms']})"
                 if row["official_ms"] else ""), flush=True)
        write_json_atomic(path, record)  # after every row: a cut-off run keeps what it measured
        write_text_atomic(table_path, markdown_table(record))
    if not profiled:
        run_profile(args.profile_file or out_dir / "profile-layers.txt", device)
    if official_module is not None and device.type == "cuda" and not args.no_graph_pass:
        # last: a capture that fails midway can leave the device unusable for whatever would follow
        side_by_side_graph_pass(record["side_by_side"], make_official, device)
    write_json_atomic(path, record)
    write_text_atomic(table_path, markdown_table(record))
    print(f"wrote {path} and {table_path}")
    return {"json": str(path), "table": str(table_path)}


if __name__ == "__main__":
    main()
