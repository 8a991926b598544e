"""Efficiency runners (S4 Tables 2, 3, 7/8): every expected cell produced, OOM recorded as X, the measuring
helpers, and the parameter matching the specs rely on. Runs at sizes below the smoke tier's to stay fast."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import runners.benchmark  # noqa: F401  registers the runners (whether or not registry.RUNNER_MODULES lists them)
from runners.benchmark import common, generation, s4_vs_lssl, vs_transformers
from runners.core.errors import SpecError
from runners.specs.expected import expected_path, load_expected
from runners.specs.registry import RunContext, get
from runners.specs.spec import build_config, load_spec
from ssm_core import SequenceModel, SSMLayer
from ssm_core.baselines import LSSL, TransformerModel

ROOT = Path(__file__).resolve().parents[1]


def _ctx(tmp_path: Path, spec_id: str) -> RunContext:
    return RunContext(spec_id, "smoke", torch.device("cpu"), 0, tmp_path, tmp_path, progress=False)


def _tiny(spec_file: str) -> tuple:
    spec = load_spec(ROOT / "reproductions" / spec_file)
    cfg = spec.tiers["smoke"].config
    if spec_file == "s4-table-2.yaml":
        cfg = dataclasses.replace(cfg, dim_divisor=16, length=32, reps=1)
    elif spec_file == "s4-table-3.yaml":
        cfg = dataclasses.replace(cfg, length_divisor=64, reps=1, batch=1, d_model=16, qkv_dim=8,
                                  s4_layer=dict(cfg.s4_layer, d_state=8))
    else:
        cfg = dataclasses.replace(cfg, settings=[dict(s, length=6) for s in cfg.settings], warmup_steps=0)
    return spec, cfg


def _expected_keys(spec_id: str) -> set:
    return {(c["row"], c["column"]) for c in load_expected(ROOT / expected_path(spec_id))["cells"]}


@pytest.mark.parametrize("spec_file", ["s4-table-2.yaml", "s4-table-3.yaml", "s4-generation.yaml"])
def test_runner_produces_every_expected_cell(spec_file: str, tmp_path: Path) -> None:
    spec, cfg = _tiny(spec_file)
    out = get(spec.runner).fn(cfg, _ctx(tmp_path, spec.id))
    produced = [(c.row, c.column) for c in out.cells]
    assert len(produced) == len(set(produced)), "a cell was produced twice"
    assert set(produced) == _expected_keys(spec.id)
    for c in out.cells:
        assert isinstance(c.value, (int, float)) and c.value > 0 and c.value == c.value, (c.row, c.column, c.value)
        assert c.note and c.unit


def test_table2_oom_in_one_layer_gives_x_and_keeps_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Boom(LSSL):
        def forward(self, u):
            if self.h == 8:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 13.00 GiB")
            return super().forward(u)

    monkeypatch.setattr(s4_vs_lssl, "LSSL", Boom)
    spec, cfg = _tiny("s4-table-2.yaml")  # H = 8, 16, 32
    cells = {(c.row, c.column): c for c in get(spec.runner).fn(cfg, _ctx(tmp_path, spec.id)).cells}
    for row in ("LSSL", "Ratio"):
        for metric in ("Step ms", "Memory MB"):
            assert cells[(row, f"{metric} H=128")].value == "X"
    assert "out of memory" in cells[("LSSL", "Step ms H=128")].note
    assert isinstance(cells[("S4", "Step ms H=128")].value, float)
    assert isinstance(cells[("Ratio", "Memory MB H=512")].value, float)


def test_table3_reference_oom_makes_its_ratios_x(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = vs_transformers.build_model

    def build(name, cfg):
        if name == "Transformer":
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return real(name, cfg)

    monkeypatch.setattr(vs_transformers, "build_model", build)
    spec, cfg = _tiny("s4-table-3.yaml")
    cfg = dataclasses.replace(cfg, models=["Transformer", "Linear Trans."])
    cells = get(spec.runner).fn(cfg, _ctx(tmp_path, spec.id)).cells
    ratios = [c for c in cells if c.column != "Params"]
    assert len(ratios) == 8 and all(c.value == "X" for c in ratios)
    assert "out of memory" in ratios[0].note
    assert ("Transformer", "Params") not in {(c.row, c.column) for c in cells}
    assert any(c.row == "Linear Trans." and c.column == "Params" for c in cells)


# -- measuring helpers ---------------------------------------------------------------------------------------
def test_measure_training_step_records_oom_as_x_and_propagates_other_errors() -> None:
    cpu = torch.device("cpu")

    def build_oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    m = common.measure_training_step(build_oom, cpu, 0, 1)
    assert (m.ms, m.mb, m.ok) == ("X", "X", False) and "out of memory" in m.note

    def build_step_oom():
        model = torch.nn.Linear(2, 2)

        def step() -> None:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")

        return step, model

    assert common.measure_training_step(build_step_oom, cpu, 1, 1).ms == "X"

    def build_bug():
        raise ValueError("a real bug")

    with pytest.raises(ValueError, match="a real bug"):
        common.measure_training_step(build_bug, cpu, 0, 1)


def test_is_out_of_memory() -> None:
    assert common.is_out_of_memory(torch.OutOfMemoryError("x"))
    assert common.is_out_of_memory(MemoryError())
    assert common.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not common.is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_saved_tensor_bytes_counts_saved_storages_parameters_and_gradients() -> None:
    model = torch.nn.Module()
    model.p = torch.nn.Parameter(torch.randn(1000))  # 4000 bytes

    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.exp(model.p).sum().backward()  # exp saves its result (4000 bytes); sum saves nothing

    assert common.saved_tensor_bytes(step, model) == 4000 + 4000 + 4000  # saved result, parameter, gradient


def test_measure_training_step_on_cpu() -> None:
    def build():
        model = torch.nn.Linear(16, 16)
        x = torch.randn(4, 16)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            model(x).square().sum().backward()

        return step, model

    m = common.measure_training_step(build, torch.device("cpu"), 1, 3)
    assert m.ok and m.ms > 0 and m.mb > 0 and m.params == 16 * 16 + 16
    assert "estimate" in m.note


def test_ratio_and_largest_batch() -> None:
    assert common.ratio(6.0, 2.0) == 3.0
    assert common.ratio("X", 2.0) == "X" and common.ratio(1.0, "X") == "X"
    assert generation.largest_batch(lambda b: b <= 37, 64, 10)[0] == 37
    b, how = generation.largest_batch(lambda b: b <= 37, 64, 2)
    assert 32 <= b <= 37 and "fits memory" in how
    assert generation.largest_batch(lambda b: True, 64, 2) == (64, "capped at max_batch=64 (memory was not the limit)")
    assert generation.largest_batch(lambda b: False, 64, 2)[0] == 0


# -- configs and what the specs rely on ----------------------------------------------------------------------
def test_configs_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="dim_divisor"):
        s4_vs_lssl.S4VsLSSLConfig(dim_divisor=3)
    with pytest.raises(ValueError, match="s4_layer.d_state"):
        s4_vs_lssl.S4VsLSSLConfig(s4_layer={"d_state": 4})
    with pytest.raises(ValueError, match="models"):
        vs_transformers.VsTransformersConfig(models=["Transformer", "Reformer"])
    with pytest.raises(ValueError, match="reference row"):
        vs_transformers.VsTransformersConfig(models=["S4"])
    with pytest.raises(SpecError, match=r"settings\[0\]"):
        build_config(generation.GenerationConfig, {"settings": [{"name": "Table 7"}]}, "spec.yaml: tiers.smoke")
    good = {"name": "T", "unit": "tokens", "length": 4, "vocab_size": 8, "d_model": 4, "n_layers": 1,
            "n_heads": 2, "ffn_dim": 0, "memory_limit_gib": None, "max_batch": 1}
    with pytest.raises(ValueError, match=r"settings\[0\]\.unit"):
        generation.GenerationConfig(settings=[dict(good, unit="pixels")])
    with pytest.raises(ValueError, match="distinct"):
        generation.GenerationConfig(settings=[good, good])


def test_table2_s4_state_is_parameter_matched_to_the_lssl() -> None:
    # App. D.1: LSSL N = H; S4 "a state size of N/2" -> both ~3 H^2 parameters
    for h in (32, 64):
        lssl = sum(p.numel() for p in LSSL(h).parameters())
        s4 = sum(p.numel() for p in SSMLayer(h, h // 2, mode="s4", output="linear").parameters())
        assert abs(s4 / lssl - 1) < 0.05, (h, lssl, s4)


def test_table3_budget_models_are_parameter_tied_near_600k() -> None:
    cfg = load_spec(ROOT / "reproductions" / "s4-table-3.yaml").tiers["budget"].config
    counts = {name: sum(p.numel() for p in vs_transformers.build_model(name, cfg).parameters())
              for name in cfg.models}
    assert counts["Transformer"] == 595_458
    for name, n in counts.items():
        assert abs(n - 600_000) / 600_000 < 0.05, (name, n)


def test_generation_state_sizes() -> None:
    s = generation.parse_setting({"name": "T", "unit": "tokens", "length": 12, "vocab_size": 10, "d_model": 8,
                                  "n_layers": 2, "n_heads": 2, "ffn_dim": 16, "memory_limit_gib": None,
                                  "max_batch": 2}, "s")
    cfg = generation.GenerationConfig(settings=[dataclasses.asdict(s)],
                                      s4_layer={"mode": "s4d", "d_state": 4, "output": "glu"})
    cpu = torch.device("cpu")
    # key/value cache: layers x (k, v) x length x d_model float32
    assert generation._Generator("Transformer", cfg, s, cpu).state_bytes() == 2 * 2 * 12 * 8 * 4
    longer = dataclasses.replace(s, length=24)
    assert (generation._Generator("S4", cfg, s, cpu).state_bytes()
            == generation._Generator("S4", cfg, longer, cpu).state_bytes())  # constant in the context
    # the timed loop generates from the state it is given: a full generation runs and returns a duration
    assert generation._Generator("Linear Transformer", cfg, s, cpu).run(2, 12) > 0
    assert isinstance(generation._Generator("S4", cfg, s, cpu).model, SequenceModel)
    assert isinstance(generation._Generator("Transformer", cfg, s, cpu).model, TransformerModel)


def test_generation_state_traffic_by_hand() -> None:
    """Per token: the Transformer reads its cache half full on average, a recurrent model reads and writes its
    state; the bound speed-up is the ratio of those bytes; a model that did not run is left out."""
    got = {"Transformer": {"state_kb": 24576.0, "batch": 640, "seconds": 10.0, "throughput": 64.0},
           "S4": {"state_kb": 256.0, "batch": 8192, "seconds": 2.0, "throughput": 4096.0},
           "Linear Transformer": {"state_kb": 260.0, "batch": 0, "seconds": None, "throughput": "X"}}
    t = generation.state_traffic(got, length=3072)
    assert set(t) == {"Transformer", "S4"}
    assert t["Transformer"]["traffic_kb_per_token"] == 12288.0 and t["S4"]["traffic_kb_per_token"] == 512.0
    assert t["S4"]["bound_speedup"] == 24.0 and "bound_speedup" not in t["Transformer"]
    # 640 x 3072 tokens in 10 s, 12,288 KiB each
    assert t["Transformer"]["state_gbs"] == pytest.approx(640 * 3072 / 10.0 * 12288 * 1024 / 1e9)
    assert t["S4"]["state_gbs"] == pytest.approx(8192 * 3072 / 2.0 * 512 * 1024 / 1e9)
    note = generation.state_traffic_note("Table 7", t)
    assert note.startswith("Table 7: state moved per generated token") and "S4 24.0x" in note
    assert "no model ran" in generation.state_traffic_note("Table 7", {})


def _generation_setup(step_graph: bool = False):
    s = generation.parse_setting({"name": "T", "unit": "tokens", "length": 12, "vocab_size": 10, "d_model": 8,
                                  "n_layers": 2, "n_heads": 2, "ffn_dim": 16, "memory_limit_gib": None,
                                  "max_batch": 2}, "s")
    cfg = generation.GenerationConfig(settings=[dataclasses.asdict(s)], step_graph=step_graph,
                                      s4_layer={"mode": "s4", "d_state": 4, "output": "glu"},
                                      s4d_layer={"mode": "s4d", "d_state": 4, "output": "glu"})
    return cfg, s


def test_generation_times_part_of_a_constant_state_models_sequence(tmp_path: Path, monkeypatch) -> None:
    """timed_steps: a constant-state model (S4, the Linear Transformer) is timed over that many tokens and its rate
    reported (the note says so); the Transformer generates the whole sequence; the state traffic reads the tokens
    timed. A timed_steps outside 1..MAX_LENGTH, or an unknown key, is an error naming the key."""
    cfg, s = _generation_setup()
    s = generation.parse_setting({**dataclasses.asdict(s), "unit": "images", "timed_steps": 3}, "s")
    cfg = dataclasses.replace(cfg, settings=[dataclasses.asdict(s)])
    timed: dict[str, list[int]] = {}

    def fake_run(self, batch, steps, start=0):
        timed.setdefault(self.name, []).append(steps)
        return 0.5

    monkeypatch.setattr(generation._Generator, "run", fake_run)
    ctx = _ctx(tmp_path, "s4-generation")
    got = {m: generation._measure(m, cfg, s, ctx) for m in ("Transformer", "S4", "Linear Transformer")}
    assert timed["Transformer"][-1] == 12 and timed["S4"][-1] == timed["Linear Transformer"][-1] == 3
    assert got["S4"]["tokens_timed"] == 3 and got["Transformer"]["tokens_timed"] == 12
    assert got["S4"]["throughput"] == pytest.approx(2 * 3 / 0.5 / 12)  # images/s: tokens/s over the length
    assert got["Transformer"]["throughput"] == pytest.approx(2 * 12 / 0.5 / 12)
    assert "the first 3 of 12 tokens" in got["S4"]["note"] and "12 tokens in" in got["Transformer"]["note"]
    traffic = generation.state_traffic(got, s.length)
    assert traffic["S4"]["state_gbs"] == pytest.approx(2 * 3 / 0.5 * 2 * got["S4"]["state_kb"] * 1024 / 1e9)
    for bad, message in (({"timed_steps": 0}, "timed_steps"), ({"timed_steps": True}, "timed_steps"),
                         ({"timed": 3}, "unknown keys")):
        with pytest.raises((ValueError, TypeError), match=message):
            generation.parse_setting({**dataclasses.asdict(s), **bad}, "s")


def _eager_tokens(gen, batch: int, steps: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The eager loop's tokens at every step and its final state tensors."""
    with torch.inference_mode():
        state = gen.state(batch)
        tokens = torch.zeros(batch, dtype=torch.long, device=gen.device)
        out = []
        for _ in range(steps):
            logits, state = gen.model.step(tokens, state)
            tokens = logits.argmax(dim=-1)
            out.append(tokens.clone())
    return out, [t.clone() for t in generation.state_tensors(state)]


