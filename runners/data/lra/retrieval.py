"""LRA Retrieval (AAN citation pairs): ``tsv_data/new_aan_pairs.{train,eval,test}.tsv``.

Each line, no header, tab-separated with no quoting (LRA reads it with use_quote_delim=False):
``label  id1  id2  text1  text2``, label 0/1 (written as an int or a float such as ``1.0``).
Each document is byte level (byte b -> id 3 + b), truncated to 4000 tokens including the appended
<eos> (S4 Table 11 / LRA: 4000 per document). Items are ((x1, x2), y); the two-tower decoder on
[x1, x2, x1 - x2, x1 * x2] is the model's business. Splits: train / eval (= val) / test as released.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from runners.data.base import DataMissing, DatasetError, TaskData, data_root, read_error
from runners.data.cache import cached, content_fingerprint
from runners.data.lra.layout import LRA_URL
from runners.data.lra.common import (
    BYTE_VOCAB_SIZE, EOS_ID, N_SPECIAL, PadCollate, PairTokenDataset, TokenDataset, find_task_dir, pack,
    truncate_bytes)

AAN_DIRNAME = "tsv_data"
SPLIT_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
               "test": "new_aan_pairs.test.tsv"}
HOW_TO_GET = (f"Get the LRA release ({LRA_URL}; it holds lra_release/tsv_data/) and extract it into the data "
              f"directory (`python -m runners.data.download lra --data DIR`).")


def read_aan_tsv(path: Path, max_len: int, append_eos: bool) -> dict:
    """Packed byte tensors of both documents and the labels of one split file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise read_error(exc)(f"Retrieval: cannot read {path}: {exc}. {HOW_TO_GET}") from exc
    docs1, docs2, labels = [], [], []
    for n, line in enumerate(raw.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        fields = line.split(b"\t")
        label = None
        if len(fields) == 5:
            try:
                value = float(fields[0])
                label = int(value) if value in (0.0, 1.0) else None
            except ValueError:
                label = None
        if label is None:
            raise DatasetError(f"Retrieval: {path} line {n}: expected 5 tab-separated fields 'label id1 id2 text1 "
                               f"text2' with label 0 or 1; found {len(fields)} field(s) starting "
                               f"{line[:60]!r}. {HOW_TO_GET}")
        labels.append(label)
        docs1.append(truncate_bytes(fields[3], max_len, append_eos))
        docs2.append(truncate_bytes(fields[4], max_len, append_eos))
    if not labels:
        raise DatasetError(f"Retrieval: {path} holds no examples. {HOW_TO_GET}")
    flat1, off1 = pack(docs1, np.uint8)
    flat2, off2 = pack(docs2, np.uint8)
    return {"flat1": flat1, "offsets1": off1, "flat2": flat2, "offsets2": off2,
            "labels": torch.tensor(labels, dtype=torch.long)}


def load_aan(root: Optional[Path] = None, *, max_len: int = 4000, append_eos: bool = True,
             pad_to_max: bool = False, use_cache: bool = True) -> TaskData:
    """LRA Retrieval as TaskData (dual=True): items ((x1 (L1,), x2 (L2,)), y), L <= max_len, 2 classes.

    root: data directory holding ``tsv_data/`` (directly or inside the extracted LRA archive).
    The collate pads both documents of a batch to the same length.
    """
    root = data_root(root)
    folder = find_task_dir(root, AAN_DIRNAME, SPLIT_FILES["train"], "Retrieval (AAN)", HOW_TO_GET)
    missing = [n for n in SPLIT_FILES.values() if not (folder / n).is_file()]
    if missing:
        raise DataMissing(f"Retrieval: {folder} lacks {', '.join(missing)} (expected "
                          f"new_aan_pairs.{{train,eval,test}}.tsv). {HOW_TO_GET}")
    files = [folder / n for n in SPLIT_FILES.values()]
    params = {"max_len": max_len, "append_eos": append_eos, "sources": [f.name for f in files],
              "content": content_fingerprint(files, folder)}
    data = cached(root, "aan", params,
                  lambda: {k: read_aan_tsv(folder / n, max_len, append_eos) for k, n in SPLIT_FILES.items()},
                  enabled=use_cache)

    def pairs(d: dict) -> PairTokenDataset:
        kw = {"add": N_SPECIAL, "append_eos": append_eos}
        return PairTokenDataset(TokenDataset(d["flat1"], d["offsets1"], d["labels"], **kw),
                                TokenDataset(d["flat2"], d["offsets2"], d["labels"], **kw))

    splits = {k: pairs(v) for k, v in data.items()}
    return TaskData(
        name="retrieval", train=splits["train"], val=splits["val"], test=splits["test"], seq_len=max_len,
        d_output=2, d_input=1, vocab_size=BYTE_VOCAB_SIZE, dual=True,
        collate_fn=PadCollate(pad_to=max_len if pad_to_max else None, dual=True),
        info={"path": str(folder), "tokenizer": "bytes of each document (id = 3 + byte); <eos> appended; truncated",
              "pad_id": 0, "eos_id": EOS_ID, "padding": "max_len" if pad_to_max else "batch max (both towers)",
              "splits": "train / eval (used as val) / test as released",
              "sizes": {k: len(v) for k, v in splits.items()}})
