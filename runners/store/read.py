"""Reading results files: the one loader and the one schema every command uses (check, report, list, compare).

Where a results file enters, it is checked whole, and anything wrong is one line naming the file, the key and
what is allowed (:class:`ResultsError`; the command line exits 2):

- the file: a regular file (a symlink, FIFO, socket, device or folder where a results file belongs is refused,
  and never opened for reading), UTF-8, JSON in which no object gives a key twice;
- its contents (:func:`result_errors`): a table's results file has ``spec_id`` (a plain spec id) and ``tier``,
  ``cells`` as ``[{row, column, value}, ...]`` with each value a number (NaN and inf included: they are judged
  FAIL), "X" or null, and the optional keys in their types (``selected_cells``, ``overrides``, ``notes``,
  ``environment``, ``series``, ``started`` / ``finished``);
- its place under ``results/`` (:func:`load_result` with a spec id and tier; :func:`load_tier_results`): the
  folder is the spec id the file records, the file name ``<UTC stamp>_<tier>[_<suffix>].json`` carries the tier
  it records, the stamp is a date; the times it records (``started``, ``finished``: ISO 8601) and its name's
  stamp are not in the future (beyond :data:`CLOCK_SKEW`), and it finishes after it starts; every cell
  ``selected_cells`` names is a cell of the spec's expected file.

The files of one (spec, tier) are ordered by the time they record (``finished``, else ``started``; a file that
records neither by its name's stamp), newest first -- never by their names alone, so a copy named
``20991231T000000_smoke.json`` outranks nothing (and, dated in the future, is refused).

Two stores hold results files (runners/core/layout.py): the reference store ``results/`` (committed) and the local
store ``local/results/`` (a researcher's runs, git-ignored). By default (:data:`READ_FROM` None) a tier's files are
those of both stores, ordered together by the time they record: a newer local run of a cell is what judges it, and
the cells it did not run keep the reference's verdict. :func:`store_of` names the store a file came from.
``--results reference`` / ``--results local`` read one store, ``--results DIR`` one folder (:func:`read_roots`).
"""
from __future__ import annotations

import json
import os
import re
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import AfterValidator, AllowInfNan, BaseModel, ConfigDict, Strict, ValidationError

from ..core import layout
from ..core.yamlio import file_kind
from ..specs.expected import expected_path, load_expected
from ..specs.schema import Choice, Opt, Problem, problems
from ..specs.spec import ID_PATTERN, TIERS
from .evidence import digest_mismatches, plausibility_problems, value_mismatches

#: how far in the future a recorded time or a file name's stamp may lie (clocks of the machines that wrote the
#: results differ a little); beyond it the file is refused as dated in the future
CLOCK_SKEW = timedelta(minutes=10)

#: time keys a table's results file may record (ISO 8601, with a UTC offset or read as UTC)
TIME_KEYS = ("started", "finished")


class ResultsError(ValueError):
    """A results file cannot be judged (corrupt, truncated, wrong shape, misplaced): one line naming the file and
    the key."""


#: the two stores of results files
REFERENCE, LOCAL = "reference", "local"
STORES = (REFERENCE, LOCAL)

#: what check / report / list read (``--results``): None, the reference store overlaid by the local one;
#: "reference" or "local", that store alone; a Path, that folder alone
READ_FROM: str | Path | None = None


def results_root() -> Path:
    """The reference store's folder (``results/``, or ``$SSM_RESULTS_DIR``)."""
    return layout.RESULTS_DIR


def store_root(store: str) -> Path:
    """The results folder of ``store`` ("reference": ``results/``; "local": ``local/results/``)."""
    if store == REFERENCE:
        return layout.RESULTS_DIR
    if store == LOCAL:
        return layout.local_results_dir()
    raise ValueError(f"no results store named {store!r}; allowed: {', '.join(STORES)}")


def _same_folder(a: Path, b: Path) -> bool:
    return Path(a) == Path(b) or Path(a).resolve() == Path(b).resolve()


def read_roots(read_from: str | Path | None = None) -> list[tuple[str, Path]]:
    """The (store name, results folder) pairs that check / report / list read: both stores by default
    (:data:`READ_FROM` None), one store, or one folder (named "folder <DIR>"); a folder named twice counts once."""
    choice = READ_FROM if read_from is None else read_from
    if choice is None:
        pairs = [(name, store_root(name)) for name in STORES]
    elif isinstance(choice, str) and choice in STORES:
        pairs = [(choice, store_root(choice))]
    else:
        pairs = [(store_of_folder(choice), Path(choice))]
    out: list[tuple[str, Path]] = []
    for name, folder in pairs:
        if not any(_same_folder(folder, seen) for _, seen in out):
            out.append((name, folder))
    return out


