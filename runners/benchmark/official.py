"""The numbers to beat: the official S4 CUDA extension and FFTConv layer, measured on an NVIDIA H200 before the
suite's kernels were written, and the suite's targets for its kernels and layers. Used by
benchmarks/bench_kernels.py and benchmarks/bench_layers.py."""
from __future__ import annotations

# Products: (op, batch, N/2, L) -> (fwd ms, fwd+bwd ms, peak MiB).
KERNELS_H200 = {
    ("cauchy", 1024, 32, 1024): (0.053, 0.308, 9),
    ("cauchy", 1024, 32, 4096): (0.187, 0.617, 33),
    ("cauchy", 1024, 32, 16384): (0.726, 2.403, 129),
    ("vandermonde", 1024, 32, 1024): (0.037, 0.199, 5),
    ("vandermonde", 1024, 32, 4096): (0.128, 0.314, 17),
    ("vandermonde", 1024, 32, 16384): (0.488, 1.331, 65),
}
# Targets for the products: (op, batch, N/2, L) -> (fwd+bwd ms at most, peak MiB at most or None).
KERNEL_TARGETS = {
    ("cauchy", 1024, 32, 4096): (0.31, 33),
    ("cauchy", 1024, 32, 16384): (1.2, 129),
    ("vandermonde", 1024, 32, 4096): (0.105, None),
    ("vandermonde", 1024, 32, 16384): (0.44, None),
}
# The official FFTConv layer with its extension, N = 64, fwd+bwd: (mode, H, B, L) -> (ms, peak MiB).
LAYERS_H200 = {
    ("s4", 256, 32, 4096): (5.38, 1833),
    ("s4", 512, 8, 16384): (13.8, 3906),
    ("s4d", 256, 32, 4096): (3.86, 1809),
    ("s4d", 512, 8, 16384): (9.33, 3713),
}
# Targets for the layers: (mode, H, B, L) -> fwd+bwd ms at most (memory: no more than the official layer's).
LAYER_TARGET_MS = {("s4", 256, 32, 4096): 2.7, ("s4d", 256, 32, 4096): 1.9}
# Targets side by side with the official extension in one process (benchmarks/bench_kernels.py --official):
# L -> ours / official fwd+bwd time at most, for both products.
SIDE_BY_SIDE_TARGETS = {1024: 1.0, 4096: 1.0, 16384: 0.5}
# Layers side by side with the official FFTConv in one process (benchmarks/bench_layers.py --official): ours / official
# forward+backward time at most, at every measured size.
SIDE_BY_SIDE_LAYER_TARGET = 0.5
