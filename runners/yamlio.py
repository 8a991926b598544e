"""Reading the suite's YAML files (specs, their includes, expected values): safe, strict and with one-line errors.

Strict means: a mapping that gives one key twice is an error (PyYAML keeps the last value silently, so a
repeated ``grid:`` would change a run without a word), and a file that is not UTF-8 is an error naming it.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml


class YamlError(ValueError):
    """A YAML file cannot be read: the message is one line naming the file (and the key or line)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects a mapping key given twice (merge keys ``<<`` keep their meaning)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may be overridden by this mapping
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r} (first given on line {seen[key]})",
                            key_node.start_mark)
                    seen[key] = line
                except TypeError:  # an unhashable key: the base class reports it
                    continue
        return super().construct_mapping(node, deep=deep)


def _one_line(exc: yaml.YAMLError) -> str:
    text = " ".join(str(exc).split())
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {' '.join(problem.split())}"
    return text


def read_text_utf8(path: Path, error: Callable[[str], Exception] = YamlError) -> str:
    """The file's text; a missing or non-UTF-8 file raises ``error`` with one line naming it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the file "
                    f"as UTF-8") from None


def load_yaml(path: Path, error: Callable[[str], Exception] = YamlError) -> Any:
    """The document of a YAML file read with :class:`UniqueKeyLoader`; every problem raises ``error`` with one
    line naming the file."""
    text = read_text_utf8(path, error)
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {_one_line(exc)}") from None


def non_finite(doc: Any, where: str = "") -> Iterator[str]:
    """The key paths (``a.b[2].c``) of every float in ``doc`` that is inf or NaN (YAML's .inf / .nan)."""
    if isinstance(doc, float) and not math.isfinite(doc):
        yield where or "(top level)"
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield from non_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, (list, tuple)):
        for i, value in enumerate(doc):
            yield from non_finite(value, f"{where}[{i}]")
