"""Test session setup shared by tests/ and reproductions/.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which must be switched on before
triton is first imported (a test module importing a kernel at collection time would otherwise fix
the compiled mode for the whole session). Tests that check the error for Triton-without-interpreter
unset the variable themselves.
"""
from __future__ import annotations

import os
import resource
import signal
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the CPU tests run tiny tensors: one intra-op thread avoids oversubscribing a small (CI) machine
    torch.set_num_threads(1)


@pytest.fixture
def script(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    """A module of the repository by its file's path from the root (e.g. 'benchmarks/diagnostics/ddp_step_ab.py' is
    the module benchmarks.diagnostics.ddp_step_ab), imported as any module is; a conftest.py is the module pytest
    made of it."""
    import importlib
    import sys

    def load(relative: str) -> Any:
        path = (Path(__file__).resolve().parent / relative).resolve()
        for module in [*request.config.pluginmanager.get_plugins(), *list(sys.modules.values())]:
            if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path:
                return module
        return importlib.import_module(relative.removesuffix(".py").replace("/", "."))
    return load


#: set to an integer to give every ``gen`` that integer as its seed (to replay a failure the report names)
SEED_VARIABLE = "SSM_TEST_SEED"


def _seed_from_environment() -> int | None:
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return None
    try:
        seed = int(text, 0)
    except ValueError:
        raise pytest.UsageError(f"{SEED_VARIABLE}={text!r}: not an integer (allowed: 0 to 2**64 - 1, e.g. "
                                f"{SEED_VARIABLE}=1234 to replay the seed a failure report names)") from None
    if not 0 <= seed < 2 ** 64:
        raise pytest.UsageError(f"{SEED_VARIABLE}={text!r}: out of range (allowed: 0 to 2**64 - 1)")
    return seed


def pytest_configure(config: pytest.Config) -> None:
    """A bad SSM_TEST_SEED stops the session before any test runs, with the variable named."""
    _seed_from_environment()


@pytest.fixture
def gen() -> torch.Generator:
    """A fresh seed per test so every run draws new random inputs; a failing test's report names the seed (section
    "random seed"), and ``SSM_TEST_SEED=<seed>`` replays it."""
    seed = _seed_from_environment()
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little") if seed is None else seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing test that drew from ``gen`` gets the seed in its report, with the command that replays it."""
    outcome = yield
    report = outcome.get_result()
    generator = getattr(item, "funcargs", {}).get("gen")
    if report.failed and isinstance(generator, torch.Generator):
        seed = generator.initial_seed()
        report.sections.append(("random seed", f"gen seed {seed}: replay with {SEED_VARIABLE}={seed} "
                                               f"pytest '{item.nodeid}'"))


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


#: seconds one case of the bad-input corpus may take before it fails as a hang
CASE_SECONDS = 60
#: bytes of address space one case may add to what the test process holds when the case starts
CASE_EXTRA_BYTES = 6 << 30


def _address_space() -> int | None:
    """The process's current virtual size in bytes (Linux /proc), or None where it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@pytest.fixture
def bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    """A case of the bad-input corpus runs under a time limit (SIGALRM after CASE_SECONDS, or the test module's own
    CASE_SECONDS) and an address-space limit (CASE_EXTRA_BYTES above the process's size when the case starts;
    subprocesses inherit it): a hang or a runaway allocation fails the case (TimeoutError, MemoryError) instead of
    stalling or exhausting the machine."""
    seconds = getattr(request.module, "CASE_SECONDS", CASE_SECONDS)

    def _raise(signum: int, frame: Any) -> None:
        raise TimeoutError(f"took longer than {seconds} s (a hang?)")

    old_handler = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = _address_space()
    if size is not None:
        limit = size + CASE_EXTRA_BYTES
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
