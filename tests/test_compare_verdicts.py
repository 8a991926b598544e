"""Verdicts that can be trusted: non-finite values, dropped cells, X in orderings, implausible improvements, the
std / context kinds, sanity checks, several results files per tier, stale known_fail analyses, malformed results
files (the corpus in tests/corpus/results/), and what the reports print."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import yaml

from runners.cli.main import main
from runners.core.errors import SpecError
from runners.core.textfmt import column_label, fmt
from runners.judge.verdicts import counts_text, describe, judge, judge_tier, sanity_summary, summary
from runners.report.markdown import report_all
from runners.specs import registry
from runners.specs.expected import load_expected, schema_errors
from runners.store.read import ResultsError, load_result, result_paths

TIERS = ("smoke", "budget", "full")
CORPUS = Path(__file__).resolve().parent / "corpus" / "results"


@dataclass
class _Cfg:
    value: float = 1.0
    tasks: dict = field(default_factory=dict)  # read by the report (a trained cell's epochs), not by the runner


if "test.verdicts" not in registry.RUNNERS:
    @registry.register("test.verdicts", config=_Cfg, kind="analytic")
    def _runner(cfg: _Cfg, ctx: registry.RunContext) -> registry.RunOutput:
        return registry.RunOutput(cells=[registry.Cell("r", "c", cfg.value)])


#: what a results file of the toy runner records of its setting (the spec's own: _Cfg's defaults, seed 0)
TOY_SETTING = {"runner": "test.verdicts", "config": {"value": 1.0, "tasks": {}}, "seed": 0}


def cell(column: str, paper, check: dict, better: str = "higher", row: str = "r", unit: str = "u", **extra) -> dict:
    return {"row": row, "column": column, "paper": paper, "std": None, "unit": unit, "better": better,
            "source": "toy", "note": None if paper is not None else "not in the paper",
            "checks": {t: check for t in TIERS}, **extra}


def one(c: dict, value, **others) -> str:
    measured = {(c["row"], c["column"]): value, **{("r", k): v for k, v in others.items()}}
    return judge(c, "smoke", measured).verdict


# ---------------------------------------------------------------------------------------------- non-finite values

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("check, better", [
    ({"tolerance": {"abs": 1}}, "higher"),
    ({"tolerance": {"rel": 0.5}}, "lower"),
    ({"bound": {"min": 1}}, "higher"),
    ({"bound": {"max": 1}}, "lower"),
    ({"within_factor": 2}, "higher"),
    ({"std": 3}, "higher"),
    ({"ordering": {"greater_than": [{"row": "r", "column": "d"}]}}, "higher"),
    ({"ordering": {"less_than": [{"row": "r", "column": "d"}]}}, "lower"),
    ({"ordering": {"greater_than": [{"row": "r", "column": "d"}]}, "significance": {"n": 100, "z": 2}}, "higher"),
])
def test_a_non_finite_measurement_fails_every_kind(check: dict, better: str, value: float) -> None:
    c = cell("c", 10.0, check, better, std=1.0, unit="%")
    v = judge(c, "smoke", {("r", "c"): value, ("r", "d"): 5.0})
    assert v.verdict == "FAIL" and "not a finite number" in v.detail


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("significance", [None, {"n": 100, "z": 2}])
def test_a_non_finite_reference_fails_an_ordering(value: float, significance) -> None:
    check = {"ordering": {"greater_than": [{"row": "r", "column": "d"}]}}
    if significance:
        check["significance"] = significance
    c = cell("c", None, check, unit="%")
    v = judge(c, "smoke", {("r", "c"): 60.0, ("r", "d"): value})
    assert v.verdict == "FAIL" and "not a finite number" in v.detail


# ---------------------------------------------------------------------------------------------- missing and null

def test_missing_null_and_declared_not_run() -> None:
    c = cell("c", 1.0, {"bound": {"min": 0}})
    assert judge(c, "smoke", {}).verdict == "FAIL"
    assert "missing in the result" in judge(c, "smoke", {}).detail
    declared = judge(c, "smoke", {("r", "c"): None}, {("r", "c"): "no CUDA device"})
    assert declared.verdict == "NOT-RUN" and "no CUDA device" in declared.detail
    assert judge(c, "smoke", {("r", "c"): None}).verdict == "FAIL"  # null without the runner's reason
    assert judge(cell("c", 1.0, {"not_run": "why"}), "smoke", {}).verdict == "NOT-RUN"


# --------------------------------------------------------------------------------------------------------- X

def test_x_in_an_ordering_needs_x_counts_as() -> None:
    ref = [{"row": "r", "column": "d"}]
    bare = cell("c", None, {"ordering": {"less_than": ref}}, "lower")
    assert one(bare, 3.0, d="X") == "FAIL" and "x_counts_as" in judge(bare, "smoke", {("r", "c"): 3.0,
                                                                                         ("r", "d"): "X"}).detail
    assert one(bare, "X", d=3.0) == "FAIL"
    worse = cell("c", None, {"ordering": {"less_than": ref}, "x_counts_as": "worse"}, "lower")
    assert one(worse, 3.0, d="X") == "PASS"  # the other ran out of memory: we are faster than a failure
    assert one(worse, "X", d=3.0) == "FAIL"  # we ran out of memory ourselves
    assert one(worse, "X", d="X") == "FAIL"  # both failed: no ordering
    better = cell("c", None, {"ordering": {"less_than": ref}, "x_counts_as": "better"}, "lower")
    assert one(better, 3.0, d="X") == "FAIL"
    higher = cell("c", None, {"ordering": {"greater_than": ref}, "x_counts_as": "worse"}, "higher")
    assert one(higher, 50.0, d="X") == "PASS" and one(higher, "X", d=50.0) == "FAIL"
    assert "X counts as worse" in describe(higher["checks"]["smoke"], None, higher)


# ---------------------------------------------------------------------------------------------- plausibility

@pytest.mark.parametrize("check, better, value, verdict", [
    ({"tolerance": {"abs": 1}}, "higher", 15.0, "IMPROVED"),  # 1.5x: plausible
    ({"tolerance": {"abs": 1}}, "higher", 25.0, "FAIL"),  # 2.5x: a unit or scale error?
    ({"tolerance": {"abs": 1}, "plausible_factor": 3}, "higher", 25.0, "IMPROVED"),
    ({"tolerance": {"rel": 0.1}}, "lower", 6.0, "IMPROVED"),
    ({"tolerance": {"rel": 0.1}}, "lower", 0.01, "FAIL"),  # 1000x faster than the paper: ms read as s?
    ({"within_factor": 2}, "lower", 4.0, "FAIL"),
    ({"within_factor": 2, "plausible_factor": 4}, "lower", 4.0, "IMPROVED"),
    ({"within_factor": 2, "plausible_factor": 4}, "lower", 2.0, "FAIL"),
    ({"std": 2}, "higher", 14.0, "IMPROVED"),
    ({"std": 2}, "higher", 21.0, "FAIL"),
    ({"tolerance": {"abs": 1}}, "higher", 8.0, "FAIL"),  # worse: FAIL as before
])
def test_improved_only_within_the_plausible_factor(check: dict, better: str, value: float, verdict: str) -> None:
    c = cell("c", 10.0, check, better, std=1.0)
    v = judge(c, "smoke", {("r", "c"): value})
    assert v.verdict == verdict
    if verdict == "FAIL" and (value > 10) == (better == "higher"):
        assert v.detail.startswith("implausible")


def test_plausibility_for_negative_values() -> None:
    c = cell("c", -2.0, {"tolerance": {"abs": 1.0}}, "higher")  # a delta: 2 points worse than the baseline
    assert one(c, -1.5) == "PASS" and one(c, -0.9) == "IMPROVED"  # 1.1 better: within (2 - 1) * |-2|
    assert one(c, 3.0) == "FAIL"  # 5 better than a paper delta of -2: beyond the plausible factor
    zero = cell("c", 0.0, {"tolerance": {"abs": 1.0}}, "higher")  # no scale: nothing beyond the tolerance is plausible
    assert one(zero, 0.5) == "PASS" and one(zero, 1.5) == "FAIL"


# ----------------------------------------------------------------------------------------------------- std

def test_std_kind() -> None:
    c = cell("c", 88.65, {"std": 2}, std=0.2)
    assert one(c, 88.3) == "PASS" and one(c, 88.2) == "FAIL" and one(c, 89.1) == "IMPROVED"
    assert describe(c["checks"]["smoke"], 88.65, c) == "88.65 ± 2 std (± 0.4)"


# ------------------------------------------------------------------------------------------- context and sanity

def test_context_and_sanity_are_counted_apart() -> None:
    cells = [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
             cell("d", 5.0, {"context": "prior work's number; not rerun"}),
             cell("e", None, {"bound": {"min": 0}, "role": "sanity"}),
             cell("f", None, {"bound": {"min": 0}, "role": "sanity"})]
    expected = {"rows": ["r"], "columns": ["c", "d", "e", "f"], "cells": cells}
    verdicts = judge_tier(expected, [{"cells": [{"row": "r", "column": k, "value": v}
                                                for k, v in {"c": 1.0, "e": 1.0, "f": -1.0}.items()]}], "smoke")
    by = {v.column: v for v in verdicts}
    assert by["d"].verdict == "CONTEXT" and by["e"].role == "sanity" and by["f"].verdict == "FAIL"
    assert summary(verdicts) == {"PASS": 1, "FAIL": 0, "IMPROVED": 0, "STALE": 0, "NOT-RUN": 0}
    assert sanity_summary(verdicts) == {"PASS": 1, "FAIL": 1, "IMPROVED": 0, "STALE": 0, "NOT-RUN": 0}
    assert counts_text(verdicts) == ("claims: PASS 1, FAIL 0, IMPROVED 0, NOT-RUN 0; context 1; "
                                     "sanity: PASS 1, FAIL 1, IMPROVED 0, NOT-RUN 0")
    assert by["f"].unexpected_fail  # a sanity FAIL still fails `runners check`


# ------------------------------------------------------------------------------------------ several results files

def test_judge_tier_takes_each_cell_from_the_newest_run_that_selected_it() -> None:
    cells = [cell("c", None, {"bound": {"min": 0}}), cell("d", None, {"bound": {"min": 0}}),
             cell("e", None, {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}}),
             cell("f", None, {"bound": {"min": 0}})]
    expected = {"rows": ["r"], "columns": ["c", "d", "e", "f"], "cells": cells}
    newest = {"selected_cells": [["r", "c"], ["r", "e"]], "cells": [{"row": "r", "column": "c", "value": 5.0},
                                                                    {"row": "r", "column": "e", "value": 7.0}]}
    older = {"selected_cells": [["r", "c"], ["r", "d"]], "cells": [{"row": "r", "column": "c", "value": -1.0},
                                                                   {"row": "r", "column": "d", "value": 2.0}]}
    by = {v.column: v for v in judge_tier(expected, [newest, older], "smoke")}
    assert (by["c"].verdict, by["c"].measured, by["c"].result) == ("PASS", 5.0, 0)  # the newer run's value
    assert (by["d"].verdict, by["d"].result) == ("PASS", 1)
    assert by["e"].verdict == "PASS"
    assert by["f"].verdict == "NOT-RUN" and by["f"].detail == "not selected by any run of this tier"
    assert {v.detail for v in judge_tier(expected, [], "smoke")} == {"tier not run"}
    # an ordering reference the judging run did not measure is read from the newest other run that did
    only_e = {"selected_cells": [["r", "e"]], "cells": [{"row": "r", "column": "e", "value": 1.0}]}
    v = {v.column: v for v in judge_tier(expected, [only_e, newest], "smoke")}["e"]
    assert v.verdict == "FAIL" and "from results file 2" in v.detail


def test_results_without_selected_cells_select_every_checked_cell() -> None:
    cells = [cell("c", None, {"bound": {"min": 0}}), cell("d", None, {"not_run": "not at this tier"}),
             cell("e", 1.0, {"context": "prior work"})]
    expected = {"rows": ["r"], "columns": ["c", "d", "e"], "cells": cells}
    by = {v.column: v.verdict for v in judge_tier(expected, [{"cells": []}], "smoke")}
    assert by == {"c": "FAIL", "d": "NOT-RUN", "e": "CONTEXT"}


# --------------------------------------------------------------------------------------------------- schema

def _doc(*cells: dict) -> dict:
    return {"table": "toy", "paper": "s4", "title": "toy", "source": "nowhere", "rows": ["r"],
            "columns": sorted({c["column"] for c in cells} | {"d"}),
            "cells": list(cells) + ([] if any(c["column"] == "d" for c in cells)
                                    else [cell("d", None, {"not_run": "x"})])}


@pytest.mark.parametrize("c, message", [
    (cell("c", 1.0, {"std": 2}), "needs the cell's 'std'"),
    (cell("c", 1.0, {"std": 0}, std=0.1), "std: must be a finite number k > 0"),
    (cell("c", 1.0, {"std": 2}, std=math.inf), "'std' must be null or a number >= 0 (finite)"),
    (cell("c", math.inf, {"tolerance": {"abs": 1}}), "'paper' must be a number (finite"),
    (cell("c", math.nan, {"tolerance": {"abs": 1}}), "'paper' must be a number (finite"),
    (cell("c", 1.0, {"tolerance": {"abs": math.nan}}), "tolerance: must be {abs: a} or {rel: r} with a finite"),
    (cell("c", 1.0, {"tolerance": {"rel": math.inf}}), "tolerance: must be"),
    (cell("c", 1.0, {"bound": {"min": -math.inf}}), "bound: must be"),
    (cell("c", 1.0, {"within_factor": math.inf}), "within_factor: must be a finite number"),
    (cell("c", 1.0, {"tolerance": {"abs": 1}, "target": math.nan}), "target: must be a finite number"),
    (cell("c", 1.0, {"context": ""}), "context: must be a non-empty reason"),
    (cell("c", 1.0, {"not_run": "x", "role": "sanity"}), "judges nothing"),
    (cell("c", 1.0, {"bound": {"min": 0}, "role": "decoration"}), "role: must be one of"),
    (cell("c", 1.0, {"bound": {"min": 0}, "x_counts_as": "worse"}), "x_counts_as: only goes with an ordering"),
    (cell("c", 1.0, {"ordering": {"less_than": [{"row": "r", "column": "d"}]}, "x_counts_as": "fine"}),
     "x_counts_as: must be one of"),
    (cell("c", 1.0, {"bound": {"min": 0}, "plausible_factor": 3}), "plausible_factor: only goes with"),
    (cell("c", 1.0, {"tolerance": {"abs": 1}, "plausible_factor": 1}), "plausible_factor: must be a finite number > 1"),
    (cell("c", 1.0, {"tolerance": {"abs": 1}, "plausible_factor": math.inf}), "plausible_factor: must be"),
    (cell("c", 1.0, {"within_factor": 2, "plausible_factor": 1.5}), "is not above within_factor"),
    (cell("c", 1.0, {"std": 2, "target": 3.0}, std=0.5), "target: only goes with"),
    (cell("c", 1.0, {"ordering": {"less_than": [{"row": "r", "column": "d"}]},
                     "significance": {"n": 10, "z": math.inf}}, unit="%"), "significance: must be"),
])
def test_schema_errors_for_the_new_keys(c: dict, message: str) -> None:
    errors = schema_errors(_doc(c), "toy")
    assert any(message in e for e in errors), errors


def test_yaml_inf_and_nan_are_schema_errors(tmp_path: Path) -> None:
    text = yaml.safe_dump(_doc(cell("c", 1.0, {"tolerance": {"abs": 0.5}}))).replace("abs: 0.5", "abs: .nan")
    (tmp_path / "toy.yaml").write_text(text)
    with pytest.raises(SpecError, match=r"(?s)toy\.yaml.*finite"):
        load_expected(tmp_path / "toy.yaml")


def test_the_new_keys_pass_the_schema() -> None:
    doc = _doc(cell("c", 88.6, {"std": 2, "plausible_factor": 1.5}, std=0.2),
               cell("d", None, {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}, "x_counts_as": "worse",
                                "role": "sanity"}),
               cell("e", 5.0, {"context": "Transformer from LRA: not rerun"}))
    doc["columns"] = ["c", "d", "e"]
    assert schema_errors(doc, "toy") == []


# ----------------------------------------------------------------------------------------------------- format

@pytest.mark.parametrize("x, text", [(20540.3, "20540"), (13964.27587890625, "13964"), (52.2916, "52.29"),
                                     (0.0864525, "0.08645"), (1.0, "1"), (0.0, "0"), (450570, "450570"),
                                     (3.1e-12, "3.1e-12"), (math.nan, "nan"), (None, "-"), ("X", "X"),
                                     (2.5e13, "2.500e+13")])
def test_fmt(x, text: str) -> None:
    assert fmt(x) == text


def test_column_label_says_mib() -> None:
    assert column_label("Memory MB H=128") == "Memory MiB H=128"
    assert column_label("Path-X peak memory MB") == "Path-X peak memory MiB"
    assert column_label("MBPP") == "MBPP"


# ----------------------------------------------------------------------------------------------- learning curves

def test_learning_curves_label_the_metric_and_draw_the_paper_value(tmp_path: Path, monkeypatch) -> None:
    from runners.train.plots import plot_learning_curves

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    hist = [{"epoch": e, "train_loss": 1.0 / e, "val_metric": 50.0 + e} for e in (1, 2, 3)]
    result = {"spec_id": "toy", "tier": "budget", "series": {"S4 / ListOps": {"history": hist, "monitor": "val_acc"},
                                                             "Mine / ListOps": {"history": hist}}}
    expected = {"cells": [{"row": "S4", "column": "ListOps", "paper": 59.6, "unit": "% acc"},
                          {"row": "Mine", "column": "ListOps", "paper": None, "unit": "% acc"}]}
    plot_learning_curves(result, tmp_path / "lc.png", expected)
    assert (tmp_path / "lc.png").exists()
    ax = figures[0].axes[1]
    assert ax.get_ylabel() == "validation accuracy (%)" and "training loss" in figures[0].axes[0].get_ylabel()
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [59.6, 59.6]


# ------------------------------------------------------------------------------------------ the CLI on a project

@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one spec (id toy) and its expected file: c = 1.0 ± 0.1, d > c."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "expected").mkdir()
    (tmp_path / "results" / "toy").mkdir(parents=True)
    spec = {"id": "toy", "paper": "s4", "table": "Table 0", "title": "toy", "groups": ["analytic"],
            "runner": "test.verdicts", "make": "toy", "tiers": {"smoke": {"device": "cpu", "seed": 0},
                                                               "budget": {"device": "cpu", "seed": 0},
                                                               "full": {"device": "cpu", "seed": 0}}}
    (tmp_path / "reproductions" / "toy.yaml").write_text(yaml.safe_dump(spec))
    write_expected(tmp_path, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
                              cell("d", None, {"ordering": {"greater_than": [{"row": "r", "column": "c"}]}})])
    return tmp_path


def write_expected(root: Path, cells: list[dict]) -> None:
    doc = {"table": "toy", "paper": "s4", "title": "toy", "source": "nowhere", "rows": ["r"],
           "columns": [c["column"] for c in cells], "cells": cells}
    (root / "expected" / "toy.yaml").write_text(yaml.safe_dump(doc))


def write_result(root: Path, values: dict, stamp: str = "20260101T000000", **extra) -> Path:
    path = root / "results" / "toy" / f"{stamp}_smoke.json"
    cells = [{"row": "r", "column": k, "value": v, "note": None} for k, v in values.items()]
    path.write_text(json.dumps({"spec_id": "toy", "tier": "smoke", **TOY_SETTING, "cells": cells, **extra}))
    return path


def check(capsys) -> tuple[int, str, str]:
    rc = main(["check", "toy", "--tier", "smoke"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_check_passes_a_good_result(project: Path, capsys) -> None:
    write_result(project, {"c": 1.05, "d": 2.0})
    rc, out, _ = check(capsys)
    assert rc == 0 and "claims: PASS 2, FAIL 0" in out


@pytest.mark.parametrize("values, message", [
    ({"c": math.nan, "d": 2.0}, "not a finite number"),
    ({"c": 1.0, "d": math.inf}, "not a finite number"),  # inf would pass "d > c"
    ({"c": -math.inf, "d": 2.0}, "not a finite number"),
    ({"c": 1.0}, "missing in the result"),
])
def test_check_fails_on_non_finite_and_dropped_cells(project: Path, capsys, values: dict, message: str) -> None:
    write_result(project, values)  # json.dumps writes NaN / Infinity, which json.loads reads back
    rc, out, _ = check(capsys)
    assert rc == 1 and message in out


def test_check_fails_on_an_implausible_improvement(project: Path, capsys) -> None:
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}, "lower"),
                             cell("d", None, {"not_run": "not here"})])
    write_result(project, {"c": 0.001})  # 1000x better than the paper: a unit error
    rc, out, _ = check(capsys)
    assert rc == 1 and "implausible" in out
    write_result(project, {"c": 0.7}, stamp="20260101T000001")  # 1.4x better: IMPROVED, for review
    rc, out, _ = check(capsys)
    assert rc == 0 and "IMPROVED 1" in out


def test_check_fails_on_a_stale_known_fail(project: Path, capsys) -> None:
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}, known_fail="c is off by 2 in our runs"),
                             cell("d", None, {"not_run": "not here"})])
    write_result(project, {"c": 3.0})
    assert check(capsys)[0] == 0  # the analysed FAIL: check passes
    write_result(project, {"c": 1.0}, stamp="20260101T000001")
    rc, out, _ = check(capsys)
    assert rc == 1 and "stale known_fail" in out


def test_check_fails_on_a_sanity_fail(project: Path, capsys) -> None:
    write_expected(project, [cell("c", None, {"bound": {"min": 0}, "role": "sanity"}),
                             cell("d", None, {"context": "prior work"})])
    write_result(project, {"c": -1.0})
    rc, out, _ = check(capsys)
    assert rc == 1 and "sanity: PASS 0, FAIL 1" in out and "context 1" in out


def test_check_combines_the_results_files_of_a_tier(project: Path, capsys) -> None:
    write_result(project, {"c": 1.0, "d": 2.0}, selected_cells=[["r", "c"], ["r", "d"]])
    write_result(project, {"c": 1.02}, stamp="20260102T000000", selected_cells=[["r", "c"]])
    rc, out, _ = check(capsys)
    assert rc == 0 and "claims: PASS 2" in out
    assert [p.name for p in result_paths("toy", "smoke")] == ["20260102T000000_smoke.json",
                                                              "20260101T000000_smoke.json"]
    for name in ("20260102T000000_smoke_2.json", "20260102T000000_smoke_10.json", "20260102T000000_budget.json",
                 "20260102T000000_smoke.helpers.log", "notes_smoke.json"):
        (project / "results" / "toy" / name).write_text("{}")
    assert [p.name for p in result_paths("toy", "smoke")][:3] == ["20260102T000000_smoke_10.json",
                                                                  "20260102T000000_smoke_2.json",
                                                                  "20260102T000000_smoke.json"]
    assert len(result_paths("toy", "smoke")) == 4


def test_report_prints_check_std_mib_and_files(project: Path) -> None:
    write_expected(project, [cell("Memory MB", 5.3, {"std": 2}, "lower", std=0.4),
                             cell("d", None, {"ordering": {"greater_than": [{"row": "r", "column": "Memory MB"}]}}),
                             cell("e", 7.0, {"context": "prior work"}),
                             cell("f", None, {"bound": {"min": 0}, "role": "sanity"})])
    write_result(project, {"Memory MB": 20540.3, "d": 30000.0, "f": 1.0}, selected_cells=[["r", "d"], ["r", "f"]])
    write_result(project, {"Memory MB": 5.0}, stamp="20260102T000000", selected_cells=[["r", "Memory MB"]])
    report_all(project / "tables")
    text = (project / "tables" / "toy.md").read_text()
    assert "5.3 ± 0.4 / 5 PASS (5.3 ± 2 std (± 0.8)) [1]" in text
    assert "- / 30000 PASS (> Memory MiB) [2]" in text
    assert "7 (context)" in text and "### Sanity checks" in text and "sanity PASS" in text
    assert "Memory MiB" in text and "MiB (2^20 bytes" in text
    assert "e+0" not in text
    assert "claims: PASS 2, FAIL 0, IMPROVED 0, NOT-RUN 0; context 1; sanity: PASS 1" in text
    index = (project / "tables" / "README.md").read_text()
    assert "PASS 2; context 1; sanity PASS 1" in index


# ------------------------------------------------------------------------------------- malformed results files

CORPUS_FILES = sorted(CORPUS.glob("*.json"))


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS_FILES) >= 20


@pytest.mark.parametrize("name", [p.name for p in CORPUS_FILES])
def test_a_malformed_results_file_is_one_line_or_a_fail(project: Path, capsys, name: str) -> None:
    """Every file of tests/corpus/results/ as the only result of a tier: `runners check` exits non-zero with one
    line naming the file (exit 2) or a FAIL verdict (exit 1), or, for a file whose values could be measurements but
    that records no setting, reads STALE with no PASS; `runners report` the same line, FAIL or STALE; never a
    traceback, never a PASS."""
    target = Path("results") / "toy" / "20260101T000000_smoke.json"
    target.write_bytes((CORPUS / name).read_bytes())
    rc, out, err = check(capsys)
    assert rc in (0, 1, 2), (rc, out, err)
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0], err
    elif rc == 1:
        assert "FAIL" in out and not err
    else:  # a file that records no setting of the toy runner: nothing it measured is judged as today's setting
        assert "PASS 0," in out and "STALE" in out and not err, out
    with pytest.raises(ResultsError) if rc == 2 else _no_error():
        load_result(target, "toy", "smoke")
    rc_report = main(["report"])
    err = capsys.readouterr().err
    if rc == 2:
        assert rc_report == 2 and len(err.strip().splitlines()) == 1 and str(target) in err
    else:
        report = (project / "local" / "tables" / "toy.md").read_text()
        assert rc_report == 0 and ("FAIL" in report if rc == 1 else "STALE" in report)


class _no_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


@pytest.mark.parametrize("series", [{"S4 / T": 5}, {"S4 / T": {"history": [{"epoch": 1, "val_metric": 50.0}]}},
                                    {"S4 / T": {}}, {"S4 / T": {"history": "none"}}])
def test_a_malformed_series_is_one_line_in_the_report(project: Path, capsys, series: dict) -> None:
    path = project / "reproductions" / "toy.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["plots"] = ["learning_curves"]
    path.write_text(yaml.safe_dump(spec))
    write_result(project, {"c": 1.0, "d": 2.0}, series=series)
    assert main(["report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot draw plot 'learning_curves'" in err[0] and "20260101T000000_smoke.json" in err[0]


def test_learning_curves_join_every_results_file_that_judges_a_cell(project: Path, monkeypatch) -> None:
    """A tier judged by two results files (each run selected one cell): the learning curves draw each cell's series
    from the file that judges it, and the report names both files; a series the newer file re-measured is drawn
    from the newer file only."""
    from runners.report import markdown as report_mod

    path = project / "reproductions" / "toy.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["plots"] = ["learning_curves"]
    path.write_text(yaml.safe_dump(spec))

    def series(val: float) -> dict:
        return {"history": [{"epoch": 1, "train_loss": 1.0, "val_metric": val}]}

    write_result(project, {"c": 1.0}, stamp="20260101T000000", selected_cells=[["r", "c"]],
                 series={"r / c": series(10.0), "r / d": series(11.0)})
    write_result(project, {"d": 2.0}, stamp="20260102T000000", selected_cells=[["r", "d"]],
                 series={"r / d": series(12.0)})
    drawn: list[dict] = []
    monkeypatch.setitem(report_mod.PLOTS, "learning_curves", lambda result, png, expected: drawn.append(result))
    assert main(["report"]) == 0
    (result,) = drawn
    assert {k: v["history"][0]["val_metric"] for k, v in result["series"].items()} == {"r / c": 10.0, "r / d": 12.0}
    text = (project / "local" / "tables" / "toy.md").read_text()
    assert "The curves come from 2 results files" in text
    assert "`20260102T000000_smoke.json`, `20260101T000000_smoke.json`" in text


# ---- a results file whose spec changed since it was written says so in the report


def test_report_names_the_settings_changed_since_a_results_file_was_written():
    import copy
    import dataclasses

    from runners.report.markdown import config_drift, drift_lines
    from runners.specs.selection import tier_config
    from runners.specs.spec import find_spec, load_spec

    spec = load_spec(find_spec("s4d-table-5"))
    now = json.loads(json.dumps(dataclasses.asdict(tier_config(spec, "full", "suite")), default=str))
    result = {"data": "suite", "overrides": [], "config": copy.deepcopy(now),
              "selected_cells": [["S4D-Inv (suite data)", "ListOps"]]}
    assert config_drift(spec, "full", result) == [] and drift_lines(spec, "full", result) == []
    then = result["config"]["tasks"]
    del then["ListOps"]["model"]["ssm"]["mask_padding"]  # written before the setting existed
    then["ListOps"]["train"]["weight_decay"] = 0.01
    then["Pathfinder"]["train"]["lr"] = 0.5  # a task the file did not measure: not its concern
    assert config_drift(spec, "full", result) == [
        "`tasks.ListOps.model.ssm.mask_padding` (then not set, now true)",
        "`tasks.ListOps.train.weight_decay` (then 0.01, now 0.05)"]
    assert drift_lines(spec, "full", result)[0].startswith("**Configuration changed since this run:** `tasks.ListOps")
    # an override the spec no longer takes is said, not hidden
    stale = {**result, "overrides": ["tasks.ListOps.train.nonesuch=1"]}
    assert config_drift(spec, "full", stale)[0].startswith("(not comparable with the spec now: ")
    # a benchmark's named settings: a change to a setting the file did not measure is not its concern
    gen = load_spec(find_spec("s4-generation"))
    now = json.loads(json.dumps(dataclasses.asdict(tier_config(gen, "full", "release")), default=str))
    table7 = {"overrides": [], "config": copy.deepcopy(now), "selected_cells": [["S4", "Speedup (Table 7)"]]}
    assert [s["name"] for s in now["settings"]] == ["Table 7", "Table 8"]
    table7["config"]["settings"][1]["timed_steps"] = 64
    assert config_drift(gen, "full", table7) == []
    table7["config"]["settings"][0]["max_batch"] = 8
    assert config_drift(gen, "full", table7) == ["`settings[0].max_batch` (then 8, now 65536)"]


# ---- the report's first lines: what was measured, on which data, schedule and card


def test_report_opens_with_what_each_column_measured_on_which_data_schedule_and_card(project: Path) -> None:
    """Two results files judge the tier: the report's first bullets give each column's verdicts with ours beside
    the check and the paper's value, the epochs of a trained cell and every card a resumed
    cell trained on; the older file's column names its own card; a cell no file measured is counted as not run."""
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}), cell("e", 3.0, {"tolerance": {"abs": 0.1}}),
                             cell("g", 5.0, {"tolerance": {"abs": 0.1}})])
    history = [{"epoch": 1, "train_loss": 1.0, "val_metric": 1.0}]
    tasks = {"c": {"train": {"epochs": 40}}}
    spec = yaml.safe_load((project / "reproductions" / "toy.yaml").read_text())
    spec["tiers"]["smoke"]["tasks"] = tasks  # today's setting: what the files below record
    (project / "reproductions" / "toy.yaml").write_text(yaml.safe_dump(spec))
    setting = {"value": 1.0, "tasks": tasks}
    write_result(project, {"e": 2.0}, stamp="20260101T000000", selected_cells=[["r", "e"]],
                 environment={"device_name": "Card B"}, config=setting)
    write_result(project, {"c": 1.05}, stamp="20260102T000000", selected_cells=[["r", "c"]],
                 environment={"device_name": "Card B"}, config=setting,
                 series={"r / c": {"history": history, "segments": [{"device": "Card A", "from_global_step": 0},
                                                                    {"device": "Card B", "from_global_step": 9}]}})
    report_all(project / "tables")
    text = (project / "tables" / "toy.md").read_text()
    head = text[:text.index("Paper:")]
    assert head.index("At a glance (smoke tier)") < head.index("- c, 40 epochs")
    assert "- c, 40 epochs, Card A then Card B: PASS 1 of 1: r 1.05 PASS (1 ± 0.1; paper 1)" in head
    assert "- e, Card B: FAIL 1 of 1: r 2 FAIL (3 ± 0.1; paper 3)" in head
    assert "- not run at this tier: 1 claim (reasons in the details)." in head