def store_of_folder(folder: str | Path) -> str:
    """The store a results folder is: "reference", "local", or "folder <folder>" for any other folder
    (``--results DIR``, ``--output DIR``)."""
    for name in STORES:
        if _same_folder(Path(folder), store_root(name)):
            return name
    return f"folder {folder}"


def store_of(path: str | Path) -> str:
    """The store a results file (``<folder>/<spec id>/<name>.json``) lies in (:func:`store_of_folder`)."""
    return store_of_folder(Path(path).parent.parent)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------------------------ the file itself

def _not_regular(path: Path, mode: int) -> ResultsError:
    return ResultsError(f"{path}: is {file_kind(mode)}; a results file must be a regular file (not a symlink, FIFO, "
                        f"socket, device or folder): replace it with the file itself or remove it")


class _DuplicateKey(ValueError):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    """json object_pairs_hook: a key given twice in one object is an error (json keeps the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_json_file(path: str | Path, error: Callable[[str], Exception] = ResultsError) -> Any:
    """The JSON document of one results file, checked as a file: regular (a symlink or a FIFO is refused without
    opening it for reading), UTF-8, valid JSON, no key given twice in one object. Raises ``error`` (one line
    naming the file)."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise error(f"{path}: file not found (a results file, e.g. results/<spec id>/<stamp>_<tier>.json)") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise error(str(_not_regular(path, mode)))
    # O_NOFOLLOW / O_NONBLOCK: a file swapped for a link or a pipe since lstat is never followed or waited on
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc}); a results file must be a regular file") \
            from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(str(_not_regular(path, mode)))
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read()
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; a results file is JSON written by `runners run`") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_object)
    except _DuplicateKey as exc:
        raise error(f"{path}: key {exc.args[0]!r} is given twice in one JSON object; each key is allowed once "
                    f"(which value would count?)") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}): a truncated or "
                    f"corrupt results file; rerun the spec or remove the file") from None
    except RecursionError:
        raise error(f"{path}: not valid JSON (nested too deeply)") from None


# ------------------------------------------------------------------------------------------------------ contents

def plain_id_error(key: str, value: Any) -> str | None:
    """Why ``value`` is not a plain spec id (lower-case letters, digits and '-': never a path), or None."""
    if not isinstance(value, str):
        return f"'{key}' must be a spec id (a string), got {value!r}"
    if not ID_PATTERN.fullmatch(value):
        return (f"'{key}' is {value!r}: a spec id is a plain name (lower-case letters, digits and '-', e.g. "
                f"s4d-table-5), never a path")
    return None


def _plain_id(value: str) -> str:
    if plain_id_error("spec_id", value):
        raise ValueError("not a plain id")
    return value


#: a measured value: a number (NaN and inf included: they are judged FAIL), "X" (out of memory / failure) or null
#: (not measured; the note says why)
Measured = Union[Annotated[int, Strict()], Annotated[float, Strict(), AllowInfNan(True)], Literal["X"], None]
Strings = Annotated[list[Annotated[str, Strict()]], Strict()]
Time = Annotated[str, Strict()]  # ISO 8601, read by :func:`parse_time`


class ResultCell(BaseModel):
    """One measured cell (runners/specs/registry.py, ``Cell``)."""

    model_config = ConfigDict(strict=True, extra="allow")
    row: Annotated[str, Strict()]
    column: Annotated[str, Strict()]
    value: Measured
    unit: Opt(Annotated[str, Strict()]) = None
    note: Opt(Annotated[str, Strict()]) = None


class ResultDocument(BaseModel):
    """The keys of a table's results file that a verdict reads; the rest (the resolved spec, the config, the series'
    contents) is the run's record, kept as written."""

    model_config = ConfigDict(strict=True, extra="allow")
    spec_id: Annotated[str, Strict(), AfterValidator(_plain_id)]
    tier: Choice(TIERS)
    cells: list[ResultCell]
    selected_cells: list[Annotated[tuple[Annotated[str, Strict()], Annotated[str, Strict()]], Strict(False)]] = []
    notes: Opt(Strings) = None
    overrides: Opt(Strings) = None
    problems: Opt(Strings) = None
    environment: Opt(Annotated[dict, Strict()]) = None
    series: Opt(Annotated[dict, Strict()]) = None
    started: Opt(Time) = None
    finished: Opt(Time) = None


