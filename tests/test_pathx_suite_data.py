"""S4D Table 6's base S4D column on Path-X made by the suite (`--data suite` at the full tier): the variant's cells
are selected in the transposed table (its rows are the table's columns), its data is LRA's Path-X size and
settings, and its model is the S4D column's, under 200K parameters."""
from __future__ import annotations

from runners.data.base import TaskData
from runners.specs.expected import expected_path, load_expected
from runners.specs.selection import select_cells, tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.table import build_model
from ssm_core.blocks import SequenceModel

SUITE_CELLS = [("Path-X", "S4D (suite data)"), ("Path-X solved", "S4D (suite data)"),
               ("Trainable parameters", "S4D (suite data)")]


def test_the_suite_variant_selects_its_own_cells_in_the_transposed_table():
    spec = load_spec(find_spec("s4d-table-6"))
    expected = load_expected(expected_path(spec.id))
    suite = select_cells(spec, "full", expected, data="suite")
    release = select_cells(spec, "full", expected, data="release")
    assert suite == SUITE_CELLS
    assert release and not set(release) & set(SUITE_CELLS)
    assert ("Path-X", "S4D") in release and ("Path-X", "DSS") in release
    assert select_cells(spec, "full", expected, ["Path-X/*"], data="suite") == SUITE_CELLS[:1]
    # what the campaign selects: every cell of the run, so its results file judges all three
    assert select_cells(spec, "full", expected, ["*/S4D (suite data)"], data="suite") == SUITE_CELLS


def test_the_suite_variant_trains_the_s4d_column_on_lras_path_x():
    spec = load_spec(find_spec("s4d-table-6"))
    cfg, release = tier_config(spec, "full", "suite"), tier_config(spec, "full")
    assert list(cfg.models) == ["S4D (suite data)"]
    prep = cfg.tasks["Path-X"]["prepare"]
    assert (prep["preparer"], prep["resolution"], prep["n"]) == ("pathfinder", 128, 200000)
    assert cfg.cell_train("S4D (suite data)", "Path-X") == release.cell_train("S4D", "Path-X")
    task = TaskData(name="Path-X", train=[], val=[], test=[], seq_len=16384, d_output=2, d_input=1)
    model = build_model("ssm", cfg.model_defaults["ssm"], task)
    assert isinstance(model, SequenceModel)
    assert 150_000 < sum(p.numel() for p in model.parameters() if p.requires_grad) < 200_000
