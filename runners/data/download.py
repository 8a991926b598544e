"""Getting datasets onto disk: the download step for users who are online, and the cache of
processed tensors that the loaders keep beside the data.

Usage (online machines only; CI and the GPU machines have no internet)::

    python -m runners.data.download speech_commands mnist bidmc --data ./data
    python -m runners.data.download {speech_commands,cifar10,mnist,bidmc,lra} --data DIR

Each dataset is downloaded from its official archive with urllib, checked against the published
checksum where one is known, and extracted into the layout the loaders read under DIR:

    DIR/speech_commands/        Speech Commands v0.02 tarball contents: one folder per word,
                                validation_list.txt, testing_list.txt, _background_noise_/
    DIR/mnist/                  train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
                                t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz
    DIR/cifar-10-batches-py/    CIFAR-10 python batches (data_batch_1..5, test_batch)
    DIR/bidmc/BIDMC32{HR,RR,SpO2}/BIDMC32{HR,RR,SpO2}_{TRAIN,TEST}.ts   (TSER archive)
    DIR/lra_release/            the LRA release archive, extracted as published (the LRA loaders
                                look for their folders under it, see runners/data/lra/common.py)
    DIR/aclImdb/                IMDB reviews (LRA Text task), Stanford layout

A dataset whose files are already present is left alone ("already present"); --force downloads
it again.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence


from runners.core.atomic import atomic_path
from runners.data.base import DataMissing, data_root
from runners.data.progress_bar import progress_bar

# ----------------------------------------------------------------------------------------------
# Where each dataset lives under the data directory (the loaders import these).

SPEECH_COMMANDS_DIR = "speech_commands"
MNIST_DIR = "mnist"
CIFAR10_DIR = "cifar-10-batches-py"
BIDMC_DIR = "bidmc"
LRA_DIR = "lra_release"
IMDB_DIR = "aclImdb"

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
BIDMC_TARGETS = ("HR", "RR", "SpO2")

# The 35 words of Speech Commands v0.02 (folders of the tarball), in the label order of the
# S4 code's SC35 loader (the v0.01 words first, then those added in v0.02).
SPEECH_COMMANDS_WORDS = (
    "bed", "cat", "down", "five", "forward", "go", "house", "left", "marvin", "no", "on", "right",
    "sheila", "tree", "up", "visual", "yes", "backward", "bird", "dog", "eight", "follow", "four",
    "happy", "learn", "nine", "off", "one", "seven", "six", "stop", "three", "two", "wow", "zero",
)
# SC10: the ten-word subset of S4 Table 5, in the S4 code's label order.
SC10_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")


def how_to_get(dataset: str) -> str:
    """The sentence a DatasetError ends with: the command that puts the dataset in place."""
    return (f"Download it on a machine with internet access with `python -m runners.data.download "
            f"{dataset} --data DIR` (DIR = the data directory, $DATA_PATH or ./data), or copy the "
            f"official files into that layout (see runners/data/download.py).")


# ----------------------------------------------------------------------------------------------
# Official archives.

@dataclass(frozen=True)
class Resource:
    url: str
    filename: str              # name of the downloaded file
    target: str                # folder under the data directory it is stored in / extracted into
    checksum: Optional[tuple[str, str]] = None  # (hashlib algorithm, hex digest), where published
    extract: bool = False      # a tar archive to unpack into `target` (the archive is then deleted)


_ZENODO_BIDMC = {"RR": "4001463", "HR": "4001456", "SpO2": "4001464"}  # TSER archive records
_MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # yann.lecun.com is often down
_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}

RESOURCES: dict[str, tuple[Resource, ...]] = {
    "speech_commands": (
        Resource("http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz",
                 "speech_commands_v0.02.tar.gz", SPEECH_COMMANDS_DIR,
                 ("sha256", "af14739ee7dc311471de98f5f9d2c9191b18aedfe957f4a6ff791c709868ff58"),
                 extract=True),
    ),
    "mnist": tuple(Resource(_MNIST_MIRROR + name, name, MNIST_DIR, ("md5", md5))
                   for name, md5 in _MNIST_MD5.items()),
    "cifar10": (
        Resource("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "cifar-10-python.tar.gz",
                 ".", ("md5", "c58f30108f718f92721af3b95e74349a"), extract=True),
    ),
    "bidmc": tuple(
        Resource(f"https://zenodo.org/record/{rec}/files/BIDMC32{t}_{part}.ts",
                 f"BIDMC32{t}_{part}.ts", f"{BIDMC_DIR}/BIDMC32{t}")  # no published checksum
        for t, rec in _ZENODO_BIDMC.items() for part in ("TRAIN", "TEST")
    ),
    "lra": (
        Resource("https://storage.googleapis.com/long-range-arena/lra_release.gz", "lra_release.gz",
                 ".", None, extract=True),  # unpacks its own lra_release/ folder
        Resource("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz", "aclImdb_v1.tar.gz",
                 ".", ("md5", "7c2ac02c03563afcf9b574c7e56c153a"), extract=True),
    ),
}


def expected_files(dataset: str) -> list[str]:
    """Paths (relative to the data directory) whose presence means the dataset is in place."""
    if dataset == "speech_commands":
        return ([f"{SPEECH_COMMANDS_DIR}/validation_list.txt", f"{SPEECH_COMMANDS_DIR}/testing_list.txt"]
                + [f"{SPEECH_COMMANDS_DIR}/{w}" for w in SPEECH_COMMANDS_WORDS])
    if dataset == "mnist":
        return [f"{MNIST_DIR}/{name}" for name in MNIST_FILES]  # .gz accepted, see is_present
    if dataset == "cifar10":
        return [f"{CIFAR10_DIR}/data_batch_{i}" for i in range(1, 6)] + [f"{CIFAR10_DIR}/test_batch"]
    if dataset == "bidmc":
        return [f"{BIDMC_DIR}/BIDMC32{t}/BIDMC32{t}_{p}.ts" for t in BIDMC_TARGETS for p in ("TRAIN", "TEST")]
    if dataset == "lra":
        return [LRA_DIR, IMDB_DIR]
    raise ValueError(f"unknown dataset {dataset!r}; allowed: {', '.join(RESOURCES)}")


def is_present(root: Path, dataset: str) -> bool:
    """Whether every expected file of `dataset` is under `root` (MNIST: raw or .gz)."""
    for rel in expected_files(dataset):
        p = root / rel
        if not (p.exists() or (dataset == "mnist" and p.with_name(p.name + ".gz").exists())):
            return False
    return True


def _file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class DownloadError(DataMissing):
    """A dataset could not be fetched (no network, a refused URL), so it is missing: the message says what to fetch
    and where to put it."""


def where_to_put(res: Resource, root: Path) -> str:
    """'URL -> where its file goes (extracted or as is)', for the message of an offline machine."""
    target = root / res.target
    if res.extract:
        return f"{res.url} (extract it into {target})"
    return f"{res.url} (save it as {target / res.filename})"


def _fetch(res: Resource, root: Path, log: Callable[[str], None]) -> None:
    """Download one resource (temp file + os.replace), verify it, extract it if an archive.

    The target folder is made only once the server answers: an offline machine gets a DownloadError saying what
    to fetch and where to put it, and no new (empty) folder."""
    target = root / res.target
    log(f"downloading {res.url}")
    dest = target / res.filename
    try:
        response = urllib.request.urlopen(res.url)  # noqa: S310
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts and socket errors are OSErrors
        reason = " ".join(str(getattr(exc, "reason", None) or exc).split())
        err = DownloadError(f"cannot download {res.url}: {reason}. On a machine with internet access, fetch "
                            f"{where_to_put(res, root)}, or run `python -m runners.data.download` there and copy "
                            f"the data directory.")
        err.brief = f"cannot download {res.url}: {reason}."
        raise err from exc
    target.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest, suffix=".part") as tmp:
        with response, open(tmp, "wb") as out:
            size = (getattr(response, "headers", None) or {}).get("Content-Length")  # for the estimate
            with progress_bar(int(size) if size and size.isdigit() else None, res.filename, "B", unit_scale=True,
                              unit_divisor=1024) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    bar.update(len(block))
        if res.checksum is not None:
            algo, want = res.checksum
            got = _file_digest(tmp, algo)
            if got != want:
                raise RuntimeError(f"{res.url}: {algo} checksum {got} does not match the published {want}; "
                                   f"the download is corrupt or the archive changed. Nothing was kept.")
    if res.extract:
        log(f"extracting {dest.name} into {target}")
        with tarfile.open(dest, "r:*") as tar:
            tar.extractall(target, filter="data")
        dest.unlink()


def download(dataset: str, root: Path, *, force: bool = False,
             log: Callable[[str], None] = print) -> bool:
    """Put `dataset` under `root`. Returns False (and touches nothing) if it is already present."""
    if dataset not in RESOURCES:
        raise ValueError(f"unknown dataset {dataset!r}; allowed: {', '.join(RESOURCES)}")
    if not force and is_present(root, dataset):
        log(f"{dataset}: already present under {root}")
        return False
    for res in RESOURCES[dataset]:
        _fetch(res, root, log)
    if not is_present(root, dataset):
        missing = [p for p in expected_files(dataset) if not (root / p).exists()]
        raise RuntimeError(f"{dataset}: downloaded, but {root} still lacks: {', '.join(missing)}")
    log(f"{dataset}: done, under {root}")
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runners.data.download",
        description="Download datasets from their official archives into the layout the loaders read.")
    parser.add_argument("datasets", nargs="+", choices=sorted(RESOURCES), metavar="DATASET",
                        help="one or more of: " + ", ".join(sorted(RESOURCES)))
    parser.add_argument("--data", default=None,
                        help="data directory (default: $DATA_PATH, else ./data)")
    parser.add_argument("--force", action="store_true", help="download even if already present")
    args = parser.parse_args(argv)
    root = data_root(args.data)
    for name in dict.fromkeys(args.datasets):  # keep order, drop repeats
        try:
            download(name, root, force=args.force)
        except DownloadError as exc:
            wanted = "; ".join(where_to_put(r, root) for r in RESOURCES[name])
            print(f"error: {name}: {getattr(exc, 'brief', exc)} On a machine with internet access, fetch {wanted} "
                  f"(or run `python -m runners.data.download {name} --data DIR` there and copy DIR here).",
                  file=sys.stderr)
            return 1
        except (RuntimeError, OSError, tarfile.TarError) as exc:
            print(f"error: {name}: {' '.join(str(exc).split())}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
