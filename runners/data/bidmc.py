"""BIDMC vital signs regression (S4D Table 4 / Table 10: HR, RR, SpO2; metric RMSE).

Reads the Monash TSER archive files ``<data>/bidmc/BIDMC32{HR,RR,SpO2}/BIDMC32{..}_{TRAIN,TEST}.ts``
(sktime .ts text format: ``@`` header lines, then one line per series with the dimensions
separated by ``:``, the values of a dimension by ``,``, and the regression target last).
Each series: 2 channels (PPG, ECG) of length 4000 -> x (4000, 2); y (1,) float.

What the S4 code does, and what we do (state-spaces/s4, src/dataloaders/ts.py BIDMC and
src/dataloaders/prepare/bidmc/process_data.py):
- no normalisation of inputs or targets: the model regresses the raw target (beats or breaths
  per minute, % saturation) and RMSE is in those units. ``normalize_targets=True`` is offered
  (train mean/std, recorded in info) but is off by default, as in the S4 code.
- split: the S4 code's default (``reshuffle=True``) pools TRAIN and TEST and splits 70/15/15 with
  sklearn's ``train_test_split(test_size=0.3, random_state=0)`` then ``(test_size=0.5,
  random_state=1)``; ``split="reshuffle"`` reproduces those indices exactly (sklearn's
  ShuffleSplit draws ``np.random.RandomState(seed).permutation(n)``) without needing sklearn.
  ``split="original"`` (our default) keeps the official TEST file as the test set and holds out
  ``val_fraction`` of TRAIN (seeded torch.randperm) as validation.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import TensorDataset

from runners.data.base import DataMissing, DatasetError, TaskData, data_root, one_line, read_error
from runners.data.cache import cached, content_fingerprint
from runners.data.download import BIDMC_DIR, BIDMC_TARGETS, how_to_get
from runners.data.mnist import train_val_indices

BIDMC_LEN = 4000
BIDMC_CHANNELS = 2
MAX_TS_DIMENSIONS = 64
MAX_TS_LENGTH = 1_000_000
_REQUIRED_TAGS = ("@problemname", "@timestamps", "@univariate", "@targetlabel")


def read_ts_regression(path: Path, *, problem_name: Optional[str] = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Parse an equal-length, timestamp-free regression .ts file.

    Returns x (n, L, d) float32 and y (n,) float64. Missing values ('?') become NaN. Raises
    DatasetError naming the file and line when the header or a data line is malformed, or when
    ``problem_name`` is given and the file's @problemName differs.
    """
    path = Path(path)

    def bad(msg: str, line_no: Optional[int] = None) -> DatasetError:
        where = f"{path}" + (f", line {line_no}" if line_no is not None else "")
        return DatasetError(f"BIDMC: malformed .ts file {where}: {msg}. {how_to_get('bidmc')}")

    tags: dict[str, str] = {}
    xs: list[np.ndarray] = []
    ys: list[float] = []
    in_data = False
    missing_allowed = False
    n_dims = length = None
    try:
        f = open(path, "r", encoding="latin-1")
    except OSError as exc:
        raise read_error(exc)(f"BIDMC: cannot read {path}: {exc}. {how_to_get('bidmc')}") from exc
    with f:
        for line_no, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if not line.startswith("@"):
                    raise bad(f"expected an @-header line or @data before the data, got {line[:40]!r}", line_no)
                key, _, value = line.partition(" ")
                key, value = key.lower(), value.strip()
                if key == "@data":
                    missing = [t for t in _REQUIRED_TAGS if t not in tags]
                    if missing:
                        raise bad(f"header lacks {', '.join(missing)} before @data", line_no)
                    if tags["@timestamps"].lower() != "false":
                        raise bad("@timeStamps true is not supported (BIDMC files have none)", line_no)
                    if tags["@targetlabel"].lower() != "true":
                        raise bad("@targetLabel must be true (a regression file); this one is not", line_no)
                    if "@equallength" in tags and tags["@equallength"].lower() != "true":
                        raise bad("@equalLength false is not supported", line_no)
                    if problem_name is not None and tags["@problemname"].lower() != problem_name.lower():
                        raise bad(f"@problemName is {tags['@problemname']!r}, expected {problem_name!r}", line_no)
                    if "@dimensions" in tags:
                        n_dims = int(tags["@dimensions"])
                    if "@serieslength" in tags:
                        length = int(tags["@serieslength"])
                    missing_allowed = tags.get("@missing", "false").lower() == "true"
                    in_data = True
                elif key == "@classlabel" and value.lower() != "false":
                    raise bad("@classLabel true: a classification file, expected a regression file with "
                              "@targetLabel true", line_no)
                else:
                    if key in ("@timestamps", "@univariate", "@targetlabel", "@equallength", "@missing") \
                            and value.lower() not in ("true", "false"):
                        raise bad(f"{key} needs the value true or false, got {value!r}", line_no)
                    if key in ("@dimensions", "@serieslength"):
                        cap = MAX_TS_DIMENSIONS if key == "@dimensions" else MAX_TS_LENGTH
                        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= cap):
                            raise bad(f"{key} needs an integer from 1 to {cap}, got {value[:40]!r}", line_no)
                    if key == "@problemname" and not value:
                        raise bad("@problemName needs a value", line_no)
                    tags[key] = value
                continue
            fields = line.split(":")
            if n_dims is None:
                n_dims = len(fields) - 1
                if not 1 <= n_dims <= MAX_TS_DIMENSIONS:
                    raise bad(f"{n_dims} dimensions before the target; allowed: 1 to {MAX_TS_DIMENSIONS}", line_no)
            if len(fields) != n_dims + 1:
                raise bad(f"{len(fields) - 1} dimensions before the target, expected {n_dims}", line_no)
            try:
                dims = [np.array(fd.replace("?", "nan").split(","), dtype=np.float32) for fd in fields[:-1]]
                target = float(fields[-1])
            except ValueError as exc:
                raise bad(f"non-numeric value ({one_line(exc, 80)})", line_no) from exc
            if not math.isfinite(target):
                raise bad(f"the target {fields[-1].strip()[:20]!r} is not a finite number; allowed: a finite "
                          f"regression target", line_no)
            if not missing_allowed and not all(np.isfinite(d).all() for d in dims):
                raise bad("a series holds a missing or non-finite value ('?', nan or inf) but the header says "
                          "@missing false", line_no)
            if length is None:
                length = len(dims[0])
            if any(len(d) != length for d in dims):
                raise bad(f"series lengths {[len(d) for d in dims]}, expected {length}", line_no)
            xs.append(np.stack(dims, axis=-1))  # (L, d)
            ys.append(target)
    if not in_data:
        raise bad("no @data line (not a .ts file?)")
    if not xs:
        raise bad("no data lines after @data")
    return np.stack(xs), np.asarray(ys, dtype=np.float64)


