"""Projected GPU time of training cells, from measured step rates.

A step-rate record (``results/step-rates/<stamp>_<spec id>.json``, written by
``benchmarks/diagnostics/train_step_profile.py --record``) holds one cell's model and training settings as a spec
tier configures them, the steady steps/s the suite's training loop reached with them on one card (random data of
the task's shape), and for each table cell it serves (the release row and, where the tier has one, the suite-data
row) the projection: epochs x (training examples // batch) steps at that rate, in hours of one GPU.
``run --dry-run`` prints each selected cell's projection; the report prints it beside the hours its training took.

Fields of a record: ``spec_id``, ``tier``, ``row``, ``task``, ``batch``, ``n_train``, ``steps_per_second``,
``device``, ``recorded`` (UTC, ISO 8601), ``cells`` (a list of {``cell``: "row/column", ``series``: the results
file's series key of the cell's training, ``epochs``, ``projected_gpu_hours``}), ``git_commit`` (with the usual
provenance keys). A record that lacks one, or whose values are of the wrong kind, is an error naming the file and
the key. The folder also holds data-time records (``<DATA_TIME_PREFIX><stamp>.json``, written by
``python -m runners.data.lra.generate ... --timing-record``: how long making a task's data took); they are not
step-rate records and are left out here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Strict, ValidationError

from ..specs.schema import Num, problems
from ..store.read import read_json_file

STEP_RATES = "step-rates"  # folder under the results root
DATA_TIME_PREFIX = "pathx_data_"  # data-time records in that folder (runners.data.lra.generate --timing-record)


class StepRateError(ValueError):
    """A step-rate record that cannot be used: the message names the file and the key."""


Positive = Num(0, lo_open=True, tail="expected a number > 0")


class CellProjection(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    cell: Annotated[str, Strict()]  # 'row/column'
    projected_gpu_hours: Positive


class StepRateRecord(BaseModel):
    """A step-rate record (benchmarks/diagnostics/train_step_profile.py writes them); more keys are kept as written."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    spec_id: Annotated[str, Strict()]
    tier: Annotated[str, Strict()]
    row: Annotated[str, Strict()]
    task: Annotated[str, Strict()]
    batch: Annotated[int, Strict()]
    n_train: Annotated[int, Strict()]
    steps_per_second: Positive
    device: Annotated[str, Strict()]
    recorded: Annotated[str, Strict()]
    cells: list[CellProjection]


def _check(path: Path, doc: Any) -> dict:
    """``doc`` if it is a usable step-rate record, else StepRateError naming ``path`` and the key."""
    if not isinstance(doc, dict):
        raise StepRateError(f"{path}: a step-rate record must be a JSON object, got {type(doc).__name__}")
    try:
        StepRateRecord.model_validate(doc)
    except ValidationError as exc:
        first = problems(exc)[0]
        if first.loc[0] == "cells" and len(first.loc) > 1:
            where = f"{path}: cells[{first.loc[1]}]"
            if len(first.loc) > 2 and first.loc[2] == "projected_gpu_hours" and first.kind != "missing":
                raise StepRateError(f"{where}: key 'projected_gpu_hours' = {first.value!r}: expected a number > 0") \
                    from None
            raise StepRateError(f"{where}: expected {{cell: 'row/column', series, epochs, projected_gpu_hours}}") \
                from None
        key = first.loc[0]
        if first.kind == "missing":
            raise StepRateError(f"{path}: key {key!r} missing (a step-rate record holds "
                                f"{', '.join(StepRateRecord.model_fields)})") from None
        if key == "steps_per_second":
            raise StepRateError(f"{path}: key 'steps_per_second' = {doc[key]!r}: expected a number > 0") from None
        raise StepRateError(f"{path}: key {key!r} = {doc[key]!r} is not a {first.type_name or 'list'}") from None
    return doc


def load_step_rates(results_root: Path) -> list[tuple[Path, dict]]:
    """Every step-rate record under ``results_root/step-rates``, oldest first (by the time each records)."""
    folder = Path(results_root) / STEP_RATES
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith(DATA_TIME_PREFIX):
            continue  # a data-time record, not a step rate
        # the results files' reader: regular files only (a link or a FIFO is refused unopened), UTF-8 JSON, no key
        # given twice
        records.append((path, _check(path, read_json_file(path, StepRateError))))
    return sorted(records, key=lambda pr: pr[1]["recorded"])


def projections(records: list[tuple[Path, dict]], spec_id: str, tier: str) -> dict[str, dict]:
    """{cell name: the newest projection of that cell of ``spec_id`` at ``tier``}: the record's cell entry with
    the record's ``steps_per_second``, ``device``, ``batch``, ``recorded`` and ``file``."""
    out: dict[str, dict] = {}
    for path, doc in records:  # oldest first: a newer record replaces an older one
        if doc["spec_id"] != spec_id or doc["tier"] != tier:
            continue
        for cell in doc["cells"]:
            out[cell["cell"]] = {**cell, "steps_per_second": doc["steps_per_second"], "device": doc["device"],
                                 "batch": doc["batch"], "recorded": doc["recorded"], "file": path.as_posix()}
    return out


def series_projection(projected: dict[str, dict], series: Optional[str]) -> Optional[dict]:
    """The newest entry of ``projections()`` for the training series ``series`` ("<model row> / <task>"), whichever
    of its cells the record lists; None without one."""
    same = [p for p in projected.values() if series is not None and p.get("series") == series]
    return max(same, key=lambda p: p["recorded"]) if same else None


def cell_projection(projected: dict[str, dict], cell: str, series: Optional[str] = None) -> Optional[dict]:
    """The projection of ``cell`` ("row/column") in ``projections()``: its own entry, else, for a cell its training
    unit reports that the step-rate record does not list (a column added after the rate was measured), that of its
    training series; None without either."""
    return projected[cell] if cell in projected else series_projection(projected, series)


def projection_text(p: Optional[dict]) -> str:
    """'1.7 GPU-h (32.9 steps/s, NVIDIA H100 80GB HBM3, 2026-11-27)', or '-' without a measured rate."""
    if not p:
        return "-"
    return (f"{p['projected_gpu_hours']:.1f} GPU-h ({p['steps_per_second']:.1f} steps/s at batch {p['batch']}, "
            f"{p['device']}, {p['recorded'][:10]})")


def measured_hours(result: dict, series_key: str) -> Optional[float]:
    """The training time of one cell in a results file, in GPU-hours: the seconds of its logged epochs (the
    evaluations included) times the processes that trained it; None where the file has no such series."""
    series = (result.get("series") or {}).get(series_key)
    if not isinstance(series, dict) or not series.get("history"):
        return None
    seconds = sum(float(e.get("seconds") or 0.0) for e in series["history"] if isinstance(e, dict))
    return seconds * int(series.get("world_size") or 1) / 3600
