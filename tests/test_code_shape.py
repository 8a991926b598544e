"""The shape of the code, kept by tests: runners/ is a stack of stages that import only downward (import-linter's
contracts in pyproject.toml), its top level stays small, no function grows past a screenful or two, and nothing
edits sys.path to find a module (tools run as ``python -m benchmarks...``)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: modules (files) directly under runners/ besides its packages
MAX_TOP_MODULES = 6
#: lines of one function in runners/ or ssm_core/ (its decorators and docstring included)
MAX_FUNCTION_LINES = 100


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


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


@pytest.mark.parametrize("folder", ["runners", "ssm_core"])
def test_no_function_is_longer_than_the_limit(folder: str) -> None:
    long = []
    for path in _python_files(folder):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - start + 1})")
    assert not long, long


def _edits_sys_path(tree: ast.AST) -> list[int]:
    """Lines that change sys.path: sys.path.insert / append / extend / remove, or an assignment to it."""
    lines = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if (isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name)
                and target.value.id == "sys"):
            lines.append(node.lineno)
    return lines


def test_no_file_edits_sys_path() -> None:
    """Modules are found through the installed package and ``python -m`` (tools: ``python -m benchmarks...``)."""
    found = [f"{path.relative_to(REPO)}:{line}" for path in _python_files("runners", "ssm_core", "benchmarks", "tests",
                                                                        "reproductions")
             for line in _edits_sys_path(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, found