@pytest.mark.parametrize("row", ["S4", "S4D", "Linear Transformer"])
def test_generation_step_in_place_follows_the_eager_loop(row: str) -> None:
    """The body the CUDA graph replays (tokens and state overwritten in place) generates what the eager loop
    generates, token for token (run here eagerly on the CPU)."""
    cfg, s = _generation_setup()
    torch.manual_seed(0)
    gen = generation._Generator(row, cfg, s, torch.device("cpu"))
    expected, final = _eager_tokens(gen, 3, 12)
    with torch.inference_mode():
        state = gen.state(3)
        tokens = torch.zeros(3, dtype=torch.long)
        got = []
        for _ in range(12):
            gen.step_in_place(tokens, state)
            got.append(tokens.clone())
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    flat = generation.state_tensors(state)
    assert len(flat) == len(final) and all(torch.equal(a, b) for a, b in zip(flat, final))
    assert any(t.abs().sum() > 0 for t in final)  # the state did move from zero


def test_generation_step_graph_needs_cuda() -> None:
    cfg, s = _generation_setup(step_graph=True)
    with pytest.raises(ValueError, match="step_graph: true replays the step from a CUDA graph"):
        generation._Generator("S4", cfg, s, torch.device("cpu"))
    assert not generation._Generator("Transformer", cfg, s, torch.device("cpu")).graphed  # runs eagerly


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("row", ["S4", "S4D", "Linear Transformer"])
def test_generation_step_graph_replays_the_eager_loop_on_gpu(row: str) -> None:
    cfg, s = _generation_setup(step_graph=True)
    torch.manual_seed(0)
    gen = generation._Generator(row, cfg, s, torch.device("cuda"))
    expected, final = _eager_tokens(gen, 3, 12)
    with torch.inference_mode():
        state = gen.state(3)
        tokens = torch.zeros(3, dtype=torch.long, device="cuda")
        replay = gen.capture(tokens, state)
        got = []
        for _ in range(12):
            replay()
            got.append(tokens.clone())
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    for a, b in zip(generation.state_tensors(state), final):
        torch.testing.assert_close(a, b)  # the graph may pick other kernels than the eager run: close, not equal
    assert gen.run(3, 12) > 0


