"""CPU: bring one campaign call's pack home (what benchmarks/campaign/longrange.sh wrote into its OUTDIR).

    python -m benchmarks.campaign.collect PARTS_DIR [--checkpoints checkpoints] [--results results] [--logs DIR]

PARTS_DIR holds campaign.tar.part00, part01, ... Each packed checkpoint goes to
``<checkpoints>/<spec>/<folder>/<cell>/checkpoint.pt`` (checked against the pack's manifest, written atomically),
with the run's metrics.jsonl and steps.jsonl beside it and, for a ``--set`` folder, its overrides.json; every results
file the call wrote (step-rate records, the results of cells that finished) goes to the same place under
``<results>``, never over a file already there; ``--logs DIR`` keeps the call's logs (for the campaign's log). Then
it prints where every run under ``<checkpoints>`` stands (``python -m runners progress``).
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Sequence

from runners.core.atomic import atomic_path
from runners.execute.transfer import MANIFEST, TransferError, unpack
from runners.report.progress import progress_table, training_progress

PART_GLOB = "campaign.tar.part*"
OVERRIDES = "overrides.json"
RUN_LOGS = ("metrics.jsonl", "steps.jsonl")  # a run's logs kept beside its checkpoint
BLOCK, END_OF_ARCHIVE = 512, 1024  # a tar's block, and the two zero blocks that end one


class CollectError(ValueError):
    """A pack that cannot be brought home; the message names the file."""


def extract(parts_dir: Path, into: Path) -> None:
    """The tar that the parts in ``parts_dir`` make together, extracted into ``into`` (regular files and folders
    only)."""
    parts = sorted(parts_dir.glob(PART_GLOB))
    if not parts:
        raise CollectError(f"{parts_dir}: no {PART_GLOB} files (what longrange.sh writes into its OUTDIR)")
    joined = into / "campaign.tar"
    with open(joined, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, out)
    names = ", ".join(p.name for p in parts)
    size = joined.stat().st_size
    with open(joined, "rb") as f:  # a whole tar ends in two zero blocks; tarfile takes a cut at a header for the end
        f.seek(max(size - END_OF_ARCHIVE, 0))
        ending = f.read()
    if size % BLOCK or size < END_OF_ARCHIVE or ending.strip(b"\0"):
        raise CollectError(f"{parts_dir}: {names} do not make a complete tar (a part missing or cut short?): "
                           f"{size} bytes, " + ("not a whole number of 512-byte blocks" if size % BLOCK
                                                else "without the two zero blocks that end a tar"))
    try:
        with tarfile.open(joined) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise CollectError(f"{parts_dir}: {names} do not make a complete tar (a part missing or cut short?): "
                           f"{exc}") from None
    joined.unlink()


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)


def collect(parts_dir: Path, checkpoints: Path, results: Path, logs: Path | None = None) -> list[str]:
    """Bring the pack in ``parts_dir`` home (see the module's docstring); returns one line per file written or left
    alone."""
    done: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        extract(parts_dir, stage)
        runs_logs = stage / "logs" / "runs" / "runs"  # the metrics and overrides of every run of the call
        if (stage / "ckpt" / MANIFEST).is_file():
            for relative in unpack(stage / "ckpt", stage / "unpacked"):
                spec, folder, cell, name = Path(relative).parts
                _copy(stage / "unpacked" / relative, checkpoints / spec / folder / cell / name)
                done.append(f"{checkpoints / relative}")
                logged = [(runs_logs / spec / folder / cell / name, checkpoints / spec / folder / cell / name)
                          for name in RUN_LOGS]
                for extra, dest in (*logged,
                                    (runs_logs / spec / folder / OVERRIDES, checkpoints / spec / folder / OVERRIDES)):
                    if extra.is_file():
                        _copy(extra, dest)
                        done.append(str(dest))
        for src in sorted((stage / "logs" / "results").rglob("*")) if (stage / "logs" / "results").is_dir() else []:
            if not src.is_file():
                continue
            dest = results / src.relative_to(stage / "logs" / "results")
            if dest.exists():
                same = filecmp.cmp(src, dest, shallow=False)
                done.append(f"{dest}: already there" + ("" if same else ", and different: left as it was"))
                continue
            _copy(src, dest)
            done.append(str(dest))
        if logs is not None and (stage / "logs").is_dir():
            shutil.copytree(stage / "logs", logs, dirs_exist_ok=True)
            done.append(f"{logs}/ (the call's logs)")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts_dir", type=Path, help="the folder holding campaign.tar.part00, part01, ...")
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--logs", type=Path, help="a folder to keep the call's logs in")
    args = parser.parse_args(argv)
    try:
        done = collect(args.parts_dir, args.checkpoints, args.results, args.logs)
    except (CollectError, TransferError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(done))
    print(progress_table(training_progress(args.checkpoints, args.results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
