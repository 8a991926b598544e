"""Free text a results file carries (notes, problems, device names, --set overrides, --cells patterns, the commit)
reaches the generated markdown as text: no heading, no HTML, no table broken by a newline, no code span ended
early."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_compare_verdicts import cell, project, write_expected, write_result  # noqa: F401 (the fixture)

from runners.core.textfmt import md_code, md_inline
from runners.report.markdown import report_all

HOSTILE = [
    "# A heading from a note",
    "line one\n\n## second heading\n| a | b |\n|---|---|",
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "ends a code span ` and goes on",
    "> a quote\n> more",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_md_inline_and_md_code_keep_text_text(text: str) -> None:
    inline, code = md_inline(text), md_code(text)
    for out in (inline, code):
        assert "\n" not in out
    assert "<" not in inline and ">" not in inline and not inline.startswith("#")
    assert inline.replace("\\`", "").count("`") == 0
    assert "`" not in code


@pytest.mark.parametrize("text", HOSTILE)
def test_a_results_files_free_text_reaches_the_report_as_text(project: Path, text: str) -> None:  # noqa: F811
    write_expected(project, [cell("c", 1.0, {"tolerance": {"abs": 0.1}})])
    write_result(project, {"c": 1.0}, notes=[text], problems=[text], cell_patterns=[text],
                 environment={"device_name": text, "git_commit": text, "torch": text})
    write_result(project, {"c": 1.0}, stamp="20260102T000000", overrides=[text],
                 config={"value": 5.0, "tasks": {}})  # a variant, listed beside the spec's own run
    report_all(project / "tables")
    report = (project / "tables" / "toy.md").read_text()
    prose = re.sub(r"(?<!\\)`[^`]*`", "", report)  # a code span shows its text as it is
    assert "<script" not in prose and "<img" not in prose
    assert not any(line.startswith(("# A heading", "## second")) for line in report.splitlines())
    grid = [line for line in report.splitlines() if line.startswith("| r ")]
    assert grid and all(line.rstrip().endswith("|") for line in grid)
    for line in report.splitlines():
        assert line.replace("\\`", "").count("`") % 2 == 0, line
