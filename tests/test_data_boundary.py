"""Dataset input is checked where it enters: every malformed, hostile or edited data file ends as one error line
naming the file, what was found and what is allowed -- never a traceback deep in numpy/PIL/torch, a hang, a huge
allocation, a read outside the data directory, or silently wrong (or stale) training data.

Fixtures are small files written in each dataset's own published layout in tmp dirs (the stand-in writers of
runners/data/standins.py, or bytes written here where a case needs a crafted header). Classes:

1. paths read from a dataset's own files stay inside its folder  (runners.data.base.InsideFolder)
2. sizes are checked before allocating                          (read_idx, pathfinder._decode, safe_pickle.check_shape)
3. labels are integers in range for their task                  (cifar.check_labels, mnist.check_labels,
                                                                  pathfinder.read_metadata, bidmc.read_ts_regression,
                                                                  speech_commands.read_list)
4. text encodings, truncated WAVs, odd .ts headers               (speech_commands.read_list / read_wav, bidmc)
5. caches are keyed on content                                   (cache.content_fingerprint and its callers)
6. an offline download says what to fetch and where              (download._fetch / main)
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
import tracemalloc
import urllib.error
import urllib.request
import wave
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from PIL import Image

from runners.data import download as dl
from runners.data.base import DatasetError, InsideFolder

#: every case runs under a time and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")


@contextmanager
def peak_allocation() -> Iterator[list[int]]:
    """The peak of Python allocations (tracemalloc) inside the block, in bytes: ``peak[0]`` once the block exits."""
    peak = [0]
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def _one_line(exc_info: pytest.ExceptionInfo, *must: str) -> str:
    """The error is one line (no traceback text) holding every string of ``must`` (the file's name first)."""
    message = str(exc_info.value)
    assert "\n" not in message and "Traceback" not in message, message
    for text in must:
        assert text in message, (text, message)
    return message


# ----------------------------------------------------------------------------------------------------------------
# fixtures in the published layouts

def _load_pathfinder(root: Path, cache: bool = False):
    from runners.data.lra import load_pathfinder

    return load_pathfinder(root, resolution=32, workers=1, use_cache=cache)


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def _png(width: int, height: int, color_type: int = 0, extra: bytes = b"", idat: bytes | None = None) -> bytes:
    """A PNG built by hand: IHDR (8-bit, ``color_type``), optional chunks, one IDAT, IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + extra
            + _chunk(b"IDAT", idat if idat is not None else zlib.compress(b"\0" * 33)) + _chunk(b"IEND", b""))


def _speech(tmp: Path) -> Path:
    from runners.data.standins import write_speech_commands_standin

    write_speech_commands_standin(tmp, n_train=1, n_val=1, n_test=1)
    return tmp / "speech_commands"


def _load_speech(root: Path, cache: bool = False):
    from runners.data.speech_commands import load_speech_commands

    return load_speech_commands(root, subset="sc10", cache=cache)


def _idx(array: np.ndarray, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def _mnist_raw(tmp: Path, n_train: int = 20, n_test: int = 10) -> Path:
    """mnist/ with the four IDX files uncompressed (a byte edit keeps the size)."""
    folder = tmp / "mnist"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)))
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx(rng.integers(0, 10, n).astype(np.uint8)))
    return folder


def _cifar(tmp: Path) -> Path:
    from runners.data.standins import write_cifar_standin

    return write_cifar_standin(tmp, n_per_batch=4)


def _ts(path: Path, lines: list[str], header: str | None = None) -> Path:
    head = header if header is not None else (
        "@problemName BIDMC32HR\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
        "@equalLength true\n@seriesLength 3\n@targetlabel true\n@data\n")
    path.write_text(head + "\n".join(lines) + "\n")
    return path


def _same_size_same_mtime(path: Path, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite ``path`` with ``edit(bytes)`` keeping its size and restoring its modification time."""
    st = path.stat()
    data = path.read_bytes()
    new = edit(data)
    assert len(new) == len(data) and new != data
    path.write_bytes(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


# ================================================================================================================
# 1. paths read from a dataset's own files resolve inside its folder

@pytest.mark.parametrize("line", [
    "../../etc passwd 0 1 1.0 14 4 2 0.5 1 1",                 # relative, leaves the folder
    "/etc passwd 0 1 1.0 14 4 2 0.5 1 1",                      # absolute
    "imgs/0/../../../../x sample_0.png 0 1 1.0 14 4 2 0.5 1 1",  # '..' in the middle
    "imgs/0 ../../../../../etc/passwd 0 1 1.0",                # second field leaves the folder
])
def test_pathfinder_metadata_path_outside_is_refused(pathfinder_release, tmp_path: Path, line: str) -> None:
    folder = pathfinder_release(tmp_path)
    (folder / "metadata" / "1.npy").write_text(f"imgs/1 sample_0.png 0 0 1.0 14\n{line}\n")
    with pytest.raises(DatasetError) as err:
        _load_pathfinder(tmp_path)
    _one_line(err, "1.npy line 2", "allowed")


def test_pathfinder_image_folder_linked_outside_is_refused(pathfinder_release, tmp_path: Path) -> None:
    folder = pathfinder_release(tmp_path / "data")
    outside = tmp_path / "elsewhere"
    (folder / "imgs" / "1").rename(outside)
    (folder / "imgs" / "1").symlink_to(outside, target_is_directory=True)
    with pytest.raises(DatasetError) as err:
        _load_pathfinder(tmp_path / "data")
    _one_line(err, "1.npy line 1", "outside")


@pytest.mark.parametrize("list_name, entry", [
    ("validation_list.txt", "../../../etc/passwd"),
    ("testing_list.txt", "/etc/passwd"),
    ("testing_list.txt", "yes/../../../etc/passwd.wav"),
])
def test_speech_list_path_outside_is_refused(tmp_path: Path, list_name: str, entry: str) -> None:
    folder = _speech(tmp_path)
    with open(folder / list_name, "a") as f:
        f.write(entry + "\n")
    with pytest.raises(DatasetError) as err:
        _load_speech(tmp_path)
    _one_line(err, list_name, "allowed")


def test_speech_clip_linked_outside_is_refused(tmp_path: Path) -> None:
    folder = _speech(tmp_path / "data")
    clip = sorted((folder / "yes").glob("*_nohash_2.wav"))[0]  # a training clip
    outside = tmp_path / "outside.wav"
    clip.rename(outside)
    clip.symlink_to(outside)
    with pytest.raises(DatasetError) as err:
        _load_speech(tmp_path / "data")
    _one_line(err, "yes", clip.name, "outside")


def test_imdb_review_linked_outside_is_refused(tmp_path: Path) -> None:
    from runners.data.lra import load_imdb
    from runners.data.standins import write_imdb_standin

    write_imdb_standin(tmp_path / "data", n_per_class=3, length_words=5)
    review = sorted((tmp_path / "data" / "aclImdb" / "train" / "pos").glob("*.txt"))[0]
    (tmp_path / "secret.txt").write_text("not a review")
    review.unlink()
    review.symlink_to(tmp_path / "secret.txt")
    with pytest.raises(DatasetError) as err:
        load_imdb(tmp_path / "data", use_cache=False)
    _one_line(err, review.name, "outside")


@pytest.mark.parametrize("entry", ["C:\\windows\\x.png", "a\\..\\..\\b", "imgs//x", "./x", "x\x00y", "", "c:x"])
def test_inside_folder_refuses_odd_entries(tmp_path: Path, entry: str) -> None:
    guard = InsideFolder(tmp_path, "Dataset")
    with pytest.raises(DatasetError) as err:
        guard(entry, tmp_path / "list.txt", 3)
    _one_line(err, "list.txt line 3", "allowed")
    assert guard("imgs/0/sample_1.png", tmp_path / "list.txt") == tmp_path / "imgs" / "0" / "sample_1.png"


# ================================================================================================================
# 2. sizes checked before allocating

def test_mnist_gzip_bomb_stops_at_the_header_size(tmp_path: Path) -> None:
    from runners.data.mnist import read_idx

    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    with open(path, "wb") as f:
        f.write(comp.compress(_idx(np.zeros((10, 28, 28), np.uint8))))
        block = b"\0" * (1 << 20)
        for _ in range(256):  # 256 MB of zeros after the announced 7840 bytes: ~250 KB on disk
            f.write(comp.compress(block))
        f.write(comp.flush())
    assert path.stat().st_size < 2 << 20
    with peak_allocation() as peak, pytest.raises(DatasetError) as err:
        read_idx(path)
    _one_line(err, path.name, "more data than its header")
    assert peak[0] < 16 << 20, f"read_idx allocated {peak[0]} bytes for a 10-image file"


@pytest.mark.parametrize("header, must", [
    (bytes([0, 0, 0x08, 3]) + struct.pack(">3I", 2**32 - 1, 2**32 - 1, 2**32 - 1), "allowed: at most"),
    (bytes([0, 0, 0x0E, 2]) + struct.pack(">2I", 60000, 60000), "allowed: at most"),
    (bytes([0, 0, 0x08, 200]) + b"\0" * 16, "allowed: 1 to"),
    (bytes([0, 0, 0x08, 3]) + struct.pack(">2I", 10, 28), "truncated inside its header"),  # no data after it
    (b"\x1f\x8b\x08\x00garbage", "is not an IDX file"),
])
def test_mnist_idx_header_is_checked_before_reading(tmp_path: Path, header: bytes, must: str) -> None:
    from runners.data.mnist import read_idx

    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(header)
    with pytest.raises(DatasetError) as err:
        read_idx(path)
    _one_line(err, path.name, must)


@pytest.mark.parametrize("corrupt", ["cut", "garbage"])
def test_mnist_broken_gzip_is_one_line(tmp_path: Path, corrupt: str) -> None:
    from runners.data.mnist import load_mnist
    from runners.data.standins import write_mnist_standin

    folder = write_mnist_standin(tmp_path, n_train=20, n_test=10)
    path = folder / "t10k-images-idx3-ubyte.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if corrupt == "cut" else b"\x1f\x8b\x08\x00" + b"\xff" * 200)
    with pytest.raises(DatasetError) as err:
        load_mnist(tmp_path, cache=False)
    _one_line(err, path.name, "MNIST")


_BIG_ZTXT = _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"\0" * (16 << 20), 9))  # 16 MB of text in ~16 KB


