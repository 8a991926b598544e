"""Exit codes of `run` for data problems: data that is not there is "cannot run here" (exit 3, the cells NOT-RUN,
the message naming what to fetch), data that is there but malformed is bad input (exit 2, one stderr line naming
the file); either way the results file is written, with the task's cells null and the reason in their note.

A tiny training table (the ``train_project`` fixture of tests/test_files_and_runs.py) is pointed at the real loaders
under $DATA_PATH, whose files are written by the builders of tests/test_data_boundary.py and conftest.py.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import yaml
from test_data_boundary import _idx, _mnist_raw, _speech, _ts
from test_files_and_runs import _edit_spec, _expected_cell, train_project  # noqa: F401 (the fixture)

from runners.cli.main import main
from runners.core.errors import NotRunnable
from runners.data.base import DataMissing, DatasetError
from runners.data.download import DownloadError
from runners.data.status import MALFORMED, MISSING, DataFileError, data_problem, raise_for_data_problems

#: every case runs under a time and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")

#: task column -> its loader (no ``prepare``: the loader reads $DATA_PATH)
LOADERS = {
    "sMNIST": {"loader": "mnist", "loader_args": {"cache": False}},
    "SC10": {"loader": "speech_commands", "loader_args": {"cache": False}},
    "BIDMC": {"loader": "bidmc", "loader_args": {"target": "HR", "cache": False}},
    "Pathfinder": {"loader": "pathfinder", "loader_args": {"resolution": 32, "workers": 1, "use_cache": False}},
    "ListOps": {"loader": "listops"},
}


def _tasks(*columns: str, keep_scifar: bool = False) -> None:
    """The project's tier trains these task columns (plus its own sCIFAR stand-in with ``keep_scifar``), and its
    expected file lists their cells."""
    def edit(doc: dict) -> None:
        tasks = doc["tiers"]["smoke"]["tasks"]
        doc["tiers"]["smoke"]["tasks"] = {**({"sCIFAR": tasks["sCIFAR"]} if keep_scifar else {}),
                                          **{c: LOADERS[c] for c in columns}}
    _edit_spec(edit)
    cols = (["sCIFAR"] if keep_scifar else []) + list(columns)
    path = Path("expected/tiny-train.yaml")
    doc = yaml.safe_load(path.read_text())
    doc["columns"], doc["cells"] = cols, [_expected_cell("S4", c) for c in cols]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _run(capsys: pytest.CaptureFixture) -> tuple[int, list[str], dict]:
    """(exit status, non-empty stderr lines, the results file written) of `run tiny-train`."""
    capsys.readouterr()
    rc = main(["run", "tiny-train", "--no-progress", "--output", "out"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    paths = list(Path("out/tiny-train").glob("*_smoke*.json"))
    assert len(paths) == 1, (rc, err)
    path = paths[0]
    return rc, err, json.loads(path.read_text())


def _cells(result: dict) -> dict[str, dict]:
    return {c["column"]: c for c in result["cells"]}


def _bad_input(rc: int, err: list[str], *must: str) -> str:
    """Exit 2 with one stderr line, no traceback, holding every string of ``must``."""
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], (rc, err)
    for text in must:
        assert text in err[0], (text, err[0])
    return err[0]


# ----------------------------------------------------------------------------------------------------------------
# missing data: exit 3, NOT-RUN cells, the message says what to fetch

@pytest.mark.parametrize("column, fetch", [
    ("sMNIST", "python -m runners.data.download mnist"),
    ("SC10", "python -m runners.data.download speech_commands"),
    ("BIDMC", "python -m runners.data.download bidmc"),
    ("ListOps", "listops-1000"),
])
def test_missing_data_is_not_runnable_with_the_results_file_written(train_project: Path, capsys, column: str,
                                                                    fetch: str) -> None:
    _tasks(column)
    rc, err, result = _run(capsys)
    assert rc == 3 and len(err) == 1 and err[0].startswith("NOT-RUN: "), (rc, err)
    assert fetch in err[0] and "out/tiny-train/" in err[0] and column in err[0]
    cell = _cells(result)[column]
    assert cell["value"] is None and cell["note"].startswith("data missing: ") and fetch in cell["note"]
    assert result["problems"] and result["problems"][0].startswith(f"{column}: NOT-RUN, data missing: ")


def test_images_listed_but_absent_are_missing(train_project: Path, tmp_path: Path, capsys,
                                              pathfinder_release: Callable[..., Path]) -> None:
    folder = pathfinder_release(tmp_path / "data")
    (folder / "imgs" / "1" / "sample_3.png").unlink()  # an incomplete extraction
    _tasks("Pathfinder")
    rc, err, result = _run(capsys)
    assert rc == 3 and "sample_3.png" in err[0] and "does not exist" in err[0], (rc, err)
    assert _cells(result)["Pathfinder"]["value"] is None


# ----------------------------------------------------------------------------------------------------------------
# malformed data: exit 2, one line naming the file (and line), the cells recorded as not run

def _corrupt_png(data: Path, release: Callable[..., Path]) -> str:
    (release(data) / "imgs" / "1" / "sample_2.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    return "sample_2.png"


def _metadata_escapes(data: Path, release: Callable[..., Path]) -> str:
    (release(data) / "metadata" / "1.npy").write_text("imgs/1 sample_0.png 0 0 1.0 14\n"
                                                      "../../etc passwd 0 1 1.0 14 4 2 0.5 1 1\n")
    return "1.npy line 2"


def _speech_list_not_utf8(data: Path, release: Callable[..., Path]) -> str:
    folder = _speech(data)
    text = (folder / "testing_list.txt").read_bytes()
    (folder / "testing_list.txt").write_bytes(text + b"yes/\xff\xfe.wav\n")
    return f"testing_list.txt line {len(text.splitlines()) + 1}"


def _truncated_wav(data: Path, release: Callable[..., Path]) -> str:
    clip = sorted((_speech(data) / "no").glob("*_nohash_2.wav"))[0]
    raw = clip.read_bytes()
    pos = raw.index(b"data") + 4  # the data chunk's size field: 20000 samples announced, 1000 held
    clip.write_bytes(raw[:pos] + struct.pack("<I", 20000) + raw[pos + 4: pos + 4 + 2000])
    return clip.name


def _mnist_labels_out_of_range(data: Path, release: Callable[..., Path]) -> str:
    (_mnist_raw(data) / "train-labels-idx1-ubyte").write_bytes(_idx(np.array([0, 10, 1, 2] * 5, dtype=np.uint8)))
    return "train-labels-idx1-ubyte"


def _mnist_bad_dims(data: Path, release: Callable[..., Path]) -> str:
    (_mnist_raw(data) / "t10k-images-idx3-ubyte").write_bytes(bytes([0, 0, 0x08, 9]) + b"\0" * 40)
    return "t10k-images-idx3-ubyte"


def _bidmc_zero_dimensions(data: Path, release: Callable[..., Path]) -> str:
    folder = data / "bidmc" / "BIDMC32HR"
    folder.mkdir(parents=True)
    for part in ("TRAIN", "TEST"):
        _ts(folder / f"BIDMC32HR_{part}.ts", ["1,2,3:4,5,6:70.5"])
    path = folder / "BIDMC32HR_TRAIN.ts"
    path.write_text(path.read_text().replace("@dimensions 2", "@dimensions 0"))
    return "BIDMC32HR_TRAIN.ts"


@pytest.mark.parametrize("column, damage", [
    ("Pathfinder", _corrupt_png),
    ("Pathfinder", _metadata_escapes),
    ("SC10", _speech_list_not_utf8),
    ("SC10", _truncated_wav),
    ("sMNIST", _mnist_labels_out_of_range),
    ("sMNIST", _mnist_bad_dims),
    ("BIDMC", _bidmc_zero_dimensions),
], ids=lambda v: getattr(v, "__name__", v))
def test_malformed_data_is_bad_input_naming_the_file(train_project: Path, tmp_path: Path, capsys,
                                                     pathfinder_release: Callable[..., Path], column: str,
                                                     damage: Callable[[Path, Callable[..., Path]], str]) -> None:
    where = damage(tmp_path / "data", pathfinder_release)
    _tasks(column)
    rc, err, result = _run(capsys)
    _bad_input(rc, err, where, f"task {column}", "data malformed", "out/tiny-train/")
    assert not err[0].startswith(("error: `", "NOT-RUN"))  # a bad-input line, not an unexpected error
    cell = _cells(result)[column]
    assert cell["value"] is None and cell["note"].startswith("data malformed: ") and where in cell["note"]
    assert result["problems"][0].startswith(f"{column}: NOT-RUN, data malformed: ")


def test_malformed_data_keeps_the_other_cells(train_project: Path, tmp_path: Path, capsys) -> None:
    """The sCIFAR stand-in trains; the malformed MNIST task is recorded as not run; the run is bad input."""
    _mnist_labels_out_of_range(tmp_path / "data", None)
    _tasks("sMNIST", keep_scifar=True)
    rc, err, result = _run(capsys)
    _bad_input(rc, err, "train-labels-idx1-ubyte", "task sMNIST")
    cells = _cells(result)
    assert cells["sCIFAR"]["value"] is not None and cells["sMNIST"]["value"] is None


def test_missing_and_malformed_at_once_is_bad_input(train_project: Path, tmp_path: Path, capsys) -> None:
    _mnist_bad_dims(tmp_path / "data", None)
    _tasks("SC10", "sMNIST", "BIDMC")  # SC10 and BIDMC are not there at all
    rc, err, result = _run(capsys)
    _bad_input(rc, err, "t10k-images-idx3-ubyte", "task sMNIST", "data also missing for SC10, BIDMC")
    notes = {c: cell["note"].split(":")[0] for c, cell in _cells(result).items()}
    assert notes == {"SC10": "data missing", "sMNIST": "data malformed", "BIDMC": "data missing"}


# ----------------------------------------------------------------------------------------------------------------
# the pieces

def test_the_kind_follows_the_error_class() -> None:
    assert issubclass(DataMissing, DatasetError) and issubclass(DownloadError, DataMissing)
    assert data_problem("A", DataMissing("gone\n  fetch it")).kind == MISSING
    bad = data_problem("B", DatasetError("x.ts line 3: bad"))
    assert bad.kind == MALFORMED and bad == "B: NOT-RUN, data malformed: x.ts line 3: bad"
    assert json.loads(json.dumps([bad])) == [str(bad)]  # a plain line in the results file
    raise_for_data_problems(["A: NOT-RUN, data missing: a line that only looks like one"], None, "r", "c")
    with pytest.raises(NotRunnable, match="r: data missing: A: gone fetch it. The results file out.json written "
                                          "with the cells of A not run"):
        raise_for_data_problems([data_problem("A", DataMissing("gone\n  fetch it"))], Path("out.json"), "r", "c")
    with pytest.raises(DataFileError, match=r"^x\.ts line 3: bad \(task B of r: data malformed"):
        raise_for_data_problems([data_problem("A", DataMissing("gone")), bad], Path("out.json"), "r", "c")
