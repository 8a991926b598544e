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
import functools
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import annotated_types as at
import pydantic
from pydantic import BaseModel, ConfigDict, Strict, ValidationError

from ..core import layout
from ..core.errors import SpecError
from ..core.yamlio import MAX_EXPANDED, file_kind, load_yaml, non_finite, plain_problem
from . import registry
from .registry import PLOTS
from .schema import (NOT_ALLOWED, STRICT, Choice, Int, Mapping, Opt, SettingsError, Text, allowed, key_path, one_line,
                     problems, settings)

TIERS = ("smoke", "budget", "full")
GROUPS = ("analytic", "efficiency", "lra", "pathx", "sc", "pixel", "ablation")
PAPERS = ("s4", "s4d")
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
    # ``run --set KEY=VALUE`` texts applied (runners/specs/overrides.py)
    overrides: list[str] = field(default_factory=list)
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
    """Whether a spec file's name names its id: the suite's own are ``<id>.yaml`` (reproductions/s4d-table-2.yaml holds
    id s4d-table-2, as expected/s4d-table-2.yaml, results/s4d-table-2/ and tables/s4d-table-2.md are named); a name
    spelled with '_' for '-' or without them (s4d_table2.yaml) still names it."""
    def bare(name: str) -> str:
        return name.replace("-", "").replace("_", "")

    return bare(spec_id) == bare(path.stem)


def check_id(spec_id: Any, path: Path) -> None:
    """A spec id is a plain name, and a spec of the suite's directory (reproductions/) has an id that matches its
    file name (a spec elsewhere may be named freely); raise SpecError otherwise."""
    if not isinstance(spec_id, str) or not ID_PATTERN.fullmatch(spec_id):
        raise SpecError(f"{path}: key 'id' is {spec_id!r}; allowed: lower-case letters, digits and '-', starting "
                        f"with a letter or digit (it names the results/, runs/ and tables/ entries)")
    if Path(path).resolve().parent == SPEC_DIR.resolve() and not id_matches_file(spec_id, path):
        raise SpecError(f"{path}: key 'id' is {spec_id!r}, which does not match the file name {path.name!r} (a spec "
                        f"in {SPEC_DIR}/ is named by its id, e.g. s4d-table-2.yaml holds id s4d-table-2)")


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


def build_config(cls: type, raw: dict, where: str) -> Any:
    """The runner's config built from a tier's mapping; pydantic checks each key's type and range (the config is a
    :func:`runners.specs.schema.settings` dataclass, or a plain dataclass checked as its fields are declared), then
    the config its rules across keys. SpecError naming ``where`` and the key otherwise."""
    schema = cls if pydantic.dataclasses.is_pydantic_dataclass(cls) else _checked(cls)
    try:
        built = schema(**raw)
    except SettingsError as exc:
        raise SpecError(one_line(exc.problems, where, [f.name for f in dataclasses.fields(cls)],
                                 f" (and {sorted(FRAMEWORK_KEYS)})", types=True)) from None
    except (TypeError, ValueError, OverflowError) as exc:  # a rule of the runner that names its own key
        raise SpecError(f"{where}: {exc}") from exc
    except (AttributeError, KeyError, IndexError) as exc:  # a value of the wrong shape that no check named
        raise SpecError(f"{where}: a setting has the wrong shape ({type(exc).__name__}: {exc}); see the runner's "
                        f"config docs for each key's form") from exc
    return built if schema is cls else cls(**{f.name: getattr(built, f.name) for f in dataclasses.fields(cls)})


@functools.cache
def _checked(cls: type) -> type:
    """A plain dataclass's twin that pydantic checks (its values then build the plain one)."""
    return settings(cls)


# ------------------------------------------------------------------------------------------- the spec's schema
#: a seed: numpy's range
SeedValue = Int(0, SEED_MAX, tail=f"expected an integer in [0, {SEED_MAX}] (numpy's seed range)")
Paper = Choice(PAPERS, tail=f"allowed: {', '.join(PAPERS)}")
Name = Annotated[Text, allowed("must be a non-empty string")]


