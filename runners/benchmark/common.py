"""Timing and memory of one training step (forward + backward) per table cell (S4 Tables 2, 3).

GPU: median over ``reps`` steps each timed with CUDA events (after ``warmup`` steps), and the peak of
``torch.cuda.max_memory_allocated`` during one step minus what was allocated before the model was built
(so: parameters, gradients, inputs, activations and transient buffers of that step).
CPU (smoke tier): median of ``time.perf_counter`` per step; memory is an ESTIMATE, not a peak: the bytes
of the distinct storages saved for backward (autograd saved-tensor hooks) plus the parameters and their
gradients. Every cell's note says which of the two it is.

An out-of-memory error in a cell is caught and recorded as the value "X" with a note; it never stops the
table. Any other error propagates.
"""
from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from dataclasses import dataclass

import torch

from ..core.textfmt import fmt as fmt_number

MIB = 2**20
CPU_MEMORY_NOTE = "CPU memory estimate: bytes saved for backward + parameters + gradients (not a peak)"
CUDA_MEMORY_NOTE = "peak torch.cuda.max_memory_allocated during one step, minus memory allocated before the model"


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA out-of-memory, Python MemoryError, and the CPU allocator's allocation failure."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and ("out of memory" in str(exc) or "can't allocate memory" in str(exc))


def oom_note(exc: BaseException, device: torch.device) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"out of memory on {device.type} ({first[:160]})"


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def float32_matmul(allow_tf32: bool) -> Iterator[None]:
    """TF32 matmuls on or off for the block (torch.set_float32_matmul_precision 'high' / 'highest'); restored after.

    PyTorch 1.7-1.11, the versions of 2021, used TF32 for float32 matmuls on Ampere GPUs by default.
    """
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


@contextlib.contextmanager
def cuda_memory_limit(limit_gib: float | None, device: torch.device) -> Iterator[str | None]:
    """Cap this process's CUDA allocations at ``limit_gib`` (set_per_process_memory_fraction); yields a note.

    S4 Appendix D.3.3 limits CIFAR generation to 16 GB. No-op (note None) on CPU or when limit_gib is None.
    """
    if limit_gib is None or device.type != "cuda":
        yield None
        return
    index = device.index if device.index is not None else torch.cuda.current_device()  # "cuda" has no index
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, limit_gib * 2**30 / total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    try:
        yield f"memory limited to {limit_gib:g} GiB of {total / 2**30:.0f} GiB"
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)


@dataclass
class StepMeasurement:
    """One model at one size: median step time (ms) and memory (MiB), or "X" for both when out of memory."""

    ms: float | str
    mb: float | str
    note: str
    params: int | None = None

    @property
    def ok(self) -> bool:
        return self.ms != "X"


def saved_tensor_bytes(step: Callable[[], None], module: torch.nn.Module) -> int:
    """CPU memory estimate of one step: distinct storages saved for backward, parameters, and gradients."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    for p in module.parameters():
        s = p.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
    grads = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return sum(storages.values()) + grads


def _time_cuda(step: Callable[[], None], reps: int, device: torch.device) -> list[float]:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))  # ms
    return times


def _time_cpu(step: Callable[[], None], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def bench_ms(fn: Callable[[], Any], device: torch.device, *, warmup: int = 25, rep: int = 100,
             grads: Sequence[torch.Tensor] = ()) -> float:
    """Median ms of one call of ``fn`` (the kernel and layer benchmarks): triton.testing.do_bench on CUDA
    (``warmup`` / ``rep`` in ms; the ``.grad`` of ``grads`` reset to None before each call), on the CPU the
    median of 3 timed calls after an untimed one."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup, rep=rep, grad_to_none=list(grads) or None, return_mode="median"))

    def call() -> None:
        for t in grads:
            t.grad = None
        fn()

    call()
    return statistics.median(_time_cpu(call, 3))


def peak_mib(fn: Callable[[], Any], device: torch.device, *, grads: Sequence[torch.Tensor] = (),
             prime: bool = False) -> float | None:
    """Peak memory (MiB) allocated during one call of ``fn`` above what was allocated before it; CUDA only (None
    elsewhere). ``prime``: call it once first; the ``.grad`` of ``grads`` is None before the call and after."""
    if device.type != "cuda":
        return None
    if prime:
        fn()
    for t in grads:
        t.grad = None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    peak = (torch.cuda.max_memory_allocated(device) - base) / MIB
    for t in grads:
        t.grad = None
    return peak


@contextlib.contextmanager
def kernel_graphs_off() -> Iterator[None]:
    """The SSM kernels' own CUDA-graph replay off for the block (SSM_KERNEL_GRAPHS=0): graphs do not nest, so a
    capture of a whole step runs the kernel generation inside it."""
    from ssm_core.kernels import graphs

    old = os.environ.get(graphs.ENV_VAR)
    os.environ[graphs.ENV_VAR] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(graphs.ENV_VAR, None)
        else:
            os.environ[graphs.ENV_VAR] = old


