"""YAML input checked where it enters: the one loader (runners/core/yamlio.py) and the spec's include graph
(runners/specs/spec.py) are bounded, refuse what is not a regular file inside the project, refuse values that are not
plain (dates, non-text keys, integers beyond a float, self-containing nodes) and seeds outside numpy's range; and
``validate`` refuses what ``run`` would refuse only after running, with the same line.

Every case is one line naming the file and the key and what is allowed (the CLI exits 2), never a traceback, a
hang or a huge allocation: each test runs under an alarm (conftest.py's ``bounded``), the expansion cases also under a
tracemalloc ceiling, and one case runs the real CLI in a subprocess with a timeout and an address-space limit.
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from runners.cli.main import main
from runners.core.errors import SpecError
from runners.core.yamlio import MAX_EXPANDED, YamlError, load_yaml_text, plain_problem
from runners.specs.spec import load_spec, resolve_includes

REPO = Path(__file__).resolve().parent.parent
#: seconds any one test may take before it is stopped as a hang (read by conftest.py's bounded fixture)
CASE_SECONDS = 20
#: every case runs under that time limit and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")
#: Python allocations (bytes) a refused expansion may make at most
ALLOC_CEILING = 32 << 20


SPECS = ("s4d-theorem-6", "s4-table-6", "_sequences")
EXPECTED = ("s4d-theorem-6", "s4-table-6")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two of the repository's specs (one analytic, one training table with an include) and their expected files in
    a temporary project, the current directory."""
    root = tmp_path / "project"
    (root / "reproductions").mkdir(parents=True)
    (root / "expected").mkdir()
    for name in SPECS:
        shutil.copy(REPO / "reproductions" / f"{name}.yaml", root / "reproductions")
    for name in EXPECTED:
        shutil.copy(REPO / "expected" / f"{name}.yaml", root / "expected")
    monkeypatch.chdir(root)
    return root


THEOREM6 = Path("reproductions/s4d-theorem-6.yaml")
TABLE6 = Path("reproductions/s4-table-6.yaml")