@pytest.mark.parametrize("png, must", [
    (_png(100_000, 100_000), "allowed: 32x32 mode L"),  # decompression bomb: refused from the header alone
    (_png(32, 32, extra=_BIG_ZTXT), "cannot decode"),    # a text chunk beyond PIL's MAX_TEXT_CHUNK
    (_png(33, 32), "allowed: 32x32 mode L"),             # another size
    (_png(32, 32, color_type=2), "allowed: 32x32 mode L"),  # RGB
    (_png(32, 32, idat=zlib.compress(b"\0" * 10)), "cannot decode"),  # too little pixel data
    (b"GIF89a" + b"\0" * 40, "cannot decode"),            # not a PNG
])
def test_pathfinder_png_header_is_checked_before_decoding(pathfinder_release,
                                                          tmp_path: Path, png: bytes, must: str) -> None:
    folder = pathfinder_release(tmp_path)
    path = folder / "imgs" / "1" / "sample_2.png"
    path.write_bytes(png)
    with peak_allocation() as peak, pytest.raises(DatasetError) as err:
        _load_pathfinder(tmp_path)
    _one_line(err, "sample_2.png", must)
    assert peak[0] < 64 << 20, peak[0]


def _deep_list_pickle(depth: int) -> bytes:
    """{b'data': <uint8 (1, 3072)>, b'labels': [[[...]]] nested ``depth`` deep}, written opcode by opcode (pickle
    itself cannot write it: it recurses)."""
    head = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}, protocol=2)[:-1]  # drop STOP; dict on the stack
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST x depth, APPEND x (depth - 1)
    key = pickle.dumps(b"labels", protocol=2)[2:-1]
    return head + key + nested + b"s."  # SETITEM, STOP


