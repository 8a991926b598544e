"""LRA Text: IMDB reviews, byte level, in the Stanford layout ``aclImdb/{train,test}/{pos,neg}/*.txt``.

Each review's UTF-8 bytes are tokens (byte b -> id 3 + b), truncated to 4096 tokens including the
appended <eos> (S4 Table 11 / LRA: byte-level, length 4096). Labels: neg = 0, pos = 1. There is no
validation split in the release: as in the S4 code base (val_split = 0, "use test set as val set, as
done in the LRA paper"), val is the test split. ``aclImdb/train/unsup`` is not used.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from runners.data.base import DataMissing, InsideFolder, TaskData, data_root
from runners.data.cache import cached, content_fingerprint
from runners.data.lra.common import BYTE_VOCAB_SIZE, EOS_ID, N_SPECIAL, PadCollate, TokenDataset, pack, truncate_bytes

IMDB_DIRNAME = "aclImdb"
CLASSES = ("neg", "pos")  # label 0, 1
HOW_TO_GET = ("Get aclImdb_v1.tar.gz from https://ai.stanford.edu/~amaas/data/sentiment/ and extract it into the "
              "data directory (`python -m runners.data.download lra --data DIR` does this).")


def _review_files(folder: Path) -> list[Path]:
    """The *.txt files of one class folder, sorted by name; one that links outside aclImdb/ is refused."""
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name.endswith(".txt") and e.is_file())
    base = folder.parent.parent  # <root>/aclImdb
    guard = InsideFolder(base, "IMDB", HOW_TO_GET)
    rel = folder.relative_to(base).as_posix()
    return [guard(f"{rel}/{n}", folder) for n in names]


def _build(base: Path, max_len: int, append_eos: bool) -> dict:
    out = {}
    for split in ("train", "test"):
        seqs, labels = [], []
        for label, cls in enumerate(CLASSES):
            for f in _review_files(base / split / cls):
                seqs.append(truncate_bytes(f.read_bytes(), max_len, append_eos))
                labels.append(label)
        flat, offsets = pack(seqs, np.uint8)
        out[split] = {"flat": flat, "offsets": offsets, "labels": torch.tensor(labels, dtype=torch.long)}
    return out


def load_imdb(root: Optional[Path] = None, *, max_len: int = 4096, append_eos: bool = True,
              pad_to_max: bool = False, use_cache: bool = True) -> TaskData:
    """LRA Text (IMDB) as TaskData: byte tokens (L,) with L <= max_len, 2 classes, vocab 259; val = test.

    root: data directory holding ``aclImdb/``; default $DATA_PATH or ./data.
    """
    root = data_root(root)
    base = root / IMDB_DIRNAME
    folders = [base / s / c for s in ("train", "test") for c in CLASSES]
    bad = [str(f) for f in folders if not f.is_dir()]
    if bad:
        raise DataMissing(f"IMDB: the data directory {root} lacks the Stanford layout "
                          f"aclImdb/{{train,test}}/{{pos,neg}}/*.txt; missing folders: {', '.join(bad)}. {HOW_TO_GET}")
    reviews = [_review_files(f) for f in folders]
    counts = [len(r) for r in reviews]
    empty = [str(f) for f, c in zip(folders, counts) if c == 0]
    if empty:
        raise DataMissing(f"IMDB: no *.txt reviews in {', '.join(empty)}. {HOW_TO_GET}")
    params = {"max_len": max_len, "append_eos": append_eos,
              "counts": counts, "content": content_fingerprint([p for r in reviews for p in r], base)}
    data = cached(root, "imdb", params, lambda: _build(base, max_len, append_eos), enabled=use_cache)
    train, test = (TokenDataset(data[s]["flat"], data[s]["offsets"], data[s]["labels"], add=N_SPECIAL,
                                append_eos=append_eos) for s in ("train", "test"))
    return TaskData(
        name="text", train=train, val=test, test=test, seq_len=max_len, d_output=2, d_input=1,
        vocab_size=BYTE_VOCAB_SIZE, collate_fn=PadCollate(pad_to=max_len if pad_to_max else None),
        info={"path": str(base), "tokenizer": "UTF-8 bytes (id = 3 + byte); <eos> appended; truncated",
              "pad_id": 0, "eos_id": EOS_ID, "padding": "max_len" if pad_to_max else "batch max",
              "val": "val is the test split (no validation split in the release; S4 code base, val_split=0)",
              "sizes": {"train": len(train), "val": len(test), "test": len(test)}})
