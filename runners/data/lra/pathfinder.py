"""LRA Pathfinder and Path-X loaders: ``pathfinder{32,64,128,256}/curv_contour_length_14/{imgs,metadata}``.

Release conventions (LRA's TFDS builder and the S4 code read them the same way):
``metadata/<k>.npy`` are TEXT files despite the suffix, one image per line, space-separated fields
``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> ...``: the image is
``curv_contour_length_14/<field 0>/<field 1>`` and the label (1 = the two markers are on one path)
is field 3. Empty PNG files (one exists in the release) are skipped, as LRA's pipeline filters them.

Samples are ordered by metadata file number, then line; the split is the S4 code's
``random_split(dataset, [N - 2 int(0.1 N), int(0.1 N), int(0.1 N)], Generator().manual_seed(42))``
(80/10/10, train/val/test), reproduced here with the same torch.randperm. Pixels are x / 255 in
[0, 1] (d_input = 1), or (x - 127.5) / 127.5 in [-1, 1] as the S4 code does with normalize=True.
Path-X is Pathfinder at 128 x 128 (sequence length 16384).
"""
from __future__ import annotations

import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from runners.data.base import DataMissing, DatasetError, InsideFolder, TaskData, data_root, one_line, read_error
from runners.data.cache import cached, content_fingerprint
from runners.data.lra.common import ImageSequenceDataset, find_task_dir, stack_collate
from runners.data.lra.layout import LRA_URL, PATHFINDER_DIFFICULTY

RESOLUTIONS = (32, 64, 128, 256)
DIFFICULTY = PATHFINDER_DIFFICULTY
GRAY_MODES = ("L", "LA", "1")  # PIL modes of a grayscale PNG (8-bit, with alpha, 1-bit); read as L like the S4 code
_PLAIN_PNG_BYTES = 2  # a file larger than this many bytes per pixel is not read whole before PIL sees its header


def how_to_get(resolution: int) -> str:
    return (f"Get the LRA release ({LRA_URL}; it holds lra_release/pathfinder{resolution}/) and extract it into the "
            f"data directory, or generate the data with `python -m runners.data.lra.generate pathfinder "
            f"--resolution {resolution} --out DIR`.")


def pathfinder_dir(root: Path, resolution: int) -> Path:
    """The ``pathfinder<R>/curv_contour_length_14`` folder under the data directory (DataMissing if absent)."""
    return find_task_dir(root, f"pathfinder{resolution}/{DIFFICULTY}", "metadata", f"Pathfinder-{resolution}",
                         how_to_get(resolution))


def metadata_files(folder: Path, resolution: int) -> list[Path]:
    """metadata/*.npy sorted by their integer stem; DataMissing if there is none, DatasetError if a stem is not an
    integer."""
    files = list((folder / "metadata").glob("*.npy"))
    bad = [f.name for f in files if not f.stem.isdigit()]
    if bad or not files:
        what = f"unexpected file names {bad[:5]}" if bad else "no metadata/*.npy files"
        raise (DatasetError if bad else DataMissing)(
            f"Pathfinder-{resolution}: {folder / 'metadata'}: {what}; expected metadata/<k>.npy "
            f"(k = 0, 1, ...). {how_to_get(resolution)}")
    return sorted(files, key=lambda f: int(f.stem))