def _laughs_pickle(width: int = 1000, levels: int = 6) -> bytes:
    """labels = a list of ``width`` references to a list of ``width`` references ... (``width**levels`` leaves)."""
    head = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}, protocol=2)[:-1]
    key = pickle.dumps(b"labels", protocol=2)[2:-1]
    body = b"K\x00"  # BININT1 0
    for level in range(levels):
        slot = bytes([200 + level])
        body = b"(" + body + b"q" + slot + (b"h" + slot) * (width - 1) + b"l"  # MARK, x, BINPUT, BINGET..., LIST
    return head + key + body + b"s."


def _self_loop_pickle() -> bytes:
    head = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}, protocol=2)[:-1]
    key = pickle.dumps(b"labels", protocol=2)[2:-1]
    return head + key + b"]q\xf0h\xf0a" + b"s."  # l = []; l.append(l)


@pytest.mark.parametrize("blob, must", [
    (_deep_list_pickle(200_000), "deep"),
    (_laughs_pickle(), "entries"),
    (_self_loop_pickle(), "deep"),
])
def test_cifar_pickle_nesting_is_bounded(tmp_path: Path, blob: bytes, must: str) -> None:
    from runners.data.cifar import load_cifar10

    folder = _cifar(tmp_path)
    (folder / "test_batch").write_bytes(blob)
    with pytest.raises(DatasetError) as err:
        load_cifar10(tmp_path, "test")
    _one_line(err, "test_batch", must)


