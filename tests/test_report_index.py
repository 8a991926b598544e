"""The index of reports names, per tier, the data and the devices behind its verdicts."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import yaml

from runners.judge.verdicts import CellVerdict
from runners.report.markdown import _index_source


def _file(data: str, card: str) -> tuple[Path, dict]:
    return Path("r.json"), {"data": data, "environment": {"device_name": card}}


def test_the_index_names_data_and_devices_of_the_files_that_judged():
    files = [_file("suite", "NVIDIA H200"), _file("release", "NVIDIA H100 80GB HBM3"), _file("release", "cpu")]
    judged = [CellVerdict("r", "a", 1, 1, "x", "PASS", result=0), CellVerdict("r", "b", 1, 1, "x", "FAIL", result=1)]
    train = SimpleNamespace(runner="train.table")
    assert _index_source(train, "full", files, judged) == " (data: release, suite; on: H100 80GB HBM3, H200)"
    assert _index_source(train, "budget", files, judged[1:]) == " (data: tier's own; on: H100 80GB HBM3)"
    assert _index_source(SimpleNamespace(runner="analytic.theorem6"), "full", files, judged) == \
        " (on: H100 80GB HBM3, H200)"
    assert _index_source(train, "full", files, [CellVerdict("r", "c", 1, None, "x", "NOT-RUN")]) == ""
    assert _index_source(train, "full", files, None) == ""


#: verbs that make a title a statement about the world rather than a description of the table
CLAIM_VERBS = re.compile(r"\b(solves?|fails?|equals?|equal|approaches|makes|beats|outperforms|matches|is|are)\b", re.I)


def test_a_title_that_states_a_claim_gives_it_as_the_papers() -> None:
    """A report's title that states a result ("S4 solves Path-X") says it is the paper's claim, so a reader never
    takes it for what the suite measured."""
    repo = Path(__file__).resolve().parents[1]
    claims = {}
    for path in sorted((repo / "reproductions").glob("*.yaml")):
        title = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("title")
        if isinstance(title, str) and CLAIM_VERBS.search(title):
            claims[path.name] = title
    assert claims, "no title states a claim: the check would test nothing"
    unattributed = {name: t for name, t in claims.items() if not re.search(r"\bpaper:", t, re.I)}
    assert not unattributed, unattributed
