"""Test session setup shared by tests/ and reproductions/.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which must be switched on before
triton is first imported (a test module importing a kernel at collection time would otherwise fix
the compiled mode for the whole session). Tests that check the error for Triton-without-interpreter
unset the variable themselves.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the CPU tests run tiny tensors: one intra-op thread avoids oversubscribing a small (CI) machine
    torch.set_num_threads(1)
