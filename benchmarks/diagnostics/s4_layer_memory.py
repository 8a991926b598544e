"""GPU: what S4 Table 2's S4 memory cell holds. One S4 layer as that table builds it (H features, d_state H / 2,
output linear) at batch 1, length 1024, one forward + backward, with the kernel-generation graphs on and off and
each FFT-convolution implementation; per case, in MiB: parameters + gradients, the input with its gradient and
the upstream gradient, what stays allocated between steps (the graphs' static tensors), the tensors saved for the
backward (distinct storages, the largest listed: save_for_backward's and the ctx attributes of custom autograd
Functions), and the step's peak above what was allocated when it began. Where that memory comes from: the
allocator's history (torch.cuda.memory._record_memory_history, Python stacks) is replayed, and the blocks still
allocated after the two warm-up steps (kept) and those live at the measured step's peak are summed by the line of
this repository's code that allocated them (the innermost ssm_core / benchmarks frame of the stack).

With ``--official PATH`` (a checkout of state-spaces/s4; its CUDA extension is built as for bench_layers.py), it
also counts the official FFTConv (DPLR kernel, GELU, d_state H / 2, no output projection) and our layer with the
same scope (output 'none', (B, H, L) input) the same way, at batch 1, length 1024: the Table 2 count of each.

    python -m benchmarks.diagnostics.s4_layer_memory [H ...] [--official PATH]      (default: 128 256 512)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from ssm_core import SSMLayer

MIB = 2 ** 20


def ctx_attributes(root) -> list[tuple[str, torch.Tensor]]:
    """Tensors that custom autograd Functions of the graph under ``root`` keep as ctx attributes for their backward
    (saved_tensors_hooks sees only save_for_backward's), labelled 'Node.attribute'."""
    found, seen, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name, value in getattr(node, "__dict__", {}).items():
            if isinstance(value, torch.Tensor):
                found.append((f"{type(node).__name__}.{name}", value))
        stack.extend(fn for fn, _ in node.next_functions)
    return found


def allocation_site(frames: list[dict]) -> str:
    """'folder/file.py:line function' of the innermost frame in this repository's code (ssm_core, benchmarks),
    else of the innermost frame; frames as the allocator's history records them (innermost first)."""
    ours = [f for f in frames if "/ssm_core/" in f.get("filename", "") or "/benchmarks/" in f.get("filename", "")]
    f = (ours or frames or [{}])[0]
    where = "/".join(str(f.get("filename", "?")).split("/")[-2:])
    return f"{where}:{f.get('line', '?')} {f.get('name', '?')}"


def live_blocks(trace: list[dict], at_peak: bool) -> tuple[int, dict[str, int]]:
    """Replay allocator trace entries (action 'alloc' / 'free_completed', addr, size, frames): the bytes allocated
    by these entries and still live (at the end, or at the moment their running total peaked: ``at_peak``), and
    those bytes by allocation site. Frees of blocks allocated before the trace began are ignored."""
    live: dict[int, tuple[int, str]] = {}  # addr -> (bytes, site)
    total, best, best_live = 0, 0, {}
    for e in trace:
        if e.get("action") == "alloc":
            live[e["addr"]] = (e["size"], allocation_site(e.get("frames") or []))
            total += e["size"]
        elif e.get("action") == "free_completed" and e.get("addr") in live:
            total -= live.pop(e["addr"])[0]
        if at_peak and total > best:
            best, best_live = total, dict(live)
    chosen = best_live if at_peak else live
    by_site: dict[str, int] = {}
    for nbytes, site in chosen.values():
        by_site[site] = by_site.get(site, 0) + nbytes
    return (best if at_peak else total), by_site


def print_sites(label: str, total: int, by_site: dict[str, int], top: int = 8) -> None:
    print(f"    {label}: {total / MIB:.2f} MiB by allocation site", flush=True)
    for site, nbytes in sorted(by_site.items(), key=lambda kv: -kv[1])[:top]:
        print(f"      {nbytes / MIB:8.3f} MiB  {site}", flush=True)


def device_trace(device: torch.device) -> list[dict]:
    """The allocator's recorded actions on ``device`` so far (needs _record_memory_history on)."""
    traces = torch.cuda.memory._snapshot()["device_traces"]
    return list(traces[device.index or 0]) if traces else []


def case(h: int, graphs: str, fftconv: str, batch: int = 1, length: int = 1024) -> None:
    os.environ["SSM_KERNEL_GRAPHS"], os.environ["SSM_FFTCONV"] = graphs, fftconv
    device = torch.device("cuda")
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    layer = SSMLayer(h, h // 2, mode="s4", output="linear").to(device)
    params = torch.cuda.memory_allocated(device) - base
    u = torch.randn(batch, length, h, device=device, requires_grad=True)  # (B, L, H)
    grad = torch.randn(batch, length, h, device=device)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        u.grad = None
        layer(u).backward(grad)

    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    n0 = len(device_trace(device))
    before = torch.cuda.memory_allocated(device)
    step()
    step()  # the graphs are captured on the second call
    layer.zero_grad(set_to_none=True)
    u.grad = None
    kept = torch.cuda.memory_allocated(device) - before
    warm_trace = device_trace(device)[n0:]
    saved: dict[int, tuple[int, tuple, str]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        saved[s.data_ptr()] = (s.nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", ""))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(u)
    for label, t in ctx_attributes(out.grad_fn):  # tensors the hooks do not see
        st = t.untyped_storage()
        saved.setdefault(st.data_ptr(), (st.nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", "") + " " + label))
    out.backward(grad)
    del out
    layer.zero_grad(set_to_none=True)
    u.grad = None
    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    n1 = len(device_trace(device))
    step()
    torch.cuda.synchronize(device)
    top = torch.cuda.max_memory_allocated(device)
    step_trace = device_trace(device)[n1:]
    torch.cuda.memory._record_memory_history(enabled=None)
    grads = sum(p.numel() * p.element_size() for p in layer.parameters())
    # the Table 2 cell: the step's peak minus what was allocated before the model was built
    print(f"H={h} graphs={graphs} fftconv={fftconv}: Table 2 count {(top - base) / MIB:.2f} MiB = parameters "
          f"{params / MIB:.2f} + kept between steps {kept / MIB:.2f} + input and upstream gradient "
          f"{(start - base - params - kept) / MIB:.2f} + the step's peak above that {(top - start) / MIB:.2f}; "
          f"within the step: parameters' gradients {grads / MIB:.2f}, the input's gradient "
          f"{u.numel() * u.element_size() / MIB:.2f}, saved for the backward "
          f"{sum(v[0] for v in saved.values()) / MIB:.2f} "
          f"({len(saved)} storages)", flush=True)
    for nbytes, shape, dtype in sorted(saved.values(), reverse=True)[:8]:
        print(f"    saved {nbytes / MIB:7.3f} MiB  {dtype:10s} {shape}", flush=True)
    print_sites("kept between steps", *live_blocks(warm_trace, at_peak=False))
    print_sites("live at the step's peak", *live_blocks(step_trace, at_peak=True))
    del layer, u, grad


def table2_count(make_layer, h: int, transposed: bool, batch: int = 1, length: int = 1024) -> float:
    """MiB of the Table 2 count for a layer ``make_layer()`` puts on the GPU: the peak of its third forward +
    backward (graphs and plans settle in the first two) minus what was allocated before it was built."""
    device = torch.device("cuda")
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    layer = make_layer().to(device)
    shape = (batch, h, length) if transposed else (batch, length, h)
    u = torch.randn(*shape, device=device, requires_grad=True)
    grad = torch.randn(*shape, device=device)
    for i in range(3):
        layer.zero_grad(set_to_none=True)
        u.grad = None
        torch.cuda.synchronize(device)
        if i == 2:
            torch.cuda.reset_peak_memory_stats(device)
        out = layer(u)
        out = out[0] if isinstance(out, tuple) else out  # the official layer returns (y, state)
        out.backward(grad)
        del out
    torch.cuda.synchronize(device)
    mib = (torch.cuda.max_memory_allocated(device) - base) / MIB
    del layer, u, grad
    return mib


def official_cases(checkout: Path, dims: list[int]) -> None:
    """The official FFTConv beside our layer of the same scope, counted as the Table 2 cell is."""
    from runners.benchmark.official_ext import load_official_layer, official_fftconv
    from runners.core.layout import RUNS_DIR

    repo = Path(__file__).resolve().parents[2]
    module = load_official_layer(checkout, repo / RUNS_DIR / "official-extension-build")
    for h in dims:
        theirs = table2_count(lambda: official_fftconv(module, "s4", h, 1024, h // 2), h, transposed=True)
        ours = table2_count(lambda: SSMLayer(h, h // 2, mode="s4", output="none", transposed=True), h,
                            transposed=True)
        print(f"H={h} batch 1, length 1024, output none (the official FFTConv's scope): Table 2 count ours "
              f"{ours:.2f} MiB, official {theirs:.2f} MiB", flush=True)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("s4_layer_memory.py measures CUDA memory: run it on a GPU machine")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dims", nargs="*", type=int, default=[128, 256, 512], help="layer widths H")
    parser.add_argument("--official", type=Path, help="a checkout of state-spaces/s4 to count its FFTConv too")
    args = parser.parse_args()
    for h in args.dims:
        for graphs in ("1", "0"):
            for fftconv in ("triton", "torch"):
                case(h, graphs, fftconv)
    if args.official is not None:
        os.environ["SSM_KERNEL_GRAPHS"], os.environ["SSM_FFTCONV"] = "1", "triton"
        official_cases(args.official, args.dims)