def read_metadata(path: Path, folder: Path, resolution: int,
                  guard: Optional[InsideFolder] = None) -> list[tuple[Path, int]]:
    """(image path, label) of each line of one metadata file. DatasetError naming the file and line for text that
    is not UTF-8, a line of fewer than 4 fields, a label other than 0/1, or an image path that is absolute or leaves
    ``folder`` (``imgs/<k> sample_<i>.png`` only: plain names, no '..')."""
    hint = how_to_get(resolution)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise DatasetError(f"Pathfinder-{resolution}: {path} line {line} is not UTF-8 text (byte "
                           f"{exc.object[exc.start]:#04x}); the release's metadata/*.npy are text files of "
                           f"space-separated fields. {hint}") from None
    except OSError as exc:
        raise read_error(exc)(f"Pathfinder-{resolution}: cannot read {path}: {one_line(exc)}. {hint}") from exc
    guard = guard or InsideFolder(folder, f"Pathfinder-{resolution}", hint)
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 4 or fields[3] not in ("0", "1"):
            raise DatasetError(f"Pathfinder-{resolution}: {path} line {n}: expected 'imgs/<k> sample_<i>.png <i> "
                               f"<label 0|1> ...'; found {one_line(repr(line), 80)}. {hint}")
        out.append((guard(f"{fields[0]}/{fields[1]}", path, n), int(fields[3])))
    return out


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _plain_png(data: bytes, resolution: int) -> Optional[np.ndarray]:
    """uint8 (R, R) from a PNG as the suite's generator writes it (IHDR: R x R, 8-bit grayscale, no interlacing; then
    only IDAT chunks and IEND, every chunk's CRC right, every row unfiltered), decoded with zlib alone; None for
    anything else (PIL decodes it then, and judges it). At most R (R + 1) bytes are inflated."""
    if not data.startswith(_PNG_SIGNATURE):
        return None
    pos, header, idat = len(_PNG_SIGNATURE), None, []
    try:
        while True:
            length, tag = struct.unpack_from(">I4s", data, pos)
            body = data[pos + 8:pos + 8 + length]
            if len(body) != length or zlib.crc32(tag + body) != struct.unpack_from(">I", data, pos + 8 + length)[0]:
                return None
            pos += 12 + length
            if header is None:
                if tag != b"IHDR" or length != 13:
                    return None
                header = struct.unpack(">IIBBBBB", body)
                if header != (resolution, resolution, 8, 0, 0, 0, 0):
                    return None
            elif tag == b"IDAT":
                idat.append(body)
            elif tag == b"IEND":
                break
            else:
                return None
        size = resolution * (resolution + 1)
        inflate = zlib.decompressobj()
        raw = inflate.decompress(b"".join(idat), size + 1)
    except (struct.error, zlib.error):
        return None
    if len(raw) != size or not inflate.eof:
        return None
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(resolution, resolution + 1)  # filter type, then the pixels
    return None if rows[:, 0].any() else rows[:, 1:]


def _decode(path: Path, resolution: int) -> Optional[np.ndarray]:
    """uint8 (R, R) grayscale image, or None for an empty file (skipped, as LRA does).

    A PNG as the suite's generator writes it is decoded with zlib alone (``_plain_png``); any other goes to PIL,
    with its header checked before any pixel is decoded: it must say PNG, R x R, grayscale (mode L; LA and 1 are
    converted to L), so a decompression bomb or an image of another size is refused without allocating it. PIL's
    own refusals (huge text chunks, bombs, truncated data) become one-line DatasetErrors naming the file."""
    hint = how_to_get(resolution)
    try:
        size = path.stat().st_size
        if size == 0:
            return None
        if size <= _PLAIN_PNG_BYTES * resolution * resolution:
            plain = _plain_png(path.read_bytes(), resolution)
            if plain is not None:
                return plain
        with Image.open(path, formats=("PNG",)) as im:
            if im.size != (resolution, resolution) or im.mode not in GRAY_MODES:
                raise DatasetError(f"Pathfinder-{resolution}: {path} is a {im.size[0]}x{im.size[1]} {im.mode} image; "
                                   f"allowed: {resolution}x{resolution} mode L (8-bit grayscale; also LA or 1). {hint}")
            arr = np.asarray(im if im.mode == "L" else im.convert("L"))
    except DatasetError:
        raise
    except FileNotFoundError:
        raise DataMissing(f"Pathfinder-{resolution}: the metadata lists {path}, which does not exist. "
                          f"{hint}") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # refused from the header alone
        raise DatasetError(f"Pathfinder-{resolution}: {path} declares an image too large to decode ({one_line(exc)}); "
                           f"allowed: {resolution}x{resolution} mode L (8-bit grayscale). {hint}") from None
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error, MemoryError) as exc:
        raise DatasetError(f"Pathfinder-{resolution}: cannot decode {path}: {type(exc).__name__}: {one_line(exc)}. "
                           f"{hint}") from exc
    if arr.shape != (resolution, resolution) or arr.dtype != np.uint8:
        raise DatasetError(f"Pathfinder-{resolution}: {path} decodes to {arr.dtype} {arr.shape}, expected uint8 "
                           f"{resolution}x{resolution}. {hint}")
    return arr


def read_samples(folder: Path, resolution: int, files: list[Path]) -> list[tuple[Path, int]]:
    """(image path, label) of every metadata line, in file then line order (paths checked to stay in ``folder``)."""
    guard = InsideFolder(folder, f"Pathfinder-{resolution}", how_to_get(resolution))
    samples = [s for f in files for s in read_metadata(f, folder, resolution, guard)]
    if not samples:
        raise DatasetError(f"Pathfinder-{resolution}: the metadata files in {folder / 'metadata'} list no "
                           f"images. {how_to_get(resolution)}")
    return samples


