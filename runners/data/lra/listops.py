"""LRA ListOps loader: ``listops-1000/basic_{train,val,test}.tsv`` (header ``Source\\tTarget``).

Tokenization of the papers' code bases (S4 code, after LRA's own input pipeline): parentheses are
dropped, ``]`` is a token, the operators ``[MAX [MIN [MED [SM`` and the digits 0-9 are tokens, and
<eos> is appended; sequences are at most 2048 tokens (S4 Table 11 setting) and are padded to the
batch maximum. Vocabulary: <pad>=0, <unk>=1, <eos>=2, then the 15 symbols below (18 in all, as
the S4 code's vocabulary built from the training split).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from runners.data.base import DataMissing, DatasetError, TaskData, data_root, read_error
from runners.data.cache import cached, content_fingerprint
from runners.data.lra.common import EOS_ID, N_SPECIAL, PadCollate, TokenDataset, find_task_dir, pack
from runners.data.lra.layout import LISTOPS_DIRNAME, LISTOPS_OPERATORS, LISTOPS_SPLIT_FILES, LRA_URL

SPLIT_FILES = LISTOPS_SPLIT_FILES
OPERATORS = LISTOPS_OPERATORS
SYMBOLS = ("]",) + OPERATORS + tuple(str(d) for d in range(10))
TOKEN_IDS = {s: N_SPECIAL + i for i, s in enumerate(SYMBOLS)}
VOCAB_SIZE = N_SPECIAL + len(SYMBOLS)  # 18
HOW_TO_GET = (f"Get the LRA release ({LRA_URL}; it holds listops-1000/) and extract it into the data "
              f"directory, or generate the data with `python -m runners.data.lra.generate listops --out DIR`.")


def tokenize_listops(source: str) -> list[str]:
    """``"( ( ( [MAX 2 ) 9 ) ] )"`` -> ``["[MAX", "2", "9", "]"]``: parentheses dropped."""
    return source.replace("(", " ").replace(")", " ").split()


def encode_listops(source: str, max_len: int = 2048, append_eos: bool = True) -> np.ndarray:
    """Token ids of one expression (truncated so that with <eos> the length is <= max_len).

    Raises KeyError naming an unknown token.
    """
    toks = tokenize_listops(source)[:max_len - int(append_eos)]
    ids = [TOKEN_IDS[t] for t in toks]
    if append_eos:
        ids.append(EOS_ID)
    return np.asarray(ids, dtype=np.int16)


def read_listops_tsv(path: Path) -> tuple[list[str], list[int]]:
    """(sources, targets) of one split file; DatasetError naming the file and line if malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise read_error(exc)(f"ListOps: cannot read {path}: {exc}. {HOW_TO_GET}") from exc
    lines = text.splitlines()
    if not lines or lines[0].strip().split("\t") != ["Source", "Target"]:
        first = lines[0][:60] if lines else "<empty file>"
        raise DatasetError(f"ListOps: {path} must start with the header row 'Source<TAB>Target' of the LRA "
                           f"release; found {first!r}. {HOW_TO_GET}")
    sources, targets = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2 or not fields[1].strip().isdigit() or not 0 <= int(fields[1]) <= 9:
            raise DatasetError(f"ListOps: {path} line {n}: expected 'expression<TAB>digit 0-9'; found "
                               f"{line[:80]!r}. {HOW_TO_GET}")
        sources.append(fields[0])
        targets.append(int(fields[1]))
    if not sources:
        raise DatasetError(f"ListOps: {path} has a header but no examples. {HOW_TO_GET}")
    return sources, targets


def _build(folder: Path, max_len: int, append_eos: bool) -> dict:
    out = {}
    for split, name in SPLIT_FILES.items():
        path = folder / name
        sources, targets = read_listops_tsv(path)
        seqs = []
        for n, s in enumerate(sources, start=2):
            try:
                seqs.append(encode_listops(s, max_len, append_eos))
            except KeyError as exc:
                raise DatasetError(f"ListOps: {path} line {n}: unknown token {exc.args[0]!r}; allowed: "
                                   f"( ) {' '.join(SYMBOLS)}. {HOW_TO_GET}") from None
        flat, offsets = pack(seqs)
        out[split] = {"flat": flat, "offsets": offsets, "labels": torch.tensor(targets, dtype=torch.long)}
    return out


def load_listops(root: Optional[Path] = None, *, max_len: int = 2048, append_eos: bool = True,
                 pad_to_max: bool = False, use_cache: bool = True) -> TaskData:
    """ListOps (LRA) as TaskData: tokens (L,) with L <= max_len, 10 classes, vocab 18.

    root: data directory holding ``listops-1000/`` (directly, or inside the extracted LRA
    archive's ``lra_release/`` folders); default $DATA_PATH or ./data.
    pad_to_max: pad every batch to max_len instead of the batch maximum.
    """
    root = data_root(root)
    folder = find_task_dir(root, LISTOPS_DIRNAME, SPLIT_FILES["train"], "ListOps", HOW_TO_GET)
    missing = [n for n in SPLIT_FILES.values() if not (folder / n).is_file()]
    if missing:
        raise DataMissing(f"ListOps: {folder} lacks {', '.join(missing)} (expected basic_train.tsv, "
                          f"basic_val.tsv, basic_test.tsv). {HOW_TO_GET}")
    files = [folder / n for n in SPLIT_FILES.values()]
    params = {"max_len": max_len, "append_eos": append_eos, "sources": [f.name for f in files],
              "content": content_fingerprint(files, folder)}
    data = cached(root, "listops", params, lambda: _build(folder, max_len, append_eos), enabled=use_cache)
    splits = {k: TokenDataset(v["flat"], v["offsets"], v["labels"]) for k, v in data.items()}
    return TaskData(
        name="listops", train=splits["train"], val=splits["val"], test=splits["test"],
        seq_len=max_len, d_output=10, d_input=1, vocab_size=VOCAB_SIZE,
        collate_fn=PadCollate(pad_to=max_len if pad_to_max else None),
        info={"path": str(folder), "tokenizer": "parentheses dropped; ']' , [MAX [MIN [MED [SM, 0-9 tokens; <eos> "
              "appended", "pad_id": 0, "eos_id": EOS_ID, "padding": "max_len" if pad_to_max else "batch max",
              "splits": "basic_train / basic_val / basic_test as released",
              "sizes": {k: len(v) for k, v in splits.items()}})
