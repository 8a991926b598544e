"""Specs: one YAML file per paper table in reproductions/, with a configuration per tier.

    id, paper, table, title, groups, runner, make, plots, tiers: {smoke, budget, full}
    make: the Makefile target of a shipped table (optional: a table added outside the Makefile has none).
    shown (optional): {tier: text}: what a run of that tier shows and does not show; the report prints it first
    include: a file (or list) of shared settings, deep-merged underneath this one: a regular file inside the
             spec's project (no device, FIFO, absolute path or symlink leading out), each read once, nesting at
             most MAX_INCLUDE_DEPTH levels and MAX_INCLUDE_FILES files; no cycles.

Each tier's mapping holds the framework keys ``device`` and ``seed``; the rest is the runner's config,
built into the runner's dataclass with every unknown key or wrong type reported with file and key. Every seed
(the tier's, and any ``seed`` / ``*_seed`` setting in it) is an integer in numpy's range [0, 2**32 - 1]. Each file
is read by the one YAML loader (runners/core/yamlio.py: bounded, text keys, plain values).

A tier may also hold ``suite_data``: the same configuration run on data the suite makes by the dataset's own
published procedure (``run --data suite``), for training tables whose datasets have a generator (LRA ListOps,
Pathfinder). Its keys:

    rows:  {release row: suite-data row}   the rows that run, each renamed (e.g. S4 -> "S4 (suite data)")
    tasks: {task: overlay}                 the tasks that run, each overlay deep-merged over the tier's task
                                           (typically ``prepare:``, the generator and LRA's sizes)
    note:  text                            what the variant is and is not (shown in the report)
    models: {suite-data row: overlay}      optional, deep-merged over a renamed row (e.g. ``train_in``)

Everything else (model sizes, optimizer, schedule) is the tier's own, so the variant is the paper's
configuration on a fresh draw of the data.
"""
from __future__ import annotations

import dataclasses
import os
import re
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import layout
from ..core.errors import SpecError
from ..core.yamlio import MAX_EXPANDED, file_kind, load_yaml, non_finite, plain_problem

TIERS = ("smoke", "budget", "full")
GROUPS = ("analytic", "efficiency", "lra", "pathx", "sc", "pixel", "ablation")
PAPERS = ("s4", "s4d")
TOP_KEYS = {"include", "id", "paper", "table", "title", "description", "groups", "runner", "make", "plots", "tiers",
            "shown"}
REQUIRED_TOP = TOP_KEYS - {"include", "description", "plots", "make", "shown"}
FRAMEWORK_KEYS = {"device": ("cpu", "cuda"), "seed": int}
DATA_VARIANTS = ("release", "suite")
SUITE_DATA_KEYS = {"rows", "tasks", "note", "models"}
SPEC_DIR = Path("reproductions")
#: seeds (the tier's ``seed`` and every ``seed`` / ``*_seed`` setting): numpy's range (np.random.seed)
SEED_MAX = 2**32 - 1
#: includes: how deep they nest, how many files one spec reads (itself included) and include entries it follows
MAX_INCLUDE_DEPTH = 8
MAX_INCLUDE_FILES = 32
MAX_INCLUDES = 64
#: what marks the folder an include must stay inside (the repository or project of the spec: the nearest folder
#: above the spec that holds one of these)
PROJECT_MARKERS = (".git", "pyproject.toml", "reproductions", "expected")
#: a spec id: the results/, runs/ and tables/ names are built from it, so it is a plain name (no '/', no '..')
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass
class TierSpec:
    device: str
    seed: int
    config: Any  # the runner's config dataclass instance
    raw: dict
    suite_data: "SuiteData | None" = None  # the tier's configuration on suite-made data (``run --data suite``)


@dataclass
class SuiteData:
    """A tier's configuration on data the suite makes: which rows run (renamed) and the tasks' overlays."""

    rows: dict[str, str]  # release row -> suite-data row
    config: Any  # the runner's config dataclass instance for the variant
    note: str = ""


@dataclass
class Spec:
    path: Path
    id: str
    paper: str
    table: str
    title: str
    groups: list[str]
    runner: str
    make: str | None  # Makefile target (shipped tables); None for a table added without one
    plots: list[str]
    tiers: dict[str, TierSpec]
    resolved: dict = field(repr=False)
    description: str = ""
    overrides: list[str] = field(default_factory=list)  # ``run --set KEY=VALUE`` texts applied (runners/specs/overrides.py)
    shown: dict[str, str] = field(default_factory=dict)  # tier -> what a run of that tier shows / does not show


def deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _read_yaml(path: Path) -> dict:
    doc = load_yaml(path, SpecError)
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: top level must be a mapping")
    bad = list(non_finite(doc))
    if bad:
        raise SpecError(f"{path}: key '{bad[0]}' is inf or NaN; a spec's numbers must be finite")
    return doc


def id_matches_file(spec_id: str, path: Path) -> bool:
    """The repository's naming: reproductions/s4d_table2.yaml holds id s4d-table-2 (ignore '_' and '-')."""
    return spec_id.replace("-", "") == path.stem.replace("_", "")


def check_id(spec_id: Any, path: Path) -> None:
    """A spec id is a plain name, and a spec of the suite's directory (reproductions/) has an id that matches its
    file name (a spec elsewhere may be named freely); raise SpecError otherwise."""
    if not isinstance(spec_id, str) or not ID_PATTERN.fullmatch(spec_id):
        raise SpecError(f"{path}: key 'id' is {spec_id!r}; allowed: lower-case letters, digits and '-', starting "
                        f"with a letter or digit (it names the results/, runs/ and tables/ entries)")
    if Path(path).resolve().parent == SPEC_DIR.resolve() and not id_matches_file(spec_id, path):
        raise SpecError(f"{path}: key 'id' is {spec_id!r}, which does not match the file name {path.name!r} (the "
                        f"id with '-' removed must equal the file name's stem with '_' removed, e.g. s4d-table-2 in "
                        f"s4d_table2.yaml)")


def project_root(path: Path) -> Path:
    """The folder a spec's includes must stay inside: the nearest folder above the spec (its own included) that
    holds a :data:`PROJECT_MARKERS` entry (the repository, or a project with reproductions/ and expected/), else the
    spec's own folder."""
    start = Path(path).resolve().parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return start


