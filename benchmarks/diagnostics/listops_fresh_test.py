"""GPU or CPU: how much a trained ListOps model's accuracy depends on which test set of the same size scores it.

    python -m benchmarks.diagnostics.listops_fresh_test \
        runs/s4d-table-5/full/S4D-LegS_suite_data__ListOps/checkpoint.pt [--spec s4d-table-5] [--tier full] \
        [--row 'S4D-LegS (suite data)'] [--draws 5] [--n 2000] [--device cpu|cuda] [--batch 50]

The checkpoint's weights are loaded into the cell's model, built as the training table builds it (the spec's tier;
its suite-data variant, ``run --data suite``, when the row is one of that variant's rows; the row is inferred from
the checkpoint's folder name unless given), and scored by the training loop's own evaluation (its batching, padding
and metric) on
  * the suite's val and test splits of the cell's ListOps data, read from the folder the table prepares them in
    (runs/<spec>/<tier>/data/ListOps/) and made there by the table's own preparation when missing: the generator
    writes the whole chunk-seeded stream (val and test are the distinct expressions after the first n_train, so
    they cannot be made without the training split; 100,000 expressions took 2.4 minutes on 2 CPU cores);
  * K fresh draws of n expressions (default: the size of the suite's test split) by the same generator with the
    same settings and seeds 1000001, 1000002, ... (each the test split of a generator run with one train and one
    val expression ahead of it), less any expression that is also in the suite's train, val or test split (counted).
Prints one line per split and draw (n, accuracy, loss, seconds), the fresh draws' mean and standard deviation, the
binomial standard error of an n-example split at that accuracy, and how far the suite's val and test accuracies lie
from the fresh mean in units of it. For a checkpoint written at the end of an epoch, the val / test accuracies the
training logged for these weights (metrics.jsonl) are printed beside the recomputed ones.
On 2 CPU cores the full tier's 8-layer model took 70-90 s per 2,000 examples (each split's time is printed) when
Python was started with MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184 in the environment, and
up to twice that without: glibc then hands each large activation buffer back to the kernel and faults it in again
(the extra time is system time).
"""
from __future__ import annotations

import argparse
import inspect
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from runners.core.errors import SpecError
from runners.data.base import TaskData, data_root
from runners.data.lra.layout import LISTOPS_SPLIT_FILES
from runners.data.lra.listops import read_listops_tsv
from runners.data.lra.listops_gen import generate_listops
from runners.data.progress_bar import progress_bar
from runners.data.registry import LOADERS
from runners.specs.registry import RunContext
from runners.specs.selection import tier_config
from runners.specs.spec import TIERS, Spec, find_spec, load_spec, work_dir_for
from runners.train import checkpoint as ckpt_io
from runners.train.config import RESUMABLE_FIELDS, TrainConfig
from runners.train.distributed import DistInfo
from runners.train.loop import autocast_dtype, evaluate, task_signature
from runners.train.table import build_model, cell_path, data_work_dir, prepare_data, with_pad_id

#: fresh draw k (1-based) uses generator seed FRESH_SEED_BASE + k, far from the seeds the specs train on (0)
FRESH_SEED_BASE = 1_000_000
LISTOPS = "listops"  # the loader and the preparer of the ListOps task


class UsageError(ValueError):
    """A command-line argument that does not fit the checkpoint or the spec: the message says what is allowed."""


@dataclass
class CellSetup:
    """One trained cell of a training table: where its settings come from."""

    spec: Spec
    tier: str
    data: str  # "suite" (the tier's suite-data variant) or "release"
    config: Any  # the runner's TrainTableConfig of that variant
    row: str
    column: str  # the ListOps task's column

    @property
    def label(self) -> str:
        """e.g. "spec s4d-table-5 tier full --data suite"."""
        return f"spec {self.spec.id} tier {self.tier}" + (" --data suite" if self.data == "suite" else "")

    @property
    def task_cfg(self) -> dict:
        return self.config.tasks[self.column]

    @property
    def prepare(self) -> dict:
        """The generator's arguments of the cell's data (the spec's ``prepare``, without the preparer's name)."""
        return {k: v for k, v in self.task_cfg["prepare"].items() if k != "preparer"}


# ----------------------------------------------------------------------------------------------
# which cell


def _variants(spec: Spec, tier: str) -> list[tuple[str, Any]]:
    """(data variant, config) of the tier: the suite-data variant first (its rows are named apart)."""
    tier_spec = spec.tiers[tier]
    found = [("suite", tier_config(spec, tier, "suite"))] if tier_spec.suite_data is not None else []
    return found + [("release", tier_config(spec, tier, "release"))]


