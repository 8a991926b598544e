"""Test session setup shared by tests/ and reproductions/.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which must be switched on before
triton is first imported (a test module importing a kernel at collection time would otherwise fix
the compiled mode for the whole session). Tests that check the error for Triton-without-interpreter
unset the variable themselves.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the CPU tests run tiny tensors: one intra-op thread avoids oversubscribing a small (CI) machine
    torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    """A fresh seed per test (shown in the failure message) so every run draws new random inputs."""
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def write_pathfinder_release(tmp: Path, n_per_file: int = 4) -> Path:
    """A small Pathfinder-32 in the LRA release's layout: lra_release/pathfinder32/curv_contour_length_14/
    {imgs/<k>/sample_<i>.png, metadata/<k>.npy} for k = 0, 1 (random 32 x 32 grayscale images, labels alternating;
    PNGs written uncompressed, so an edited image keeps its size). Returns the difficulty folder."""
    from PIL import Image

    folder = tmp / "lra_release" / "pathfinder32" / "curv_contour_length_14"
    (folder / "metadata").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for k in (0, 1):
        (folder / "imgs" / str(k)).mkdir(parents=True)
        lines = []
        for i in range(n_per_file):
            Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), "L").save(
                folder / "imgs" / str(k) / f"sample_{i}.png", compress_level=0)
            lines.append(f"imgs/{k} sample_{i}.png {i} {i % 2} 1.0 14 4 2 0.5 1 1")
        (folder / "metadata" / f"{k}.npy").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def pathfinder_release() -> Callable[..., Path]:
    """:func:`write_pathfinder_release`, for tests of the Pathfinder loader."""
    return write_pathfinder_release
