"""CPU: how far the S4 layer's one-node path (kernel and FFT convolution in one autograd node) and its two-node path
round each float32 gradient apart, and how far each lies from the float64 gradients.

    python -m benchmarks.diagnostics.one_node_float32_rounding --seeds 200 [--mode s4 --channels 2 --output linear]
        [--kernel]

Per seed: a float32 layer (H 16) and its float64 copy, input (3, 16, 200) and output gradient drawn from the seed,
the graphs stand-ins that run the same ops eagerly (tests/test_layers.py's one_node_float32_gradients, the function
the CPU test of the float32 criterion runs), the kernel's spectrum and D in the graph unless ``--kernel``. Prints,
per gradient, the largest relative difference of the two float32 paths (relative to the largest entry), on how many
seeds it exceeds 1e-5, and each path's largest relative difference from float64; and the largest difference of the
two float32 outputs.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch
from tabulate import tabulate

from ssm_core import SSMLayer
from tests.test_layers import one_node_float32_gradients, rel_error

FLAG = 1e-5  # the float32 one-path-against-the-other tolerance the GPU test held before


def measure(seeds: int, layer_kwargs: dict, spectrum: bool) -> tuple[list[list], float]:
    """(a row per gradient: name, one vs two max, seeds over FLAG, one vs float64 max, two vs float64 max; the
    largest relative difference of the two float32 outputs) over seeds 0 .. seeds - 1."""
    worst: dict[str, list[float]] = {}
    flagged: dict[str, int] = {}
    output = 0.0
    for seed in range(seeds):
        torch.manual_seed(seed)
        layer = SSMLayer(16, 16, transposed=True, backend="torch", **layer_kwargs)
        u = torch.randn(3, 16, 200)  # (B, H, L)
        g = torch.randn(3, layer.channels, 16, 200, dtype=torch.float64)  # (B, C, H, L)
        names, one, two, exact, out_rel = one_node_float32_gradients(layer, spectrum, u, g)
        output = max(output, out_rel)
        for name, a, b, c in zip(names, one, two, exact):
            errors = [rel_error(a, b), rel_error(a.double(), c), rel_error(b.double(), c)]
            worst[name] = [max(x, y) for x, y in zip(worst.get(name, [0.0] * 3), errors)]
            flagged[name] = flagged.get(name, 0) + (errors[0] > FLAG)
    rows = [[name, f"{w[0]:.2e}", flagged[name], f"{w[1]:.2e}", f"{w[2]:.2e}"] for name, w in worst.items()]
    return rows, output


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--mode", default="s4", choices=["s4", "s4d", "dss"])
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--output", default="linear", choices=["linear", "glu"])
    parser.add_argument("--kernel", action="store_true", help="the graph gives the kernel, not its spectrum with D")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.channels < 1:
        parser.error(f"--seeds {args.seeds} and --channels {args.channels}: expected integers >= 1")
    torch.set_num_threads(1)
    layer_kwargs = {"mode": args.mode, "channels": args.channels, "output": args.output}
    rows, output = measure(args.seeds, layer_kwargs, not args.kernel)
    print(f"{args.seeds} seeds, SSMLayer(16, 16, {layer_kwargs}), graph gives the "
          f"{'kernel' if args.kernel else 'spectrum with D'}; relative to each tensor's largest entry")
    print(tabulate(rows, headers=["gradient", "one vs two node (max)", f"seeds over {FLAG:g}",
                                  "one node vs float64 (max)", "two nodes vs float64 (max)"], tablefmt="github"))
    print(f"outputs, one vs two node (max): {output:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
