"""Schema check of expected/*.yaml (the papers' numbers per table cell; see expected/README.md).

The checking logic is the framework's :func:`runners.specs.expected.schema_errors`; the tests run it on every
file and on deliberately broken documents.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from runners.specs.expected import schema_errors

EXPECTED_DIR = Path(__file__).resolve().parents[1] / "expected"
EXPECTED_FILES = sorted(EXPECTED_DIR.glob("*.yaml"))

# ------------------------------------------------------------------ the files


def test_expected_files_exist() -> None:
    assert EXPECTED_FILES, f"no expected/*.yaml under {EXPECTED_DIR}"


@pytest.mark.parametrize("path", EXPECTED_FILES, ids=lambda p: p.stem)
def test_expected_file_schema(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    errs = schema_errors(doc, path.stem)
    assert not errs, "\n".join(errs)


# ------------------------------------------------------------------ the checker itself

VALID = {
    "table": "t-1",
    "paper": "s4",
    "title": "Table 1",
    "source": "S4 Table 1",
    "rows": ["A", "B"],
    "columns": ["c"],
    "cells": [
        {"row": "A", "column": "c", "paper": 1.5, "std": 0.1, "unit": "ms", "better": "lower",
         "source": "S4 Table 1, row A, column c", "note": None,
         "checks": {"smoke": {"not_run": "why"},
                    "budget": {"ordering": {"less_than": [{"row": "B", "column": "c"}]}},
                    "full": {"tolerance": {"rel": 0.5}}}},
        {"row": "B", "column": "c", "paper": "X", "std": None, "unit": "ms", "better": "lower",
         "source": "S4 Table 1, row B, column c", "note": None,
         "checks": {"smoke": {"not_run": "why"}, "budget": {"bound": {"min": 0}},
                    "full": {"not_run": "the paper reports failure (X)"}}},
    ],
}


def test_schema_errors_accepts_valid_document() -> None:
    assert schema_errors(VALID, "t-1") == []


def _broken(edit) -> dict:
    doc = copy.deepcopy(VALID)
    edit(doc)
    return doc


REJECTS = [
    (lambda d: d.pop("rows"), "missing top-level"),
    (lambda d: d.update(table="other"), "must equal the file name"),
    (lambda d: d["cells"][0].pop("better"), "missing key"),
    (lambda d: d["cells"][0].update(row="Z"), "row not listed"),
    (lambda d: d["cells"][0].update(column="z"), "column not listed"),
    (lambda d: d["cells"].append(copy.deepcopy(d["cells"][0])), "duplicate (row, column)"),
    (lambda d: d["cells"][0].update(paper="1.5"), "'paper' must be a number"),
    (lambda d: d["cells"][0].update(paper=True), "'paper' must be a number"),
    (lambda d: d["cells"][0].update(paper=None), "needs a non-empty note"),
    (lambda d: d["cells"][0].update(std="0.1"), "'std' must be null or a number"),
    (lambda d: d["cells"][0].update(better="up"), "'better' must be"),
    (lambda d: d["cells"][0]["checks"].pop("budget"), "exactly the tiers"),
    (lambda d: d["cells"][0]["checks"]["full"].update(not_run="x"), "exactly one of"),
    (lambda d: d["cells"][0]["checks"].update(full={}), "exactly one of"),
    (lambda d: d["cells"][0]["checks"].update(full={"tolerance": {"abs": "1"}}), "tolerance: must be"),
    (lambda d: d["cells"][0]["checks"].update(full={"tolerance": {"abs": 1, "rel": 1}}), "tolerance: must be"),
    (lambda d: d["cells"][0].update(paper=None, note="not printed"), "needs a numeric paper value"),
    (lambda d: d["cells"][0]["checks"].update(full={"within_factor": 0.5}), "within_factor: must be"),
    (lambda d: d["cells"][0]["checks"].update(full={"not_run": ""}), "non-empty reason"),
    (lambda d: d["cells"][0]["checks"].update(full={"bound": {"least": 1}}), "bound: must be"),
    (lambda d: d["cells"][0]["checks"].update(
        budget={"ordering": {"less_than": [{"row": "Q", "column": "c"}]}}), "is not a {row, column}"),
]


@pytest.mark.parametrize("edit, expect", REJECTS, ids=[f"{i}-{e}" for i, (_, e) in enumerate(REJECTS)])
def test_schema_errors_rejects(edit, expect: str) -> None:
    errs = schema_errors(_broken(edit), "t-1")
    assert any(expect in e for e in errs), errs


# ------------------------------------------------------------------ the content: no check counted twice or by default


def _orderings(doc: dict, tier: str):
    for cell in doc["cells"]:
        check = cell["checks"][tier]
        if "ordering" in check:
            (which, refs), = check["ordering"].items()
            for ref in refs:
                yield (cell["row"], cell["column"]), which, (ref["row"], ref["column"])


@pytest.mark.parametrize("path", EXPECTED_FILES, ids=lambda p: p.stem)
def test_no_ordering_is_written_from_both_sides(path: Path) -> None:
    """A comparison is one check: 'A < B' on A and 'B > A' on B would count the same claim twice."""
    doc = yaml.safe_load(path.read_text())
    for tier in ("smoke", "budget", "full"):
        seen = {(a, which, b) for a, which, b in _orderings(doc, tier)}
        flip = {"less_than": "greater_than", "greater_than": "less_than"}
        mirrored = sorted({tuple(sorted((a, b))) for a, which, b in seen if (b, flip[which], a) in seen})
        assert not mirrored, f"{path.stem} [{tier}]: orderings written from both sides: {mirrored}"
        selfref = [a for a, _, b in seen if a == b]
        assert not selfref, f"{path.stem} [{tier}]: a cell ordered against itself: {selfref}"


@pytest.mark.parametrize("path", EXPECTED_FILES, ids=lambda p: p.stem)
def test_sanity_checks_say_why_and_context_rows_are_context(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    for cell in doc["cells"]:
        where = f"{path.stem}: ({cell['row']}, {cell['column']})"
        for tier, check in cell["checks"].items():
            if check.get("role") == "sanity":
                assert "Sanity check" in (cell.get("note") or ""), \
                    f"{where} [{tier}]: a sanity check needs its reason in the cell's note"
            assert not str(check.get("not_run", "")).startswith("context row"), \
                f"{where} [{tier}]: prior work's number is `context: reason`, not not_run"