# ================================================================================================================
# 3. labels: integers in range for their task, checked at load time

@pytest.mark.parametrize("labels, must", [
    ([0, 3.7, 1, 2], "3.7"),
    ([0, -1, 1, 2], "-1"),
    ([0, True, 1, 2], "True"),
    ([0, 1, 2], "4 integers in 0..9"),
    (np.array([0.0, 1.0, 2.0, 3.0]), "float64"),
    (np.array([0, 1, 2, 10]), "0..9"),
])
def test_cifar_labels_must_be_integers_0_to_9(tmp_path: Path, labels: object, must: str) -> None:
    from runners.data.cifar import load_cifar10

    folder = _cifar(tmp_path)
    batch = {b"data": np.zeros((4, 3072), np.uint8), b"labels": labels, b"batch_label": b"x"}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError) as err:
        load_cifar10(tmp_path, "test")
    _one_line(err, "test_batch", must)


@pytest.mark.parametrize("payload, must", [
    (_idx(np.array([0, 3.7, 1, 2] * 5, dtype=">f4"), 0x0D), ">f4"),       # float labels
    (_idx(np.array([0, -1, 1, 2] * 5, dtype=np.int8), 0x09), "-1"),        # negative
    (_idx(np.array([0, 10, 1, 2] * 5, dtype=np.uint8)), "10"),             # out of range
    (_idx(np.arange(10, dtype=np.uint8)), "(10,) for 20 images"),           # one per image
])
def test_mnist_labels_must_be_digits(tmp_path: Path, payload: bytes, must: str) -> None:
    from runners.data.mnist import load_mnist

    folder = _mnist_raw(tmp_path)
    (folder / "train-labels-idx1-ubyte").write_bytes(payload)
    with pytest.raises(DatasetError) as err:
        load_mnist(tmp_path, cache=False)
    _one_line(err, "train-labels-idx1-ubyte", must)


