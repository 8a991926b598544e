"""Reading published pickles (the CIFAR-10 python batches) without running code from them.

A pickle may name any importable callable (``os.system``, ``builtins.exec``, ...), which ``pickle.load`` calls.
:func:`load_pickle` admits only what the data format holds: dicts, lists, tuples, str, bytes, numbers, booleans,
None (built into the pickle opcodes, no lookup), bytes as Python 3 writes them at protocol 2 (a call of the
pure function ``_codecs.encode``), and numpy arrays, whose reconstruction names exactly the globals below.
Anything else raises :class:`UnsafePickleError` before it is called.

The loaded object is then walked without recursion: nesting deeper than ``max_depth`` (the format nests 2 deep) or
more than ``max_items`` containers and items (shared references counted each time they are reached, so a "billion
laughs" pickle stops early) raise :class:`UnsafePickleError` too, so a crafted file never reaches numpy or a repr
as a 200 000-deep list (RecursionError) or a self-referencing one.
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


MAX_DEPTH = 8
MAX_ITEMS = 1_000_000


def check_shape(obj: Any, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> None:
    """Raise UnsafePickleError if ``obj`` nests lists/tuples/dicts/sets deeper than ``max_depth`` or holds more than
    ``max_items`` entries in all; iterative, so it never recurses."""
    stack = [(obj, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = [v for kv in item.items() for v in kv]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise UnsafePickleError(f"nests containers more than {max_depth} deep (allowed: at most {max_depth}; "
                                    f"the data format nests 2 deep)")
        seen += len(children)
        if seen > max_items:
            raise UnsafePickleError(f"holds more than {max_items} entries in its containers (allowed: at most "
                                    f"{max_items})")
        stack.extend((c, depth + 1) for c in children)


def load_pickle(path: Path, encoding: str = "ASCII", *, max_depth: int = MAX_DEPTH,
                max_items: int = MAX_ITEMS) -> Any:
    """The object pickled in ``path``, read with the restricted unpickler (``encoding`` as for pickle.load), then
    checked by :func:`check_shape`. A RecursionError or MemoryError while reading becomes UnsafePickleError."""
    with open(path, "rb") as fh:
        try:
            obj = _RestrictedUnpickler(io.BufferedReader(fh), encoding=encoding).load()
        except (RecursionError, MemoryError) as exc:
            raise UnsafePickleError(f"cannot be read within limits ({type(exc).__name__})") from None
    check_shape(obj, max_depth, max_items)
    return obj
