"""The ledger of a store's results files: one line per file ``run`` wrote, so a file that went missing or changed is
named, never silently judged without it.

``<store>/ledger.jsonl`` holds one JSON object per line: ``file`` (the path under the store,
``<spec id>/<name>.json``), ``sha256`` (of its bytes), ``recorded`` (UTC time the line was added) and ``verdicts``
(the claims' verdict counts the file gave when it was written). ``run`` adds its file's line as it writes it
(:func:`add`), as does the campaign's collect script for the files it brings home; a maintainer adds files written
before the ledger existed with ``python -m runners ledger add``. ``check`` holds the store to its ledger
(:func:`problems`): a listed file that is missing or whose bytes changed, and a results file the ledger does not
list, are each one line naming the file. A store without a ledger (a researcher's own folder) is not held to one;
``check`` says so.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..core.atomic import write_text_atomic
from ..core.lock import exclusive

LEDGER_NAME = "ledger.jsonl"
#: results folders of a store that hold step-rate records and logs, not a spec's results files
NOT_SPECS = ("diagnostics",)


class LedgerError(ValueError):
    """A ledger that cannot be read: one line naming the file and the line."""


def ledger_path(store_root: Path) -> Path:
    return Path(store_root) / LEDGER_NAME


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read(store_root: Path) -> dict[str, dict[str, Any]]:
    """The ledger's entries by file ({} when the store has no ledger); the last line of a file wins."""
    path = ledger_path(store_root)
    if not path.is_file():
        return {}
    entries: dict[str, dict[str, Any]] = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LedgerError(f"{path}: line {number} is not JSON ({exc.msg})") from None
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str)
                and isinstance(entry.get("sha256"), str)):
            raise LedgerError(f"{path}: line {number}: an object with 'file' and 'sha256' (strings) expected")
        entries[entry["file"]] = entry
    return entries


def add(store_root: Path, files: Iterable[Path], verdicts: dict[str, dict[str, int]] | None = None) -> list[str]:
    """Append a line for each results file in ``files`` (paths under ``store_root``) to the store's ledger, under
    the store's lock; returns the ``file`` keys added. ``verdicts``: the counts per file key, where known."""
    root = Path(store_root)
    keys = []
    with exclusive(root / ".ledger.lock", f"the ledger of {root}"):
        path = ledger_path(root)
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text and not text.endswith("\n"):
            text += "\n"
        for file in files:
            key = Path(file).resolve().relative_to(root.resolve()).as_posix()
            entry = {"file": key, "sha256": file_digest(file),
                     "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "verdicts": (verdicts or {}).get(key)}
            text += json.dumps(entry) + "\n"
            keys.append(key)
        write_text_atomic(path, text)
    return keys


def results_files(store_root: Path) -> list[Path]:
    """The spec results files a store holds: ``<spec id>/*.json`` (step-rate records and logs apart)."""
    root = Path(store_root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/*.json") if p.parent.name not in NOT_SPECS and p.is_file())


def problems(store_root: Path, spec_ids: Iterable[str] | None = None) -> list[str]:
    """One line per file the ledger lists that is missing or changed, and per results file it does not list
    (limited to ``spec_ids`` when given); [] when all agree or the store keeps no ledger."""
    root = Path(store_root)
    entries = read(root)
    if not entries:
        return []
    wanted = set(spec_ids) if spec_ids is not None else None
    out = []
    for key, entry in sorted(entries.items()):
        if wanted is not None and key.split("/")[0] not in wanted:
            continue
        path = root / key
        if not path.is_file():
            out.append(f"{path}: listed in {ledger_path(root)} but missing (a results file deleted or moved)")
        elif file_digest(path) != entry["sha256"]:
            out.append(f"{path}: its bytes differ from those {ledger_path(root)} recorded (edited after it was "
                       f"written)")
    for path in results_files(root):
        key = path.relative_to(root).as_posix()
        if key not in entries and (wanted is None or path.parent.name in wanted):
            out.append(f"{path}: not listed in {ledger_path(root)} (a results file the ledger does not know: add "
                       f"it with `python -m runners ledger add {path}` once it is checked)")
    return out