def _one_line(capsys: pytest.CaptureFixture, argv: list[str], must: list[str]) -> str:
    """Run the CLI: exit 2, one stderr line holding every string of ``must``, no traceback."""
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in must:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def _run(capsys: pytest.CaptureFixture, spec: str, must: list[str], *extra: str) -> str:
    return _one_line(capsys, ["run", spec, "--tier", "smoke", "--no-progress", "--output", "out", *extra], must)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _billion_laughs(levels: int, width: int = 9) -> str:
    """``levels`` nested aliases of ``width`` each: a few hundred bytes that expand to width**levels nodes."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _bounded(fn: Callable[[], Any], seconds: float = 5.0) -> Any:
    """``fn()`` must return or raise within ``seconds`` and ALLOC_CEILING bytes of Python allocations (the runners
    are imported first, so that their imports do not count)."""
    from runners.specs import registry

    registry.load_all()
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        try:
            return fn()
        finally:
            elapsed = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1]
            assert elapsed < seconds, f"took {elapsed:.1f} s"
            assert peak < ALLOC_CEILING, f"allocated {peak >> 20} MiB"
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------ 1. aliases and includes are bounded

@pytest.mark.parametrize("levels", [6, 9, 30])
def test_nested_aliases_are_refused_before_expansion(levels: int) -> None:
    text = "id: x\n" + _billion_laughs(levels)
    assert len(text) < 2000
    with pytest.raises(YamlError) as err:
        _bounded(lambda: load_yaml_text(text, "laughs.yaml"))
    msg = str(err.value)
    assert "\n" not in msg and "laughs.yaml" in msg and "key 'l" in msg and f"at most {MAX_EXPANDED}" in msg


def _indented_laughs(levels: int) -> str:
    return "".join(f"  {line}\n" for line in _billion_laughs(levels).splitlines())


def test_nested_aliases_in_a_spec_fail_validate_and_run(project: Path, capsys: pytest.CaptureFixture) -> None:
    _append(THEOREM6, "shown:\n" + _indented_laughs(9))
    line = _bounded(lambda: _one_line(capsys, ["validate"], ["s4d-theorem-6.yaml", "key 'shown.l", "aliases"]),
                    seconds=10)
    assert line == _bounded(lambda: _run(capsys, "s4d-theorem-6", []), seconds=10)


def test_aliases_in_an_expected_file_are_bounded(project: Path, capsys: pytest.CaptureFixture) -> None:
    path = Path("expected/s4d-theorem-6.yaml")
    _append(path, "\n" + _billion_laughs(7).replace("l", "zz"))
    _bounded(lambda: _run(capsys, "s4d-theorem-6", ["s4d-theorem-6.yaml", "key 'zz", "at most"]), seconds=10)


def test_aliases_in_a_set_value_are_bounded(project: Path, capsys: pytest.CaptureFixture) -> None:
    value = "{a: &a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(
        f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]" for p, c in zip("abcdefg", "bcdefgh")) + "}"
    _bounded(lambda: _run(capsys, "s4d-theorem-6", ["--set", "t_max", "at most"], "--set", f"t_max={value}"),
             seconds=10)


def test_a_modest_use_of_aliases_still_loads() -> None:
    doc = load_yaml_text("base: &b {lr: 0.01, wd: 0.0}\nx: {<<: *b, lr: 0.1}\ny: [*b, *b]\n", "ok.yaml")
    assert doc == {"base": {"lr": 0.01, "wd": 0.0}, "x": {"lr": 0.1, "wd": 0.0},
                   "y": [{"lr": 0.01, "wd": 0.0}] * 2}
    spec = load_spec(REPO / "reproductions" / "s4d-table-3.yaml")  # the repository's most aliased spec
    assert spec.id == "s4d-table-3"


def _chain(folder: Path, n: int, fan: int = 2) -> Path:
    """_inc0.yaml includes _inc1.yaml ``fan`` times, _inc1 includes _inc2 ``fan`` times, ... (2**n reads unbounded)."""
    for i in range(n):
        body = {"include": [f"_inc{i + 1}.yaml"] * fan} if i + 1 < n else {}
        body[f"k{i}"] = i
        (folder / f"_inc{i}.yaml").write_text(yaml.safe_dump(body))
    return folder / "_inc0.yaml"


def test_include_fan_out_is_bounded_in_depth(project: Path, capsys: pytest.CaptureFixture) -> None:
    _chain(project / "reproductions", 24)
    _append(THEOREM6, "include: _inc0.yaml\n")
    line = _bounded(lambda: _one_line(capsys, ["validate"], ["key 'include'", "more than 8 levels", "at most 8"]),
                    seconds=10)
    assert "s4d-theorem-6" in line or "inc" in line


def test_include_fan_out_is_bounded_in_files(project: Path) -> None:
    folder = project / "reproductions"
    for i in range(40):
        (folder / f"_many{i}.yaml").write_text(f"k{i}: {i}\n")
    _append(THEOREM6, "include: [" + ", ".join(f"_many{i}.yaml" for i in range(40)) + "]\n")
    with pytest.raises(SpecError, match=r"key 'include'.*more than 32 files.*at most 32"):
        _bounded(lambda: resolve_includes(THEOREM6))


def test_each_included_file_is_read_once(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import runners.specs.spec as spec_mod

    top = _chain(project / "reproductions", 8, fan=3)  # 3**7 includes of the last file without the cache
    reads: list[Path] = []
    real = spec_mod._read_yaml
    monkeypatch.setattr(spec_mod, "_read_yaml", lambda p: reads.append(p) or real(p))
    doc = resolve_includes(top)
    assert doc == {f"k{i}": i for i in range(8)} and len(reads) == len(set(reads)) == 8


def test_include_cycle_is_still_refused(project: Path) -> None:
    (project / "reproductions" / "_a.yaml").write_text("include: _b.yaml\n")
    (project / "reproductions" / "_b.yaml").write_text("include: _a.yaml\n")
    _append(THEOREM6, "include: _a.yaml\n")
    with pytest.raises(SpecError, match="include cycle"):
        resolve_includes(THEOREM6)


# -------------------------------------------------------- 2. includes are regular files inside the project

def _outside(tmp_path: Path) -> Path:
    """A valid shared-settings file outside the project."""
    path = tmp_path / "elsewhere" / "_shared.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("paper: s4d\n")
    return path


INCLUDE_CASES: list[tuple[str, Callable[[Path], str], list[str]]] = [
    ("dev-zero", lambda p: "/dev/zero", ["'/dev/zero'", "outside the project"]),
    ("absolute-outside", lambda p: str(_outside(p.parent)), ["outside the project", "allowed"]),
    ("dotdot-outside", lambda p: "../../elsewhere/_shared.yaml" if _outside(p.parent) else "", ["outside the project"]),
    ("symlink-to-dev-zero", lambda p: (p / "reproductions" / "_z.yaml").symlink_to("/dev/zero") or "_z.yaml",
     ["'_z.yaml'", "resolves to /dev/zero"]),
    ("symlink-escaping", lambda p: (p / "reproductions" / "_s.yaml").symlink_to(_outside(p.parent)) or "_s.yaml",
     ["'_s.yaml'", "outside the project", "resolves to"]),
    ("fifo", lambda p: os.mkfifo(p / "reproductions" / "_f.yaml") or "_f.yaml", ["'_f.yaml'", "a FIFO"]),
    ("folder", lambda p: (p / "reproductions" / "_d.yaml").mkdir() or "_d.yaml", ["'_d.yaml'", "a folder"]),
]


@pytest.mark.parametrize("make, must", [c[1:] for c in INCLUDE_CASES], ids=[c[0] for c in INCLUDE_CASES])
def test_include_must_be_a_regular_file_inside_the_project(project: Path, capsys: pytest.CaptureFixture,
                                                            make: Callable[[Path], str], must: list[str]) -> None:
    _append(THEOREM6, f"include: {make(project)!r}\n")
    line = _run(capsys, "s4d-theorem-6", ["s4d-theorem-6.yaml", "key 'include'", *must])
    assert "regular YAML file" in line or "allowed" in line


def test_an_include_inside_the_project_through_a_symlink_still_loads(project: Path) -> None:
    (project / "shared").mkdir()
    (project / "shared" / "_base.yaml").write_text("paper: s4d\nshown: {smoke: from the include}\n")
    (project / "reproductions" / "_link.yaml").symlink_to(project / "shared" / "_base.yaml")
    _append(THEOREM6, "include: _link.yaml\n")
    assert load_spec(THEOREM6).shown == {"smoke": "from the include"}


def test_a_spec_or_expected_file_that_is_a_fifo_is_refused_unread(project: Path, capsys: pytest.CaptureFixture
                                                                   ) -> None:
    fifo = project / "reproductions" / "pipe.yaml"
    os.mkfifo(fifo)
    _one_line(capsys, ["run", str(fifo)], ["pipe.yaml", "a FIFO", "regular YAML file"])
    fifo.unlink()
    expected = Path("expected/s4d-theorem-6.yaml")
    expected.unlink()
    os.mkfifo(expected)
    _run(capsys, "s4d-theorem-6", ["s4d-theorem-6.yaml", "a FIFO", "regular YAML file"])


# --------------------------------------------- 3. keys, dates, self-containing nodes, big integers, seeds

def _tier_line(old: str, new: str) -> Callable[[str], str]:
    return lambda t: t.replace(old, new, 1)


SMOKE = "smoke:  {device: cpu, seed: 0, "
VALUE_CASES: list[tuple[str, Path, Callable[[str], str], list[str]]] = [
    ("int-and-str-keys", THEOREM6, lambda t: t + "shown: {1: a, smoke: b}\n", ["key 'shown.1'", "not text"]),
    ("int-tier-key", THEOREM6, _tier_line("  smoke:", "  16: {t_max: 1.0}\n  smoke:"), ["key 'tiers.16'", "an int"]),
    ("bool-key", THEOREM6, lambda t: t + "shown: {on: text}\n", ["key 'shown.on'", "a bool", "quote it"]),
    ("null-key", THEOREM6, lambda t: t + "shown: {~: text}\n", ["key 'shown.~'", "not text"]),
    ("list-key", THEOREM6, lambda t: t + "shown: {? [a, b] : text}\n", ["key 'shown.?'", "text keys"]),
    ("date-value", THEOREM6, lambda t: t + "shown: {smoke: 2026-11-27}\n",
     ["key 'shown.smoke'", "a date", "'2026-11-27'"]),
    ("timestamp-value", THEOREM6, lambda t: t.replace('table: "Theorem 6"', "table: 2026-11-27T10:00:00Z"),
     ["key 'table'", "a date"]),
    ("recursive-list", THEOREM6, lambda t: t + "shown: &p [theorem6_basis, *p]\n",
     ["key 'shown[1]'", "contains itself"]),
    ("recursive-merge", THEOREM6, lambda t: t + "shown: &s {smoke: x, <<: *s}\n", ["key 'shown.<<'", "contains itself"]),
    ("int-beyond-float", THEOREM6, _tier_line("grid: 2001}", "grid: " + "1" * 400 + "}"),
     ["key 'tiers.smoke.grid'", "beyond the range of a float"]),
    ("int-of-5000-digits", THEOREM6, _tier_line("grid: 2001}", "grid: " + "9" * 5000 + "}"),
     ["key 'tiers.smoke.grid'", "5000 characters"]),
    ("binary", THEOREM6, lambda t: t + "shown: {smoke: !!binary aGVsbG8=}\n", ["key 'shown.smoke'", "!!binary"]),
    ("set", THEOREM6, lambda t: t + "shown: !!set {smoke, budget}\n", ["key 'shown'", "!!set"]),
    ("seed-negative", THEOREM6, _tier_line(SMOKE, "smoke:  {device: cpu, seed: -1, "),
     ["tiers.smoke.seed", "-1", "[0, 4294967295]"]),
    ("seed-2**32", THEOREM6, _tier_line(SMOKE, f"smoke:  {{device: cpu, seed: {2**32}, "),
     ["tiers.smoke.seed", "4294967296", "[0, 4294967295]"]),
    ("seed-huge", THEOREM6, _tier_line(SMOKE, f"smoke:  {{device: cpu, seed: {10**30}, "),
     ["tiers.smoke.seed", "[0, 4294967295]"]),
    ("seed-float", THEOREM6, _tier_line(SMOKE, "smoke:  {device: cpu, seed: 1.5, "),
     ["tiers.smoke.seed", "1.5", "integer"]),
    ("train-seed-huge", TABLE6, _tier_line("    train: {lr: 0.02, ", f"    train: {{seed: {2**40}, lr: 0.02, "),
     ["tiers.smoke.train.seed", "[0, 4294967295]"]),
]


@pytest.mark.parametrize("file, transform, must", [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES])
def test_value_that_is_not_plain_is_one_line(project: Path, capsys: pytest.CaptureFixture, file: Path,
                                             transform: Callable[[str], str], must: list[str]) -> None:
    text = file.read_text()
    file.write_text(transform(text))
    assert file.read_text() != text, "the case did not change the file"
    spec = "s4d-theorem-6" if file == THEOREM6 else "s4-table-6"
    line = _run(capsys, spec, [file.name, *must])
    assert line == _one_line(capsys, ["validate"], [])


def test_date_in_an_expected_file_is_one_line(project: Path, capsys: pytest.CaptureFixture) -> None:
    path = Path("expected/s4d-theorem-6.yaml")
    text = path.read_text()
    path.write_text(text.replace("source: S4D paper, Appendix A.1, Theorem 6", "source: 2026-11-27", 1))
    _run(capsys, "s4d-theorem-6", ["s4d-theorem-6.yaml", "key 'source'", "a date", "quote it"])


@pytest.mark.parametrize("argv, must", [
    (["--seed", "-1"], ["seed", "[0, 4294967295]"]),
    (["--seed", str(2**32)], ["seed", "[0, 4294967295]"]),
    (["--set", "t_max=2026-11-27"], ["--set 't_max=2026-11-27'", "key 't_max'", "a date"]),
    (["--set", "+shown={1: x}"], ["key 'shown.1'", "not text"]),
    (["--set", "t_max=&a [*a]"], ["key 't_max[0]'", "contains itself"]),
    (["--set", "grid=" + "7" * 400], ["key 'grid'", "beyond the range of a float"]),
])
def test_command_line_values_pass_the_same_checks(project: Path, capsys: pytest.CaptureFixture, argv: list[str],
                                                  must: list[str]) -> None:
    _run(capsys, "s4d-theorem-6", must, *argv)


def test_plain_problem_names_the_key_of_what_json_cannot_write() -> None:
    import datetime

    loop: list = [1]
    loop.append(loop)
    assert "key 'a.b'" in plain_problem({"a": {"b": datetime.date(2026, 11, 27)}})
    assert "key 'a.1'" in plain_problem({"a": {1: "x", "1": "y"}})
    assert "contains itself" in plain_problem({"a": loop})
    assert "beyond the range" in plain_problem({"a": [10**400]})
    assert "set" in plain_problem({"a": {1, 2}})
    assert plain_problem({"a": [1, 2.5, None, True, "x", {"b": []}]}) is None


# ----------------------------------------------------- 4. validate refuses what run would refuse later

def test_repeated_state_sizes_fail_validate_and_run_alike(project: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: validate passed and run measured N=16 twice, then refused its own results file."""
    THEOREM6.write_text(THEOREM6.read_text().replace("state_sizes: [16, 64, 256]", "state_sizes: [16, 16, 64, 256]"))
    line = _one_line(capsys, ["validate"], ["s4d-theorem-6.yaml", "tiers.smoke", "state_sizes", "distinct",
                                            "16 is given twice"])
    assert _run(capsys, "s4d-theorem-6", []) == line
    assert not Path("out").exists()


