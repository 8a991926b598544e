"""Test session setup shared by tests/ and reproductions/.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which must be switched on before
triton is first imported (a test module importing a kernel at collection time would otherwise fix
the compiled mode for the whole session). Tests that check the error for Triton-without-interpreter
unset the variable themselves.
"""
from __future__ import annotations

import os

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
