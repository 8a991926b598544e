"""Checks of the specs and expected files together, before anything runs (``runners validate``, start of ``run``).

Per spec: it loads (runners/specs/spec.py: keys, types, ranges of the runner's config), its expected file exists and
loads (runners/specs/expected.py), and every expected cell that a tier checks is a cell that tier's config can
produce (for runners that can tell their cells from the config: the ``cells`` hook of runners/specs/registry.py).
Over all specs: ids are unique, and every expected file belongs to a spec.

What ``run`` would otherwise refuse only after running is checked here too (``check_spec``, which ``run`` calls
before anything runs, so both say the same line): the resolved spec and each tier's config can be written to the
results file as JSON, within :data:`MAX_RESULTS_SPEC_BYTES`; no ``ordering`` check names its own cell; lists whose
entries name cells hold no entry twice (runners/specs/schema.py, ``check_ints``: a config check, so ``load_spec``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..core.atomic import to_json_text
from ..core.errors import SpecError
from ..core.yamlio import plain_problem
from ..specs import registry
from ..specs.expected import CHECK_KINDS, EXPECTED_DIR, expected_path, load_expected
from ..specs.selection import UNMEASURED_CHECKS, select_cells
from ..specs.spec import TIERS, Spec, id_matches_file, load_spec, spec_paths

#: the resolved spec and a tier's config as they are embedded in a results file (JSON): at most this many bytes
MAX_RESULTS_SPEC_BYTES = 8 << 20


def json_problem(spec: Spec) -> str | None:
    """Why the results file of ``spec`` could not embed its resolved spec and a tier's config (the resolved spec
    not plain, a value JSON cannot write, or too large), as one line naming the file and key; None when it can."""
    problem = plain_problem(spec.resolved)
    if problem:
        return f"{spec.path}: {problem} (the resolved spec is written into every results file, as JSON)"
    for tier in TIERS:
        tier_spec = spec.tiers[tier]
        configs = [("", tier_spec.config)] + ([(".suite_data", tier_spec.suite_data.config)]
                                              if tier_spec.suite_data is not None else [])
        for suffix, config in configs:
            try:
                text = to_json_text({"spec": spec.resolved, "config": dataclasses.asdict(config)})
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                return (f"{spec.path}: tiers.{tier}{suffix}: the configuration cannot be written to the results file "
                        f"as JSON ({' '.join(str(exc).split())}); allowed: text, numbers, true/false, null, lists and "
                        f"mappings with text keys")
            if len(text) > MAX_RESULTS_SPEC_BYTES:
                return (f"{spec.path}: tiers.{tier}{suffix}: the resolved spec and configuration take {len(text)} bytes "
                        f"of JSON in the results file; allowed: at most {MAX_RESULTS_SPEC_BYTES}")
    return None


def ordering_problems(expected: dict, path: Path) -> list[str]:
    """One message per ``ordering`` check that names the cell it judges among its references (a cell compared with
    itself: it can never pass)."""
    out = []
    for cell in expected["cells"]:
        for tier in TIERS:
            order = cell["checks"][tier].get("ordering")
            for direction, refs in order.items() if isinstance(order, dict) else ():
                for j, ref in enumerate(refs):
                    if (ref.get("row"), ref.get("column")) == (cell["row"], cell["column"]):
                        out.append(f"{path}: cell ({cell['row']!r}, {cell['column']!r}).checks.{tier}.ordering."
                                   f"{direction}[{j}] names the cell itself; allowed: other cells of the table "
                                   f"(an ordering compares a cell with others)")
    return out


def unproducible_cells(spec: Spec, expected: dict, path: Path, tiers: tuple[str, ...] = TIERS,
                       only: set[tuple[str, str]] | None = None) -> list[str]:
    """One message per expected cell that a tier checks but the tier's config can never produce (of the cells in
    ``only`` when given)."""
    cells_fn = registry.get(spec.runner).cells
    if cells_fn is None:
        return []
    out = []
    for tier in tiers:
        tier_spec = spec.tiers[tier]
        producible = cells_fn(tier_spec.config)
        if tier_spec.suite_data is not None:  # ``run --data suite``: the variant's renamed rows
            producible |= cells_fn(tier_spec.suite_data.config)
        for cell in expected["cells"]:
            check = cell["checks"][tier]
            if any(k in check for k in UNMEASURED_CHECKS) or (cell["row"], cell["column"]) in producible \
                    or (only is not None and (cell["row"], cell["column"]) not in only):
                continue
            kind = next((k for k in check if k in CHECK_KINDS), None)
            out.append(f"{path}: cell ({cell['row']!r}, {cell['column']!r}) has a {kind!r} check "
                       f"at tier {tier!r}, but {spec.path} tiers.{tier} can never produce it (check the spec's "
                       f"rows / columns / skip, or make the check 'not_run: <reason>')")
    return out


def check_spec(spec: Spec, expected_root: Path | None = None, tiers: tuple[str, ...] = TIERS) -> dict:
    """The spec's expected file, loaded; SpecError (one line) if it is missing, invalid or does not fit the spec
    at ``tiers``, if an ordering check names its own cell, or if the results file could not embed the resolved
    spec (:func:`json_problem`). ``run`` calls it (through :func:`selection_problems`) before anything runs."""
    path = expected_path(spec.id, expected_root)
    if not path.exists():
        raise SpecError(f"{spec.path}: no expected file {path} for id {spec.id!r} (create it with the paper's values)")
    expected = load_expected(path)
    problem = json_problem(spec)
    if problem:
        raise SpecError(problem)
    problems = ordering_problems(expected, path) + unproducible_cells(spec, expected, path, tiers)
    if problems:
        raise SpecError(problems[0] + (f" (and {len(problems) - 1} more such cells)" if len(problems) > 1 else ""))
    return expected


def selection_problems(spec: Spec, tier: str, patterns: Sequence[str] = (), data: str = "release") -> list[str]:
    """What keeps ``run`` of ``spec`` at ``tier`` from producing its selected cells (``--cells`` patterns, data
    variant): one line per cell; the expected file must exist and be valid (SpecError otherwise)."""
    expected = check_spec(spec, tiers=())
    selected = set(select_cells(spec, tier, expected, patterns, data))
    return unproducible_cells(spec, expected, expected_path(spec.id), (tier,), only=selected)


def validate_all(spec_root: Path | None = None, expected_root: Path | None = None) -> tuple[list[str], int]:
    """Every problem of every spec and expected file, one line each, and the number of valid specs."""
    problems: list[str] = []
    ids: dict[str, Path] = {}
    broken: list[Path] = []
    for path in spec_paths(spec_root):
        try:
            spec = load_spec(path)
        except SpecError as exc:
            problems.append(str(exc))
            broken.append(path)
            continue
        if spec.id in ids:
            problems.append(f"{path}: id {spec.id!r} is also the id of {ids[spec.id]}; each spec needs its own id")
            continue
        ids[spec.id] = path
        try:
            check_spec(spec, expected_root)
        except SpecError as exc:
            problems.append(str(exc))
    for path in sorted((expected_root or EXPECTED_DIR).glob("*.yaml")):
        if path.stem not in ids and not any(id_matches_file(path.stem, b) for b in broken):
            problems.append(f"{path}: no spec has id {path.stem!r} (an orphan expected file: add "
                            f"reproductions/<name>.yaml with this id, or remove the file)")
    return problems, len(ids)
