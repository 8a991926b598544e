"""GPU: what S4 Table 2's S4 memory cell holds. One S4 layer as that table builds it (H features, d_state H / 2,
output linear) at batch 1, length 1024, one forward + backward, with the kernel-generation graphs on and off and
each FFT-convolution implementation; per case, in MiB: parameters + gradients, the input with its gradient and
the upstream gradient, what stays allocated between steps (the graphs' static tensors), the tensors saved for the
backward (distinct storages, the largest listed: save_for_backward's and the ctx attributes of custom autograd
Functions), and the step's peak above what was allocated when it began.

    python benchmarks/diagnostics/s4_layer_memory.py [H ...]      (default: 128 256 512)
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from ssm_core import SSMLayer  # noqa: E402

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

    before = torch.cuda.memory_allocated(device)
    step()
    step()  # the graphs are captured on the second call
    layer.zero_grad(set_to_none=True)
    u.grad = None
    kept = torch.cuda.memory_allocated(device) - before
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
    step()
    torch.cuda.synchronize(device)
    top = torch.cuda.max_memory_allocated(device)
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
    del layer, u, grad


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("s4_layer_memory.py measures CUDA memory: run it on a GPU machine")
    for h in [int(a) for a in sys.argv[1:]] or [128, 256, 512]:
        for graphs in ("1", "0"):
            for fftconv in ("triton", "torch"):
                case(h, graphs, fftconv)
