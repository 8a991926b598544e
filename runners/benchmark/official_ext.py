"""The official S4 CUDA extension, built from the user's own checkout of state-spaces/s4, for side-by-side timings.

The suite contains none of the official code. :func:`load_official` compiles ``extensions/kernels/cauchy.cpp`` and
``cauchy_cuda.cu`` of a checkout with ``torch.utils.cpp_extension.load`` (nvcc and ninja needed) under the flags of
the checkout's ``setup.py``, registers the result as the module ``structured_kernels`` the official wrappers import,
and imports the checkout's ``cauchy.py`` and ``vandermonde.py`` from their files, so that what is timed is the
official path as its users call it: autograd wrapper, argument checks and CUDA kernels.

:func:`load_official_layer` then imports the checkout's ``models/s4/s4.py`` (its ``FFTConv`` layer, which finds
that extension through ``extensions.kernels``), and stops unless the module reports the extension found (it would
otherwise fall back to slower kernels); :func:`official_fftconv` builds its layer at a benchmark size.

Calling conventions (both products on conjugate-pair halves, complex64, CUDA):
    official cauchy_mult(v (B, N/2), z (L,), w (B, N/2)) -> (B, L)      sum_n v_n / (z - w_n) + conj. pairs
    official log_vandermonde_cuda(v (B, N/2), x (B, N/2), L) -> (B, L)  2 Re sum_n v_n exp(x_n l)
:class:`OfficialProducts` exposes both with the argument order of the suite's benchmark, ``fn(v, w, z)``.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

#: files of a state-spaces/s4 checkout the side-by-side benchmark needs
KERNEL_DIR = Path("extensions") / "kernels"
REQUIRED = ("cauchy.cpp", "cauchy_cuda.cu", "cauchy.py", "vandermonde.py")
#: the checkout's setup.py flags (its CUDAExtension 'structured_kernels')
CXX_FLAGS = ["-g", "-march=native", "-funroll-loops"]
NVCC_FLAGS = ["-O2", "-lineinfo", "--use_fast_math"]


class OfficialExtensionError(RuntimeError):
    """The official extension cannot be built or imported from the given checkout (the message says why)."""


@dataclass
class OfficialProducts:
    """The official products as ``fn(v, w, z)`` (the benchmark's order) and where they came from."""
    cauchy_mult: Callable
    log_vandermonde: Callable
    checkout: str
    commit: Optional[str]

    def product(self, op: str, length: int) -> Callable:
        """fn(v, w, z) -> (B, L) for op 'cauchy' or 'vandermonde' (v, w: (B, N/2); z: (L,) or None)."""
        if op == "cauchy":
            return lambda v, w, z: self.cauchy_mult(v, z, w)
        if op == "vandermonde":
            return lambda v, w, z: self.log_vandermonde(v, w, length)
        raise ValueError(f"op must be 'cauchy' or 'vandermonde', got {op!r}")


def check_checkout(checkout: Path) -> Path:
    """The checkout's ``extensions/kernels`` folder; OfficialExtensionError naming every missing file."""
    checkout = Path(checkout)
    if not checkout.is_dir():
        raise OfficialExtensionError(f"OFFICIAL_S4={checkout}: not a directory; give the root of a checkout of "
                                     "state-spaces/s4 (git clone https://github.com/state-spaces/s4)")
    kernels = checkout / KERNEL_DIR
    missing = [str(KERNEL_DIR / name) for name in REQUIRED if not (kernels / name).is_file()]
    if missing:
        raise OfficialExtensionError(f"OFFICIAL_S4={checkout}: not a checkout of state-spaces/s4 with its CUDA "
                                     f"extension; missing {', '.join(missing)}")
    return kernels


def checkout_commit(checkout: Path) -> Optional[str]:
    """The commit the checkout's own git repository is at, or None: not a git checkout (e.g. an exported copy
    of its files), or git missing. A folder inside another repository is not that repository's checkout."""
    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return (out.stdout.strip() or None) if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != Path(checkout).resolve():
        return None
    return git("rev-parse", "HEAD")


def _import_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise OfficialExtensionError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise OfficialExtensionError(f"{path}: {exc} (the official wrapper's own imports; install what it names)") \
            from exc
    return module


def _checkout_package(name: str, checkout: Path) -> ModuleType:
    """The checkout's top-level package ``name`` (its folder, with or without an __init__.py) as ``import name`` finds
    it from now on: registered by its own location, so the checkout's imports resolve inside it without the
    checkout on sys.path."""
    folder = Path(checkout).resolve() / name
    init = folder / "__init__.py"
    spec = (importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
            if init.is_file() else importlib.machinery.ModuleSpec(name, None, is_package=True))
    if spec.submodule_search_locations is not None and str(folder) not in spec.submodule_search_locations:
        spec.submodule_search_locations.append(str(folder))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return module


def load_official(checkout: Path, build_dir: Path) -> OfficialProducts:
    """Build the checkout's extension into ``build_dir`` and return its products (see the module docstring)."""
    import torch

    kernels = check_checkout(checkout)
    if not torch.cuda.is_available():
        raise OfficialExtensionError("the official extension runs on CUDA only; no CUDA device is visible")
    from torch.utils.cpp_extension import load

    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        ext = load(name="structured_kernels", sources=[str(kernels / "cauchy.cpp"), str(kernels / "cauchy_cuda.cu")],
                   extra_cflags=CXX_FLAGS, extra_cuda_cflags=NVCC_FLAGS, extra_include_paths=[str(kernels)],
                   build_directory=str(build_dir), verbose=False)
    except Exception as exc:  # noqa: BLE001 - the compiler's message, with where it came from
        raise OfficialExtensionError(f"building the official extension from {kernels} failed: {exc}") from exc
    sys.modules["structured_kernels"] = ext
    cauchy = _import_file("official_s4_cauchy", kernels / "cauchy.py")
    vandermonde = _import_file("official_s4_vandermonde", kernels / "vandermonde.py")
    for module, attr in ((cauchy, "cauchy_mult"), (vandermonde, "log_vandermonde_cuda")):
        if not callable(getattr(module, attr, None)):
            raise OfficialExtensionError(f"{module.__file__}: no function {attr}; this checkout's wrappers differ "
                                         "from the ones the benchmark knows")
    return OfficialProducts(cauchy.cauchy_mult, vandermonde.log_vandermonde_cuda, str(Path(checkout).resolve()),
                            checkout_commit(Path(checkout)))


#: the layer module of a checkout (relative to its root) and the FFTConv kernel of each suite mode
LAYER_FILE = Path("models") / "s4" / "s4.py"
LAYER_KERNELS = {"s4": "s4", "s4d": "s4d"}


def load_official_layer(checkout: Path, build_dir: Path) -> ModuleType:
    """The checkout's models/s4/s4.py, imported with the extension :func:`load_official` builds (see the module
    docstring); OfficialExtensionError when the file is missing or the module did not find the extension."""
    checkout = Path(checkout)
    if not (checkout / LAYER_FILE).is_file():
        check_checkout(checkout)  # names a wrong path first
        raise OfficialExtensionError(f"OFFICIAL_S4={checkout}: missing {LAYER_FILE} (the official FFTConv layer)")
    load_official(checkout, build_dir)
    _checkout_package("extensions", checkout)  # the layer imports extensions.kernels.cauchy / .vandermonde
    module = _import_file("official_s4_layer", checkout / LAYER_FILE)
    if not getattr(module, "has_cuda_extension", False):
        raise OfficialExtensionError(f"{checkout / LAYER_FILE} did not find the CUDA extension it was built with "
                                     "(has_cuda_extension is False); its layer would time its fallback kernels")
    return module


def official_fftconv(module: Any, mode: str, d_model: int, length: int, d_state: int) -> Any:
    """The official FFTConv (kernel 's4' = DPLR or 's4d' = diagonal, GELU, (B, H, L) input) for one size."""
    if mode not in LAYER_KERNELS:
        raise ValueError(f"mode must be one of {sorted(LAYER_KERNELS)}, got {mode!r}")
    return module.FFTConv(d_model, l_max=length, activation="gelu", transposed=True, mode=LAYER_KERNELS[mode],
                          d_state=d_state)
