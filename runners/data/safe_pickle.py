"""Reading published pickles (the CIFAR-10 python batches) without running code from them.

A pickle may name any importable callable (``os.system``, ``builtins.exec``, ...), which ``pickle.load`` calls.
:func:`load_pickle` admits only what the data format holds: dicts, lists, tuples, str, bytes, numbers, booleans,
None (built into the pickle opcodes, no lookup), bytes as Python 3 writes them at protocol 2 (a call of the
pure function ``_codecs.encode``), and numpy arrays, whose reconstruction names exactly the globals below.
Anything else raises :class:`UnsafePickleError` before it is called.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

#: (module, name) of the globals a pickled numpy array needs (numpy 1.x and 2.x spell the module differently)
ALLOWED_GLOBALS = frozenset({
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),  # bytes in a protocol-2 pickle written by Python 3: encode(text, "latin1")
})


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a global that the data format does not hold."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafePickleError(f"refers to {module}.{name}, which a data file of this format never holds "
                                    f"(allowed: numpy arrays, dicts, lists, str, bytes, numbers)")
        return super().find_class(module, name)


def load_pickle(path: Path, encoding: str = "ASCII") -> Any:
    """The object pickled in ``path``, read with the restricted unpickler (``encoding`` as for pickle.load)."""
    with open(path, "rb") as fh:
        return _RestrictedUnpickler(io.BufferedReader(fh), encoding=encoding).load()