class StepNotCapturable(ValueError):
    """The step waits for the GPU on the host (e.g. ``.item()``), which a CUDA graph capture cannot record."""


def graphed_step(step: Callable[[], None], device: torch.device, warmup: int = 3) -> Callable[[], None]:
    """``step`` (static inputs, forward and backward) captured whole in one CUDA graph; returns its replay.

    Warm-up on a side stream first (allocator, kernel selection, autotuning); its last step runs with CUDA's sync
    debug mode set to "error", so a step that synchronizes with the host raises :class:`StepNotCapturable` before
    any capture starts (a failed capture can leave the process unable to use the device). Then the capture
    (PyTorch's whole-network capture). The SSM kernels' own graph replay must be off (:func:`kernel_graphs_off`)."""
    from ssm_core.kernels import graphs

    if device.type != "cuda":
        raise ValueError(f"step_graph: a CUDA graph needs a CUDA device, got {device}")
    if graphs.enabled():
        raise RuntimeError(f"graphed_step: set {graphs.ENV_VAR}=0 first (kernel graphs do not nest in a capture)")
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 1) - 1):
            step()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step()
        except RuntimeError as exc:
            if "synchroniz" not in str(exc):
                raise
            raise StepNotCapturable(f"the step cannot be captured in a CUDA graph: it synchronizes with the host "
                                    f"({str(exc).splitlines()[0][:200]})") from exc
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


#: what the memory of a graph-replayed step counts
GRAPH_MEMORY_NOTE = ("peak torch.cuda.max_memory_allocated from the eager warm-up through the capture and a replay "
                     "(the graph's pool included), minus memory allocated before the model")


def measure_training_step(build: Callable[[], tuple[Callable[[], None], torch.nn.Module]], device: torch.device,
                          warmup: int = 3, reps: int = 10, step_graph: bool = False) -> StepMeasurement:
    """Time and memory of ``step()``, where ``build()`` makes the model and inputs on ``device`` and returns
    (step, model); ``step`` zeroes the gradients, runs forward, and backward (one training step without the
    optimizer update, as S4 Table 2 "a single forward+backward pass"). ``step_graph`` (CUDA only): the step is
    captured whole in one CUDA graph after the warm-up (:func:`graphed_step`) and its replay is timed.
    """
    if warmup < 0 or reps < 1:
        raise ValueError(f"measure_training_step: need warmup >= 0 and reps >= 1, got {warmup}, {reps}")
    if step_graph and device.type != "cuda":
        raise ValueError(f"step_graph: a CUDA graph needs a CUDA device, got {device}")
    with kernel_graphs_off() if step_graph else contextlib.nullcontext():
        return _measure(build, device, warmup, reps, step_graph)


def _measure(build: Callable[[], tuple[Callable[[], None], torch.nn.Module]], device: torch.device, warmup: int,
             reps: int, step_graph: bool) -> StepMeasurement:
    free_memory(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    step = model = None
    try:
        step, model = build()
        params = sum(p.numel() for p in model.parameters())
        if step_graph:  # the peak from before the warm-up: the graph's pool is kept across replays
            torch.cuda.reset_peak_memory_stats(device)
            step = graphed_step(step, device, warmup)
            how = f"median of {reps} replays of the step captured in one CUDA graph after {max(warmup, 1)} warm-up " \
                  f"steps; {GRAPH_MEMORY_NOTE}"
        else:
            for _ in range(warmup):
                step()
            how = f"median of {reps} steps after {warmup} warm-up; "
        synchronize(device)
        if device.type == "cuda":
            if not step_graph:
                torch.cuda.reset_peak_memory_stats(device)
            step()
            torch.cuda.synchronize(device)
            mem = torch.cuda.max_memory_allocated(device) - base
            times = _time_cuda(step, reps, device)
            note = "" if step_graph else CUDA_MEMORY_NOTE
        else:
            mem = saved_tensor_bytes(step, model)
            times = _time_cpu(step, reps)
            note = CPU_MEMORY_NOTE
        result = StepMeasurement(statistics.median(times), mem / MIB, how + note, params)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        result = StepMeasurement("X", "X", oom_note(exc, device))
    finally:
        step = model = None
        free_memory(device)
    return result


def ratio(num: float | str, den: float | str) -> float | str:
    """num / den, or "X" when either side failed."""
    if num == "X" or den == "X":
        return "X"
    return float(num) / float(den)


def fmt(value: float | str, unit: str) -> str:
    """A measured value with its unit for a note ("13964 MiB", "0.317 ms"); "X" for a failure."""
    return "X" if value == "X" else f"{fmt_number(value)} {unit}"


def host_seconds(fn: Callable[[], Any], device: torch.device, n: int) -> float:
    """Host time per call: best of 5 rounds of the mean wall time of n calls, with no synchronization inside a
    round (so it measures what issuing the work costs when the GPU keeps up); one round of one call for n = 1
    (a CPU smoke run). In seconds."""
    for _ in range(3 if n > 1 else 1):
        fn()
    synchronize(device)
    best = float("inf")
    for _ in range(5 if n > 1 else 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
        synchronize(device)
    return best