def sklearn_style_split(n: int, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices as sklearn.model_selection.train_test_split(test_size=..., random_state=seed,
    shuffle=True) draws them: n_test = ceil(test_size * n), perm = RandomState(seed).permutation(n),
    test = perm[:n_test], train = perm[n_test:]."""
    n_test = math.ceil(test_size * n)
    perm = np.random.RandomState(seed).permutation(n)
    return perm[n_test:], perm[:n_test]


def load_bidmc(data_dir: Optional[Path] = None, *, target: str = "SpO2", split: str = "original",
               val_fraction: float = 0.1, split_seed: int = 0, normalize_targets: bool = False,
               cache: bool = True) -> TaskData:
    """BIDMC32{HR,RR,SpO2}: x (4000, 2) float, y (1,) float; regression, metric RMSE.

    data_dir is the data root; files are read from ``<data_dir>/bidmc/BIDMC32<target>/``.
    split="original": official TEST = test, val = seeded ``val_fraction`` of TRAIN.
    split="reshuffle": the S4 code's pooled 70/15/15 split (seeds split_seed and split_seed + 1).
    """
    if target not in BIDMC_TARGETS:
        raise ValueError(f"target must be one of {BIDMC_TARGETS}, got {target!r}")
    if split not in ("original", "reshuffle"):
        raise ValueError(f"split must be 'original' or 'reshuffle', got {split!r}")
    root = data_root(data_dir)
    problem = f"BIDMC32{target}"
    folder = root / BIDMC_DIR / problem
    files = {p: folder / f"{problem}_{p}.ts" for p in ("TRAIN", "TEST")}
    if not folder.is_dir():
        raise DataMissing(f"BIDMC: no directory {folder} (expected {problem}_TRAIN.ts and {problem}_TEST.ts "
                          f"from the TSER archive in it). {how_to_get('bidmc')}")
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise DataMissing(f"BIDMC: missing {', '.join(missing)}. {how_to_get('bidmc')}")

    def build() -> dict:
        out = {}
        for part, p in files.items():
            x, y = read_ts_regression(p, problem_name=problem)
            if x.shape[1:] != (BIDMC_LEN, BIDMC_CHANNELS):
                raise DatasetError(f"BIDMC: {p} holds series of shape {x.shape[1:]}, expected "
                                   f"({BIDMC_LEN}, {BIDMC_CHANNELS}) (length, channels). {how_to_get('bidmc')}")
            out[part] = (torch.from_numpy(x), torch.from_numpy(y).float())
        return {"train_x": out["TRAIN"][0], "train_y": out["TRAIN"][1],
                "test_x": out["TEST"][0], "test_y": out["TEST"][1]}

    key = {"v": 1, "sources": [p.name for p in files.values()],
           "content": content_fingerprint(list(files.values()), folder)}
    t = cached(root, f"bidmc-{target}", key, build, enabled=cache)
    tr_x, tr_y, te_x, te_y = t["train_x"], t["train_y"], t["test_x"], t["test_y"]
    if split == "original":
        tr_idx, va_idx = train_val_indices(len(tr_y), val_fraction, split_seed)
        parts = {"train": (tr_x[tr_idx], tr_y[tr_idx]), "val": (tr_x[va_idx], tr_y[va_idx]),
                 "test": (te_x, te_y)}
        split_note = (f"official TEST file = test; val = {len(va_idx)} of {len(tr_y)} TRAIN series "
                      f"(torch.randperm, seed {split_seed})")
    else:
        all_x, all_y = torch.cat([tr_x, te_x]), torch.cat([tr_y, te_y])
        i_train, i_eval = sklearn_style_split(len(all_y), 0.3, split_seed)
        j_val, j_test = sklearn_style_split(len(i_eval), 0.5, split_seed + 1)
        i_val, i_test = i_eval[j_val], i_eval[j_test]
        parts = {k: (all_x[torch.from_numpy(i)], all_y[torch.from_numpy(i)])
                 for k, i in (("train", i_train), ("val", i_val), ("test", i_test))}
        split_note = ("S4 code's reshuffle: TRAIN+TEST pooled, train_test_split(0.3, seed) then "
                      f"(0.5, seed + 1), seed {split_seed}")
    info = {"source": str(folder), "target": target, "split": split, "split_note": split_note,
            "split_seed": split_seed, "metric": "rmse", "inputs": "raw values, not normalised (as the S4 code)"}
    if normalize_targets:
        mean, std = parts["train"][1].mean().item(), parts["train"][1].std().item()
        parts = {k: (x, (y - mean) / std) for k, (x, y) in parts.items()}
        info.update(target_mean=mean, target_std=std,
                    targets="standardised with train mean/std: multiply RMSE by target_std for raw units")
    else:
        info["targets"] = "raw units, not normalised (as the S4 code)"
    ds = {k: TensorDataset(x, y.unsqueeze(-1)) for k, (x, y) in parts.items()}  # x (n, 4000, 2), y (n, 1)
    return TaskData(name=f"bidmc-{target.lower()}", train=ds["train"], val=ds["val"], test=ds["test"],
                    seq_len=BIDMC_LEN, d_output=1, d_input=BIDMC_CHANNELS, task_type="regression", info=info)