def _build(folder: Path, resolution: int, files: list[Path], workers: int,
           samples: Optional[list[tuple[Path, int]]] = None) -> dict:
    samples = samples if samples is not None else read_samples(folder, resolution, files)
    images = np.zeros((len(samples), resolution, resolution), dtype=np.uint8)  # (N, R, R)
    keep = np.ones(len(samples), dtype=bool)

    def work(chunk: range) -> int:
        for i in chunk:
            arr = _decode(samples[i][0], resolution)
            if arr is None:
                keep[i] = False
            else:
                images[i] = arr
        return len(chunk)

    step = 256
    chunks = [range(a, min(a + step, len(samples))) for a in range(0, len(samples), step)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
            tqdm(total=len(samples), desc=f"decoding pathfinder{resolution}", unit="img", disable=None) as bar:
        for done in pool.map(work, chunks):  # PIL releases the GIL while decoding
            bar.update(done)
    labels = np.array([s[1] for s in samples], dtype=np.int64)
    if not keep.all():
        images, labels = images[keep], labels[keep]
    return {"images": torch.from_numpy(images), "labels": torch.from_numpy(labels),
            "skipped_empty": int((~keep).sum())}


def split_80_10_10(n: int, seed: int, val_fraction: float = 0.1, test_fraction: float = 0.1):
    """(train, val, test) indices of torch.utils.data.random_split(range(n), [n - v - t, v, t], seed)."""
    n_val, n_test = int(val_fraction * n), int(test_fraction * n)
    n_train = n - n_val - n_test
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]


PIXEL_SCALINGS = {False: (0.0, 255.0), True: (127.5, 127.5)}  # normalize -> (shift, scale): (x - shift) / scale
PIXEL_VALUES = {False: "x / 255 in [0, 1]", True: "(x - 127.5) / 127.5 in [-1, 1]"}  # what a checkpoint's task records


def load_pathfinder(root: Optional[Path] = None, *, resolution: int = 32, split_seed: int = 42,
                    val_fraction: float = 0.1, test_fraction: float = 0.1, normalize: bool = False,
                    workers: int = 8, use_cache: bool = True, name: Optional[str] = None) -> TaskData:
    """Pathfinder-R as TaskData: x (R*R, 1) float pixels, 2 classes, split 80/10/10 (S4 code's seed 42).

    root: data directory holding ``pathfinder<R>/curv_contour_length_14/`` (directly or inside the
    extracted LRA archive). workers: threads decoding PNGs on the first load (later loads read the
    cache under <root>/_cache).
    """
    if resolution not in RESOLUTIONS:
        raise ValueError(f"load_pathfinder: resolution must be one of {RESOLUTIONS}, got {resolution}")
    root = data_root(root)
    folder = pathfinder_dir(root, resolution)
    files = metadata_files(folder, resolution)
    samples = read_samples(folder, resolution, files)
    params = {"resolution": resolution, "sources": [f.name for f in files]}
    if use_cache:  # the metadata and every image it lists, by their bytes: an edited image is never served stale
        params["content"] = content_fingerprint(files + sorted({p for p, _ in samples if p.is_file()}), folder)
    data = cached(root, f"pathfinder{resolution}", params,
                  lambda: _build(folder, resolution, files, workers, samples), enabled=use_cache)
    images, labels = data["images"], data["labels"]
    tr, va, te = split_80_10_10(labels.numel(), split_seed, val_fraction, test_fraction)
    shift, scale = PIXEL_SCALINGS[normalize]
    ds = {k: ImageSequenceDataset(images, labels, idx, shift, scale) for k, idx in (("train", tr), ("val", va),
                                                                                     ("test", te))}
    return TaskData(
        name=name or f"pathfinder{resolution}", train=ds["train"], val=ds["val"], test=ds["test"],
        seq_len=resolution * resolution, d_output=2, d_input=1, collate_fn=stack_collate,
        info={"path": str(folder), "values": PIXEL_VALUES[normalize],
              "split": f"random_split 80/10/10 with seed {split_seed} (S4 code)",
              "skipped_empty_images": int(data["skipped_empty"]),
              "label_balance": float(labels.float().mean()) if labels.numel() else None,
              "sizes": {k: len(v) for k, v in ds.items()}})


def load_pathx(root: Optional[Path] = None, **kwargs) -> TaskData:
    """Path-X: Pathfinder at 128 x 128 (sequence length 16384); same arguments as load_pathfinder."""
    if kwargs.pop("resolution", 128) != 128:
        raise ValueError("load_pathx: Path-X is Pathfinder at resolution 128")
    return load_pathfinder(root, resolution=128, name="pathx", **kwargs)