def _listops_cells(spec: Spec, tier: str) -> list[tuple[str, Any, str, str]]:
    """(variant, config, row, column) of every cell trained on ListOps data the suite generates."""
    cells = []
    for data, cfg in _variants(spec, tier):
        skip = {tuple(p) for p in cfg.skip}
        for col, task in cfg.tasks.items():
            if task.get("loader") != LISTOPS or (task.get("prepare") or {}).get("preparer") != LISTOPS:
                continue
            cells += [(data, cfg, row, col) for row, m in cfg.models.items()
                      if (row, col) not in skip and col in m.get("tasks", [col])]
    return cells


def resolve_cell(spec_name: str, tier: str, row: Optional[str], checkpoint: Path) -> CellSetup:
    """The cell that wrote ``checkpoint``: ``row`` of ``spec_name`` at ``tier``, or, without ``row``, the one row whose
    cell folder has the checkpoint folder's name. Raises UsageError naming the argument and what is allowed."""
    try:
        spec = load_spec(find_spec(spec_name))
    except SpecError as exc:
        raise UsageError(f"--spec {spec_name!r}: {exc}") from None
    if tier not in TIERS:
        raise UsageError(f"--tier {tier!r}: allowed: {', '.join(TIERS)}")
    cells = _listops_cells(spec, tier)
    if not cells:
        raise UsageError(f"--spec {spec.id} --tier {tier}: no cell of this tier trains on ListOps data the suite "
                         f"generates (a task with loader and preparer '{LISTOPS}'); try another --tier or --spec")
    rows = sorted({c[2] for c in cells})
    if row is not None:
        picked = [c for c in cells if c[2] == row]
        if not picked:
            raise UsageError(f"--row {row!r} is not a ListOps row of spec {spec.id} tier {tier}; allowed: {rows}")
    else:
        work_dir = work_dir_for(spec, tier)
        picked = [c for c in cells if cell_path(work_dir, tier, c[1].models[c[2]], c[2], c[3]).name
                  == checkpoint.parent.name]
        if len(picked) != 1:
            raise UsageError(f"cannot tell the row from the checkpoint's folder name {checkpoint.parent.name!r} "
                             f"(spec {spec.id} tier {tier}); pass --row, one of {rows}")
    if len(picked) > 1:
        raise UsageError(f"--row {row!r} trains on several ListOps tasks of spec {spec.id} tier {tier} "
                         f"({[c[3] for c in picked]}); this script expects one")
    data, cfg, row, col = picked[0]
    return CellSetup(spec=spec, tier=tier, data=data, config=cfg, row=row, column=col)


def load_checkpoint(path: Path) -> dict:
    """The training checkpoint at ``path`` (the training loop's reader); UsageError if missing or foreign."""
    if not path.is_file():
        raise UsageError(f"CHECKPOINT {path}: no such file (a training checkpoint, e.g. "
                         f"runs/<spec>/<tier>/<row>__ListOps/checkpoint.pt)")
    try:
        ckpt = ckpt_io.load(path, advice="pass a training checkpoint.pt")
    except ckpt_io.CheckpointMismatch as exc:
        raise UsageError(f"CHECKPOINT {exc}") from None
    if "model" not in ckpt:
        raise UsageError(f"CHECKPOINT {path}: holds no model weights")
    return ckpt


# ----------------------------------------------------------------------------------------------
# data, model, evaluation settings, as the training table has them


def run_context(cell: CellSetup, device: torch.device, progress: bool) -> RunContext:
    """The context the training table ran the cell with (where its run and data folders are)."""
    tier_spec = cell.spec.tiers[cell.tier]
    return RunContext(spec_id=cell.spec.id, tier=cell.tier, device=device, seed=tier_spec.seed,
                      work_dir=work_dir_for(cell.spec, cell.tier), data_dir=data_root(), progress=progress)


def suite_task(cell: CellSetup, ctx: RunContext) -> TaskData:
    """The cell's ListOps task, prepared (generated if not there yet) and loaded by the table's own code."""
    root = prepare_data(cell.column, cell.task_cfg, ctx, data_work_dir(ctx, [cell.config.models[cell.row]]))
    return LOADERS[cell.task_cfg["loader"]](root, **cell.task_cfg.get("loader_args", {}))


def train_config(cell: CellSetup, batch: Optional[int]) -> TrainConfig:
    """The cell's TrainConfig as the table builds it; ``batch`` sets the evaluation batch."""
    train = cell.config.cell_train(cell.row, cell.column)
    train.setdefault("seed", cell.spec.tiers[cell.tier].seed)
    if batch is not None:
        train["eval_batch_size"] = batch
    return TrainConfig.from_dict(train, f"{cell.spec.id} {cell.tier} ({cell.row}, {cell.column}) train")