@pytest.mark.parametrize("label", ["0.5", "-1", "2", "1.0", "yes"])
def test_pathfinder_labels_must_be_0_or_1(pathfinder_release, tmp_path: Path, label: str) -> None:
    folder = pathfinder_release(tmp_path)
    (folder / "metadata" / "0.npy").write_text(f"imgs/0 sample_0.png 0 {label} 1.0 14 4 2 0.5 1 1\n")
    with pytest.raises(DatasetError) as err:
        _load_pathfinder(tmp_path)
    _one_line(err, "0.npy line 1", "<label 0|1>")


@pytest.mark.parametrize("target", ["nan", "inf", "-Infinity", "?"])
def test_bidmc_targets_must_be_finite(tmp_path: Path, target: str) -> None:
    from runners.data.bidmc import read_ts_regression

    path = _ts(tmp_path / "BIDMC32HR_TRAIN.ts", ["1,2,3:4,5,6:70.5", f"1,2,3:4,5,6:{target}"])
    with pytest.raises(DatasetError) as err:
        read_ts_regression(path)
    _one_line(err, "BIDMC32HR_TRAIN.ts, line 11", "target" if target != "?" else "non-numeric")


def test_bidmc_loader_names_the_nan_target_line(tmp_path: Path) -> None:
    from runners.data.bidmc import load_bidmc
    from runners.data.standins import write_bidmc_standin

    write_bidmc_standin(tmp_path, n_train=3, n_test=2)
    path = tmp_path / "bidmc" / "BIDMC32RR" / "BIDMC32RR_TEST.ts"
    lines = path.read_text().splitlines()
    last = lines[-1]
    lines[-1] = last[: last.rindex(":") + 1] + "nan"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as err:
        load_bidmc(tmp_path, target="RR", cache=False)
    _one_line(err, f"BIDMC32RR_TEST.ts, line {len(lines)}", "finite")


def test_speech_list_unknown_word_is_refused(tmp_path: Path) -> None:
    folder = _speech(tmp_path)
    with open(folder / "validation_list.txt", "a") as f:
        f.write("cats/0000_nohash_0.wav\n")
    with pytest.raises(DatasetError) as err:
        _load_speech(tmp_path)
    _one_line(err, "validation_list.txt line", "'cats/0000_nohash_0.wav'", "35 words")


# ================================================================================================================
# 4. encodings, truncated audio, odd .ts headers

def test_speech_list_not_utf8_names_the_line(tmp_path: Path) -> None:
    folder = _speech(tmp_path)
    data = (folder / "testing_list.txt").read_bytes()
    (folder / "testing_list.txt").write_bytes(data + b"yes/\xff\xfe.wav\n")
    n = data.count(b"\n") + 1
    with pytest.raises(DatasetError) as err:
        _load_speech(tmp_path)
    _one_line(err, f"testing_list.txt line {n}", "not UTF-8")


def test_pathfinder_metadata_not_utf8_names_the_line(pathfinder_release, tmp_path: Path) -> None:
    folder = pathfinder_release(tmp_path)
    with open(folder / "metadata" / "1.npy", "ab") as f:
        f.write(b"imgs/1 sample_\xe9.png 0 1 1.0\n")
    with pytest.raises(DatasetError) as err:
        _load_pathfinder(tmp_path)
    _one_line(err, "1.npy line 5", "not UTF-8")


