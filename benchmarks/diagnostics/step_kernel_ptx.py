"""CPU (no GPU needed): compile the fused recurrent-step kernel for sm_90 as the JIT would specialize it at the
full tier's Table 7 size (pointers and H, N divisible by 16; one output channel, the skip term fused), run the
bundled ptxas, and print for the diagonal step and the DPLR step (diagonal plus rank one) and each warp count:
registers, spill bytes, shared memory, and the global loads / stores with how many are 128-bit vectors.

    python -m benchmarks.diagnostics.step_kernel_ptx [--module path/to/step_triton.py] [--warps 4,8]

A static check of the code the GPU will run (vector width, spills), not a timing: step_kernel_rate.py times it.
The blocks are the ones the module picks for each step at batch 3584, H 512, N/2 32 (its ``launch_blocks``), and the
warps default to its ``BLOCKS``. --module compiles another copy of the module with the same kernel (e.g. an edited
one).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget


#: (batch, features, modes) of the full tier's Table 7 setting
SIZE = (3584, 512, 32)


def _load(path: str):
    spec = importlib.util.spec_from_file_location("step_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(fn, blocks: dict[str, int], warps: int, ptxas: str) -> str:
    names = fn.arg_names
    consts = {n: blocks[n] for n in names if n in blocks}
    signature = {n: ("constexpr" if n in consts else "*fp32" if n.endswith("_ptr") else "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n in ("H", "N")}
    kernel = triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptx = kernel.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        log = subprocess.run([ptxas, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                             text=True, check=True).stderr
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", log)
    spills = re.findall(r"(\d+) bytes spill stores", log)
    loads = re.findall(r"ld\.global[^\n]*", ptx)
    stores = re.findall(r"st\.global[^\n]*", ptx)
    return (f"{fn.__name__} {consts} warps {warps}: registers {regs[0] if regs else '?'}, spill stores "
            f"{spills[0] if spills else '?'} B, shared {kernel.metadata.shared} B, global loads {len(loads)} "
            f"({sum('.v4' in s for s in loads)} of 128 bits), stores {len(stores)} "
            f"({sum('.v4' in s for s in stores)} of 128 bits)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default=os.path.join("ssm_core", "ops", "step_triton.py"))
    parser.add_argument("--warps", help="comma-separated warp counts (default: the module's BLOCKS)")
    args = parser.parse_args()
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        sys.exit(f"step_kernel_ptx.py needs the ptxas that ships with triton; not found at {ptxas}")
    module = _load(args.module)
    print(f"{args.module}, triton {triton.__version__}, target sm_90", flush=True)
    for name, rank1 in (("diag", False), ("dplr", True)):
        rows, block_h, block_n = module.launch_blocks(*SIZE, name)
        _, _, default_warps, stages = module.BLOCKS[name]
        blocks = {"CHANNELS": 1, "RANK1": rank1, "HAS_SKIP": True, "ROWS": rows, "BLOCK_H": block_h,
                  "BLOCK_N": block_n, "STAGES": stages}
        for warps in ([int(w) for w in args.warps.split(",")] if args.warps else [default_warps]):
            print(f"{name}: " + _compile(module.step_kernel, blocks, warps, ptxas), flush=True)

if __name__ == "__main__":
    main()