def _result_line(doc: dict, p: Problem) -> str:
    """One problem of a results file in the suite's words."""
    loc, key = p.loc, str(p.loc[0]) if p.loc else ""
    if key == "cells" and len(loc) >= 2:
        i = loc[1]
        c = doc["cells"][i]
        if len(loc) == 2:
            return f"cells[{i}] must be an object {{row, column, value}}, got {type(c).__name__}"
        field = loc[2]
        if p.kind == "missing":
            return f"cells[{i}] lacks {[k for k in ('row', 'column', 'value') if k not in c]}"
        if field in ("row", "column"):
            return f"cells[{i}]: row and column must be strings, got {c.get('row')!r}, {c.get('column')!r}"
        if field == "value":
            return f"cells[{i}] ({c['row']} / {c['column']}).value must be a number, 'X' or null, got {c['value']!r}"
        return f"cells[{i}].{field} must be a string or null, got {c.get(field)!r}"
    if p.kind == "missing" and len(loc) == 1:
        return f"no '{key}' key: a results file records the spec and the tier it ran " \
               f"({'a spec id' if key == 'spec_id' else 'one of ' + ', '.join(TIERS)})"
    value = doc.get(key)
    if key == "spec_id":
        return plain_id_error("spec_id", value) or f"'spec_id' is {value!r}"
    if key == "tier":
        return f"'tier' is {value!r}; allowed: {', '.join(TIERS)}"
    if key == "cells":
        return f"'cells' must be a list of {{row, column, value}}, got {type(value).__name__}"
    if key == "selected_cells":
        return "'selected_cells' must be a list of [row, column] pairs of strings"
    if key in ("notes", "overrides", "problems"):
        return f"'{key}' must be a list of strings"
    if key in TIME_KEYS:
        return f"'{key}' must be an ISO 8601 time (a string), got {value!r}"
    return f"'{key}' must be an object, got {type(value).__name__}"


def result_errors(doc: Any) -> list[str]:
    """What makes a parsed table results file unusable (empty list: usable): pydantic's checks of the keys a verdict
    reads (:class:`ResultDocument`), then no cell reported twice."""
    if not isinstance(doc, dict):
        return [f"top level must be a JSON object, got {type(doc).__name__}"]
    if "cells" not in doc:
        return ["no 'cells' key (a results file lists its measured cells as [{row, column, value}, ...])"]
    try:
        ResultDocument.model_validate(doc)
    except ValidationError as exc:
        found = problems(exc)
        errs = list(dict.fromkeys(_result_line(doc, p) for p in found))
        if any(p.loc[:1] == ("cells",) and len(p.loc) == 1 for p in found):
            return errs  # not a list: nothing more to say about its entries
        return errs + _twice(doc)
    return _twice(doc)


def _twice(doc: dict) -> list[str]:
    """The cells reported more than once (of those that name a row and a column)."""
    errs, seen = [], set()
    for i, c in enumerate(doc["cells"]):
        if isinstance(c, dict) and isinstance(c.get("row"), str) and isinstance(c.get("column"), str):
            if (c["row"], c["column"]) in seen:
                errs.append(f"cells[{i}]: ({c['row']} / {c['column']}) is reported twice")
            seen.add((c["row"], c["column"]))
    return errs


def check_result(path: Path, doc: Any) -> dict:
    """``doc`` if it is a usable table results file, else ResultsError naming ``path`` and the first problem."""
    errs = result_errors(doc)
    if errs:
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise ResultsError(f"{path}: {errs[0]}{more}")
    return doc


# --------------------------------------------------------------------------------------------- place and time

def result_name(tier: str) -> re.Pattern:
    """<UTC stamp>_<tier>.json, or with a uniqueness suffix: <stamp>_<tier>_<suffix>.json."""
    return re.compile(rf"^(\d{{8}}T\d{{6,}})_{re.escape(tier)}(?:_([A-Za-z0-9-]+))?\.json$")


def name_key(path: Path, tier: str) -> tuple[str, int, str]:
    """Sort key of a results file by its name: its stamp, then a numeric uniqueness suffix, then the name."""
    stamp, suffix = result_name(tier).match(path.name).groups()
    return stamp, int(suffix) if suffix and suffix.isdigit() else 0, path.name


