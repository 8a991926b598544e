"""The shape of the code, kept by tests: runners/ is a stack of stages that import only downward (import-linter's
contracts in pyproject.toml) and its top level stays small."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: modules (files) directly under runners/ besides its packages
MAX_TOP_MODULES = 6


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lint-imports``: cli > execute > report > judge > store > runner families > specs > core, every child of
    runners/ in a layer, and ssm_core free of runners. The message lists each import that breaks a contract."""
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out


def test_runners_keeps_few_modules_at_its_top_level() -> None:
    top = sorted(p.name for p in (REPO / "runners").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
