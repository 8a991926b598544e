"""The LRA specs' machinery: train.table's out-of-memory "X" cells and its ``metrics`` columns, and the
specs s4-table-4 / s4d-table-5 / lra-pathx (every cell a tier produces is in expected/, the Path-X claim's
arithmetic, `pytest reproductions/ -m pathx`).

Out of memory is faked on the CPU: a model whose forward raises torch.cuda.OutOfMemoryError, as the CUDA
caching allocator does, inside the real training loop.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from runners.core.errors import SpecError
from runners.data.base import TaskData
from runners.judge.verdicts import judge
from runners.specs.expected import expected_path, load_expected
from runners.specs.registry import RunContext
from runners.specs.selection import tier_config
from runners.specs.spec import load_spec
from runners.train import table
from runners.train.table import METRICS, TrainTableConfig, column_name, run_train_table

ROOT = Path(__file__).resolve().parents[1]
VOCAB, SEQ = 6, 16
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total capacity of 79.19 GiB of "
               "which 75.00 GiB is free.")
ALL_METRICS = ["test", "steps_per_second", "peak_memory_mb", "fits"]


def toy_task(root: Path, seed: int = 0) -> TaskData:
    """Label 1 when most tokens are < VOCAB / 2 (learnable by mean pooling)."""
    g = torch.Generator().manual_seed(seed)

    def split(n: int) -> TensorDataset:
        x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        return TensorDataset(x, ((x < VOCAB // 2).sum(1) > SEQ // 2).long())

    return TaskData(name="toy", train=split(64), val=split(16), test=split(16), seq_len=SEQ, d_output=2,
                    vocab_size=VOCAB)


class OutOfMemoryModel(nn.Module):
    """Fails its first forward the way a CUDA allocation that does not fit does."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        raise torch.cuda.OutOfMemoryError(OOM_MESSAGE)


@pytest.fixture
def toy_loader(monkeypatch: pytest.MonkeyPatch) -> list:
    """Register loader 'toy' and preparer 'toy_prep' (which records its calls)."""
    prepared: list = []
    monkeypatch.setitem(table.LOADERS, "toy", lambda root, **kw: toy_task(root, **kw))
    monkeypatch.setitem(table.PREPARERS, "toy_prep", lambda root, **kw: prepared.append((root, kw)))
    return prepared


def toy_config(metrics: list[str] | None = None, **extra) -> TrainTableConfig:
    ssm = {"d_model": 8, "n_layers": 1, "norm": "batch", "pool": "mean",
           "layer": {"d_state": 4, "bidirectional": True, "output": "glu"}}
    kw = dict(tasks={"Toy": {"loader": "toy", "prepare": {"preparer": "toy_prep", "n": 1}}},
              models={"S4D": {"arch": "ssm"}, "Attention": {"arch": "transformer"}, "S4D again": {"arch": "ssm"}},
              model_defaults={"ssm": ssm, "transformer": {"d_model": 8, "n_layers": 1, "n_heads": 2, "ffn_dim": 8}},
              train={"lr": 0.01, "epochs": 2, "batch_size": 16, "scheduler": "constant"}, **extra)
    if metrics is not None:
        kw["metrics"] = metrics
    return TrainTableConfig(**kw)


def ctx(tmp_path: Path) -> RunContext:
    return RunContext(spec_id="toy", tier="smoke", device=torch.device("cpu"), seed=0, work_dir=tmp_path / "work",
                      data_dir=tmp_path / "data", progress=False)


def cells_by_key(out) -> dict:
    return {(c.row, c.column): c for c in out.cells}


# ---------------------------------------------------------------------------------------------- out of memory


