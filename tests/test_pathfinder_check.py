"""The Pathfinder learnability check: its training loop on CPU (it can pass and it can fail), the shortcut probe
(it finds a statistic that tells the label; the generator's images have none), its command line, and the check
itself on a GPU (fresh Pathfinder-32 must be learned well above chance)."""
import json
import os

import numpy as np
import pytest
import torch

from runners.data.lra.pathfinder_check import (
    SHORTCUT_FEATURES, _threshold_accuracy, learnability, main, path_statistics, shortcut_probe, train_check)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _bar_images(n: int, seed: int, informative: bool) -> dict:
    """32 x 32 images holding a bright horizontal or vertical bar at a random place; the label is the bar's
    direction (informative) or a coin flip (not)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1, 32, 32), dtype=np.float32)
    direction = rng.integers(0, 2, size=n)
    for i in range(n):
        r, c = rng.integers(4, 24, size=2)
        if direction[i]:
            x[i, 0, r:r + 8, c] = 1.0
        else:
            x[i, 0, r, c:c + 8] = 1.0
    y = direction if informative else rng.integers(0, 2, size=n)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    return {"train": (xt[:n * 4 // 5], yt[:n * 4 // 5]), "val": (xt[n * 4 // 5:], yt[n * 4 // 5:])}


def test_train_check_learns_a_readable_label_and_not_a_random_one():
    torch.set_num_threads(min(2, torch.get_num_threads()))
    kw = dict(max_epochs=3, channels=8, dilations=(1, 2), batch_size=32)
    readable = train_check(_bar_images(400, 0, informative=True), **kw)
    random = train_check(_bar_images(400, 0, informative=False), **kw)
    assert readable["best_val_acc"] >= 0.9, readable
    assert random["best_val_acc"] <= 0.65, random  # 80 validation images: chance +- 0.06 (1 sd)
    assert readable["epochs"] == 3 and readable["n_train"] == 320 and len(readable["val_acc"]) == 3


def test_threshold_accuracy_finds_a_leaky_statistic_and_not_a_random_one():
    rng = np.random.default_rng(0)
    y = rng.integers(2, size=2000)
    leaky = y * 1.0 + rng.normal(0, 0.3, size=2000)  # shifted by the label
    noise = rng.normal(0, 1, size=2000)
    assert _threshold_accuracy(leaky[:1000], y[:1000], leaky[1000:], y[1000:]) > 0.9
    assert abs(_threshold_accuracy(noise[:1000], y[:1000], noise[1000:], y[1000:]) - 0.5) < 0.06
    flipped = -leaky  # the rule's sign is fitted too
    assert _threshold_accuracy(flipped[:1000], y[:1000], flipped[1000:], y[1000:]) > 0.9


def test_generated_pathfinder_has_no_global_statistic_that_tells_the_label():
    # 400 fresh images: 200 score each statistic's threshold (chance 0.5, 1 sd 0.035)
    probe = shortcut_probe(resolution=32, n=400, seed=3)
    assert list(probe) == list(SHORTCUT_FEATURES)
    assert all(acc <= 0.6 for acc in probe.values()), probe


def test_command_line_rejects_bad_probe_settings(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--max-shortcut-acc", "0.4"])
    assert "--max-shortcut-acc must be in (0.5, 1), got 0.4" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--probe-n", "5"])
    assert "--probe-n must be 0 (skip) or at least 20, got 5" in capsys.readouterr().err


def test_whole_check_runs_on_cpu_at_a_tiny_size(tmp_path, capsys):
    # generation, loading, training, the probe and the JSON, end to end (too small to learn: the verdict is FAIL)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    out = tmp_path / "check.json"
    code = main(["--out", str(tmp_path / "data"), "--n", "100", "--minutes", "0.001", "--device", "cpu",
                 "--workers", "1", "--channels", "8", "--probe-n", "40", "--output", str(out)])
    res = json.loads(out.read_text())
    assert (res["n_train"], res["n_val"], res["epochs"]) == (80, 10, 1)
    assert set(res["shortcut_probe"]["held_out_acc"]) == set(SHORTCUT_FEATURES)
    assert res["environment"]["git_commit"] and res["environment"]["device"] == "cpu"
    assert code == (0 if res["passed"] else 1)
    assert "shortcut probe:" in capsys.readouterr().out


def test_command_line_rejects_a_bad_min_acc(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--min-acc", "1.5"])
    assert "--min-acc must be in (0, 1), got 1.5" in capsys.readouterr().err


@needs_cuda
@pytest.mark.gpu
def test_fresh_pathfinder32_is_learnable_on_gpu(tmp_path):
    # 40,000 fresh images (80/10/10), a residual CNN for 8 minutes: LRA's Pathfinder-32 is learned far above
    # chance by such models; data whose label cannot be read from the image stays at 0.50.
    res = learnability(tmp_path / "data", resolution=32, n=40000, gen_seed=0, workers=os.cpu_count() or 1,
                       seconds=480, device="cuda", channels=64, batch_size=128, lr=2e-3)
    (tmp_path / "result.json").write_text(json.dumps(res))
    assert res["best_val_acc"] >= 0.7, res


def test_path_statistics_see_the_targets_meet_and_run_straight_as_in_the_original():
    # the first version of the generator kept the targets apart (0 of its images); the original's targets meet
    rates = path_statistics(resolution=32, n=60, seed=5)
    assert set(rates) == {"targets_share_pixel", "targets_within_1px", "target_distractor_share_pixel",
                          "target_distractor_within_1px", "distractors_per_image", "images_without_distractors",
                          "mean_abs_turn_deg", "straight_turns"}
    assert 0.05 <= rates["straight_turns"] <= 0.4  # the original's discrete headings: straight runs (18 % there)
    assert 0.05 <= rates["targets_share_pixel"] <= 0.6 and rates["targets_within_1px"] >= rates["targets_share_pixel"]
