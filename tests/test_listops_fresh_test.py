"""benchmarks/diagnostics/listops_fresh_test.py on the smoke tier's ListOps (CPU, seconds): a cell trained by the
table's own runner is rescored on its val / test splits (the numbers its training logged) and on fresh draws."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from runners.core import layout
from runners.specs.registry import RunContext
from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec, work_dir_for
from runners.train.table import run_train_table

ROOT = Path(__file__).resolve().parent.parent
SPEC, TIER, ROW = "s4-table-4", "smoke", "S4 (suite data)"


def _script():
    """The diagnostic benchmarks/diagnostics/listops_fresh_test.py."""
    from benchmarks.diagnostics import listops_fresh_test

    return listops_fresh_test


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(runs directory, checkpoint) of the smoke tier's (S4 (suite data), ListOps) cell, trained by the table."""
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout, "RUNS_DIR", runs)
        spec = load_spec(find_spec(SPEC, ROOT / "reproductions"))
        ctx = RunContext(spec_id=spec.id, tier=TIER, device=torch.device("cpu"), seed=0,
                         work_dir=work_dir_for(spec, TIER), data_dir=runs / "none", progress=False,
                         selected=frozenset({(ROW, "ListOps")}))
        ctx.work_dir.mkdir(parents=True)
        run_train_table(tier_config(spec, TIER), ctx)
    ckpt = runs / SPEC / TIER / "S4_suite_data__ListOps" / "checkpoint.pt"
    assert ckpt.is_file()
    return runs, ckpt


def _run(module, monkeypatch, capsys, runs: Path, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(layout, "RUNS_DIR", runs)
    monkeypatch.chdir(ROOT)
    rc = module.main([*argv, "--spec", SPEC, "--tier", TIER, "--device", "cpu", "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _accuracy(out: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\s+n\s+\d+\s+accuracy\s+([\d.]+)", out, re.M)
    assert match, out
    return float(match.group(1))


def test_rescores_the_logged_val_and_test_and_fresh_draws(trained, monkeypatch, capsys) -> None:
    runs, ckpt = trained
    module = _script()
    rc, out, _ = _run(module, monkeypatch, capsys, runs, str(ckpt), "--draws", "2")
    assert rc == 0, out
    last = json.loads((ckpt.parent / "metrics.jsonl").read_text().splitlines()[-1])
    assert _accuracy(out, "suite val") == round(last["val_metric"], 2)
    assert _accuracy(out, "suite test") == round(last["test_metric"], 2)
    fresh = re.findall(r"^fresh seed (\d+)\s+n\s+(\d+)\s+accuracy\s+([\d.]+).*\((\d+) dropped", out, re.M)
    assert [int(f[0]) for f in fresh] == [module.FRESH_SEED_BASE + 1, module.FRESH_SEED_BASE + 2]
    for _, n, acc, dropped in fresh:  # the smoke tier's 32-example test size, less what the suite's splits hold
        assert int(n) + int(dropped) == 32 and 0 <= float(acc) <= 100
    assert "fresh draws: mean" in out and "binomial standard error of a 32-example split" in out


def test_fresh_draws_drop_the_suite_expressions(trained, tmp_path) -> None:
    runs, _ = trained
    module = _script()
    spec = load_spec(find_spec(SPEC, ROOT / "reproductions"))
    cell = module.CellSetup(spec=spec, tier=TIER, data="release", config=tier_config(spec, TIER),
                            row=ROW, column="ListOps")
    whole, none_dropped = module.fresh_draw(cell, module.FRESH_SEED_BASE + 1, 32, tmp_path / "a", set(), False)
    sources = module.read_listops_tsv(tmp_path / "a" / "listops-1000" / "basic_test.tsv")[0]
    part, dropped = module.fresh_draw(cell, module.FRESH_SEED_BASE + 1, 32, tmp_path / "b", set(sources[:5]), False)
    assert (len(whole), none_dropped, len(part), dropped) == (32, 0, 27, 5)


def test_errors_name_the_argument(trained, monkeypatch, capsys, tmp_path) -> None:
    runs, ckpt = trained
    module = _script()
    rc, _, err = _run(module, monkeypatch, capsys, runs, str(tmp_path / "checkpoint.pt"))
    assert rc == 2 and "CHECKPOINT" in err and "no such file" in err
    rc, _, err = _run(module, monkeypatch, capsys, runs, str(ckpt), "--row", "nope")
    assert rc == 2 and "--row 'nope'" in err and "S4 (suite data)" in err
    rc, _, err = _run(module, monkeypatch, capsys, runs, str(ckpt), "--row", "Transformer (suite data)")
    assert rc == 2 and "was not written by row 'Transformer (suite data)'" in err and "model_config.arch" in err


def test_binomial_standard_error() -> None:
    module = _script()
    assert module.binomial_se(50.0, 2000) == pytest.approx(1.118, abs=1e-3)


def test_fresh_seeds_skip_the_data_seed() -> None:
    module = _script()
    base = module.FRESH_SEED_BASE
    assert module.fresh_seeds(3, 0) == [base + 1, base + 2, base + 3]
    assert module.fresh_seeds(3, base + 2) == [base + 1, base + 3, base + 4]