def test_out_of_memory_cell_is_X_in_every_metric_and_the_table_goes_on(tmp_path, toy_loader, monkeypatch):
    built: list[OutOfMemoryModel] = []
    real_build = table.build_model
    freed: list[bool] = []

    def build(arch, kwargs, task):
        if arch == "transformer":
            built.append(OutOfMemoryModel())
            return built[-1]
        return real_build(arch, kwargs, task)

    monkeypatch.setattr(table, "build_model", build)
    monkeypatch.setattr(table, "free_memory", lambda device: freed.append(True))
    out = run_train_table(toy_config(ALL_METRICS), ctx(tmp_path))
    cells = cells_by_key(out)
    assert len(cells) == 3 * 4 and built and built[0].calls == 1 and freed == [True]
    for m in ALL_METRICS:  # the failing row: "X" everywhere, with the allocator's message
        c = cells[("Attention", column_name("Toy", m, ALL_METRICS))]
        assert c.value == "X" and c.note.startswith("CUDA out of memory: CUDA out of memory. Tried to allocate")
    for row in ("S4D", "S4D again"):  # the rows before and after it trained
        acc = cells[(row, "Toy accuracy")].value
        assert isinstance(acc, float) and 0 <= acc <= 100
        assert cells[(row, "Toy steps/s")].value > 0
        assert cells[(row, "Toy fits in memory")].value == 1
        mem = cells[(row, "Toy peak memory MB")]
        assert mem.value is None and "no CUDA device" in mem.note  # CPU: nothing to read
    assert out.series["Attention / Toy"]["history"] == []
    assert "out of memory" in out.series["Attention / Toy"]["out_of_memory"]
    assert any(n.startswith("Attention / Toy: X (CUDA out of memory") for n in out.notes)
    # the framework's verdicts: "X" passes a check whose target is "X" and fails any other
    expect_x = {"row": "Attention", "column": "Toy fits in memory", "paper": None, "better": "higher",
                "checks": {"smoke": {"target": "X", "tolerance": {"abs": 0}}}}
    expect_fits = {**expect_x, "checks": {"smoke": {"bound": {"min": 1}}}}
    measured = {k: c.value for k, c in cells.items()}
    assert judge(expect_x, "smoke", measured).verdict == "PASS"
    assert judge(expect_fits, "smoke", measured).verdict == "FAIL"
    assert judge({**expect_x, "row": "S4D"}, "smoke", measured).verdict == "FAIL"


def test_other_errors_are_not_swallowed(tmp_path, toy_loader, monkeypatch):
    def build(arch, kwargs, task):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(table, "build_model", build)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        run_train_table(toy_config(ALL_METRICS), ctx(tmp_path))


# ---------------------------------------------------------------------------------------------- metrics option


def test_default_metrics_give_one_column_per_task_with_the_test_metric(tmp_path, toy_loader, monkeypatch):
    results = {}
    real_train = table.train

    def spy(model_fn, task, cfg, run_dir, device, **kw):
        results[run_dir.name] = real_train(model_fn, task, cfg, run_dir, device, **kw)
        return results[run_dir.name]

    monkeypatch.setattr(table, "train", spy)
    cfg = toy_config(skip=[["Attention", "Toy"], ["S4D again", "Toy"]])
    assert cfg.metrics == ["test"]
    out = run_train_table(cfg, ctx(tmp_path))
    assert [(c.row, c.column, c.unit) for c in out.cells] == [("S4D", "Toy", "% acc")]
    assert out.cells[0].value == results["S4D__Toy"].test_at_best_val
    assert toy_loader and toy_loader[0][1] == {"n": 1}  # the preparer ran once, with its arguments


def test_metric_cells_read_the_train_result(tmp_path, toy_loader, monkeypatch):
    from runners.train.loop import TrainResult

    fake = TrainResult(best_epoch=3, best_val=70.0, test_at_best_val=65.5, history=[], steps_per_second=4.25,
                       peak_memory_mb=1234.5, n_params=10, stop_reason="max_minutes")
    monkeypatch.setattr(table, "train", lambda *a, **kw: fake)
    cfg = toy_config(ALL_METRICS, skip=[["Attention", "Toy"], ["S4D again", "Toy"]])
    cells = cells_by_key(run_train_table(cfg, ctx(tmp_path)))
    assert {k[1]: (c.value, c.unit) for k, c in cells.items()} == {
        "Toy accuracy": (65.5, "% acc"), "Toy steps/s": (4.25, "steps/s"), "Toy peak memory MB": (1234.5, "MiB"),
        "Toy fits in memory": (1, METRICS["fits"][1])}
    assert "best val epoch 3, stop: max_minutes" in cells[("S4D", "Toy accuracy")].note


def test_column_names():
    assert column_name("Path-X", "test", ["test"]) == "Path-X"
    assert column_name("Path-X", "test", ALL_METRICS) == "Path-X accuracy"
    assert column_name("BIDMC", "test", ["test", "fits"], regression=True) == "BIDMC rmse"
    assert [column_name("T", m, ALL_METRICS) for m in ALL_METRICS[1:]] == [
        "T steps/s", "T peak memory MB", "T fits in memory"]


@pytest.mark.parametrize("metrics", [[], ["test", "test"], ["accuracy"], ["test", "memory"]])
def test_bad_metrics_are_refused_with_the_key_named(metrics, toy_loader):
    with pytest.raises(ValueError, match="metrics"):
        toy_config(metrics)


def test_a_column_with_every_cell_skipped_is_not_prepared(tmp_path, toy_loader):
    cfg = toy_config(skip=[["S4D", "Toy"], ["Attention", "Toy"], ["S4D again", "Toy"]])
    out = run_train_table(cfg, ctx(tmp_path))
    assert out.cells == [] and toy_loader == []


