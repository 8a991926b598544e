"""Spec loading, config validation, verdicts, results files and reports, on a toy runner."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from runners.cli.main import main
from runners.core.errors import NotRunnable, SpecError
from runners.execute.run import run_spec
from runners.judge.verdicts import accuracy_gap_z, compare, judge
from runners.report.markdown import report_all
from runners.specs import registry
from runners.specs.expected import schema_errors
from runners.specs.spec import load_spec
from runners.store.read import latest_result, load_result


@dataclass
class ToyConfig:
    value: float
    label: str = "a"
    sizes: list[int] = field(default_factory=lambda: [1, 2])


@registry.register("test.toy", config=ToyConfig, kind="analytic")
def _toy(cfg: ToyConfig, ctx: registry.RunContext) -> registry.RunOutput:
    return registry.RunOutput(cells=[registry.Cell("r", "c", cfg.value), registry.Cell("r", "d", 2 * cfg.value)],
                              series={"sizes": cfg.sizes}, notes=[f"toy run on {ctx.device}"])


def _cell(column: str, paper, checks: dict, better: str = "higher") -> dict:
    return {"row": "r", "column": column, "paper": paper, "std": None, "unit": "u", "better": better,
            "source": "toy", "note": None, "checks": checks}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory with one toy spec (with an include) and its expected file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "expected").mkdir()
    (tmp_path / "reproductions" / "_shared.yaml").write_text(yaml.safe_dump(
        {"paper": "s4", "groups": ["analytic"], "tiers": {"smoke": {"device": "cpu", "value": 1.0}}}))
    spec = {"include": "_shared.yaml", "id": "toy", "table": "Table 0", "title": "toy", "runner": "test.toy",
            "make": "toy", "tiers": {"smoke": {"seed": 3}, "budget": {"value": 5.0}, "full": {"value": 10.0}}}
    (tmp_path / "reproductions" / "toy.yaml").write_text(yaml.safe_dump(spec))
    expected = {"table": "toy", "paper": "s4", "title": "toy", "source": "nowhere", "rows": ["r"],
                "columns": ["c", "d"], "cells": [
                    _cell("c", 1.0, {"smoke": {"tolerance": {"abs": 0.1}}, "budget": {"bound": {"min": 6}},
                                     "full": {"within_factor": 2}}),
                    _cell("d", None, {"smoke": {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}},
                                      "budget": {"not_run": "not at this tier"},
                                      "full": {"ordering": {"less_than": [{"row": "r", "column": "c"}]}}})]}
    expected["cells"][1]["note"] = "not in the paper"
    (tmp_path / "expected" / "toy.yaml").write_text(yaml.safe_dump(expected))
    return tmp_path


def test_include_merges_and_tiers_build_configs(project: Path) -> None:
    spec = load_spec(project / "reproductions" / "toy.yaml")
    assert spec.paper == "s4" and spec.groups == ["analytic"]
    assert spec.tiers["smoke"].config == ToyConfig(value=1.0) and spec.tiers["smoke"].seed == 3


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["tiers"]["full"].update(valu=1), "tiers.full: unknown key(s) ['valu']"),
    (lambda s: s["tiers"]["full"].update(value="big"), "tiers.full.value: expected float"),
    (lambda s: s["tiers"]["full"].update(sizes=[1, "x"]), "tiers.full.sizes"),
    (lambda s: s.update(runner="nope"), "not a registered runner"),
    (lambda s: s.update(colour="red"), "unknown top-level key(s) ['colour']"),
    (lambda s: s["tiers"].pop("budget"), "must map exactly"),
    (lambda s: s["tiers"]["smoke"].update(device="cuda"), "smoke.device must be 'cpu'"),
    (lambda s: s["tiers"]["full"].update(device="tpu"), "tiers.full.device"),
    (lambda s: s.update(groups=["speech"]), "groups"),
    (lambda s: s.update(include="missing.yaml"), "file not found"),
    (lambda s: s.update(shown={"medium": "x"}), "key 'shown' must map tiers"),
    (lambda s: s.update(shown={"budget": " "}), "key 'shown' must map tiers"),
    (lambda s: s.update(shown="all of it"), "key 'shown' must map tiers"),
])
def test_bad_spec_names_file_and_key(project: Path, edit, message: str) -> None:
    path = project / "reproductions" / "toy.yaml"
    spec = yaml.safe_load(path.read_text())
    edit(spec)
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert message in str(err.value) and ("toy.yaml" in str(err.value) or "missing.yaml" in str(err.value))


def test_include_cycle_is_reported(project: Path) -> None:
    (project / "reproductions" / "_shared.yaml").write_text("include: toy.yaml\n")
    with pytest.raises(SpecError, match="include cycle"):
        load_spec(project / "reproductions" / "toy.yaml")


def test_run_writes_new_results_and_check_and_report(project: Path, capsys: pytest.CaptureFixture) -> None:
    spec = load_spec(project / "reproductions" / "toy.yaml")
    first = run_spec(spec, "smoke", progress=False)
    second = run_spec(spec, "smoke", progress=False)
    assert first != second and first.exists() and second.exists()
    assert not list(first.parent.glob(".*.ssm-partial"))
    result = load_result(latest_result("toy", "smoke"))
    assert result["config"] == {"value": 1.0, "label": "a", "sizes": [1, 2]}
    assert result["environment"]["torch"] and result["seed"] == 3 and result["spec"]["id"] == "toy"
    verdicts = {v.column: v.verdict for v in compare(yaml.safe_load((project / "expected/toy.yaml").read_text()),
                                                     result, "smoke")}
    assert verdicts == {"c": "PASS", "d": "PASS"}
    assert main(["check", "toy", "--tier", "smoke"]) == 0
    run_spec(spec, "full", progress=False)  # value 10: within factor 2 of 1.0 fails; d = 20 < 10 fails
    assert main(["check", "toy", "--tier", "full"]) == 1
    assert "FAIL" in capsys.readouterr().out
    report_all(project / "tables")
    text = (project / "tables" / "toy.md").read_text()
    assert "## Tier: full" in text and "FAIL" in text and "NOT-RUN: no results for this tier" in text
    assert "toy" in (project / "tables" / "README.md").read_text()


def test_report_says_first_what_each_run_tier_shows(project: Path) -> None:
    path = project / "reproductions" / "toy.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["shown"] = {"smoke": "Shown: the toy runs. Not shown: anything else.", "full": "The claim."}
    path.write_text(yaml.safe_dump(spec))
    run_spec(load_spec(path), "smoke", progress=False)
    report_all(project / "tables")
    lines = [line for line in (project / "tables" / "toy.md").read_text().splitlines() if line]
    assert lines[0].startswith("# Table 0: toy")
    assert lines[1].startswith("**At a glance (smoke tier):**")  # the measured claims, then what the tier shows
    shown = lines.index("**What the smoke tier shows:** Shown: the toy runs. Not shown: anything else.")
    assert all(line.startswith("- ") for line in lines[2:shown]) and lines[shown + 1].startswith("Paper:")
    assert "The claim." not in "\n".join(lines)  # the full tier has no results: its text is not printed


def test_cuda_tier_without_gpu_is_not_runnable(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = project / "reproductions" / "toy.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["tiers"]["budget"]["device"] = "cuda"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(NotRunnable, match="needs a CUDA GPU"):
        run_spec(load_spec(path), "budget")


@pytest.mark.parametrize("check, value, paper, better, verdict", [
    ({"tolerance": {"abs": 1}}, 10.5, 10, "higher", "PASS"),
    ({"tolerance": {"abs": 1}}, 12, 10, "higher", "IMPROVED"),
    ({"tolerance": {"abs": 1}}, 8, 10, "higher", "FAIL"),
    ({"tolerance": {"rel": 0.1}}, 8, 10, "lower", "IMPROVED"),
    ({"bound": {"min": 5}}, 4.9, None, "higher", "FAIL"),
    ({"bound": {"max": 5}}, 4.9, None, "lower", "PASS"),
    ({"within_factor": 2}, 19, 10, "lower", "PASS"),
    ({"within_factor": 2}, 21, 10, "lower", "FAIL"),
    ({"within_factor": 2, "plausible_factor": 3}, 4, 10, "lower", "IMPROVED"),
    ({"within_factor": 2}, 4, 10, "lower", "FAIL"),  # 2.5x better than the paper: beyond the default factor 2
    ({"tolerance": {"abs": 0}}, "X", "X", "higher", "PASS"),
    ({"tolerance": {"abs": 1}}, "X", 10, "higher", "FAIL"),
    ({"not_run": "why"}, 3, 10, "higher", "NOT-RUN"),
    ({"bound": {"min": 0}}, None, 10, "higher", "FAIL"),  # null without the runner's reason
])
def test_judge(check: dict, value, paper, better: str, verdict: str) -> None:
    cell = _cell("c", paper, {"smoke": check, "budget": check, "full": check}, better)
    assert judge(cell, "smoke", {("r", "c"): value}).verdict == verdict


def test_ordering_against_other_cells() -> None:
    cell = _cell("c", None, {t: {"ordering": {"less_than": [{"row": "r", "column": "d"}]}}
                             for t in ("smoke", "budget", "full")})
    assert judge(cell, "smoke", {("r", "c"): 1, ("r", "d"): 2}).verdict == "PASS"
    assert judge(cell, "smoke", {("r", "c"): 3, ("r", "d"): 2}).verdict == "FAIL"
    # the other ran out of memory: an ordering must say what X means there (x_counts_as), else FAIL
    assert judge(cell, "smoke", {("r", "c"): 3, ("r", "d"): "X"}).verdict == "FAIL"
    x_worse = _cell("c", None, {t: {"ordering": {"less_than": [{"row": "r", "column": "d"}]}, "x_counts_as": "worse"}
                                for t in ("smoke", "budget", "full")}, better="lower")
    assert judge(x_worse, "smoke", {("r", "c"): 3, ("r", "d"): "X"}).verdict == "PASS"
    assert judge(cell, "smoke", {("r", "c"): 3}).verdict == "NOT-RUN"  # the reference is not measured


def test_ordering_with_significance_needs_a_gap_beyond_the_test_noise() -> None:
    check = {"ordering": {"greater_than": [{"row": "r", "column": "d"}]}, "significance": {"n": 1500, "z": 2}}
    cell = {**_cell("c", None, {t: check for t in ("smoke", "budget", "full")}), "unit": "% acc"}
    # two models at chance on 1500 examples: 50.87 vs 50.67 is 0.11 standard errors apart
    small = judge(cell, "budget", {("r", "c"): 50.87, ("r", "d"): 50.67})
    assert small.verdict == "FAIL" and "gap only 0.11 s.e." in small.detail
    assert judge(cell, "budget", {("r", "c"): 60.0, ("r", "d"): 50.0}).verdict == "PASS"  # 5.5 s.e.
    assert judge(cell, "budget", {("r", "c"): 49.0, ("r", "d"): 50.0}).verdict == "FAIL"  # wrong side
    assert accuracy_gap_z(100.0, 100.0, 1000) == 0.0 and accuracy_gap_z(100.0, 99.3, 1000) == pytest.approx(2.6504, 1e-4)


@pytest.mark.parametrize("check, unit, message", [
    ({"bound": {"min": 1}, "significance": {"n": 10, "z": 2}}, "%", "only goes with an ordering"),
    ({"ordering": {"greater_than": [{"row": "r", "column": "d"}]}, "significance": {"n": 0, "z": 2}}, "%",
     "n: test examples"),
    ({"ordering": {"greater_than": [{"row": "r", "column": "d"}]}, "significance": {"n": 10, "z": 2}}, "ms",
     "compares accuracies in %"),
])
def test_bad_significance_is_named(check: dict, unit: str, message: str) -> None:
    cell = {**_cell("c", None, {t: check for t in ("smoke", "budget", "full")}), "unit": unit}
    doc = {"table": "toy", "paper": "s4", "title": "toy", "source": "nowhere", "rows": ["r"], "columns": ["c", "d"],
           "cells": [cell, {**_cell("d", None, {t: {"not_run": "x"} for t in ("smoke", "budget", "full")}),
                            "note": "n"}]}
    errors = schema_errors(doc, "toy")
    assert any(message in e and "checks.smoke.significance" in e for e in errors), errors


def test_every_spec_has_its_make_target() -> None:
    """Each spec's `make:` key names a target of the Makefile (the reports tell users to run it)."""
    root = Path(__file__).resolve().parents[1]
    targets = {line.split(":")[0] for line in (root / "Makefile").read_text().splitlines()
               if line and not line[0].isspace() and ":" in line and not line.startswith(("#", "."))}
    missing = []
    for path in sorted((root / "reproductions").glob("[!_]*.yaml")):
        make = yaml.safe_load(path.read_text()).get("make")
        if make not in targets:
            missing.append(f"{path.name}: make {make}")
    assert not missing, missing


def test_git_commit_prefers_the_commit_named_by_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine the tree is a copy whose .git may be stale: $SSM_GIT_COMMIT names the code that ran."""
    from runners.core.provenance import git_commit
    monkeypatch.setenv("SSM_GIT_COMMIT", "0123abc")
    assert git_commit() == "0123abc"
    monkeypatch.delenv("SSM_GIT_COMMIT")
    assert git_commit() != "0123abc"


def test_atomic_writes_replace_whole_files_and_leave_nothing_on_failure(tmp_path):
    """runners.core.atomic: the target is replaced only by a complete file; a failed write keeps the old one and leaves
    no temp file; new files get the usual mode (not mkstemp's 0600)."""
    import os

    from runners.core.atomic import atomic_path, write_bytes_atomic, write_text_atomic

    target = tmp_path / "sub" / "f.txt"
    write_text_atomic(target, "old\n")
    assert target.read_text() == "old\n" and os.stat(target).st_mode & 0o044 == 0o044 & ~os.umask(os.umask(0))
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target, fsync=True) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old\n" and sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new" and sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]
