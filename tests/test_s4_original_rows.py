"""S4 Table 10's 'S4 (original)' row at the full tier: S4 Table 11's hyperparameters per task through the training
table's ``per_task`` settings, and that key's errors."""
from __future__ import annotations

import pytest

from runners.specs.selection import tier_config
from runners.specs.spec import find_spec, load_spec
from runners.train.table import TrainTableConfig

# S4 Table 11 (LRA rows): depth, H, norm, pre-norm, dropout, lr, batch, epochs, weight decay, patience
TABLE_11 = {"ListOps": (6, 128, "batch", False, 0.0, 0.01, 100, 50, 0.01, 5),
            "Text": (4, 64, "batch", True, 0.0, 0.001, 50, 20, 0.0, 5),
            "Retrieval": (6, 256, "batch", True, 0.0, 0.002, 64, 20, 0.0, 20),
            "Image": (6, 512, "layer", False, 0.2, 0.004, 50, 200, 0.01, 20),
            "Pathfinder": (6, 256, "batch", True, 0.1, 0.004, 100, 200, 0.0, 10),
            "Path-X": (6, 256, "batch", True, 0.0, 0.0005, 32, 100, 0.0, 20)}


@pytest.mark.parametrize("task", sorted(TABLE_11))
def test_the_original_row_trains_with_table_11s_settings(task):
    cfg = tier_config(load_spec(find_spec("s4-table-4")), "full")
    model, train = cfg.cell_model("S4 (original)", task), cfg.cell_train("S4 (original)", task)
    depth, h, norm, prenorm, dropout, lr, batch, epochs, wd, patience = TABLE_11[task]
    assert (model["n_layers"], model["d_model"], model["norm"], model["prenorm"], model.get("dropout", 0.0)) == \
        (depth, h, norm, prenorm, dropout)
    assert (train["lr"], train["batch_size"], train["epochs"], train["weight_decay"], train["patience"]) == \
        (lr, batch, epochs, wd, patience)
    assert train["scheduler"] == "plateau" and train["warmup_epochs"] == 0
    layer = model["layer"]
    assert (layer["mode"], layer["d_state"], layer["bidirectional"], layer["output"], layer["lr"]) == \
        ("s4", 64, False, "linear", 0.001)
    assert model["pool"] == "mean"
    # the updated row keeps S4D Table 12's settings
    assert cfg.cell_model("S4", task)["layer"]["bidirectional"] is True


def _config(per_task) -> dict:
    return {"tasks": {"ListOps": {"loader": "listops"}},
            "models": {"S4": {"arch": "ssm", "per_task": per_task}},
            "train": {"lr": 0.01, "epochs": 1, "batch_size": 2}}


@pytest.mark.parametrize("per_task, message", [
    ({"Text": {"train": {"lr": 0.1}}}, r"models.S4.per_task.Text: not a task of this table"),
    ({"ListOps": {"optimizer": {}}}, r"models.S4.per_task.ListOps: unknown key\(s\) \['optimizer'\]"),
    ({"ListOps": [1, 2]}, r"models.S4.per_task.ListOps"),
    ({"ListOps": {"train": {"lr": -1.0}}}, r"lr"),
])
def test_per_task_errors_name_the_key(per_task, message):
    with pytest.raises(ValueError, match=message):
        TrainTableConfig(**_config(per_task))