def test_report_lists_every_run_of_a_cell_measured_more_than_once(project: Path) -> None:
    """Three files measured c (newest 1.05 PASS; earlier 0.5 FAIL at today's setting and 0.98 at another setting,
    STALE, at two commits), one file measured e: the tier section says which claim an earlier run would have judged
    differently and how many commits the runs span, and lists every run of c (the judged one first) with its
    verdict, file and commit, median and range; e, measured once, is not listed; the glance says the same in one
    bullet."""
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}}),
                             cell("e", 3.0, {"tolerance": {"abs": 0.1}})])
    old = {"environment": {"git_commit": "aaaaaaa1111", "git_dirty": False}, "config": {"value": 0.5, "tasks": {}}}
    new = {"environment": {"git_commit": "bbbbbbb2222", "git_dirty": True}}  # today's setting (TOY_SETTING)
    write_result(project, {"c": 0.98, "e": 3.0}, stamp="20260101T000000", **old)
    write_result(project, {"c": 0.5}, stamp="20260102T000000", selected_cells=[["r", "c"]],
                 environment=old["environment"])
    write_result(project, {"c": 1.05}, stamp="20260103T000000", selected_cells=[["r", "c"]], **new)
    report_all(project / "tables")
    text = (project / "tables" / "toy.md").read_text()
    smoke = text[text.index("## Tier: smoke"):]
    assert ("**Measured more than once:** 1 claim of this tier appears in several results files; the verdict reads "
            "the newest run that measured each. An earlier run's verdict differs for 1: r / c. The runs come from 2 "
            "commits and 2 configurations: an earlier run may have measured other code or settings.") in smoke
    line = next(x for x in smoke.splitlines() if x.startswith("- r / c: "))
    assert line == ("- r / c: 3 runs: 1.05 PASS (`20260103T000000_smoke.json`, bbbbbbb + changes), 0.5 FAIL "
                    "(`20260102T000000_smoke.json`, aaaaaaa), 0.98 STALE (`20260101T000000_smoke.json`, aaaaaaa); "
                    "median 0.98, range 0.5 to 1.05")
    assert not any(x.startswith("- r / e: ") for x in smoke.splitlines())
    head = text[:text.index("Paper:")]
    assert ("- measured in more than one run: 1 claim, judged differently by an earlier run: r / c 3 runs, 0.5 to "
            "1.05; the runs span 2 commits and 2 configurations (every run in the tier's section).") in head