@pytest.mark.parametrize("how, must", [
    ("cut", "truncated"),         # the data chunk ends early
    ("huge", "more than the 16000"),  # the header announces 2**30 frames: refused before reading
    ("short", "truncated"),       # the header announces 10 000 frames, the file holds 1000
    ("header", "cannot read WAV"),  # cut inside the RIFF header
])
def test_truncated_wav_is_one_line(tmp_path: Path, how: str, must: str) -> None:
    folder = _speech(tmp_path)
    clip = sorted((folder / "no").glob("*_nohash_2.wav"))[0]
    data = clip.read_bytes()
    pos = data.index(b"data") + 4  # the data chunk's size field
    if how == "cut":
        data = data[: len(data) // 2]
    elif how == "huge":
        data = data[:pos] + struct.pack("<I", 2**31) + data[pos + 4:]
    elif how == "short":
        data = data[:pos] + struct.pack("<I", 20000) + data[pos + 4: pos + 4 + 2000]
    else:
        data = data[:20]
    clip.write_bytes(data)
    with pytest.raises(DatasetError) as err:
        _load_speech(tmp_path)
    _one_line(err, clip.name, must)


@pytest.mark.parametrize("edit, must", [
    (lambda h: h.replace("@dimensions 2", "@dimensions 0"), "@dimensions needs an integer from 1"),
    (lambda h: h.replace("@dimensions 2", "@dimensions \u00b2"), "@dimensions needs an integer from 1"),
    (lambda h: h.replace("@seriesLength 3", "@seriesLength 1000000000000"), "@serieslength needs an integer"),
    (lambda h: h.replace("@data\n", ""), "@data"),
    (lambda h: h.replace("@timeStamps false", "@timeStamps maybe"), "true or false"),
])
def test_odd_ts_headers_are_one_line(tmp_path: Path, edit: Callable[[str], str], must: str) -> None:
    from runners.data.bidmc import read_ts_regression

    header = ("@problemName BIDMC32HR\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
              "@equalLength true\n@seriesLength 3\n@targetlabel true\n@data\n")
    path = tmp_path / "BIDMC32HR_TRAIN.ts"
    path.write_bytes(edit(header).encode("utf-8") + b"1,2,3:4,5,6:70.5\n")
    with pytest.raises(DatasetError) as err:
        read_ts_regression(path)
    _one_line(err, "BIDMC32HR_TRAIN.ts", must)


def test_ts_missing_value_with_missing_false_is_refused(tmp_path: Path) -> None:
    from runners.data.bidmc import read_ts_regression

    path = _ts(tmp_path / "BIDMC32HR_TEST.ts", ["1,2,3:4,5,6:70.5", "1,?,3:4,5,6:71"])
    with pytest.raises(DatasetError) as err:
        read_ts_regression(path)
    _one_line(err, "BIDMC32HR_TEST.ts, line 11", "@missing false")
    path = _ts(path, ["1,2,3:4,5,6:70.5", "1,?,3:4,5,6:71"],
               header="@problemName BIDMC32HR\n@timeStamps false\n@missing true\n@univariate false\n"
                      "@targetlabel true\n@data\n")
    x, y = read_ts_regression(path)  # allowed where the header says so
    assert np.isnan(x[1, 1, 0]) and y.tolist() == [70.5, 71.0]


# ================================================================================================================
# 5. caches keyed on content

def test_content_fingerprint_follows_bytes_not_mtime(tmp_path: Path) -> None:
    from runners.data.cache import content_fingerprint

    files = []
    for i in range(300):  # above the threaded path's threshold
        p = tmp_path / "imgs" / f"{i}.png"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(bytes([i % 256]) * 100)
        files.append(p)
    a = content_fingerprint(files, tmp_path)
    assert a == content_fingerprint(files, tmp_path)
    _same_size_same_mtime(files[123], lambda b: b[:50] + b"\x01" + b[51:])
    b = content_fingerprint(files, tmp_path)
    assert b != a
    files[5].rename(tmp_path / "imgs" / "renamed.png")
    files[5] = tmp_path / "imgs" / "renamed.png"
    assert content_fingerprint(files, tmp_path) != b
    with pytest.raises(DatasetError) as err:
        content_fingerprint(files + [tmp_path / "gone.png"], tmp_path)
    _one_line(err, "gone.png")


def test_mnist_cache_follows_an_edited_image(tmp_path: Path) -> None:
    from runners.data.mnist import load_mnist

    folder = _mnist_raw(tmp_path)
    before = load_mnist(tmp_path).test[0][0]
    _same_size_same_mtime(folder / "t10k-images-idx3-ubyte",
                          lambda b: b[:16] + bytes(255 - v for v in b[16:16 + 784]) + b[16 + 784:])
    after = load_mnist(tmp_path).test[0][0]
    torch.testing.assert_close(after, 1.0 - before, atol=1e-6, rtol=0)
    assert len(list((tmp_path / "_cache").glob("mnist-*.pt"))) == 2


def test_pathfinder_cache_follows_an_edited_image(pathfinder_release, tmp_path: Path) -> None:
    folder = pathfinder_release(tmp_path)
    first = _load_pathfinder(tmp_path, cache=True)
    path = folder / "imgs" / "0" / "sample_0.png"
    arr = np.asarray(Image.open(path)).copy()
    arr[5, 7] ^= 0xFF
    new = tmp_path / "new.png"
    Image.fromarray(arr, "L").save(new, compress_level=0)
    _same_size_same_mtime(path, lambda b: new.read_bytes())
    again = _load_pathfinder(tmp_path, cache=True)
    assert torch.equal(again.train.images[0], torch.from_numpy(arr))
    assert not torch.equal(first.train.images[0], again.train.images[0])


def test_speech_cache_follows_an_edited_clip(tmp_path: Path) -> None:
    folder = _speech(tmp_path)
    _load_speech(tmp_path, cache=True)
    clip = sorted((folder / "yes").glob("*_nohash_2.wav"))[0]  # the one training clip of 'yes'

    def silence(b: bytes) -> bytes:
        pos = b.index(b"data") + 8
        return b[:pos] + b"\0" * (len(b) - pos)

    _same_size_same_mtime(clip, silence)
    task = _load_speech(tmp_path, cache=True)
    waves = task.train.waves
    assert int((waves.abs().sum(1) == 0).sum()) == 1  # the edited clip is read, not the cached one
    assert len(list((tmp_path / "_cache").glob("speech_commands-sc10-raw-*.pt"))) == 2


def test_bidmc_cache_follows_an_edited_target(tmp_path: Path) -> None:
    from runners.data.bidmc import load_bidmc
    from runners.data.standins import write_bidmc_standin

    write_bidmc_standin(tmp_path, n_train=3, n_test=2)
    path = tmp_path / "bidmc" / "BIDMC32HR" / "BIDMC32HR_TEST.ts"
    before = load_bidmc(tmp_path, target="HR").test[1][1]

    def bump(b: bytes) -> bytes:
        colon = b.rstrip(b"\n").rindex(b":")
        digit = colon + 1
        return b[:digit] + (b"1" if b[digit:digit + 1] != b"1" else b"2") + b[digit + 1:]

    _same_size_same_mtime(path, bump)
    after = load_bidmc(tmp_path, target="HR").test[1][1]
    assert not torch.equal(before, after)


# ================================================================================================================
# 6. an offline download says what to fetch and where, and leaves no empty folder

def _offline(*args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


@pytest.mark.parametrize("dataset, must", [
    ("mnist", ["train-images-idx3-ubyte.gz", "save it as", "mnist/train-images-idx3-ubyte.gz"]),
    ("speech_commands", ["speech_commands_v0.02.tar.gz", "extract it into", "speech_commands"]),
    ("bidmc", ["BIDMC32HR_TRAIN.ts", "bidmc/BIDMC32HR"]),
])
def test_offline_download_says_what_and_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture, dataset: str, must: list[str]) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    data = tmp_path / "data"
    assert dl.main([dataset, "--data", str(data)]) == 1
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in must + ["https://" if dataset != "speech_commands" else "http://", "name resolution", str(data)]:
        assert text in lines[0], (text, lines[0])
    assert not data.exists(), "an offline download left a folder behind"


def test_offline_download_in_an_existing_directory_adds_nothing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", _offline)
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(dl.DownloadError) as err:
        dl.download("cifar10", tmp_path, log=lambda s: None)
    _one_line(err, "cifar-10-python.tar.gz", "extract it into")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
