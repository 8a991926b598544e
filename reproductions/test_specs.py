"""Every spec at the smoke tier as a test: `pytest reproductions/ -m lra` runs the LRA tables.

Each test runs the spec into a temporary results directory and fails on any FAIL verdict. A spec's
`groups` become pytest markers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from runners.core import layout
from runners.execute import run as run_mod
from runners.judge.verdicts import compare, sanity_summary, summary
from runners.specs.expected import expected_path, load_expected
from runners.specs.spec import load_spec, resolve_includes, spec_paths
from runners.store.read import load_result

SPEC_DIR = Path(__file__).resolve().parent


def _params() -> list:
    out = []
    for path in spec_paths(SPEC_DIR):
        groups = resolve_includes(path).get("groups", [])
        out.append(pytest.param(path, id=path.stem, marks=[getattr(pytest.mark, g) for g in groups]))
    return out


@pytest.mark.parametrize("spec_path", _params())
def test_spec_smoke(spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "RUNS_DIR", tmp_path / "runs")
    spec = load_spec(spec_path)
    result_path = run_mod.run_spec(spec, "smoke", results_root=tmp_path / "results", progress=False)
    verdicts = compare(load_expected(expected_path(spec.id)), load_result(result_path), "smoke")
    counts = summary(verdicts)
    failed = [f"{v.row} / {v.column}: measured {v.measured}, check {v.check} ({v.detail})"
              for v in verdicts if v.unexpected_fail]
    assert not failed, f"{spec.id} smoke FAIL:\n" + "\n".join(failed)
    # a FAIL analysed in expected/ (known_fail) must still fail: if it passes, the analysis is stale
    stale = [f"{v.row} / {v.column}" for v in verdicts if v.known_fail and v.verdict in ("PASS", "IMPROVED")]
    assert not stale, f"{spec.id}: cells marked known_fail no longer FAIL: {stale}"
    sanity = sanity_summary(verdicts)
    assert counts["PASS"] + counts["IMPROVED"] + sanity["PASS"] > 0, \
        f"{spec.id}: the smoke tier checks nothing (claims {counts}, sanity {sanity})"