def _stamp_time(path: Path, stamp: str) -> datetime:
    try:
        return datetime.strptime(stamp[:15], "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ResultsError(f"{path}: the file name's stamp {stamp!r} is not a date and time (YYYYMMDDTHHMMSS, UTC)") \
            from None


def parse_time(path: Path, key: str, text: str) -> datetime:
    """A recorded time (ISO 8601; 'Z' or an offset; without one it is read as UTC) as an aware datetime."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ResultsError(f"{path}: '{key}' is {text!r}; allowed: an ISO 8601 time such as "
                           f"2026-11-26T07:30:34+00:00") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def recorded_time(path: Path, doc: dict, tier: str) -> datetime:
    """When the run recorded in ``doc`` ended: ``finished``, else ``started``, else the stamp of the file's name."""
    for key in ("finished", "started"):
        if isinstance(doc.get(key), str):
            return parse_time(path, key, doc[key])
    return _stamp_time(path, result_name(tier).match(path.name).group(1))


def _place_errors(path: Path, doc: dict, spec_id: str | None, tier: str | None) -> None:
    """Raise ResultsError where the file's contents disagree with its place, or it is dated in the future."""
    for key, want, place in (("spec_id", spec_id, "its folder"), ("tier", tier, "its file name")):
        if want is not None and doc[key] != want:
            raise ResultsError(f"{path}: '{key}' is {doc[key]!r}, but {place} files it under {want!r}; a results "
                               f"file lives in results/<spec_id>/<stamp>_<tier>.json")
    limit = _now() + CLOCK_SKEW
    times = {key: parse_time(path, key, doc[key]) for key in TIME_KEYS if isinstance(doc.get(key), str)}
    if tier is not None:
        match = result_name(tier).match(path.name)
        if match is None:
            raise ResultsError(f"{path}: the file name does not say tier {tier!r}; allowed: "
                               f"<YYYYMMDDTHHMMSS>_{tier}[_<suffix>].json")
        times["the file name's stamp"] = _stamp_time(path, match.group(1))
    for key, when in times.items():
        if when > limit:
            where = key if key.startswith("the file") else f"'{key}'"
            raise ResultsError(f"{path}: dated in the future: {where} is {when.isoformat()}, later than now "
                               f"({_now().isoformat(timespec='seconds')}) plus {CLOCK_SKEW}; a results file records "
                               f"a run that has happened")
    if "started" in times and "finished" in times and times["finished"] < times["started"]:
        raise ResultsError(f"{path}: 'finished' ({doc['finished']}) is before 'started' ({doc['started']}); a run "
                           f"finishes after it starts")


def _selection_errors(path: Path, doc: dict, expected: dict | None) -> None:
    """Raise ResultsError where ``selected_cells`` names a cell the expected file lacks."""
    if expected is None or "selected_cells" not in doc:
        return
    known = {(c["row"], c["column"]) for c in expected["cells"]}
    unknown = [f"{r} / {c}" for r, c in doc["selected_cells"] if (r, c) not in known]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise ResultsError(f"{path}: 'selected_cells' names {unknown[0]!r}{more}, which is not a cell of "
                           f"expected/{doc['spec_id']}.yaml; allowed: the expected file's (row, column) cells")


_EXPECTED_CACHE: dict[tuple[str, int, int], dict] = {}


def expected_for(spec_id: str) -> dict | None:
    """The expected file of ``spec_id`` (a plain id) when it exists, loaded and checked once per version."""
    path = expected_path(spec_id)
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _EXPECTED_CACHE:
        if len(_EXPECTED_CACHE) > 64:
            _EXPECTED_CACHE.clear()
        _EXPECTED_CACHE[key] = load_expected(path)
    return _EXPECTED_CACHE[key]


def load_result(path: str | Path, spec_id: str | None = None, tier: str | None = None,
                expected: dict | None = None) -> dict:
    """Read and check one table results file; raise ResultsError (one line naming the file) if it cannot be
    judged.

    With ``spec_id`` / ``tier`` (the place the file is filed under), the file must also agree with its place, not
    be dated in the future and select only cells of the expected file (``expected``, else expected/<spec_id>.yaml
    when it exists).
    """
    path = Path(path)
    doc = check_result(path, read_json_file(path))
    mismatches = digest_mismatches(doc) + value_mismatches(doc) + plausibility_problems(doc)
    if mismatches:
        raise ResultsError(f"{path}: {mismatches[0]}" + (f" (and {len(mismatches) - 1} more such cells)"
                                                          if len(mismatches) > 1 else ""))
    if spec_id is not None or tier is not None:
        _place_errors(path, doc, spec_id, tier)
        if spec_id is not None:
            _selection_errors(path, doc, expected if expected is not None else expected_for(spec_id))
    return doc


# ---------------------------------------------------------------------------------------------- a tier's files

def _spec_dir(spec_id: str, root: Path) -> Path | None:
    """results/<spec id>/ (None when there is none); a folder that is a symlink or not a folder is refused."""
    if (why := plain_id_error("spec_id", spec_id)) is not None:
        raise ResultsError(f"results of {spec_id!r}: {why}")
    base = root / spec_id
    try:
        mode = os.lstat(base).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode):
        raise ResultsError(f"{base}: is {file_kind(mode)}; results/<spec id>/ must be a folder of its own (not a "
                           f"symlink)")
    return base