def test_whole_step_graph_needs_cuda_and_kernel_graphs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    def build():
        model = torch.nn.Linear(3, 2)
        return (lambda: model(torch.ones(1, 3)).sum().backward()), model

    with pytest.raises(ValueError, match="step_graph: a CUDA graph needs a CUDA device"):
        common.measure_training_step(build, torch.device("cpu"), step_graph=True)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        common.graphed_step(lambda: None, torch.device("cpu"))
    monkeypatch.setenv("SSM_KERNEL_GRAPHS", "1")
    with common.kernel_graphs_off():
        assert os.environ["SSM_KERNEL_GRAPHS"] == "0"
    assert os.environ["SSM_KERNEL_GRAPHS"] == "1"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["S4", "Transformer"])
def test_whole_step_graph_gives_the_eager_gradients_on_gpu(name: str) -> None:
    cfg = vs_transformers.VsTransformersConfig(batch=4, d_model=32, n_layers=2, n_heads=2, qkv_dim=32,
                                               s4_layer={"mode": "s4", "d_state": 16, "output": "glu"})
    dev = torch.device("cuda")
    step, model = vs_transformers._classifier_step(name, cfg, 256, dev, 0)()
    step()
    eager = [p.grad.clone() for p in model.parameters()]
    with common.kernel_graphs_off():
        replay = common.graphed_step(step, dev)
        replay()
    torch.cuda.synchronize()
    for p, g in zip(model.parameters(), eager):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
    m = common.measure_training_step(vs_transformers._classifier_step(name, cfg, 256, dev, 0), dev, 2, 3,
                                     step_graph=True)
    assert m.ok and m.ms > 0 and "CUDA graph" in m.note


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_step_that_syncs_with_the_host_is_refused_before_capture_and_the_device_stays_usable() -> None:
    dev = torch.device("cuda")
    w = torch.randn(8, device=dev, requires_grad=True)
    flag = torch.ones((), device=dev)

    def syncing() -> None:
        w.grad = None
        if flag.item() > 0:  # a host read of a device value: cannot be recorded in a graph
            (w * 2).sum().backward()

    with common.kernel_graphs_off():
        with pytest.raises(common.StepNotCapturable, match="synchronizes with the host"):
            common.graphed_step(syncing, dev)
        assert torch.cuda.get_sync_debug_mode() == 0

        def clean() -> None:
            w.grad = None
            (w * torch.randn(8, device=dev)).sum().backward()  # the generator's offset advances inside the capture

        replay = common.graphed_step(clean, dev)
        replay()
    torch.cuda.synchronize()
    assert w.grad is not None and torch.isfinite(w.grad).all()