# ---------------------------------------------------------------------------------------------- the specs

SPECS = ["s4-table-4", "s4d-table-5", "lra-pathx"]


def produced_cells(spec, tier: str) -> set[tuple[str, str]]:
    """The (row, column) cells train.table writes for one tier (it names every column by column_name)."""
    cfg = spec.tiers[tier].config
    skip = {tuple(p) for p in cfg.skip}
    return {(row, column_name(col, m, cfg.metrics))  # every LRA task is a classification task
            for col in cfg.tasks for row in cfg.models if (row, col) not in skip for m in cfg.metrics}


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("tier", ["smoke", "budget", "full"])
def test_every_cell_a_tier_writes_is_in_expected(name, tier, monkeypatch):
    # a GPU run that writes a cell expected/ lacks is refused at its end (runners/execute/run.py): catch it here
    monkeypatch.chdir(ROOT)
    spec = load_spec(ROOT / "reproductions" / f"{name}.yaml")
    expected = load_expected(expected_path(spec.id))
    listed = {(c["row"], c["column"]) for c in expected["cells"]}
    produced = produced_cells(spec, tier)
    assert produced and produced <= listed, sorted(produced - listed)
    checked = [c for c in expected["cells"] if (c["row"], c["column"]) in produced
               and "not_run" not in c["checks"][tier]]
    assert checked, f"{spec.id}: tier {tier} checks none of the cells it measures"


@pytest.mark.parametrize("name", ["s4-table-4", "s4d-table-5", "s4d-table-6"])
def test_the_full_tier_feeds_pathfinder_and_pathx_pixels_in_minus_one_to_one(name, monkeypatch):
    """The full tier scales Pathfinder's and Path-X's pixels as the authors' pipeline does (_lra.yaml says why); the
    smoke and budget tiers keep x / 255, the scaling their committed results used, except S4D Table 6's budget tier,
    which is the full protocol (it shares the full tier's task). Both data variants."""
    monkeypatch.chdir(ROOT)
    spec = load_spec(ROOT / "reproductions" / f"{name}.yaml")
    for tier, data in [("full", "release"), ("full", "suite"), ("smoke", "release"), ("budget", "release")]:
        if tier not in spec.tiers or (data == "suite" and spec.tiers[tier].suite_data is None):
            continue
        tasks = tier_config(spec, tier, data).tasks
        for name_, task in tasks.items():
            if task["loader"] in ("pathfinder", "pathx"):
                minus_one_to_one = tier == "full" or (name, tier) == ("s4d-table-6", "budget")
                assert task.get("loader_args", {}).get("normalize", False) == minus_one_to_one, (tier, data, name_)


def test_pathx_budget_claims_follow_from_its_config(monkeypatch):
    """The budget's "X" for materialized attention is arithmetic on the spec's own sizes: keep them so."""
    monkeypatch.chdir(ROOT)
    budget = load_spec(ROOT / "reproductions" / "lra-pathx.yaml").tiers["budget"].config
    task = budget.tasks["Path-X"]
    assert task["loader"] == "pathx" and task["prepare"]["resolution"] == 128  # length 16384
    length = 128 * 128
    batch = budget.train["batch_size"]
    heads = budget.model_defaults["transformer"]["n_heads"]
    scores_gb = batch * heads * length**2 * 4 / 1e9  # one layer's float32 (B, heads, L, L) scores
    assert 2 * scores_gb > 150  # scores + softmax kept for backward: more than an H200's 141 GB
    impls = {row: m.get("model", {}).get("impl") for row, m in budget.models.items() if m["arch"] == "transformer"}
    assert sorted(impls.values()) == ["materialized", "sdpa"]
    assert budget.model_defaults["transformer"]["d_model"] == budget.model_defaults["ssm"]["d_model"]  # same width
    assert {"fits", "steps_per_second", "peak_memory_mb", "test"} == set(budget.metrics)


