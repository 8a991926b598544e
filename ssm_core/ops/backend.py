"""Which implementation computes the Cauchy and Vandermonde products.

The choice is explicit: an argument (``backend=``) or, for whole runs, the environment variable
``SSM_BACKEND``. Values:

- ``"auto"`` (default): Triton on CUDA tensors, the torch reference on CPU tensors.
- ``"torch"``: the chunked torch reference everywhere.
- ``"triton"``: the Triton kernels; on CPU tensors this needs ``TRITON_INTERPRET=1``.

Asking for Triton where it cannot run raises :class:`BackendUnavailable` naming the reason;
nothing falls back silently.
"""
from __future__ import annotations

import importlib.util
import os

import torch

BACKENDS = ("auto", "torch", "triton")
ENV_VAR = "SSM_BACKEND"


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine or these tensors."""


def triton_problem(device: torch.device) -> str | None:
    """Why Triton cannot run on ``device`` here, or None if it can."""
    if importlib.util.find_spec("triton") is None:
        return "the 'triton' package is not installed (pip install 'ssm-repro[triton]')"
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        return "the tensors are on the CPU and TRITON_INTERPRET=1 is not set"
    return f"Triton kernels support CUDA tensors (or CPU under TRITON_INTERPRET=1), not device type '{device.type}'"


def env_switch(env_var: str, default: bool, on: str, off: str) -> bool:
    """An on/off environment variable: '1' or '0' (unset: ``default``); any other value is refused by name, with
    what each allowed value does (``on``, ``off``: e.g. 'replays ... from CUDA graphs')."""
    value = os.environ.get(env_var, "1" if default else "0")
    if value not in ("0", "1"):
        raise ValueError(f"environment variable {env_var}={value!r} not allowed: '1' {on}"
                         f"{' (the default)' if default else ''}, '0' {off}{'' if default else ' (the default)'}")
    return value == "1"


def resolve_backend(backend: str | None, device: torch.device, *, env_var: str = ENV_VAR,
                    what: str = "backend") -> str:
    """Return 'torch' or 'triton' for tensors on ``device``; raise if the choice cannot run.

    ``backend`` None reads ``env_var`` (default 'auto'). Also the choice of the FFT convolution's passes
    (``what`` = 'fft_conv impl', ``env_var`` = SSM_FFTCONV): one rule for every Triton path.
    """
    source = f"argument {what}"
    if backend is None:
        backend, source = os.environ.get(env_var, "auto"), f"environment variable {env_var}"
    if backend not in BACKENDS:
        raise ValueError(f"{source}={backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    if backend == "auto":
        if device.type != "cuda":
            return "torch"
        problem = triton_problem(device)
        if problem:
            raise BackendUnavailable(
                f"{what} 'auto' uses Triton on CUDA, but {problem}; install triton or set {env_var}=torch")
        return "triton"
    if backend == "triton":
        problem = triton_problem(device)
        if problem:
            raise BackendUnavailable(f"{what} 'triton' was requested ({source}) but {problem}")
    return backend