def test_a_narrowed_run_keeps_what_it_measured_beside_the_selected_cells(tmp_path: Path, monkeypatch) -> None:
    """`run --cells` writes the selected cells and every other cell the runner measured on the way (the other
    models of the selected setting): only the selected ones are judged from that file, and an ordering check
    reads the others (here the Transformer's state size against the constant-state models', which the smoke tier
    reports without checking them)."""
    import json

    from runners.cli.main import main
    from runners.judge.verdicts import judge_tier

    def fake_measure(name, cfg_, setting, ctx_):
        return {"params": 1, "batch": 2, "batch_limit": "x", "seconds": 1.0, "throughput": 10.0, "note": "n",
                "state_kb": 100.0 if name == "Transformer" else 1.0}

    monkeypatch.setattr(generation, "_measure", fake_measure)
    assert main(["run", "s4-generation", "--tier", "smoke", "--cells", "Transformer/State KB/seq (Table 7)",
                 "--output", str(tmp_path), "--no-progress"]) == 0
    (path,) = (tmp_path / "s4-generation").glob("*.json")
    result = json.loads(path.read_text())
    assert result["selected_cells"] == [["Transformer", "State KB/seq (Table 7)"]]
    cells = {(c["row"], c["column"]): c["value"] for c in result["cells"]}
    assert cells[("S4", "State KB/seq (Table 7)")] == 1.0  # measured on the way, kept
    assert not any(column.endswith("(Table 8)") for _, column in cells)  # a setting not selected is not measured
    verdicts = {(v.row, v.column): v for v in judge_tier(load_expected(expected_path("s4-generation")), [result],
                                                         "smoke")}
    assert verdicts[("Transformer", "State KB/seq (Table 7)")].verdict == "PASS"
    assert verdicts[("S4", "State KB/seq (Table 7)")].result is None  # not judged from this file


