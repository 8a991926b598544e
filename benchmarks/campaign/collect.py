"""CPU: bring one campaign call's pack home (what benchmarks/campaign/longrange.sh wrote into its OUTDIR).

    python -m benchmarks.campaign.collect PARTS_DIR [--checkpoints checkpoints] [--results results] [--logs DIR]

PARTS_DIR holds campaign.tar.part00, part01, ... Each packed checkpoint goes to
``<checkpoints>/<spec>/<folder>/<cell>/checkpoint.pt`` (checked against the pack's manifest, written atomically),
with the run's metrics.jsonl and steps.jsonl beside it and, for a ``--set`` folder, its overrides.json; every results
file the call wrote (step-rate records, the results of cells that finished) goes to the same place under
``<results>``, never over a file already there, and into that store's ledger; ``--logs DIR`` keeps the call's logs (for the campaign's log). Then
it prints where every run under ``<checkpoints>`` stands (``python -m runners progress``).
"""
from __future__ import annotations

import argparse
import filecmp
import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Sequence

from runners.core.atomic import atomic_path
from runners.execute.transfer import MANIFEST, TransferError, unpack
from runners.report.progress import progress_table, training_progress
from runners.store import ledger

PART_GLOB = "campaign.tar.part*"
PART_NAME = re.compile(r"campaign\.tar\.part(\d{2,})")  # what `split -d` names the parts: part00, part01, ...
MAX_MEMBER_BYTES = 64 << 20  # a call brings back at most 64 MiB, so no member of its pack is larger
OVERRIDES = "overrides.json"
RUN_LOGS = ("metrics.jsonl", "steps.jsonl")  # a run's logs kept beside its checkpoint
BLOCK, END_OF_ARCHIVE = 512, 1024  # a tar's block, and the two zero blocks that end one


class CollectError(ValueError):
    """A pack that cannot be brought home; the message names the file."""


def _parts(parts_dir: Path) -> list[Path]:
    """The parts longrange.sh wrote, in order: campaign.tar.part00, part01, ... with no number missing; any other
    file named campaign.tar.part* (an editor's backup, a copy) is refused by name, never joined."""
    found = sorted(parts_dir.glob(PART_GLOB))
    if not found:
        raise CollectError(f"{parts_dir}: no {PART_GLOB} files (what longrange.sh writes into its OUTDIR)")
    stray = [p.name for p in found if not PART_NAME.fullmatch(p.name) or not p.is_file() or p.is_symlink()]
    if stray:
        raise CollectError(f"{parts_dir}: {', '.join(stray)} not a part longrange.sh writes (campaign.tar.partNN, a "
                           "plain file): move it out of the folder")
    numbers = [int(PART_NAME.fullmatch(p.name).group(1)) for p in found]
    parts = [p for _, p in sorted(zip(numbers, found))]
    if sorted(numbers) != list(range(len(numbers))):
        raise CollectError(f"{parts_dir}: parts {', '.join(p.name for p in parts)} leave a number out (a part "
                           "missing?)")
    return parts


def _check_members(tar: tarfile.TarFile, where: str) -> None:
    """Only folders and regular files of at most MAX_MEMBER_BYTES each, none sparse: what longrange.sh packs."""
    for member in tar.getmembers():
        if member.isdir():
            continue
        if not member.isfile() or member.issparse():
            kind = "a sparse file" if member.issparse() else "not a regular file"
            raise CollectError(f"{where}: member {member.name!r} is {kind}; a pack holds folders and files only")
        if member.size > MAX_MEMBER_BYTES:
            raise CollectError(f"{where}: member {member.name!r} is {member.size} bytes, over the "
                               f"{MAX_MEMBER_BYTES} a call can bring back")


def extract(parts_dir: Path, into: Path) -> None:
    """The tar that the parts in ``parts_dir`` make together, extracted into ``into`` (regular files and folders
    only)."""
    parts = _parts(parts_dir)
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
            _check_members(tar, f"{parts_dir}: {names}")
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise CollectError(f"{parts_dir}: {names} do not make a complete tar (a part missing or cut short?): "
                           f"{exc}") from None
    joined.unlink()


def _no_links(root: Path, dest: Path) -> None:
    """Refuse to write ``dest`` through a symbolic link: ``root`` itself or any folder between it and ``dest``."""
    folders = [root]
    for part in dest.relative_to(root).parts[:-1]:
        folders.append(folders[-1] / part)
    for path in folders:
        if path.is_symlink():
            raise CollectError(f"{path} is a symbolic link: collect writes into real folders only (the link could "
                               "lead outside the repository)")


def _copy(src: Path, dest: Path, root: Path) -> None:
    _no_links(root, dest)
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
                _copy(stage / "unpacked" / relative, checkpoints / spec / folder / cell / name, checkpoints)
                done.append(f"{checkpoints / relative}")
                logged = [(runs_logs / spec / folder / cell / name, checkpoints / spec / folder / cell / name)
                          for name in RUN_LOGS]
                for extra, dest in (*logged,
                                    (runs_logs / spec / folder / OVERRIDES, checkpoints / spec / folder / OVERRIDES)):
                    if extra.is_file():
                        _copy(extra, dest, checkpoints)
                        done.append(str(dest))
        for src in sorted((stage / "logs" / "results").rglob("*")) if (stage / "logs" / "results").is_dir() else []:
            if not src.is_file():
                continue
            dest = results / src.relative_to(stage / "logs" / "results")
            if src.suffix != ".json":
                done.append(f"{dest}: not a results file (.json): left out")
                continue
            try:
                json.loads(src.read_text())
            except (UnicodeDecodeError, ValueError) as exc:
                done.append(f"{dest}: not valid JSON ({exc}): left out")
                continue
            if dest.exists():
                same = filecmp.cmp(src, dest, shallow=False)
                done.append(f"{dest}: already there" + ("" if same else ", and different: left as it was"))
                continue
            _copy(src, dest, results)
            ledger.add(results, [dest])  # the store's ledger lists every results file it holds
            done.append(str(dest))
        if logs is not None and (stage / "logs").is_dir():
            _no_links(logs, logs / "calls.txt")
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
