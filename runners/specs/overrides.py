"""``run SPEC --set KEY=VALUE``: override settings of one tier's configuration by dotted key.

The configuration is the tier's mapping in the spec after its includes are merged (what ``--show-config``
prints): ``--set train.lr=0.004``, ``--set model_defaults.ssm.d_model=256``, ``--set t_max=4.0``,
``--set state_sizes.0=32`` (a list item by index). VALUE is read as YAML (``4`` an int, ``4.0`` a float,
``[16, 64]`` a list, ``null``, ``'text'``). A key names an existing setting, a field of the runner's config
(defaults included), a framework key (``device``, ``seed``) or a training setting under any ``train`` mapping
(TrainConfig's fields). Anything else is an error naming the closest known keys; ``+KEY=VALUE`` adds a key the
configuration does not have yet (e.g. a model argument left at its default), which the runner's config then
validates like any key of the spec. A key holding dots (a row named "S4 (0.5x)") is matched as a whole.
"""
from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

from ..core.errors import SpecError
from ..core.yamlio import load_yaml_text
from . import registry
from .selection import tier_config
from .spec import FRAMEWORK_KEYS, Spec, load_spec



@dataclasses.dataclass(frozen=True)
class Override:
    text: str  # as given, e.g. "train.lr=0.004"
    key: str  # "train.lr"
    value: Any  # parsed as YAML
    add: bool  # "+key=value": a new key


def parse_override(text: str) -> Override:
    """``KEY=VALUE`` or ``+KEY=VALUE`` -> Override; SpecError naming the argument otherwise."""
    add = text.startswith("+")
    key, sep, raw = (text[1:] if add else text).partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise SpecError(f"--set {text!r}: expected KEY=VALUE with a dotted KEY, e.g. --set train.lr=0.004")
    # the one YAML loader (runners/core/yamlio.py): no key given twice, aliases bounded, plain values only
    value = load_yaml_text(raw, f"--set {text!r}", SpecError, key=key)
    return Override(text, key, value, add)


def _walk(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a mapping (nested mappings and list indices included)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        path = f"{prefix}{key}"
        yield path
        yield from _walk(value, path + ".")


def known_keys(raw: dict, config_cls: type) -> list[str]:
    """The keys ``--set`` accepts for a tier whose mapping is ``raw`` and whose runner config is ``config_cls``: the
    mapping's own, the framework's, the config's fields, and what the config adds (its ``settable_keys(raw, keys)``,
    e.g. a training table's train settings under every row and task)."""
    keys = set(_walk(raw)) | set(FRAMEWORK_KEYS) | {f.name for f in dataclasses.fields(config_cls)}
    more = getattr(config_cls, "settable_keys", None)
    if more is not None:
        keys |= set(more(raw, keys))
    return sorted(keys)


def _split(node: Any, parts: list[str]) -> list[str | int]:
    """The path of ``parts`` into ``node``: the longest run of parts that names an existing key is one key."""
    path: list[str | int] = []
    i = 0
    while i < len(parts):
        step: str | int = parts[i]
        width = 1
        if isinstance(node, dict):
            for j in range(len(parts), i, -1):
                if ".".join(parts[i:j]) in node:
                    step, width = ".".join(parts[i:j]), j - i
                    break
        elif isinstance(node, list) and parts[i].isdigit():
            step = int(parts[i])
        path.append(step)
        if isinstance(node, dict):
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        else:
            node = None
        i += width
    return path


def _assign(raw: dict, path: list[str | int], value: Any, where: str) -> None:
    """Set ``raw[path] = value``, creating missing mappings on the way."""
    node: Any = raw
    for step in path[:-1]:
        if isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
            continue
        if not isinstance(node, dict):
            raise SpecError(f"{where}: {step!r} is inside a {type(node).__name__}, not a mapping")
        if node.get(step) is None:
            node[step] = {}
        node = node[step]
    last = path[-1]
    if isinstance(node, list):
        if not (isinstance(last, int) and last < len(node)):
            raise SpecError(f"{where}: index {last!r} is outside the list of {len(node)} item(s)")
        node[last] = value
        return
    if not isinstance(node, dict):
        raise SpecError(f"{where}: the value at the parent key is a {type(node).__name__}, not a mapping")
    node[last] = value


def _fresh(obj: Any) -> Any:
    """A copy sharing nothing (YAML anchors make several keys one object; an override changes one key)."""
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fresh(v) for v in obj]
    return obj


def apply_overrides(spec: Spec, tier: str, texts: Sequence[str]) -> Spec:
    """``spec`` with ``texts`` (``KEY=VALUE`` strings) applied to tier ``tier``, rebuilt and validated; the
    other tiers are untouched. The returned spec's ``overrides`` lists the texts."""
    if not texts:
        return spec
    config_cls = registry.get(spec.runner).config
    doc = _fresh(spec.resolved)
    raw = doc["tiers"][tier] = doc["tiers"].get(tier) or {}
    for override in map(parse_override, texts):
        where = f"--set {override.text!r} (tiers.{tier} of {spec.path})"
        keys = known_keys(raw, config_cls)
        path = _split(raw, override.key.split("."))
        dotted = ".".join(str(p) for p in path)
        if override.add:
            if dotted in set(_walk(raw)):
                raise SpecError(f"{where}: '{dotted}' is already set; override it with --set {override.key}=...")
        elif dotted not in keys:
            close = difflib.get_close_matches(dotted, keys, n=4, cutoff=0.6)
            hint = (f"closest known keys: {', '.join(close)}" if close else
                    f"top-level keys: {', '.join(k for k in keys if '.' not in k)}")
            raise SpecError(f"{where}: unknown key '{dotted}'; {hint} (--show-config prints them all; "
                            f"+{override.key}=... adds a new key)")
        _assign(raw, path, override.value, where)
    try:
        built = load_spec(spec.path, doc=doc)
    except SpecError as exc:
        raise SpecError(f"with --set {' '.join(texts)}: {exc}") from None
    return dataclasses.replace(built, overrides=list(texts))


def resolved_config(spec: Spec, tier: str, data: str = "release") -> dict:
    """The tier's whole configuration: framework keys, then every field of the runner's config with its
    default filled in (what the runner receives; ``data="suite"``: the tier's suite-data variant)."""
    tier_spec = spec.tiers[tier]
    config = dataclasses.asdict(tier_config(spec, tier, data))
    return _plain({"device": tier_spec.device, "seed": tier_spec.seed, **config})


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def config_yaml(spec: Spec, tier: str, data: str = "release") -> str:
    """``--show-config``: the tier's resolved configuration as YAML, headed by where it comes from."""
    head = [f"# {spec.id}, tier {tier}" + (f", data {data}" if data != "release" else "") +
            f": {spec.path} with its includes"]
    if spec.overrides:
        head.append(f"# overrides: {' '.join(spec.overrides)}")
    body = yaml.safe_dump(resolved_config(spec, tier, data), sort_keys=False, default_flow_style=False, width=100,
                          allow_unicode=True)
    return "\n".join(head) + "\n" + body