class _Includes:
    """One spec's include graph, each file read once: bounded in depth, files and entries, every include a regular
    file inside the spec's project (:func:`project_root`), no cycles."""

    def __init__(self, top: Path) -> None:
        self.root = project_root(top)
        self.done: dict[Path, dict] = {}
        self.entries = self.files = 0

    def target(self, path: Path, inc: str) -> Path:
        """The file ``inc`` (relative to ``path``'s folder) names, checked; SpecError naming ``path`` otherwise."""
        where = f"{path}: key 'include': {inc!r}"
        if not inc.strip() or "\0" in inc:
            raise SpecError(f"{where} is not a file name; allowed: a YAML file inside {self.root}")
        candidate = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise SpecError(f"{where} cannot be resolved ({exc}); allowed: a YAML file inside {self.root}") from None
        if not resolved.is_relative_to(self.root):
            via = f" (it resolves to {resolved})" if resolved != candidate else ""
            raise SpecError(f"{where} is outside the project {self.root}{via}; allowed: a regular YAML file inside "
                            f"it (no absolute path or symlink that leads out)")
        try:
            mode = os.stat(resolved).st_mode
        except FileNotFoundError:
            raise SpecError(f"{resolved}: file not found (key 'include' of {path})") from None
        except OSError as exc:
            raise SpecError(f"{where} cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(mode):
            raise SpecError(f"{where} is {file_kind(mode)}; allowed: a regular YAML file inside {self.root}")
        return resolved

    def resolve(self, path: Path, chain: tuple[Path, ...] = ()) -> dict:
        if path in chain:
            raise SpecError(f"{path}: include cycle: {' -> '.join(str(p) for p in (*chain, path))}")
        if len(chain) > MAX_INCLUDE_DEPTH:
            raise SpecError(f"{chain[-1]}: key 'include': includes nest more than {MAX_INCLUDE_DEPTH} levels deep "
                            f"({' -> '.join(p.name for p in (*chain, path))}); allowed: at most {MAX_INCLUDE_DEPTH}")
        if path in self.done:
            return self.done[path]
        self.files += 1
        if self.files > MAX_INCLUDE_FILES:
            raise SpecError(f"{chain[-1] if chain else path}: key 'include': the spec's includes read more than "
                            f"{MAX_INCLUDE_FILES} files; allowed: at most {MAX_INCLUDE_FILES}")
        doc = _read_yaml(path)
        includes = doc.pop("include", [])
        if isinstance(includes, str):
            includes = [includes]
        if not (isinstance(includes, list) and all(isinstance(i, str) for i in includes)):
            raise SpecError(f"{path}: key 'include' must be a file name or a list of file names")
        merged: dict = {}
        for inc in includes:
            self.entries += 1
            if self.entries > MAX_INCLUDES:
                raise SpecError(f"{path}: key 'include': the spec's includes name more than {MAX_INCLUDES} files in "
                                f"all; allowed: at most {MAX_INCLUDES}")
            merged = deep_merge(merged, self.resolve(self.target(path, inc), (*chain, path)))
        self.done[path] = deep_merge(merged, doc)
        return self.done[path]


def resolve_includes(path: Path) -> dict:
    """The spec with its ``include:`` files merged underneath it (includes relative to the including file; each
    file read once; bounded by :data:`MAX_INCLUDE_DEPTH`, :data:`MAX_INCLUDE_FILES` and :data:`MAX_INCLUDES`; every
    include a regular file inside the spec's project). The merged mapping is plain and bounded as each file is
    (runners/core/yamlio.py)."""
    path = Path(path).resolve()
    doc = _Includes(path).resolve(path)
    problem = plain_problem(doc, limit=MAX_EXPANDED)
    if problem:
        raise SpecError(f"{path} with its includes: {problem}")
    return doc


def seed_problem(value: Any, where: str, required: bool = False) -> str | None:
    """Why ``value`` is not a seed (an integer in [0, :data:`SEED_MAX`]); a non-integer is left to the runner's
    own check unless ``required``."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if (is_int and not 0 <= value <= SEED_MAX) or (required and not is_int):
        return f"{where}: {value!r} not allowed; expected an integer in [0, {SEED_MAX}] (numpy's seed range)"
    return None


def _nested_seeds(raw: Any, where: str) -> str | None:
    """The first ``seed`` / ``*_seed`` setting anywhere under ``raw`` outside numpy's seed range."""
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        at = f"{where}.{key}" if isinstance(raw, dict) else f"{where}[{key}]"
        if isinstance(key, str) and (key == "seed" or key.endswith("_seed")):
            why = seed_problem(value, at)
            if why:
                return why
        why = _nested_seeds(value, at)
        if why:
            return why
    return None


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, list) and (not args or args[0] is Ellipsis or
                                            all(_type_ok(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    return isinstance(value, tp) if isinstance(tp, type) else True


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def build_config(cls: type, raw: dict, where: str) -> Any:
    """Instantiate the runner's config dataclass from a mapping; errors name ``where`` and the key."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(fields)} (and {sorted(FRAMEWORK_KEYS)})")
    missing = [n for n, f in fields.items() if n not in raw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{where}: missing required key(s) {missing}")
    values = {}
    for name, value in raw.items():
        if not _type_ok(value, hints[name]):
            raise SpecError(f"{where}.{name}: expected {_type_name(hints[name])}, got {value!r}")
        values[name] = tuple(value) if typing.get_origin(hints[name]) is tuple else value
    try:
        return cls(**values)
    except (TypeError, ValueError, OverflowError) as exc:  # __post_init__ validation of the runner
        raise SpecError(f"{where}: {exc}") from exc
    except (AttributeError, KeyError, IndexError) as exc:  # a value of the wrong shape that no check named
        raise SpecError(f"{where}: a setting has the wrong shape ({type(exc).__name__}: {exc}); see the runner's "
                        f"config docs for each key's form") from exc


def load_spec(path: str | Path, doc: dict | None = None) -> Spec:
    """Load, merge includes, validate against the registry; raise SpecError naming the file and key.

    ``doc``: the spec's mapping with its includes already merged (and changed, e.g. by ``--set``) instead of
    the file's."""
    from . import registry

    path = Path(path)
    if doc is None:
        doc = resolve_includes(path)
    else:  # a changed mapping (``--set``): the checks each file gets when it is read
        problem = plain_problem(doc, limit=MAX_EXPANDED)
        if problem:
            raise SpecError(f"{path}: {problem}")
        bad = list(non_finite(doc))
        if bad:
            raise SpecError(f"{path}: key '{bad[0]}' is inf or NaN; a spec's numbers must be finite")
    unknown = sorted(set(doc) - TOP_KEYS)
    if unknown:
        raise SpecError(f"{path}: unknown top-level key(s) {unknown}; allowed: {sorted(TOP_KEYS)}")
    missing = sorted(REQUIRED_TOP - set(doc))
    if missing:
        raise SpecError(f"{path}: missing top-level key(s) {missing}")
    for key in ("id", "table", "title", "runner", "make"):
        if key in doc and (not isinstance(doc[key], str) or not doc[key].strip()):
            raise SpecError(f"{path}: key '{key}' must be a non-empty string, got {doc[key]!r}")
    check_id(doc["id"], path)
    if doc["paper"] not in PAPERS:
        raise SpecError(f"{path}: key 'paper' is {doc['paper']!r}; allowed: {', '.join(PAPERS)}")
    groups = doc["groups"]
    if not (isinstance(groups, list) and groups and all(g in GROUPS for g in groups)):
        raise SpecError(f"{path}: key 'groups' must be a non-empty list from {list(GROUPS)}, got {groups!r}")
    try:
        entry = registry.get(doc["runner"])
    except KeyError:
        raise SpecError(f"{path}: key 'runner' is {doc['runner']!r}, not a registered runner; allowed: "
                        f"{', '.join(sorted(registry.load_all()))}") from None
    plots = doc.get("plots", []) or []
    from .registry import PLOTS

    bad = [p for p in plots if p not in PLOTS]
    if bad:
        raise SpecError(f"{path}: key 'plots' names unknown plot(s) {bad}; registered: {sorted(PLOTS)}")
    tiers_raw = doc["tiers"]
    if not isinstance(tiers_raw, dict) or set(tiers_raw) != set(TIERS):
        got = sorted(tiers_raw) if isinstance(tiers_raw, dict) else tiers_raw
        raise SpecError(f"{path}: key 'tiers' must map exactly {list(TIERS)} to configs, got {got}")
    tiers = {}
    for tier in TIERS:
        where = f"{path}: tiers.{tier}"
        if not isinstance(tiers_raw[tier] or {}, dict):
            raise SpecError(f"{where}: must be a mapping of settings, got {tiers_raw[tier]!r}")
        raw = dict(tiers_raw[tier] or {})
        device = raw.pop("device", "cpu")
        if device not in FRAMEWORK_KEYS["device"]:
            raise SpecError(f"{where}.device: {device!r} not allowed; choose one of {list(FRAMEWORK_KEYS['device'])}")
        seed = raw.pop("seed", 0)
        why = seed_problem(seed, f"{where}.seed", required=True) or _nested_seeds(raw, where)
        if why:
            raise SpecError(why)
        variant = raw.pop("suite_data", None)
        tiers[tier] = TierSpec(device, seed, build_config(entry.config, raw, where), dict(tiers_raw[tier] or {}),
                               None if variant is None else _suite_data(entry, raw, variant, f"{where}.suite_data"))
    shown = doc.get("shown", {})
    if not (isinstance(shown, dict) and set(shown) <= set(TIERS)
            and all(isinstance(v, str) and v.strip() for v in shown.values())):
        raise SpecError(f"{path}: key 'shown' must map tiers from {list(TIERS)} to non-empty text, got {shown!r}")
    if tiers["smoke"].device != "cpu":
        raise SpecError(f"{path}: tiers.smoke.device must be 'cpu' (the smoke tier runs in CI, which has no GPU)")
    return Spec(path=path, id=doc["id"], paper=doc["paper"], table=doc["table"], title=doc["title"],
                groups=list(groups), runner=doc["runner"], make=doc.get("make"), plots=list(plots), tiers=tiers,
                resolved=doc, description=doc.get("description", ""), shown=dict(shown))


def _suite_data(entry: Any, raw: dict, variant: Any, where: str) -> SuiteData:
    """Build a tier's ``suite_data`` variant (see the module docstring) into the runner's config."""
    if not isinstance(variant, dict):
        raise SpecError(f"{where}: must be a mapping with keys {sorted(SUITE_DATA_KEYS)}, got {variant!r}")
    unknown = sorted(set(variant) - SUITE_DATA_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(SUITE_DATA_KEYS)}")
    rows, tasks, note = variant.get("rows"), variant.get("tasks"), variant.get("note", "")
    models, tier_tasks = raw.get("models"), raw.get("tasks")
    if not (isinstance(models, dict) and isinstance(tier_tasks, dict)):
        raise SpecError(f"{where}: only a training table (a tier with 'models' and 'tasks') has a suite-data variant")
    if not (isinstance(rows, dict) and rows and all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                     for k, v in rows.items())):
        raise SpecError(f"{where}.rows: must map release rows to suite-data row names, got {rows!r}")
    bad = sorted(set(rows) - set(models))
    if bad:
        raise SpecError(f"{where}.rows: {bad} not among the tier's models {sorted(models)}")
    if len(set(rows.values())) != len(rows) or set(rows.values()) & set(models):
        raise SpecError(f"{where}.rows: suite-data row names must be new and distinct, got {sorted(rows.values())}")
    if not (isinstance(tasks, dict) and tasks and all(isinstance(v, dict) for v in tasks.values())):
        raise SpecError(f"{where}.tasks: must map task names to overlays (mappings), got {tasks!r}")
    bad = sorted(set(tasks) - set(tier_tasks))
    if bad:
        raise SpecError(f"{where}.tasks: {bad} not among the tier's tasks {sorted(tier_tasks)}")
    if not isinstance(note, str):
        raise SpecError(f"{where}.note: must be text, got {note!r}")
    built = dict(raw)
    built["tasks"] = {name: deep_merge(tier_tasks[name], overlay) for name, overlay in tasks.items()}
    overlays = variant.get("models", {})
    if not (isinstance(overlays, dict) and set(overlays) <= set(rows.values())
            and all(isinstance(v, dict) for v in overlays.values())):
        raise SpecError(f"{where}.models: must map suite-data rows {sorted(rows.values())} to overlays, got {overlays!r}")
    built["models"] = {rows[name]: deep_merge(m, overlays.get(rows[name], {})) for name, m in models.items()
                       if name in rows}
    built["skip"] = [[rows[r], c] for r, c in (raw.get("skip") or []) if r in rows and c in tasks]
    return SuiteData(rows=dict(rows), config=build_config(entry.config, built, where), note=note.strip())


def spec_paths(root: Path | None = None) -> list[Path]:
    """All table specs (files starting with '_' are shared includes, not tables)."""
    return sorted(p for p in (root or SPEC_DIR).glob("*.yaml") if not p.name.startswith("_"))


class NoSuchSpec(SpecError):
    """No spec file or spec id of this name."""


def find_spec(name: str, root: Path | None = None) -> Path:
    """A spec path from a path, a file name, or a spec id. A spec file that cannot be read raises its own error
    when it is the one named (its file name matches); an unknown name raises :class:`NoSuchSpec`."""
    p = Path(name)
    if p.suffix == ".yaml":
        if not p.exists():
            raise NoSuchSpec(f"{p}: file not found")
        return p
    ids: list[str] = []
    for path in spec_paths(root):
        if path.stem == name or id_matches_file(name, path):
            return path
        try:
            spec_id = resolve_includes(path).get("id")
        except SpecError:
            spec_id = None
        if spec_id == name:
            return path
        ids.append(spec_id if isinstance(spec_id, str) else path.stem)
    raise NoSuchSpec(f"no spec named {name!r} under {root or SPEC_DIR}; known: {', '.join(ids)}")


def command_for(spec: Spec, tier: str) -> str:
    """The command that runs ``spec`` at ``tier``: its make target where it has one, and the CLI."""
    cli = f"ssm-repro run {spec.path} --tier {tier}"
    return f"make {spec.make} TIER={tier}   (or: {cli})" if spec.make else cli


def work_dir_for(spec: Spec, tier: str) -> Path:
    """Scratch space of a spec's tier (checkpoints, generated data): runs/<spec id>/<tier>/; for a run with ``--set``
    overrides, runs/<spec id>/<tier>-set-<key>/, keyed by the tier's resolved configuration (runners/core/layout.py,
    ``tier_work_dir``)."""
    return layout.tier_work_dir(spec.id, tier, bool(spec.overrides), spec.resolved.get("tiers", {}).get(tier))
