"""Reading the suite's YAML files (specs, their includes, expected values, ``--set`` values): the one loader, safe,
strict, bounded and with one-line errors.

Strict means: a mapping that gives one key twice is an error (PyYAML keeps the last value silently, so a
repeated ``grid:`` would change a run without a word), and a file that is not UTF-8 is an error naming it.

Bounded means: the file is a regular file (a FIFO, a device such as /dev/zero, a folder is refused without being
read) of at most :data:`MAX_FILE_BYTES`; the document, with every alias (``*name``) written out, holds at most
:data:`MAX_EXPANDED` nodes and characters (a "billion laughs" of nested aliases is refused before anything is
built from it: the document is embedded in every results file), nests at most :data:`MAX_DEPTH` levels, and no
node contains itself (``&a [*a]``).

Plain means: what a document holds can be written to a results file as JSON unchanged and compared by name:
keys are text (``16:``, ``on:``, ``null:`` are an int, a bool and a null in YAML; quote them), values are text,
numbers, true / false, null, lists and mappings (a date such as ``2026-11-27``, ``!!binary``, ``!!set``, ``!!omap``
are refused: quote a date), and integers are within the range of a float (about 1.8e308). Each problem is one
line naming the file, the line, the key and what is allowed (:class:`YamlError`, or the caller's error class).
"""
from __future__ import annotations

import copy
import math
import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

#: the largest YAML file read (the suite's largest expected file is ~80 KB)
MAX_FILE_BYTES = 1 << 20
#: nodes plus characters of scalars of one document with its aliases written out (the suite's files: < 75 000)
MAX_EXPANDED = 500_000
#: nesting levels of lists and mappings in one document
MAX_DEPTH = 64
#: an integer literal longer than this is refused before it is converted (Python's int() limit is 4300 digits)
MAX_INT_CHARS = 4000

