"""Move training checkpoints between machines through a flat folder of plainly named files.

    python -m runners.execute.transfer pack runs/ OUT [--cells GLOB] [--unfinished-only]  # checkpoint.pt -> OUT/
    python -m runners.execute.transfer unpack OUT runs/             # back to runs/<spec>/<tier>/<cell>/checkpoint.pt

A training cell's checkpoint lives at ``runs/<spec id>/<tier>/<row>__<task>/checkpoint.pt`` (its metrics.jsonl is
rewritten from the checkpoint's history when the run resumes, so the checkpoint is all a resumed run needs). Cell
folders hold spaces and parentheses ("S4-LegS (suite data)__Pathfinder"); ``pack`` copies each checkpoint to one
flat file named with letters, digits, '.', '_' and '-' only, and writes ``transfer_manifest.json`` mapping each file
back to its place (with its size and SHA-256). ``unpack`` checks each file against the manifest and writes it to
its place atomically; a manifest entry that would leave the runs folder, a missing or altered file, is an error
naming it. Files are copied, never moved: the source stays as it was. ``--unfinished-only`` leaves out the
checkpoints at the end of their schedules: a finished run trains nothing more, and what it produced (its results
file, its metrics) travels without its checkpoint, so a campaign's call brings back only what a next call resumes.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Optional, Sequence

from runners.core.atomic import atomic_path, write_text_atomic

MANIFEST = "transfer_manifest.json"
CHECKPOINT = "checkpoint.pt"


class TransferError(ValueError):
    """A checkpoint transfer that cannot be done; the message names the file or entry."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def flat_name(relative: PurePosixPath) -> str:
    """A plain file name for ``<spec>/<tier>/<cell>/checkpoint.pt``: runs of other characters become '_', and a
    short hash of the whole path keeps two cells whose names differ only there apart."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", "__".join(relative.parts[:-1])).strip("_.")
    return f"{stem[:150]}-{hashlib.sha256(str(relative).encode()).hexdigest()[:8]}.pt"


def pack(runs: Path, out: Path, cells: Sequence[str] = (), unfinished_only: bool = False) -> list[str]:
    """Copy every ``<spec>/<tier>/<cell>/checkpoint.pt`` under ``runs`` (those whose ``spec/tier/cell`` matches
    one of ``cells``, all when empty; with ``unfinished_only``, not those at the end of their schedules, whose
    training is over) to ``out`` as flat files; write the manifest. Returns the files written."""
    runs, out = Path(runs), Path(out)
    found = sorted(runs.glob(f"*/*/*/{CHECKPOINT}"))
    picked = [p for p in found if not cells or any(
        fnmatch.fnmatchcase("/".join(p.relative_to(runs).parts[:-1]), g) for g in cells)]
    finished = []
    if unfinished_only:  # an unreadable checkpoint is not judged finished: it is packed
        from runners.report.progress import summarize  # reads each checkpoint: only when asked

        finished = [p for p in picked if summarize(p, runs, []).finished]
        picked = [p for p in picked if p not in finished]
    if not picked:
        raise TransferError(f"pack: no {CHECKPOINT} under {runs}/<spec>/<tier>/<cell>/"
                            + (f" matching {list(cells)}" if cells else "")
                            + (f" that has not finished its schedule ({len(finished)} finished)"
                               if unfinished_only else ""))
    out.mkdir(parents=True, exist_ok=True)
    entries = {}
    for path in picked:
        relative = PurePosixPath(*path.relative_to(runs).parts)
        name = flat_name(relative)
        with atomic_path(out / name) as tmp:
            shutil.copyfile(path, tmp)
        entries[name] = {"path": str(relative), "bytes": path.stat().st_size, "sha256": _sha256(out / name)}
    write_text_atomic(out / MANIFEST, json.dumps(entries, indent=1) + "\n")
    return [*entries, MANIFEST]


def unpack(src: Path, runs: Path) -> list[str]:
    """Restore the files of ``src``'s manifest under ``runs``; returns the paths written (relative to ``runs``)."""
    src, runs = Path(src), Path(runs)
    manifest = src / MANIFEST
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TransferError(f"unpack: {manifest} does not exist (made by `pack`)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TransferError(f"unpack: {manifest} is not a JSON manifest: {exc}") from None
    if not isinstance(entries, dict):
        raise TransferError(f"unpack: {manifest}: expected an object of file name -> {{path, bytes, sha256}}")
    written = []
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise TransferError(f"unpack: {manifest}: entry {name!r} has no 'path'")
        relative = PurePosixPath(entry["path"])
        if (relative.is_absolute() or ".." in relative.parts or len(relative.parts) != 4
                or relative.name != CHECKPOINT or "/" in name or name in ("", ".", "..")):
            raise TransferError(f"unpack: {manifest}: entry {name!r}: path {entry['path']!r} is not "
                                f"<spec>/<tier>/<cell>/{CHECKPOINT} inside the runs folder")
        path = src / name
        if not path.is_file() or path.is_symlink():
            raise TransferError(f"unpack: {path}: listed in the manifest, not a regular file here")
        if path.stat().st_size != entry.get("bytes") or _sha256(path) != entry.get("sha256"):
            raise TransferError(f"unpack: {path}: its size or SHA-256 differs from the manifest's (a partial copy?)")
        dest = runs.joinpath(*relative.parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp:
            shutil.copyfile(path, tmp)
        written.append(str(relative))
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="runs folder -> flat folder of checkpoints and a manifest")
    p.add_argument("runs", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--cells", action="append", default=[], help="glob on '<spec>/<tier>/<cell>' (repeatable)")
    p.add_argument("--unfinished-only", action="store_true",
                   help="leave out the checkpoints at the end of their schedules (their training is over)")
    u = sub.add_parser("unpack", help="flat folder made by pack -> runs folder")
    u.add_argument("src", type=Path)
    u.add_argument("runs", type=Path)
    args = parser.parse_args(argv)
    try:
        done = (pack(args.runs, args.out, args.cells, args.unfinished_only) if args.cmd == "pack"
                else unpack(args.src, args.runs))
    except TransferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