def test_generation_runs_only_the_settings_whose_cells_are_selected(tmp_path: Path, monkeypatch) -> None:
    """`run --cells` on the generation spec: a setting none of whose cells is selected is not measured at all (so a
    long tier can be split across calls, one setting each); a selected setting measures every model (the speed-up
    needs the Transformer of the same setting)."""
    cfg, s = _generation_setup()
    other = dataclasses.replace(s, name="U")
    cfg = dataclasses.replace(cfg, settings=[dataclasses.asdict(s), dataclasses.asdict(other)])
    measured: list[tuple[str, str]] = []

    def fake_measure(name, cfg_, setting, ctx_):
        measured.append((setting.name, name))
        return {"params": 1, "batch": 2, "batch_limit": "x", "seconds": 1.0, "throughput": 10.0, "note": "n",
                "state_kb": 1.0}

    monkeypatch.setattr(generation, "_measure", fake_measure)
    ctx = dataclasses.replace(_ctx(tmp_path, "s4-generation"), selected=frozenset({("S4", "Speedup (U)")}))
    out = generation.run_generation(cfg, ctx)
    assert measured == [("U", m) for m in cfg.models]
    assert {c.column for c in out.cells} == {"Tokens/s (U)", "Speedup (U)", "State KB/seq (U)"}