def test_pytest_marker_pathx_selects_the_pathx_spec():
    proc = subprocess.run([sys.executable, "-m", "pytest", "reproductions/", "-m", "pathx", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    selected = {line.split("[")[-1].rstrip("]") for line in proc.stdout.splitlines() if "::" in line}
    assert "lra-pathx" in selected, proc.stdout
    # the marker selects exactly the specs whose groups name pathx (s4-table-4 and s4d-table-5: lra only)
    from runners.specs.spec import resolve_includes, spec_paths

    with_group = {p.stem for p in spec_paths(ROOT / "reproductions") if "pathx" in resolve_includes(p)["groups"]}
    assert selected == with_group and not {"s4-table-4", "s4d-table-5"} & selected, proc.stdout


def test_learning_curve_plot_draws_a_table_with_an_out_of_memory_cell(tmp_path):
    import runners.train.plots  # noqa: F401  (registers the plot)
    from runners.specs.registry import PLOTS

    history = [{"epoch": e, "train_loss": 1.0 / e, "val_metric": 50.0 + e} for e in (1, 2, 3)]
    result = {"spec_id": "lra-pathx", "tier": "budget",
              "series": {"S4 / Path-X": {"history": history},
                         "Transformer / Path-X": {"history": [], "out_of_memory": OOM_MESSAGE}}}
    PLOTS["learning_curves"](result, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_data_of_an_older_generator_version_is_refused(tmp_path, monkeypatch):
    # a folder prepared before the Pathfinder generator changed (its record has no version) is not reused
    made = []
    monkeypatch.setitem(table.PREPARERS, "pathfinder", lambda root, **kw: made.append(kw))
    task = {"prepare": {"preparer": "pathfinder", "resolution": 32, "n": 8, "seed": 0}}
    run = SimpleNamespace(work_dir=tmp_path, tier=tmp_path.name, progress=False, data_dir=None)
    root = table.prepare_data("Pathfinder", task, run)
    assert len(made) == 1 and "('generator_version', 3)" in (root / ".complete").read_text()
    assert table.prepare_data("Pathfinder", task, run) == root and len(made) == 1  # reused as it is
    (root / ".complete").write_text(repr(sorted(task["prepare"].items() - {("preparer", "pathfinder")})))
    with pytest.raises(SpecError, match=r"tasks\.Pathfinder\.prepare: .* older generator .*generator_version"):
        table.prepare_data("Pathfinder", task, run)
    assert table.data_version(task) == "pathfinder v3"
    assert table.data_version({"prepare": {"preparer": "listops"}}) is None


def test_a_set_run_reads_its_tiers_prepared_data_and_prepares_its_own_only_when_the_arguments_differ(tmp_path,
                                                                                                    monkeypatch):
    made = []
    monkeypatch.setitem(table.PREPARERS, "pathfinder", lambda root, **kw: made.append((root, kw)))
    task = {"prepare": {"preparer": "pathfinder", "resolution": 32, "n": 8, "seed": 0}}
    tier_run = SimpleNamespace(work_dir=tmp_path / "full", tier="full", progress=False, data_dir=None)
    set_run = SimpleNamespace(work_dir=tmp_path / "full-set-0123456789ab", tier="full", progress=False, data_dir=None)
    root = table.prepare_data("Pathfinder", task, set_run)  # made in the tier's folder, where the tier finds it
    assert root == tmp_path / "full" / "data" / "Pathfinder" and len(made) == 1
    assert table.prepare_data("Pathfinder", task, tier_run) == root and len(made) == 1
    other = {"prepare": {**task["prepare"], "n": 16}}
    own = table.prepare_data("Pathfinder", other, set_run)  # other arguments: the configuration's own folder
    assert own == tmp_path / "full-set-0123456789ab" / "data" / "Pathfinder" and len(made) == 2
    assert table.prepare_data("Pathfinder", other, set_run) == own and len(made) == 2
    with pytest.raises(SpecError, match=r"tasks\.Pathfinder\.prepare: .*other arguments"):
        table.prepare_data("Pathfinder", other, tier_run)  # the tier's own data is never replaced


def test_the_authors_lra_settings_run_end_to_end_and_are_recorded(tmp_path, monkeypatch):
    """Per-group SSM learning rates, padding-masked SSM inputs and weight decay on 1-D parameters (the LRA full
    tier's settings) through the whole pipeline on a smoke cell: they train, and the results file records them."""
    from runners.core import layout
    from runners.cli.main import main

    monkeypatch.setattr(layout, "RUNS_DIR", tmp_path / "runs")
    sets = ["+model_defaults.ssm.mask_padding=true", "+model_defaults.ssm.layer.lr={dt: null, A: 0.001, B: 0.001}",
            "+train.weight_decay_1d=true"]
    argv = ["run", "s4-table-4", "--tier", "smoke", "--cells", "S4 (suite data)/Text", "--no-progress",
            "--output", str(tmp_path / "results")]
    assert main([*argv, *[w for s in sets for w in ("--set", s)]]) == 0
    (path,) = (tmp_path / "results" / "s4-table-4").glob("*_smoke.json")
    result = json.loads(path.read_text())
    assert result["config"]["model_defaults"]["ssm"]["mask_padding"] is True
    assert result["config"]["model_defaults"]["ssm"]["layer"]["lr"] == {"dt": None, "A": 0.001, "B": 0.001}
    assert result["config"]["train"]["weight_decay_1d"] is True
    assert [c["value"] for c in result["cells"] if c["row"] == "S4 (suite data)"]  # the cell was measured
