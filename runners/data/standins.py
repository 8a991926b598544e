"""Stand-in datasets written in the official on-disk layouts, for where the real data cannot be had.

They exercise the real loaders end to end (smoke tier, CI) and give a learnable signal, but they are not
the papers' data: a number measured on a stand-in is never shown in a paper column (its rows say
"stand-in"). ListOps and Pathfinder / Path-X need none of this: the suite generates them with LRA's
procedure (runners.data.lra.generate).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

POSITIVE = ("great", "lovely", "superb", "moving", "brilliant")
NEGATIVE = ("awful", "boring", "dull", "clumsy", "terrible")
FILLER = ("the", "film", "plot", "actor", "scene", "music", "story", "camera", "and", "with", "a", "was")


def _words(rng: np.random.Generator, n: int, extra: tuple[str, ...], p_extra: float) -> str:
    out = [rng.choice(extra) if rng.random() < p_extra else rng.choice(FILLER) for _ in range(n)]
    return " ".join(out)


def write_imdb_standin(root: Path, n_per_class: int = 40, length_words: int = 60, seed: int = 0) -> Path:
    """aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt: sentiment carried by a few marker words."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "aclImdb"
    for split in ("train", "test"):
        for cls, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            folder = base / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n_per_class):
                rating = rng.integers(7, 11) if cls == "pos" else rng.integers(1, 5)
                (folder / f"{i}_{rating}.txt").write_text(_words(rng, length_words, words, 0.1))
    return base


def write_aan_standin(root: Path, n_pairs: int = 80, length_words: int = 50, seed: int = 0) -> Path:
    """tsv_data/new_aan_pairs.{train,eval,test}.tsv: label 1 when both documents share a topic vocabulary."""
    rng = np.random.default_rng(seed)
    topics = [tuple(f"{stem}{k}" for k in range(4)) for stem in ("graph", "parse", "speech", "vision", "tagger")]
    folder = Path(root) / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "eval", "test"):
        lines = []
        for i in range(n_pairs):
            t1 = int(rng.integers(len(topics)))
            same = i % 2 == 0
            t2 = t1 if same else int((t1 + rng.integers(1, len(topics))) % len(topics))
            d1, d2 = _words(rng, length_words, topics[t1], 0.3), _words(rng, length_words, topics[t2], 0.3)
            lines.append(f"{int(same)}\tdoc{i}a\tdoc{i}b\t{d1}\t{d2}")
        (folder / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def write_cifar_standin(root: Path, n_per_batch: int = 40, seed: int = 0) -> Path:
    """cifar-10-batches-py/{data_batch_1..5,test_batch}: class-dependent stripes plus noise, 32x32x3 uint8."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rows = np.arange(32)[:, None, None]
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, size=n_per_batch)
        images = np.empty((n_per_batch, 32, 32, 3), dtype=np.uint8)
        for j, lab in enumerate(labels):
            pattern = 128 + 100 * np.sin(2 * np.pi * (lab + 1) * rows / 32) * np.ones((1, 32, 3))
            images[j] = np.clip(pattern + rng.normal(0, 30, (32, 32, 3)), 0, 255).astype(np.uint8)
        data = images.transpose(0, 3, 1, 2).reshape(n_per_batch, 3072)  # CIFAR stores R, G, B planes
        with open(folder / name, "wb") as fh:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels.tolist(), b"data": data,
                         b"filenames": [f"{name}_{j}.png".encode() for j in range(n_per_batch)]}, fh, protocol=2)
    return folder