_TAG = "tag:yaml.org,2002:"
#: scalar tags whose values are plain (JSON) values
PLAIN_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null")}
#: what a value may be, for messages
ALLOWED_VALUES = "text, numbers, true/false, null, lists and mappings with text keys"
_TAG_WHAT = {_TAG + "timestamp": "a date/time", _TAG + "binary": "binary data (!!binary)",
             _TAG + "set": "a set (!!set)", _TAG + "omap": "an ordered map (!!omap)",
             _TAG + "pairs": "a list of pairs (!!pairs)", _TAG + "value": "a value key ('=')"}


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


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for an error message ("a symlink", "a FIFO (named pipe)", ...),
    from its ``st_mode`` (``lstat``'s, to name a symlink)."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_bytes_bounded(path: Path, error: Callable[[str], Exception] = YamlError,
                       limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; anything else (missing, a FIFO, a device, a folder,
    larger) raises ``error`` with one line naming it. A FIFO or device is never read (opened non-blocking)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: is {file_kind(info.st_mode)}; allowed: a regular YAML file")
        if info.st_size > limit:
            raise error(f"{path}: {info.st_size} bytes; allowed: a YAML file of at most {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"{path}: more than {limit} bytes; allowed: a YAML file of at most {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text_utf8(path: Path, error: Callable[[str], Exception] = YamlError) -> str:
    """The file's text; a missing, irregular, too large or non-UTF-8 file raises ``error`` with one line naming it."""
    path = Path(path)
    data = read_bytes_bounded(path, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the file "
                    f"as UTF-8") from None


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class _Graph:
    """The checks of a composed document (nodes, before anything is constructed from them): size with aliases
    written out, depth, self-containing nodes, key and value types, integer range."""

    def __init__(self, loader: yaml.SafeLoader, name: str, error: Callable[[str], Exception],
                 limit: int = MAX_EXPANDED) -> None:
        self.loader, self.name, self.error, self.limit = loader, name, error, limit
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()
        self.aliases = 0

    def fail(self, node: yaml.Node, where: str, text: str) -> Exception:
        key = f"key '{where}'" if where else "the top level"
        return self.error(f"{self.name}: {key} (line {node.start_mark.line + 1}): {text}")

    def size(self, node: yaml.Node, where: str = "", depth: int = 0) -> int:
        """The node's size with its aliases written out: 1 per node plus the characters of its scalars."""
        ident = id(node)
        if ident in self.sizes:
            self.aliases += 1
            return self.sizes[ident]
        if ident in self.open:
            raise self.fail(node, where, "contains itself (an alias inside its own anchor, e.g. '&a [*a]'); allowed: "
                                         "aliases of nodes defined before and outside them")
        if depth > MAX_DEPTH:
            raise self.fail(node, where, f"nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH}")
        self.open.add(ident)
        if isinstance(node, yaml.ScalarNode):
            total = 1 + len(node.value)
            self.scalar(node, where)
        elif isinstance(node, yaml.SequenceNode):
            if node.tag != _TAG + "seq":
                raise self.fail(node, where, f"is {_TAG_WHAT.get(node.tag, repr(node.tag))}; allowed: "
                                             f"{ALLOWED_VALUES}")
            total = 1
            for i, child in enumerate(node.value):
                total += self.size(child, f"{where}[{i}]", depth + 1)
                self.check_total(total, node, where)
        elif isinstance(node, yaml.MappingNode):
            if node.tag != _TAG + "map":
                raise self.fail(node, where, f"is {_TAG_WHAT.get(node.tag, repr(node.tag))}; allowed: "
                                             f"{ALLOWED_VALUES}")
            total = 1
            for key_node, value_node in node.value:
                if key_node.tag == _TAG + "merge":  # '<<: *base'
                    total += self.size(value_node, _key(where, "<<"), depth + 1)
                    self.check_total(total, node, where)
                    continue
                if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag == _TAG + "str"):
                    raise self.bad_key(key_node, where)
                total += 1 + len(key_node.value)
                total += self.size(value_node, _key(where, key_node.value), depth + 1)
                self.check_total(total, node, where)
        else:  # pragma: no cover (the composer makes only these three)
            raise self.fail(node, where, f"unexpected node {type(node).__name__}")
        self.open.discard(ident)
        self.sizes[ident] = total
        return total

    def bad_key(self, key_node: yaml.Node, where: str) -> Exception:
        if isinstance(key_node, yaml.ScalarNode):
            kind = key_node.tag.replace(_TAG, "")
            what = _TAG_WHAT.get(key_node.tag) or f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
            return self.fail(key_node, _key(where, key_node.value),
                             f"the key {key_node.value!r} is {what}, not text; allowed: text keys (quote it: "
                             f"'{key_node.value}')")
        return self.fail(key_node, _key(where, "?"), "a list or mapping used as a key; allowed: text keys")

    def check_total(self, total: int, node: yaml.Node, where: str) -> None:
        if total > self.limit:
            raise self.fail(node, where, f"expands to more than {self.limit} nodes and characters with its aliases "
                                         f"(*name) written out ({self.aliases} alias uses so far); allowed: at most "
                                         f"{self.limit} (write the values out, or use fewer nested aliases)")

    def scalar(self, node: yaml.ScalarNode, where: str) -> None:
        if node.tag not in PLAIN_SCALAR_TAGS:
            what = _TAG_WHAT.get(node.tag, f"tagged {node.tag!r}")
            hint = " (quote it to keep it as text: '" + node.value + "')" if node.tag == _TAG + "timestamp" else ""
            raise self.fail(node, where, f"{node.value!r} is {what}; allowed: {ALLOWED_VALUES}{hint}")
        if node.tag == _TAG + "int":
            if len(node.value) > MAX_INT_CHARS:
                raise self.fail(node, where, f"an integer of {len(node.value)} characters; allowed: integers "
                                             f"within the range of a float (|x| < 1.8e308)")
            value = self.loader.construct_yaml_int(node)
            try:
                float(value)
            except OverflowError:
                raise self.fail(node, where, f"the integer {node.value[:20]}... ({len(node.value)} characters) is "
                                             f"beyond the range of a float; allowed: |x| < 1.8e308") from None


#: documents already read, by (text, limit): a command reads each spec and expected file many times (a report: every
#: expected file per tier and per results folder), and the document depends on the text alone; a copy is returned
_READ: dict[tuple[str, int], Any] = {}
_READ_MAX = 256


def load_yaml_text(text: str, name: str, error: Callable[[str], Exception] = YamlError,
                   limit: int = MAX_EXPANDED, key: str = "") -> Any:
    """The document of YAML ``text`` read with :class:`UniqueKeyLoader` after the checks of the module docstring;
    every problem raises ``error`` with one line starting with ``name`` (the file, or ``--set 'KEY=VALUE'``);
    ``key``: the key the document is the value of (``--set``), prefixed to the keys named. A text read before
    gives a copy of its document (only documents that passed every check are kept)."""
    if (text, limit) in _READ:
        return copy.deepcopy(_READ[text, limit])
    doc = _read_document(text, name, error, limit, key)
    if len(_READ) >= _READ_MAX:
        _READ.clear()
    _READ[text, limit] = copy.deepcopy(doc)
    return doc


def _read_document(text: str, name: str, error: Callable[[str], Exception], limit: int, key: str) -> Any:
    loader = UniqueKeyLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise error(f"{name}: nested too deeply to read; allowed: at most {MAX_DEPTH} levels") from None
        if node is None:
            return None
        _Graph(loader, name, error, limit).size(node, key)
        try:
            return loader.construct_document(node)
        except RecursionError:
            raise error(f"{name}: nested too deeply to read; allowed: at most {MAX_DEPTH} levels") from None
        except (ValueError, TypeError, OverflowError) as exc:  # a scalar the constructor cannot convert
            raise error(f"{name}: a value cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                        f"allowed: {ALLOWED_VALUES}") from None
    except yaml.YAMLError as exc:
        raise error(f"{name}: not valid YAML: {_one_line(exc)}") from None
    finally:
        loader.dispose()


def load_yaml(path: Path, error: Callable[[str], Exception] = YamlError) -> Any:
    """The document of a YAML file read with :class:`UniqueKeyLoader` after the checks of the module docstring;
    every problem raises ``error`` with one line naming the file."""
    return load_yaml_text(read_text_utf8(path, error), str(path), error)


def plain_problem(doc: Any, where: str = "", limit: int = MAX_EXPANDED) -> str | None:
    """Why ``doc`` (a document as built, e.g. after includes are merged or ``--set`` applied) is not plain in the
    module docstring's sense, as "key 'a.b': ... allowed: ..."; None when it is. Shared objects count once per
    use (as written out in a results file); a container that contains itself is a problem."""
    budget = [limit]
    open_ids: set[int] = set()

    def label(at: str) -> str:
        return f"key '{at}'" if at else "the top level"

    def walk(x: Any, at: str, depth: int) -> str | None:
        budget[0] -= 1
        if budget[0] < 0:
            return (f"{label(where)}: more than {limit} nodes and characters once shared values are written out; "
                    f"allowed: at most {limit}")
        if depth > MAX_DEPTH:
            return f"{label(at)}: nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH}"
        if isinstance(x, (dict, list)):
            if id(x) in open_ids:
                return f"{label(at)}: contains itself; allowed: {ALLOWED_VALUES}, without cycles"
            open_ids.add(id(x))
            try:
                items = x.items() if isinstance(x, dict) else enumerate(x)
                for k, v in items:
                    if isinstance(x, dict) and not isinstance(k, str):
                        return (f"{label(_key(at, str(k)))}: the key {k!r} is {type(k).__name__}, not text; allowed: "
                                f"text keys (quote it: '{k}')")
                    budget[0] -= len(k) if isinstance(x, dict) else 0
                    why = walk(v, _key(at, k) if isinstance(x, dict) else f"{at}[{k}]", depth + 1)
                    if why:
                        return why
            finally:
                open_ids.discard(id(x))
            return None
        if x is None or isinstance(x, (bool, str, float)):
            budget[0] -= len(x) if isinstance(x, str) else 0
            return None
        if isinstance(x, int):
            try:
                float(x)
            except OverflowError:
                return f"{label(at)}: an integer beyond the range of a float; allowed: |x| < 1.8e308"
            return None
        return f"{label(at)}: {x!r} is a {type(x).__name__}; allowed: {ALLOWED_VALUES}"

    return walk(doc, where, 0)


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
