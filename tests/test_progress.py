"""`progress`: where each training cell with a checkpoint under runs/ stands (a tiny training table trained for real,
then its checkpoint edited to stand mid-schedule, copied into a --set configuration, or corrupted)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pytest
import torch
from test_files_and_runs import train_project  # noqa: F401 (the fixture)

from runners.cli.main import main
from runners.report.progress import epochs_at_chance

CELL = Path("runs") / "tiny-train" / "smoke" / "S4__sCIFAR" / "checkpoint.pt"


def _progress(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(["progress", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _paper_column(out: str, row: str) -> str:
    """The text of ``row`` under the table's "paper (test)" header."""
    header = next(line for line in out.splitlines() if "paper (test)" in line)
    start = header.index("paper (test)")
    return row[start:start + len("paper (test)")].strip()


def test_a_finished_cell_is_listed_with_its_schedule_and_validation(train_project: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    capsys.readouterr()
    status, out, err = _progress(capsys)
    assert status == 0 and not err
    row = next(line for line in out.splitlines() if "S4 / sCIFAR" in line)
    assert "tiny-train" in row and "smoke" in row and "1 of 1" in row and "finished" in row
    assert _paper_column(out, row) == "50"  # the expected file's value beside the run's (tabulate trims ".00")


def test_the_paper_column_is_blank_where_the_expected_file_cannot_be_read(train_project: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    Path("expected/tiny-train.yaml").write_text("cells: [not a cell\n")
    capsys.readouterr()
    status, out, _ = _progress(capsys, "tiny-train")
    row = next(line for line in out.splitlines() if "S4 / sCIFAR" in line)
    assert status == 0 and _paper_column(out, row) == "-" and "finished" in row


def test_a_cell_mid_schedule_shows_the_cut_and_its_set_folder(train_project: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    ckpt = torch.load(CELL, weights_only=True)
    ckpt["config"]["epochs"], ckpt["epoch"], ckpt["step"] = 3, 1, 7
    ckpt["partial"] = {"epoch": 2, "val_metric": 42.5, "partial": True}
    ckpt["elapsed_seconds"] = 1800.0
    moved = Path("runs") / "tiny-train" / "smoke-set-0123456789ab" / "S4__sCIFAR" / "checkpoint.pt"
    moved.parent.mkdir(parents=True)
    torch.save(ckpt, moved)
    capsys.readouterr()
    status, out, _ = _progress(capsys, "tiny-train")
    row = next(line for line in out.splitlines() if "smoke-set-0123456789ab" in line)
    assert status == 0 and "S4 / sCIFAR" in row and "1 of 3 (+7 steps)" in row and "cut: 42.50" in row
    assert "in progress" in row and "0.5" in row  # 1,800 s of training: 0.5 hours


def test_an_unreadable_checkpoint_is_named_in_its_row_and_exits_2(train_project: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    broken = Path("runs") / "tiny-train" / "budget" / "S4__sCIFAR" / "checkpoint.pt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a checkpoint")
    capsys.readouterr()
    status, out, _ = _progress(capsys)
    assert status == 2
    assert any("finished" in line and "smoke" in line for line in out.splitlines())  # the good one still listed
    row = next(line for line in out.splitlines() if "budget" in line)
    assert "unreadable" in row and "checkpoint.pt" in row


@pytest.mark.parametrize("argv, message", [(["no-such-spec"], "no spec named 'no-such-spec'"),
                                           (["--runs", "no-such-folder"], "--runs no-such-folder: no such folder")])
def test_bad_arguments_are_one_line(train_project: Path, capsys: pytest.CaptureFixture, argv: list[str],
                                    message: str) -> None:
    Path("runs").mkdir(exist_ok=True)
    status, out, err = _progress(capsys, *argv)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_no_checkpoint_says_so(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    Path("runs").mkdir()
    status, out, _ = _progress(capsys)
    assert status == 0 and "no training checkpoint under runs" in out


def test_a_set_folder_names_the_overrides_that_made_it(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress", "--seed", "3"]) == 0
    capsys.readouterr()
    status, out, _ = _progress(capsys, "tiny-train")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "smoke-set-" in line)
    assert status == 0 and "S4 / sCIFAR" in lines[at] and "--set seed=3" in lines[at + 1]


@pytest.mark.parametrize("record, shown", [
    (None, "no overrides.json: overrides not recorded"),
    ("not json", "unreadable"),
    ('{"set": "seed=3"}', "unreadable: 'set' is not a list of strings"),
    ('{"sets": []}', "unreadable"),
])
def test_a_set_folder_without_a_readable_record_says_so(train_project: Path, capsys: pytest.CaptureFixture,
                                                        record: str | None, shown: str) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    moved = Path("runs") / "tiny-train" / "smoke-set-0123456789ab" / "S4__sCIFAR" / "checkpoint.pt"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(CELL.read_bytes())
    if record is not None:
        (moved.parent.parent / "overrides.json").write_text(record)
    capsys.readouterr()
    status, out, _ = _progress(capsys, "tiny-train")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "smoke-set-0123456789ab" in line)
    assert status == 0 and shown in lines[at + 1]


LN2 = math.log(2)


@pytest.mark.parametrize("losses, task, expected", [
    ([0.6939, 0.6935, 0.6934], {"task_type": "classification", "d_output": 2}, 3),  # a dead Pathfinder run
    ([0.6927, 0.6219, 0.4994, 0.4250], {"task_type": "classification", "d_output": 2}, None),  # it learned
    ([0.6934, 0.6935], {"task_type": "classification", "d_output": 2}, None),  # too few epochs to say
    ([math.log(10) * 1.005] * 4, {"task_type": "classification", "d_output": 10}, 4),  # ten classes: ln 10
    ([math.log(10) * 0.95] * 4, {"task_type": "classification", "d_output": 10}, None),  # 5 % under: not chance
    ([0.69] * 5, {"task_type": "regression", "d_output": 1}, None),  # no classes
    ([LN2] * 5, {"task_type": "classification"}, None),  # no class count recorded
    ([LN2, None, LN2], {"task_type": "classification", "d_output": 2}, None),  # a loss missing
    ([LN2] * 5, None, None),  # no task record (an older checkpoint)
])
def test_a_run_at_chance_is_one_whose_every_epoch_ended_at_ln_c(losses: list, task: dict,
                                                                expected: Optional[int]) -> None:
    history = [{"epoch": i + 1, "train_loss": v} for i, v in enumerate(losses)]
    assert epochs_at_chance(history, task) == expected


def test_a_cut_epoch_does_not_count_toward_chance() -> None:
    task = {"task_type": "classification", "d_output": 2}
    history = [{"epoch": 1, "train_loss": 0.6935}, {"epoch": 2, "train_loss": 0.6933},
               {"epoch": 3, "train_loss": 0.6934, "partial": True}]
    assert epochs_at_chance(history, task) is None
    assert epochs_at_chance(history + [{"epoch": 3, "train_loss": 0.6932}], task) == 3
    assert epochs_at_chance(history + [{"epoch": 3, "train_loss": 0.52}], task) is None


def test_progress_marks_a_run_at_chance(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    ckpt = torch.load(CELL, weights_only=True)
    classes = ckpt["task"]["d_output"]
    ckpt["config"]["epochs"], ckpt["epoch"], ckpt["step"] = 10, 4, 0
    ckpt["history"] = [{"epoch": e, "train_loss": math.log(classes), "val_metric": 100 / classes}
                       for e in range(1, 5)]
    torch.save(ckpt, CELL)
    capsys.readouterr()
    status, out, _ = _progress(capsys, "tiny-train")
    row = next(line for line in out.splitlines() if "S4 / sCIFAR" in line)
    assert status == 0 and "in progress; at chance (4 epochs)" in row


def test_a_run_stopped_at_chance_has_finished(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    """At chance for its config's chance_stop_epoch epochs: finished (a campaign starts it no more); one epoch
    short of it, or without the setting, in progress."""
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    ckpt = torch.load(CELL, weights_only=True)
    classes = ckpt["task"]["d_output"]
    for epochs_done, stop, finished in ((20, 20, True), (19, 20, False), (20, None, False), (25, 20, True)):
        ckpt["config"]["epochs"], ckpt["config"]["chance_stop_epoch"] = 200, stop
        ckpt["epoch"], ckpt["step"] = epochs_done, 0
        ckpt["history"] = [{"epoch": e, "train_loss": math.log(classes), "val_metric": 100 / classes}
                           for e in range(1, epochs_done + 1)]
        torch.save(ckpt, CELL)
        assert main(["progress", "--finished", "tiny-train/smoke/S4__sCIFAR"]) == (0 if finished else 1), \
            (epochs_done, stop)
    capsys.readouterr()


def test_a_checkpoint_whose_config_is_not_a_mapping_is_one_line(train_project: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    ckpt = torch.load(CELL, weights_only=True)
    for bad in ([1, 2], "epochs", 3):
        ckpt["config"] = bad
        torch.save(ckpt, CELL)
        capsys.readouterr()
        assert main(["progress", "tiny-train"]) in (0, 2)
        out = capsys.readouterr()
        assert "Traceback" not in out.err and "not a mapping of training settings" in out.out + out.err


def test_the_devices_a_run_trained_on_come_from_its_checkpoints_segments(train_project: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    capsys.readouterr()
    _, out, _ = _progress(capsys, "tiny-train")
    assert "trained on" in out and "CPU (" in next(line for line in out.splitlines() if "S4 / sCIFAR" in line)
    ckpt = torch.load(CELL, weights_only=True)
    ckpt["segments"] = [{"from_global_step": 0}, {"device": "NVIDIA H100 80GB HBM3", "from_global_step": 5},
                        {"device": "NVIDIA H200", "from_global_step": 9},
                        {"device": "NVIDIA H100 80GB HBM3", "from_global_step": 12}]
    torch.save(ckpt, CELL)
    _, out, _ = _progress(capsys, "tiny-train")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "S4 / sCIFAR" in line)
    assert "NVIDIA H100 80GB HBM3" in lines[at] and "NVIDIA H200" in lines[at + 1]  # each card once, in order
    assert "H100" not in "".join(lines[at + 1:])
    ckpt["segments"] = [{"from_global_step": 0}]  # from before cards were recorded
    torch.save(ckpt, CELL)
    _, out, _ = _progress(capsys, "tiny-train")
    header = next(line for line in out.splitlines() if "trained on" in line)
    row = next(line for line in out.splitlines() if "S4 / sCIFAR" in line)
    assert row[header.index("trained on"):].split()[0] == "-"


def test_finished_answers_for_a_cell_a_folder_or_a_glob(train_project: Path, capsys: pytest.CaptureFixture) -> None:
    """`progress --finished PATTERN`: 0 when every checkpoint under the pattern ended its schedule, 1 when one has
    not or none is there, 2 when one cannot be read; one line each."""
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    capsys.readouterr()
    for pattern in ("tiny-train/smoke/S4__sCIFAR", "tiny-train/smoke", "tiny-train/smo*"):
        status, out, err = _progress(capsys, "--finished", pattern)
        assert (status, err) == (0, "") and out.startswith("finished: 1 checkpoint(s) under runs/") and \
            len(out.splitlines()) == 1, (pattern, out)
    ckpt = torch.load(CELL, weights_only=True)
    ckpt["config"]["epochs"], ckpt["epoch"], ckpt["step"] = 3, 1, 7
    mid = Path("runs") / "tiny-train" / "smoke-set-0123456789ab" / "S4__sCIFAR" / "checkpoint.pt"
    mid.parent.mkdir(parents=True)
    torch.save(ckpt, mid)
    for pattern in ("tiny-train/smoke-set-0123456789ab", "tiny-train/*"):
        status, out, _ = _progress(capsys, "--finished", pattern)
        assert status == 1 and "not finished:" in out and "at epoch 1 of 3 (+7 steps)" in out, (pattern, out)
    status, out, _ = _progress(capsys, "--finished", "tiny-train/budget")
    assert status == 1 and "not finished: no checkpoint under runs/tiny-train/budget (not started)" in out
    broken = Path("runs") / "tiny-train" / "full" / "S4__sCIFAR" / "checkpoint.pt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a checkpoint")
    status, out, _ = _progress(capsys, "--finished", "tiny-train/full")
    assert status == 2 and out.startswith("unreadable: ") and "checkpoint.pt" in out
    status, out, err = _progress(capsys, "tiny-train", "--finished", "tiny-train/smoke")
    assert status == 2 and "--finished PATTERN reads the checkpoints under the pattern; name no spec" in err


@pytest.mark.parametrize("pattern", ["", "  ", "/abs/path", "../elsewhere", "tiny-train/../../x"])
def test_finished_takes_a_path_under_the_runs_folder(train_project: Path, capsys: pytest.CaptureFixture,
                                                     pattern: str) -> None:
    Path("runs").mkdir()
    status, out, err = _progress(capsys, "--finished", pattern)
    assert status == 2 and f"--finished {pattern!r}: expected a path under runs/" in err and not out
    assert len(err.strip().splitlines()) == 1