def cell_model(cell: CellSetup, task: TaskData, ckpt: dict, cfg: TrainConfig, checkpoint: Path) -> nn.Module:
    """The cell's model built as the table builds it, with the checkpoint's weights; UsageError when the checkpoint
    was written by another configuration (model, task or training settings)."""
    arch = cell.config.models[cell.row]["arch"]
    kwargs = with_pad_id(cell.config.cell_model(cell.row, cell.column), task)
    model = build_model(arch, kwargs, task)
    try:  # the check the training loop makes before it resumes a checkpoint
        ckpt_io.check_compatible(ckpt, checkpoint, config=cfg.to_dict(), resumable=RESUMABLE_FIELDS,
                                 model_config={"arch": arch, **kwargs}, task=task_signature(task),
                                 shapes=ckpt_io.model_shapes(model), config_defaults=TrainConfig.field_defaults(),
                                 advice="Pass the --spec / --tier / --row of the cell that trained it.")
    except ckpt_io.CheckpointMismatch as exc:
        raise UsageError(f"CHECKPOINT was not written by row {cell.row!r} of {cell.label}: {exc}") from None
    model.load_state_dict(ckpt["model"])
    return model


# ----------------------------------------------------------------------------------------------
# scoring


class _Counted(Dataset):
    """``dataset`` whose item reads advance a progress bar (the evaluation reads items in this process)."""

    def __init__(self, dataset: Dataset, bar: Any):
        self.dataset, self.bar = dataset, bar

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        self.bar.update(1)
        return self.dataset[i]


@dataclass
class Score:
    name: str
    n: int
    accuracy: float  # percent
    loss: float
    seconds: float
    note: str = ""


def score(name: str, model: nn.Module, dataset: Dataset, task: TaskData, cfg: TrainConfig, device: torch.device,
          progress: Optional[bool] = None) -> Score:
    """Accuracy and loss of ``model`` on ``dataset`` by the training loop's evaluation."""
    eval_cfg = TrainConfig.from_dict({**cfg.to_dict(), "num_workers": 0})  # items read here, so the bar moves
    t0 = time.perf_counter()
    with progress_bar(len(dataset), name, "expr", show=progress) as bar:
        loss, acc = evaluate(model, _Counted(dataset, bar), task, eval_cfg, device, DistInfo(), autocast_dtype(cfg))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return Score(name, len(dataset), acc, loss, time.perf_counter() - t0)


def split_texts(folder: Path) -> set[str]:
    """Every expression of the train, val and test files in ``folder``."""
    texts: set[str] = set()
    for name in LISTOPS_SPLIT_FILES.values():
        texts.update(read_listops_tsv(folder / name)[0])
    return texts


def _generator_arg(prepare: dict, name: str) -> Any:
    """The spec's value of a generator argument, else the generator's default."""
    return prepare.get(name, inspect.signature(generate_listops).parameters[name].default)


def generator_settings(prepare: dict) -> dict:
    """The generator's settings of the cell's data that fix its distribution (lengths, depth, arguments)."""
    return {k: _generator_arg(prepare, k) for k in ("min_length", "max_length", "max_depth", "max_args")}


def fresh_seeds(draws: int, data_seed: int) -> list[int]:
    """Generator seeds of the fresh draws: FRESH_SEED_BASE + 1, + 2, ..., never the seed of the cell's data."""
    seeds = [s for s in range(FRESH_SEED_BASE + 1, FRESH_SEED_BASE + draws + 2) if s != data_seed]
    return seeds[:draws]


def fresh_draw(cell: CellSetup, seed: int, n: int, out: Path, exclude: set[str],
               progress: Optional[bool] = None) -> tuple[Dataset, int]:
    """(dataset, dropped): n expressions of the cell's generator at ``seed`` (the test split of a run with one train
    and one val expression ahead), loaded as the cell's task loads its data, less those in ``exclude``."""
    workers = max(1, min(int(_generator_arg(cell.prepare, "workers")), os.cpu_count() or 1))
    folder = generate_listops(out, n_train=1, n_val=1, n_test=n, seed=seed, workers=workers,
                              progress=progress is not False, **generator_settings(cell.prepare))
    task = LOADERS[cell.task_cfg["loader"]](out, **cell.task_cfg.get("loader_args", {}), use_cache=False)
    sources = read_listops_tsv(folder / LISTOPS_SPLIT_FILES["test"])[0]
    keep = [i for i, s in enumerate(sources) if s not in exclude]
    return Subset(task.test, keep), len(sources) - len(keep)


def binomial_se(accuracy: float, n: int) -> float:
    """Standard error in points of an accuracy (percent) measured on n independent examples."""
    p = accuracy / 100.0
    return 100.0 * math.sqrt(p * (1.0 - p) / n)