def _belongs_to(name: str, tier: str) -> bool:
    """A name of ``tier``'s results files, or one no tier claims (every tier reports a bad entry of that kind)."""
    tiers = [t for t in TIERS if f"_{t}" in name]
    return not tiers or tier in tiers


def result_paths(spec_id: str, tier: str, root: Path | None = None) -> list[Path]:
    """Every results/<spec id>/<stamp>_<tier>[_<suffix>].json by name, newest name first (a listing; the files are
    judged in the order of the times they record: :func:`load_tier_results`). Without ``root``: those of every
    folder :func:`read_roots` names."""
    pattern = result_name(tier)
    roots = [root] if root is not None else [folder for _, folder in read_roots()]
    files = [p for base in roots for p in (base / spec_id).glob(f"*_{tier}*.json") if pattern.match(p.name)]
    return sorted(files, key=lambda p: name_key(p, tier), reverse=True)


def latest_result(spec_id: str, tier: str, root: Path | None = None) -> Path | None:
    """The newest results file of (spec, tier) by the time it records, or None (a file that cannot be read counts
    by its name)."""
    try:
        loaded = load_tier_results(spec_id, tier, root)
    except (ResultsError, ValueError):
        paths = result_paths(spec_id, tier, root)
        return paths[0] if paths else None
    return loaded[0][0] if loaded else None


def load_tier_results(spec_id: str, tier: str, root: Path | None = None,
                      expected: dict | None = None) -> list[tuple[Path, dict]]:
    """Every results file of (spec, tier), each checked by :func:`load_result` against its place, newest first by
    the time it records (``finished``, else ``started``, else its name's stamp; ties by name).

    ``root``: that results folder alone; without it, every folder :func:`read_roots` names (by default the
    reference store and the local one), their files ordered together by the times they record (at the same time
    the reference store's first). :func:`store_of` tells which store each path lies in.

    Anything under results/<spec id>/ that is not a regular file (a symlink, a FIFO, ...) is refused with one line,
    whether or not its name is a results file's; an entry whose name says another tier is left to that tier.
    """
    if root is not None:
        return _folder_results(spec_id, tier, Path(root), expected)
    loaded = []
    for name, folder in read_roots():
        loaded += [(path, doc, name == REFERENCE) for path, doc in _folder_results(spec_id, tier, folder, expected)]
    order = {path: (recorded_time(path, doc, tier), first, name_key(path, tier)) for path, doc, first in loaded}
    return [(path, doc) for path, doc, _ in sorted(loaded, key=lambda item: order[item[0]], reverse=True)]


def _folder_results(spec_id: str, tier: str, root: Path, expected: dict | None) -> list[tuple[Path, dict]]:
    """:func:`load_tier_results` of one results folder."""
    base = _spec_dir(spec_id, root)
    if base is None:
        return []
    pattern = result_name(tier)
    paths = []
    with os.scandir(base) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            mode = entry.stat(follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                if _belongs_to(entry.name, tier):
                    raise _not_regular(base / entry.name, mode)
                continue
            if pattern.match(entry.name):
                paths.append(base / entry.name)
    if expected is None:
        expected = expected_for(spec_id)
    loaded = [(p, load_result(p, spec_id, tier, expected)) for p in paths]
    order = {p: (recorded_time(p, doc, tier), name_key(p, tier)) for p, doc in loaded}
    return sorted(loaded, key=lambda item: order[item[0]], reverse=True)