class SuiteDataDocument(BaseModel):
    """A tier's ``suite_data`` (see the module docstring); the names it maps are checked against the tier after."""

    model_config = STRICT
    rows: Annotated[dict[str, Text], at.MinLen(1), allowed("must map release rows to suite-data row names")]
    tasks: Annotated[dict[str, Mapping], at.MinLen(1), allowed("must map task names to overlays (mappings)")]
    note: Annotated[str, Strict(), allowed("must be text")] = ""
    models: Annotated[dict[str, Mapping], allowed("must map suite-data rows to overlays")] = {}


class TierDocument(BaseModel):
    """A tier's framework keys; the rest of its mapping is the runner's config (:func:`build_config`)."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    device: Choice(FRAMEWORK_KEYS["device"]) = "cpu"
    seed: SeedValue = 0
    suite_data: Annotated[Opt(dict), allowed(f"must be a mapping with keys {sorted(SUITE_DATA_KEYS)}")] = None


class TiersDocument(BaseModel):
    model_config = STRICT
    smoke: Opt(TierDocument)
    budget: Opt(TierDocument)
    full: Opt(TierDocument)


class SpecDocument(BaseModel):
    """A spec's top level, with its includes merged (see the module docstring)."""

    model_config = STRICT
    include: Any = None
    id: Name
    paper: Paper
    table: Name
    title: Name
    description: Annotated[str, Strict(), allowed("must be text")] = ""
    groups: Annotated[list[Choice(GROUPS)], at.MinLen(1), allowed(f"must be a non-empty list from {list(GROUPS)}")]
    runner: Name
    make: Opt(Name) = None
    plots: Annotated[Opt(list[str]), allowed("must be a list of plot names")] = None
    tiers: TiersDocument  # exactly the three tiers
    shown: Annotated[dict[Choice(TIERS), Text], allowed(f"must map tiers from {list(TIERS)} to non-empty text")] = {}


def _document_problem(path: Path, doc: dict, exc: ValidationError) -> str:
    """The first problem of a spec document as the one line that names the file and the key."""
    found = problems(exc)
    first = found[0]
    if first.kind in ("unknown", "missing") and len(first.loc) == 1:
        names = sorted(p.key for p in found if p.kind == first.kind and len(p.loc) == 1)
        if first.kind == "unknown":
            return f"{path}: unknown top-level key(s) {names}; allowed: {sorted(SpecDocument.model_fields)}"
        return f"{path}: missing top-level key(s) {names}"
    top = first.loc[0]
    if top == "tiers" and (len(first.loc) == 1 or first.kind in ("unknown", "missing")):
        tiers = doc.get("tiers")
        got = sorted(tiers) if isinstance(tiers, dict) else tiers
        return f"{path}: key 'tiers' must map exactly {list(TIERS)} to configs, got {got}"
    if top == "tiers":
        where = f"{path}: tiers.{first.loc[1]}"
        if len(first.loc) == 2:
            return f"{where}: must be a mapping of settings, got {first.value!r}"
        if first.loc[2] == "suite_data" and first.kind in ("unknown", "missing", NOT_ALLOWED) and len(first.loc) > 3:
            return one_line(found, f"{where}.suite_data", sep=".", root=SuiteDataDocument)
        return f"{where}.{key_path(first.loc[2:])}: {first.text}"
    if first.tail.startswith("allowed:"):  # paper
        return f"{path}: key '{top}' is {doc.get(top)!r}; {first.tail}"
    return f"{path}: key '{top}' {first.tail}, got {doc.get(top)!r}"