def logged_metrics(ckpt: dict) -> Optional[dict]:
    """The evaluation the training logged for exactly these weights (an end-of-epoch checkpoint), else None."""
    history = ckpt.get("history") or []
    if ckpt.get("partial"):
        return ckpt["partial"]
    if ckpt.get("step", 0) == 0 and history:
        return history[-1]
    return None


def summary_lines(suite: list[Score], fresh: list[Score], n: int) -> list[str]:
    """The fresh draws' mean and std, the binomial standard error at n, and the suite splits' distance from the
    fresh mean in units of it."""
    if not fresh:
        return []
    accs = [s.accuracy for s in fresh]
    mean = statistics.fmean(accs)
    std = statistics.stdev(accs) if len(accs) > 1 else float("nan")
    se = binomial_se(mean, n)
    lines = [f"fresh draws: mean {mean:.2f}, std {std:.2f} over {len(accs)} draws (sample std; "
             f"{'n/a' if len(accs) < 2 else f'expected about {se:.2f} if they differ by sampling alone'})",
             f"binomial standard error of a {n}-example split at {mean:.2f}%: {se:.2f} points "
             f"(of the mean of {len(accs)} draws: {se / math.sqrt(len(accs)):.2f})"]
    for s in suite:
        z = (s.accuracy - mean) / se
        lines.append(f"{s.name} - fresh mean: {s.accuracy - mean:+.2f} points = {z:+.2f} binomial SE")
    return lines


def _line(s: Score) -> str:
    return f"{s.name:<24} n {s.n:>5}  accuracy {s.accuracy:6.2f}  loss {s.loss:.4f}  {s.seconds:7.1f} s{s.note}"


# ----------------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a ListOps cell's checkpoint.pt")
    parser.add_argument("--spec", default="s4d-table-5", help="spec id or file (default s4d-table-5)")
    parser.add_argument("--tier", default="full", help="tier of the spec (default full)")
    parser.add_argument("--row", default=None, help="the cell's row (default: from the checkpoint's folder name)")
    parser.add_argument("--draws", type=int, default=5, help="fresh draws K (default 5; 0: the suite's splits only)")
    parser.add_argument("--n", type=int, default=None,
                        help="expressions per fresh draw (default: the size of the suite's test split)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch", type=int, default=None, help="evaluation batch (default: the cell's)")
    parser.add_argument("--no-progress", action="store_true", help="progress as a line per tenth of each split, not tqdm bars")
    args = parser.parse_args(argv)
    if args.draws < 0 or (args.n is not None and args.n < 1) or (args.batch is not None and args.batch < 1):
        parser.error("--draws must be >= 0, --n and --batch >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible here; allowed here: cpu")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    show = False if args.no_progress else None
    device = torch.device(args.device)
    try:
        ckpt = load_checkpoint(args.checkpoint)
        cell = resolve_cell(args.spec, args.tier, args.row, args.checkpoint)
        ctx = run_context(cell, device, progress=not args.no_progress)
        task = suite_task(cell, ctx)
        cfg = train_config(cell, args.batch)
        model = cell_model(cell, task, ckpt, cfg, args.checkpoint).to(device)
    except UsageError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        return 2
    n = args.n or len(task.test)
    where = "end of epoch" if ckpt.get("step", 0) == 0 else f"epoch {ckpt['epoch'] + 1}, step {ckpt['step']}"
    print(f"{cell.label}: {cell.row} / {cell.column}: {args.checkpoint} "
          f"(epoch {ckpt['epoch']} done, {where}); data {task.info['path']}; generator "
          f"{generator_settings(cell.prepare)}, seed {_generator_arg(cell.prepare, 'seed')}; device {device}, "
          f"eval batch {cfg.eval_batch_size or cfg.batch_size}", flush=True)
    logged = logged_metrics(ckpt)
    suite = []
    for split, dataset in (("val", task.val), ("test", task.test)):
        s = score(f"suite {split}", model, dataset, task, cfg, device, show)
        if logged is not None:
            s.note = f"   (logged at epoch {logged['epoch']}: {logged[f'{split}_metric']:.2f})"
        print(_line(s), flush=True)
        suite.append(s)
    fresh: list[Score] = []
    if args.draws:
        exclude = split_texts(Path(task.info["path"]))
        with tempfile.TemporaryDirectory(prefix="listops_fresh_") as tmp:
            for seed in fresh_seeds(args.draws, _generator_arg(cell.prepare, "seed")):
                dataset, dropped = fresh_draw(cell, seed, n, Path(tmp) / str(seed), exclude, show)
                s = score(f"fresh seed {seed}", model, dataset, task, cfg, device, show)
                s.note = f"   ({dropped} dropped: also in the suite's splits)"
                print(_line(s), flush=True)
                fresh.append(s)
    for line in summary_lines(suite, fresh, n):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
