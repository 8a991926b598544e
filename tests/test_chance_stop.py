"""A run still at chance after its spec's chance_stop_epoch stops there (stop reason "at_chance"), is finished for
progress and the campaign (resumed, it trains nothing), and its results file records the stop; the at-chance rule
itself on histories that are and are not at chance."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from test_files_and_runs import _edit_spec, train_project  # noqa: F401 (the fixture)

from runners.cli.main import main
from runners.report.progress import finished_under
from runners.train.chance import epochs_at_chance, stops_at_chance

LN2 = math.log(2)


def _history(losses: list[float], partial_last: bool = False) -> list[dict]:
    out = [{"epoch": i + 1, "train_loss": v, "partial": False} for i, v in enumerate(losses)]
    if partial_last:
        out[-1]["partial"] = True
    return out


@pytest.mark.parametrize("losses, classes, expect", [
    ([LN2] * 3, 2, 3),
    ([LN2 * 1.009, LN2 * 0.995, LN2], 2, 3),
    ([LN2] * 2, 2, None),  # too few epochs to tell
    ([LN2, LN2, 0.5], 2, None),  # learned in its third epoch
    ([LN2 * 1.02] * 4, 2, None),  # 2 % off: not the loss of a constant output
    ([math.log(10)] * 5, 10, 5),
    ([float("nan")] * 3, 2, None),
])
def test_epochs_at_chance(losses: list[float], classes: int, expect) -> None:
    assert epochs_at_chance(_history(losses), "classification", classes) == expect


def test_only_complete_classification_epochs_count() -> None:
    assert epochs_at_chance(_history([LN2] * 3, partial_last=True), "classification", 2) is None
    assert epochs_at_chance(_history([LN2] * 3), "regression", 2) is None
    assert stops_at_chance(_history([LN2] * 20), "classification", 2, 20)
    assert not stops_at_chance(_history([LN2] * 19), "classification", 2, 20)
    assert not stops_at_chance(_history([LN2] * 30), "classification", 2, None)


def test_a_run_at_chance_stops_at_its_epoch_and_stays_stopped(train_project: Path,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    """chance_stop_epoch 2 of 5 epochs, every epoch taken for chance (the rule is tested above): the run stops
    after epoch 2, records stop: at_chance, progress calls it finished, and resumed it trains no epoch more."""
    _edit_spec(lambda d: d["tiers"]["smoke"]["train"].update(epochs=5, chance_stop_epoch=2))
    monkeypatch.setattr("runners.train.loop.stops_at_chance",
                        lambda history, task_type, classes, stop: stop is not None and len(history) >= stop)
    assert main(["run", "tiny-train", "--no-progress"]) == 0
    (path,) = (train_project / "local" / "results" / "tiny-train").glob("*_smoke.json")
    series = json.loads(path.read_text())["series"]["S4 / sCIFAR"]
    assert series["stop_reason"] == "at_chance" and len(series["history"]) == 2
    done, line = finished_under(train_project / "runs", "tiny-train/smoke/S4__sCIFAR")
    assert done is False  # the stand-in model is not at chance by the real rule: progress reads its losses
    metrics = train_project / "runs" / "tiny-train" / "smoke" / "S4__sCIFAR" / "metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == 2
    assert main(["run", "tiny-train", "--no-progress"]) == 0  # resumed: still at chance, no epoch more
    assert len(metrics.read_text().splitlines()) == 2


def test_chance_stop_epoch_is_checked(train_project: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    for bad in (0, -3, 2.5, "ten"):
        _edit_spec(lambda d, bad=bad: d["tiers"]["smoke"]["train"].update(chance_stop_epoch=bad))
        assert main(["run", "tiny-train", "--dry-run"]) == 2
        assert "chance_stop_epoch" in capsys.readouterr().err
    spec = yaml.safe_load(Path("reproductions/tiny_train.yaml").read_text())
    assert spec["tiers"]["smoke"]["train"]["chance_stop_epoch"] == "ten"