def load_spec(path: str | Path, doc: dict | None = None) -> Spec:
    """Load, merge includes, validate against the registry; raise SpecError naming the file and key.

    ``doc``: the spec's mapping with its includes already merged (and changed, e.g. by ``--set``) instead of
    the file's."""
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
    try:
        SpecDocument.model_validate(doc)
    except ValidationError as exc:
        raise SpecError(_document_problem(path, doc, exc)) from None
    check_id(doc["id"], path)
    groups = doc["groups"]
    try:
        entry = registry.get(doc["runner"])
    except KeyError:
        raise SpecError(f"{path}: key 'runner' is {doc['runner']!r}, not a registered runner; allowed: "
                        f"{', '.join(sorted(registry.load_all()))}") from None
    plots = doc.get("plots", []) or []
    bad = [p for p in plots if p not in PLOTS]
    if bad:
        raise SpecError(f"{path}: key 'plots' names unknown plot(s) {bad}; registered: {sorted(PLOTS)}")
    tiers_raw = doc["tiers"]
    tiers = {}
    for tier in TIERS:
        where = f"{path}: tiers.{tier}"
        raw = dict(tiers_raw[tier] or {})
        device, seed = raw.pop("device", "cpu"), raw.pop("seed", 0)
        why = _nested_seeds(raw, where)
        if why:
            raise SpecError(why)
        variant = raw.pop("suite_data", None)
        tiers[tier] = TierSpec(device, seed, build_config(entry.config, raw, where), dict(tiers_raw[tier] or {}),
                               None if variant is None else _suite_data(entry, raw, variant, f"{where}.suite_data"))
    shown = doc.get("shown", {})
    if tiers["smoke"].device != "cpu":
        raise SpecError(f"{path}: tiers.smoke.device must be 'cpu' (the smoke tier runs in CI, which has no GPU)")
    return Spec(path=path, id=doc["id"], paper=doc["paper"], table=doc["table"], title=doc["title"],
                groups=list(groups), runner=doc["runner"], make=doc.get("make"), plots=list(plots), tiers=tiers,
                resolved=doc, description=doc.get("description", ""), shown=dict(shown))


def _suite_data(entry: Any, raw: dict, variant: Any, where: str) -> SuiteData:
    """Build a tier's ``suite_data`` variant (see the module docstring) into the runner's config."""
    try:
        SuiteDataDocument.model_validate(variant)
    except ValidationError as exc:
        found = problems(exc)
        first = found[0]
        if first.kind in ("unknown", "missing"):
            raise SpecError(one_line(found, where, sep=".", root=SuiteDataDocument)) from None
        raise SpecError(f"{where}.{first.key.split('.')[0]}: {first.tail}, got {variant.get(first.loc[0])!r}") from None
    rows, tasks, note = variant["rows"], variant["tasks"], variant.get("note", "")
    models, tier_tasks = raw.get("models"), raw.get("tasks")
    if not (isinstance(models, dict) and isinstance(tier_tasks, dict)):
        raise SpecError(f"{where}: only a training table (a tier with 'models' and 'tasks') has a suite-data variant")
    bad = sorted(set(rows) - set(models))
    if bad:
        raise SpecError(f"{where}.rows: {bad} not among the tier's models {sorted(models)}")
    if len(set(rows.values())) != len(rows) or set(rows.values()) & set(models):
        raise SpecError(f"{where}.rows: suite-data row names must be new and distinct, got {sorted(rows.values())}")
    bad = sorted(set(tasks) - set(tier_tasks))
    if bad:
        raise SpecError(f"{where}.tasks: {bad} not among the tier's tasks {sorted(tier_tasks)}")
    built = dict(raw)
    built["tasks"] = {name: deep_merge(tier_tasks[name], overlay) for name, overlay in tasks.items()}
    overlays = variant.get("models", {})
    if not set(overlays) <= set(rows.values()):
        raise SpecError(f"{where}.models: must map suite-data rows {sorted(rows.values())} to overlays, "
                        f"got {overlays!r}")
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
