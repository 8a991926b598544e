"""A corpus of malformed specs, expected files and data directories: each gives a one-line error naming the file
and the key (exit status 2 from the CLI, a DatasetError from a loader), never a traceback, a result or a write
outside results/ and runs/.

Spec and expected cases edit a copy of the repository's reproductions/ and expected/ in a temporary project and
run ``python -m runners run PATH`` (which validates before it runs) or ``validate`` (for cases that involve several
files); data cases corrupt a stand-in dataset written by the suite's own preparers.
"""
from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml

from runners.cli.main import main
from runners.data.base import DatasetError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the repository's specs and expected files in an empty directory (the current directory)."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "reproductions", root / "reproductions", ignore=shutil.ignore_patterns("*.py", "__*"))
    shutil.copytree(REPO / "expected", root / "expected")
    monkeypatch.chdir(root)
    return root


def _set(doc: Any, dotted: str, value: Any) -> None:
    """Set ``doc[a][b]...`` from "a.b..." (list indices as numbers)."""
    *parents, last = dotted.split(".")
    for key in parents:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    if isinstance(doc, list):
        doc[int(last)] = value
    else:
        doc[last] = value


def _edit_yaml(path: Path, edit: Callable[[Any], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _one_line_error(capsys: pytest.CaptureFixture, argv: list[str], must: list[str], tmp: Path) -> str:
    """Run the CLI; assert exit 2, one stderr line with every string of ``must``, no traceback, nothing written."""
    before = _snapshot(tmp)
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "NOT-RUN" not in err and "PASS" not in out
    for text in must:
        assert text in lines[0], (text, lines[0])
    assert _snapshot(tmp) == before, "files were written"
    return lines[0]


# --------------------------------------------------------------------------------------------------------------
# specs: (file, edit of the parsed YAML, strings the error must contain)
SPEC_EDITS = [
    # analytic runners
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.grid", 10**12), ["tiers.smoke", "grid", "1000000"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.grid", 1), ["grid"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.grid", "1e12"), ["grid", "int"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.budget.t_max", 0.0), ["tiers.budget", "t_max"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.t_max", float("inf")), ["tiers.smoke.t_max", "inf or NaN"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.full.dt", float("nan")), ["tiers.full.dt", "inf or NaN"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.state_sizes", [16, 33]), ["state_sizes", "even"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.dt", 0.0), ["dt"]),
    ("s4d-theorem-3", lambda d: _set(d, "tiers.smoke.dt", 1e-9), ["dt", "t_max / dt"]),
    ("s4d-theorem-6", lambda d: _set(d, "tiers.smoke.state_sizes", [0]), ["state_sizes"]),
    ("s4d-theorem-6", lambda d: _set(d, "tiers.smoke.state_sizes", []), ["state_sizes", "non-empty"]),
    ("s4d-theorem-6", lambda d: _set(d, "tiers.smoke.state_sizes", [10**9]), ["state_sizes"]),
    ("s4d-figure-4", lambda d: _set(d, "tiers.smoke.sigmas", [0.0, -0.1]), ["sigmas"]),
    ("s4d-figure-4", lambda d: _set(d, "tiers.smoke.n_draws", 0), ["n_draws"]),
    ("s4d-proposition-1", lambda d: _set(d, "tiers.smoke.length", 0), ["length"]),
    ("s4d-proposition-1", lambda d: _set(d, "tiers.smoke.d_model", 0), ["d_model"]),
    ("s4d-proposition-1", lambda d: _set(d, "tiers.smoke.diag_inits", ["legs", "bogus"]), ["diag_inits"]),
    ("s4d-proposition-1", lambda d: _set(d, "tiers.smoke.dt_max", 1e-5), ["dt_max"]),
    ("s4d-conjecture-5", lambda d: _set(d, "tiers.smoke.plot_state_size", 5), ["plot_state_size", "even"]),
    # benchmark runners (settings under an include are overridden in the spec)
    ("s4-table-2", lambda d: _set(d, "tiers.smoke.dims", [0, 8]), ["dims"]),
    ("s4-table-2", lambda d: _set(d, "tiers.smoke.s4_layer", {"mode": "s5"}), ["s4_layer.mode", "s5"]),
    ("s4-table-3", lambda d: _set(d, "tiers.smoke.lengths", [2**40]), ["lengths"]),
    ("s4-table-3", lambda d: _set(d, "tiers.smoke.s4_layer.d_state", 0), ["s4_layer.d_state"]),
    ("s4-generation", lambda d: _set(d, "tiers.smoke.settings.0.length", 0), ["settings[0].length"]),
    ("s4-generation", lambda d: _set(d, "tiers.smoke.s4d_layer.init", "legt"), ["s4d_layer.init", "legt"]),
    # the training runner: model, layer and train settings of every cell
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.d_model", 0), ["tiers.budget", "d_model"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.n_layers", -1), ["n_layers"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.dropout", 1.5), ["dropout"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.d_modle", 64), ["d_modle", "unknown"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.layer.mode", "s5"), ["layer.mode"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.layer.d_state", 0), ["layer.d_state"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.models.S4 (stand-in).model.layer.init", "inv"),
     ["layer.init", "inv"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.layer.lr", {"dt": None, "A": 0.001}),
     ["layer.lr", "keys dt, A, B"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.layer.lr", -0.001), ["layer.lr", "> 0"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.mask_padding", "yes"), ["mask_padding"]),
    ("s4-table-6", lambda d: _set(d, "tiers.budget.model_defaults.ssm.encoder_bias", "no"), ["encoder_bias"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.train.weight_decay_1d", 1), ["weight_decay_1d", "true or false"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.train.batch_size", 0), ["batch_size"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.train.lr", float("inf")), ["tiers.smoke.train.lr", "inf"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.skip", [["nobody", "sCIFAR"]]), ["skip[0]"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.tasks.sMNIST.loader_args", {"permutee": True}),
     ["tasks.sMNIST.loader_args.permutee", "unknown argument"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.tasks.sMNIST.prepare.n_train", "200"),
     ["tasks.sMNIST.prepare.n_train", "int"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.tasks.sCIFAR.prepare.n_per_btch", 3),
     ["tasks.sCIFAR.prepare.n_per_btch", "unknown argument"]),
    # settings of the wrong shape
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.model_defaults", {"ssm": 5}), ["model_defaults.ssm", "mapping"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.tasks.sCIFAR.loader_args", [1]), ["sCIFAR.loader_args"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.tasks.sCIFAR.prepare", "x"), ["sCIFAR.prepare", "mapping"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.models.S4 (stand-in).model.layer", 3), ["layer", "mapping"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke.models.S4 (stand-in).train", 3), ["train", "mapping"]),
    ("s4-table-6", lambda d: _set(d, "tiers.smoke", [1]), ["tiers.smoke", "mapping"]),
    # top-level keys
    ("s4d-theorem-6", lambda d: _set(d, "id", "../../escape"), ["key 'id'", "../../escape"]),
    ("s4d-theorem-6", lambda d: _set(d, "id", "S4D-Theorem-6"), ["key 'id'"]),
    ("s4d-theorem-6", lambda d: _set(d, "id", "s4d-theorem-3"), ["key 'id'", "does not match the file name"]),
    ("s4d-theorem-6", lambda d: _set(d, "id", "a/b"), ["key 'id'"]),
    ("s4d-theorem-6", lambda d: d["tiers"].pop("budget"), ["tiers"]),
]


@pytest.mark.parametrize("name, edit, must", SPEC_EDITS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SPEC_EDITS)])
def test_malformed_spec_is_one_line_error(project: Path, capsys: pytest.CaptureFixture, name: str,
                                          edit: Callable[[Any], None], must: list[str]) -> None:
    path = Path("reproductions") / f"{name}.yaml"
    _edit_yaml(path, edit)
    _one_line_error(capsys, ["run", str(path), "--tier", "smoke"], [str(path), *must], project.parent)


# text-level spec and expected cases: (file, text transformation, strings the error must contain)
TEXT_EDITS = [
    ("reproductions/s4d-theorem-3.yaml", lambda t: t.replace("grid: 2001,", "grid: 2001, grid: 3,", 1),
     ["duplicate key 'grid'"]),
    ("reproductions/s4d-theorem-3.yaml", lambda t: t + "title: again\n", ["duplicate key 'title'"]),
    ("reproductions/_efficiency.yaml", lambda t: t + "groups: [efficiency]\ngroups: [efficiency]\n",
     ["_efficiency.yaml", "duplicate key 'groups'"]),
    ("reproductions/s4d-theorem-3.yaml", lambda t: t.replace("title:", "title: \udcff", 1), ["not UTF-8"]),
    ("reproductions/s4d-theorem-3.yaml", lambda t: t + "tiers: [unclosed\n", ["not valid YAML"]),
    ("expected/s4d-theorem-3.yaml", lambda t: t.replace("title:", "title: \udcfe", 1), ["not UTF-8"]),
    ("expected/s4d-theorem-3.yaml", lambda t: t.replace("- row:", "- row: x\n  row:", 1), ["duplicate key 'row'"]),
    ("expected/s4d-theorem-3.yaml", lambda t: "- just\n- a list\n", ["top level must be a mapping"]),
]


@pytest.mark.parametrize("file, transform, must", TEXT_EDITS, ids=[f"text-{i}" for i in range(len(TEXT_EDITS))])
def test_malformed_text_is_one_line_error(project: Path, capsys: pytest.CaptureFixture, file: str,
                                          transform: Callable[[str], str], must: list[str]) -> None:
    path = Path(file)
    text = transform(path.read_text())
    assert text != path.read_text()
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    spec = "s4-table-2" if "_efficiency" in file else "s4d-theorem-3"
    _one_line_error(capsys, ["run", spec, "--tier", "smoke"], [path.name, *must], project.parent)


# --------------------------------------------------------------------------------------------------------------
# expected files: (edit of the parsed expected/s4d-theorem-3.yaml, strings the error must contain)
def _add_cell(doc: dict, row: str, column: str, smoke_check: dict) -> None:
    cell = {**doc["cells"][0], "row": row, "column": column,
            "checks": {"smoke": smoke_check, "budget": {"not_run": "x"}, "full": {"not_run": "x"}}}
    doc["rows"] = list(dict.fromkeys([*doc["rows"], row]))
    doc["columns"] = list(dict.fromkeys([*doc["columns"], column]))
    doc["cells"].append(cell)


EXPECTED_EDITS = [
    (lambda d: _set(d, "cells.0.paper", float("nan")), ["cells[0].paper", "inf or NaN"]),
    (lambda d: _set(d, "cells.0.checks.smoke", {"tolerance": {"abs": float("inf")}}),
     ["cells[0].checks.smoke.tolerance.abs", "inf or NaN"]),
    (lambda d: _set(d, "cells.0.checks.budget", {"bound": {"min": float("-inf")}}), ["bound.min", "inf or NaN"]),
    (lambda d: _set(d, "cells.0.std", float("inf")), ["cells[0].std", "inf or NaN"]),
    (lambda d: _add_cell(d, "weak error", "N=4096", {"bound": {"max": 1.0}}), ["'N=4096'", "never produce"]),
    (lambda d: _add_cell(d, "strong error", "N=16", {"bound": {"max": 0.1}}), ["'strong error'", "never produce"]),
    (lambda d: _set(d, "table", "s4d-theorem-9"), ["'table'"]),
    (lambda d: _set(d, "cells.0.checks.smoke", {"tolerance": {"abs": -1}}), ["tolerance"]),
    (lambda d: _set(d, "cells.0.row", ["weak error"]), ["cells[0].row", "row or column name"]),
    (lambda d: _set(d, "cells.0.checks.smoke", {"ordering": {"greater_than": [{"row": [1], "column": "N=16"}]}}),
     ["ordering"]),
    (lambda d: _set(d, "cells", [3]), ["cells[0]"]),
]


@pytest.mark.parametrize("edit, must", EXPECTED_EDITS, ids=[f"expected-{i}" for i in range(len(EXPECTED_EDITS))])
def test_malformed_expected_is_one_line_error(project: Path, capsys: pytest.CaptureFixture,
                                              edit: Callable[[Any], None], must: list[str]) -> None:
    path = Path("expected/s4d-theorem-3.yaml")
    _edit_yaml(path, edit)
    _one_line_error(capsys, ["run", "s4d-theorem-3", "--tier", "smoke"], [str(path), *must], project.parent)


# --------------------------------------------------------------------------------------------------------------
# several files at once: validate names every problem, one line each
def test_validate_finds_orphans_missing_expected_and_repeated_ids(project: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    shutil.copy("expected/s4d-theorem-3.yaml", "expected/s4d-theorem-99.yaml")
    Path("expected/s4d-theorem-6.yaml").unlink()
    shutil.copy("reproductions/s4d-figure-4.yaml", "reproductions/s4dfigure_4.yaml")  # same id, a matching name
    assert main(["validate"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert all(line.startswith("error: ") for line in err) and "Traceback" not in "".join(err)
    assert any("s4d-theorem-99.yaml" in line and "orphan" in line for line in err)
    assert any("s4d-theorem-6.yaml" in line and "no expected file" in line for line in err)
    assert any("s4dfigure_4.yaml" in line and "also the id of" in line for line in err)


@pytest.mark.parametrize("name", ["s4d-theorem-6", "s4d-theorem-6", "reproductions/s4d-theorem-6.yaml"])
def test_run_by_id_prints_the_real_error(project: Path, capsys: pytest.CaptureFixture, name: str) -> None:
    """Not 'NOT-RUN: no spec / runner', whichever way the spec is named."""
    _edit_yaml(Path("reproductions/s4d-theorem-6.yaml"), lambda d: _set(d, "tiers.smoke.grid", 0))
    _one_line_error(capsys, ["run", name], ["s4d-theorem-6.yaml", "tiers.smoke", "grid"], project.parent)


def test_unknown_spec_name_is_an_error(project: Path, capsys: pytest.CaptureFixture) -> None:
    _one_line_error(capsys, ["run", "s4d-theorem-77"], ["s4d-theorem-77", "no spec named"], project.parent)


def test_the_repository_has_no_duplicate_yaml_keys_or_non_finite_values() -> None:
    from runners.core.yamlio import load_yaml, non_finite

    for path in [*sorted((REPO / "reproductions").glob("*.yaml")), *sorted((REPO / "expected").glob("*.yaml"))]:
        assert not list(non_finite(load_yaml(path))), path


# --------------------------------------------------------------------------------------------------------------
# data directories: a loader's error is one line naming the file
def _cifar(tmp: Path) -> Path:
    from runners.data.standins import write_cifar_standin

    return write_cifar_standin(tmp, n_per_batch=4)


class _RunsCode:
    """Unpickling this calls ``fn(*args)``: what a crafted data file does."""

    def __init__(self, fn: Callable, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple:
        return self.fn, self.args


def _evil_batch(marker: Path, how: str) -> bytes:
    payload = {
        "os.system": _RunsCode(os.system, f"touch {marker}"),
        "exec": _RunsCode(exec, f"open({str(marker)!r}, 'w').write('x')"),
        "eval": _RunsCode(eval, f"__import__('pathlib').Path({str(marker)!r}).touch()"),
        "subprocess": _RunsCode(__import__("subprocess").call, ["touch", str(marker)]),
    }[how]
    return pickle.dumps({b"data": payload, b"labels": [0]}, protocol=2)


@pytest.mark.parametrize("how", ["os.system", "exec", "eval", "subprocess"])
def test_crafted_cifar_batch_does_not_run_code(tmp_path: Path, how: str) -> None:
    from runners.data.cifar import load_cifar10

    folder = _cifar(tmp_path)
    marker = tmp_path / "ran"
    (folder / "test_batch").write_bytes(_evil_batch(marker, how))
    with pytest.raises(DatasetError) as err:
        load_cifar10(tmp_path, "test")
    assert not marker.exists(), "code in the pickle ran"
    assert "test_batch" in str(err.value) and "\n" not in str(err.value)


def _bytes_of(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=2)


DATA_CASES = [
    ("cifar", "cifar-10-batches-py/test_batch", lambda p: p.write_bytes(p.read_bytes()[:100]), "test_batch"),
    ("cifar", "cifar-10-batches-py/test_batch", lambda p: p.write_bytes(_bytes_of([1, 2, 3])), "b'data'"),
    ("cifar", "cifar-10-batches-py/test_batch",
     lambda p: p.write_bytes(_bytes_of({b"data": np.zeros((2, 5), np.uint8), b"labels": [0, 1]})), "(n, 3072)"),
    ("cifar", "cifar-10-batches-py/test_batch",
     lambda p: p.write_bytes(_bytes_of({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 12]})), "0..9"),
    ("cifar", "cifar-10-batches-py/test_batch", lambda p: p.unlink(), "test_batch"),
    ("cifar", "cifar-10-batches-py/test_batch", lambda p: p.write_bytes(b""), "test_batch"),
    ("mnist", "mnist/t10k-images-idx3-ubyte", lambda p: p.write_bytes(p.read_bytes()[:10]), "t10k-images"),
    ("mnist", "mnist/t10k-labels-idx1-ubyte", lambda p: p.write_bytes(b"\x00\x00\x09\x09" + p.read_bytes()[4:]),
     "t10k-labels"),
    ("mnist", "mnist/train-images-idx3-ubyte", lambda p: p.unlink(), "train-images"),
]


def _load(kind: str, root: Path) -> Any:
    from runners.data.cifar import load_cifar10
    from runners.data.mnist import load_mnist

    if kind == "cifar":
        return load_cifar10(root, "test")
    return load_mnist(root, cache=False)


@pytest.mark.parametrize("kind, file, corrupt, must", DATA_CASES,
                         ids=[f"data-{i}" for i in range(len(DATA_CASES))])
def test_malformed_data_directory_is_one_line_error(tmp_path: Path, kind: str, file: str,
                                                    corrupt: Callable[[Path], None], must: str) -> None:
    from runners.data.standins import write_mnist_standin

    _cifar(tmp_path) if kind == "cifar" else write_mnist_standin(tmp_path, n_train=20, n_test=10)
    path = tmp_path / file
    if not path.exists():
        path = path.with_name(path.name + ".gz") if path.with_name(path.name + ".gz").exists() else path
    corrupt(path)
    with pytest.raises(DatasetError) as err:
        _load(kind, tmp_path)
    message = str(err.value)
    assert "\n" not in message and must in message, message


def test_the_repository_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.judge.validate import validate_all

    monkeypatch.chdir(REPO)
    problems, n_specs = validate_all()
    assert problems == [] and n_specs == len(list((REPO / "reproductions").glob("[!_]*.yaml")))


def _png_of_size(path: Path, size: int) -> None:
    from PIL import Image

    Image.fromarray(np.zeros((size, size), np.uint8), "L").save(path, format="PNG")


PATHFINDER_CASES = [
    ("imgs/1/sample_2.png", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10), "sample_2.png"),
    ("imgs/1/sample_2.png", lambda p: _png_of_size(p, 16), "sample_2.png"),
    ("imgs/0/sample_1.png", lambda p: p.unlink(), "sample_1.png"),
    ("metadata/1.npy", lambda p: p.write_text("imgs/1 sample_0.png 0\n"), "1.npy"),
    ("metadata/0.npy", lambda p: p.write_bytes(b"imgs/0 sample_0.png 0 \xff 1.0 14 4 2 0.5 1 1\n"), "0.npy"),
    ("metadata/0.npy", lambda p: p.write_text("imgs/0 sample_0.png 0 7 1.0 14 4 2 0.5 1 1\n"), "0.npy"),
    ("metadata", lambda p: shutil.rmtree(p), "metadata"),
]


@pytest.mark.parametrize("file, corrupt, must", PATHFINDER_CASES,
                         ids=[f"pathfinder-{i}" for i in range(len(PATHFINDER_CASES))])
def test_malformed_pathfinder_directory_is_one_line_error(pathfinder_release, tmp_path: Path, file: str,
                                                          corrupt: Callable[[Path], None], must: str) -> None:
    from runners.data.lra import load_pathfinder

    corrupt(pathfinder_release(tmp_path) / file)
    with pytest.raises(DatasetError) as err:
        load_pathfinder(tmp_path, resolution=32, workers=1, use_cache=False)
    message = str(err.value)
    assert "\n" not in message and must in message, message


def test_run_checks_the_cells_it_selects(project: Path, capsys: pytest.CaptureFixture) -> None:
    """A cell no tier produces stops a run that selects it; --cells elsewhere runs; --dry-run warns."""
    _edit_yaml(Path("expected/s4d-theorem-3.yaml"), lambda d: _add_cell(d, "weak error", "N=4096", {"bound": {"max": 1}}))
    assert main(["run", "s4d-theorem-3", "--dry-run"]) == 0
    assert "warning: " in capsys.readouterr().err
    assert main(["run", "s4d-theorem-3", "--cells", "sup error/N=16", "--dry-run"]) == 0
    assert capsys.readouterr().err == ""
    _one_line_error(capsys, ["run", "s4d-theorem-3", "--cells", "weak error/*"], ["'N=4096'", "never produce"],
                    project.parent)


def test_a_spec_outside_the_spec_directory_may_be_named_freely(project: Path) -> None:
    from runners.specs.spec import load_spec

    mine = project / "elsewhere" / "anything.yaml"
    mine.parent.mkdir()
    shutil.copy("reproductions/s4d-theorem-6.yaml", mine)
    assert load_spec(mine).id == "s4d-theorem-6"
    _edit_yaml(mine, lambda d: _set(d, "id", "../x"))
    with pytest.raises(Exception, match="key 'id'"):
        load_spec(mine)