def test_repeated_lengths_of_a_benchmark_are_refused() -> None:
    from runners.specs.schema import check_ints

    with pytest.raises(ValueError, match=r"lengths: \[1024, 1024\] not allowed; expected .*distinct"):
        check_ints("lengths", [1024, 1024], 1)
    check_ints("plot_basis", [3, 3], 0, distinct=False)


def test_ordering_that_names_its_own_cell_fails_validate_and_run_alike(project: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    path = Path("expected/s4d-theorem-6.yaml")
    doc = yaml.safe_load(path.read_text())
    cell = doc["cells"][0]
    cell["checks"]["smoke"] = {"ordering": {"less_than": [{"row": cell["row"], "column": cell["column"]}]}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    line = _one_line(capsys, ["validate"], ["s4d-theorem-6.yaml", "checks.smoke.ordering.less_than[0]",
                                            "names the cell itself", "allowed"])
    assert _run(capsys, "s4d-theorem-6", []) == line


def test_a_resolved_spec_json_cannot_write_is_refused_before_running(project: Path) -> None:
    """A mapping changed after loading (as ``--set`` changes it) that holds a value JSON cannot write: load_spec and
    validate's check_spec (which run calls first) name the key instead of a TypeError after the run."""
    import datetime

    from runners.judge.validate import check_spec, json_problem

    doc = resolve_includes(THEOREM6)
    doc["shown"] = {"smoke": datetime.date(2026, 11, 27)}
    with pytest.raises(SpecError, match=r"s4d-theorem-6.yaml: key 'shown.smoke'.*date"):
        load_spec(THEOREM6, doc=doc)
    spec = load_spec(THEOREM6)
    spec.resolved["shown"] = {"smoke": datetime.date(2026, 11, 27)}  # as if it slipped past the loader
    assert "key 'shown.smoke'" in json_problem(spec)
    with pytest.raises(SpecError, match="key 'shown.smoke'"):
        check_spec(spec)


def test_the_repository_still_validates_and_loads_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.judge.validate import validate_all

    monkeypatch.chdir(REPO)
    problems, n_specs = validate_all()
    assert problems == [] and n_specs == len(list((REPO / "reproductions").glob("[!_]*.yaml")))


# ------------------------------------------------------------ the real command line: no hang, no huge memory

def test_cli_validate_on_nested_aliases_and_includes_exits_2_quickly(project: Path) -> None:
    """``python -m runners validate`` in a subprocess with a timeout and a 6 GiB address-space limit."""
    laughs = _billion_laughs(9).replace("\nl", "\n  l").replace("l0:", "  l0:", 1)
    _append(THEOREM6, "shown:\n" + laughs)
    _chain(project / "reproductions", 24)
    _append(TABLE6, "\n" + "include: [_sequences.yaml, _inc0.yaml]\n")
    TABLE6.write_text(TABLE6.read_text().replace("include: _sequences.yaml\n", "", 1))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "runners", "validate"], cwd=project, capture_output=True, text=True,
                          timeout=60, preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), lines
    assert any("s4d-theorem-6.yaml" in line and "aliases" in line for line in lines)
    assert any("key 'include'" in line and "levels" in line for line in lines)
    assert time.perf_counter() - t0 < 60


def test_a_text_read_again_gives_a_fresh_copy_and_a_bad_text_fails_again() -> None:
    """The loader keeps the documents it has read: a second read of one text is an equal document that shares
    nothing with the first (a caller that edits its copy changes no other), and a text that failed fails again."""
    text = "a: {b: [1, 2]}\nc: x\n"
    first = load_yaml_text(text, "first.yaml")
    first["a"]["b"].append(3)
    second = load_yaml_text(text, "second.yaml")
    assert second == {"a": {"b": [1, 2]}, "c": "x"} and second["a"] is not first["a"]
    for name in ("bad.yaml", "again.yaml"):
        with pytest.raises(YamlError, match=f"^{name}: .*duplicate key 'a'"):
            load_yaml_text("a: 1\na: 2\n", name)
