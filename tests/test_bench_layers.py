"""benchmarks/bench_layers.py --quick: the CPU smoke configuration writes its results JSON and table."""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load():
    from benchmarks import bench_layers

    return bench_layers


def test_quick_run_writes_json_and_table(tmp_path: Path) -> None:
    bench = _load()
    paths = bench.main(["--quick", "--out-dir", str(tmp_path)])
    record = json.loads(Path(paths["json"]).read_text())
    assert Path(paths["json"]).parent == tmp_path / "bench-layers"
    rows = record["rows"]
    assert {(r["mode"], r["output"]) for r in rows if r["variant"] == "layer"} == {
        ("s4d", "none"), ("s4d", "glu"), ("s4", "none"), ("s4", "glu")}
    assert {r["variant"] for r in rows} == {"layer", "before", "kernel only", "conv only"}
    for r in rows:
        assert "error" not in r, r
        assert isinstance(r["ms"], float) and r["ms"] > 0
    assert record["environment"]["device_name"]
    table = Path(paths["table"]).read_text()
    assert Path(paths["table"]) == tmp_path / "bench-layers.md"
    assert "| S4D " in table and "official ms" in table and record["environment"]["device_name"] in table
    # --render writes the same table from the results file alone
    again = bench.main(["--render", paths["json"], "--tables-dir", str(tmp_path / "again")])
    assert Path(again["table"]).read_text() == table


def test_full_plan_covers_the_issue_sizes() -> None:
    bench = _load()
    specs = bench.plan(quick=False)
    layer = {(s["mode"], s["backend"], s["output"], s["h"], s["b"], s["length"]) for s in specs
             if s.get("variant", "layer") == "layer" and s.get("transposed", True)}
    for mode in ("s4", "s4d"):
        for backend in ("triton", "torch"):
            for output in ("none", "glu"):
                for h in (128, 256, 512):
                    for b, length in ((32, 1024), (32, 4096), (8, 16384)):
                        assert (mode, backend, output, h, b, length) in layer
    assert specs[0]["mode"] == "s4d" and (specs[0]["h"], specs[0]["b"], specs[0]["length"]) == bench.KEY
