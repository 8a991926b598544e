"""Command line for the LRA generators.

    python -m runners.data.lra.generate listops --out DIR [--n 100000 | --n-train 96000 --n-val 2000
        --n-test 2000] [--min-length 500 --max-length 2000 --max-depth 10 --max-args 10] --seed 0 --workers K
    python -m runners.data.lra.generate pathfinder --out DIR --resolution 32 --n 200000 [--per-batch 1000]
        --seed 0 --workers K [--load] [--timing-record FILE.json]

DIR is the data directory the loaders read ($DATA_PATH): ListOps goes to DIR/listops-1000/,
Pathfinder to DIR/pathfinder<R>/curv_contour_length_14/ (Path-X: --resolution 128).

``--load`` then loads the data as a training run does before its first step (the task's loader, which decodes the
images once into its cache under DIR/_cache). ``--timing-record FILE.json`` writes, atomically, how long it all
took: {"card", "cpu_cores", "images", "resolution", "seconds"} (card: the CUDA device's name, or "cpu"). The
generator runs on the CPU (numpy), in ``--workers`` processes (at most one per core).

Path-X data the way S4D Table 6's suite-data run makes it (its spec's prepare block: 200,000 images, seed 0, 60
workers), timed with the loader's cache:

    python -m runners.data.lra.generate pathfinder --resolution 128 --n 200000 --seed 0 --workers 60 --out DIR \
        --load --timing-record results/step-rates/pathx_data_<stamp>.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

from runners.core.atomic import write_text_atomic
from runners.data.lra.listops_gen import generate_listops
from runners.data.lra.pathfinder_gen import PARAMS, generate_pathfinder


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.data.lra.generate",
                                     description="Write LRA ListOps or Pathfinder/Path-X data in the release layout.")
    sub = parser.add_subparsers(dest="task", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, help="data directory to write into")
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    common.add_argument("--quiet", action="store_true", help="no progress bar")

    lo = sub.add_parser("listops", parents=[common], help="ListOps (LRA procedure)")
    lo.add_argument("--n", type=int, default=None,
                    help="total examples, split 96/2/2 percent as LRA (overridden by --n-train/--n-val/--n-test)")
    lo.add_argument("--n-train", type=int, default=None)
    lo.add_argument("--n-val", type=int, default=None)
    lo.add_argument("--n-test", type=int, default=None)
    lo.add_argument("--min-length", type=int, default=500)
    lo.add_argument("--max-length", type=int, default=2000)
    lo.add_argument("--max-depth", type=int, default=10)
    lo.add_argument("--max-args", type=int, default=10)

    pf = sub.add_parser("pathfinder", parents=[common], help="Pathfinder / Path-X (resolution 128)")
    pf.add_argument("--resolution", type=int, default=32, choices=sorted(PARAMS))
    pf.add_argument("--n", type=int, default=200000, help="images (LRA: 200000)")
    pf.add_argument("--per-batch", type=int, default=1000, help="images per imgs/<k>/ folder and metadata/<k>.npy")
    pf.add_argument("--load", action="store_true",
                    help="then load the data with the task's loader (building its cache), as a training run does")
    pf.add_argument("--timing-record", default=None, metavar="FILE.json",
                    help="write {card, cpu_cores, images, resolution, seconds} of the whole command here")

    args = parser.parse_args(argv)
    for name in ("workers", "n", "per_batch"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.task == "pathfinder" and args.load:
        from runners.data.lra.pathfinder import load_pathfinder  # (imports torch, as a training run has, untimed)
    start = time.perf_counter()
    workers = args.workers
    if args.task == "listops":
        if args.n is not None:
            n_val = n_test = max(1, round(0.02 * args.n))
            n_train = args.n - n_val - n_test
        else:
            n_train, n_val, n_test = 96000, 2000, 2000
        n_train = args.n_train if args.n_train is not None else n_train
        n_val = args.n_val if args.n_val is not None else n_val
        n_test = args.n_test if args.n_test is not None else n_test
        folder = generate_listops(args.out, n_train=n_train, n_val=n_val, n_test=n_test, min_length=args.min_length,
                                  max_length=args.max_length, max_depth=args.max_depth, max_args=args.max_args,
                                  seed=args.seed, workers=args.workers, progress=not args.quiet)
        n = n_train + n_val + n_test
    else:
        folder = generate_pathfinder(args.out, resolution=args.resolution, n=args.n, per_batch=args.per_batch,
                                     seed=args.seed, workers=args.workers, progress=not args.quiet)
        n = args.n
        workers = min(args.workers, os.cpu_count() or 1, -(-n // args.per_batch))  # as generate_pathfinder runs
    elapsed = time.perf_counter() - start
    print(f"wrote {n} {args.task} examples to {folder} in {elapsed:.1f} s "
          f"({n / elapsed:.1f}/s with {workers} worker(s), on the CPU)")
    if args.task == "pathfinder" and args.load:
        task = load_pathfinder(args.out, resolution=args.resolution)
        loaded = time.perf_counter() - start
        print(f"loaded {sum(task.info['sizes'].values())} images (cache under {args.out}/_cache) in "
              f"{loaded - elapsed:.1f} s; {loaded:.1f} s in all")
        elapsed = loaded
    if args.task == "pathfinder" and args.timing_record:
        write_timing_record(args.timing_record, images=n, resolution=args.resolution, seconds=elapsed)
        print(f"timing record: {args.timing_record}")
    return 0


def device_name() -> str:
    """The CUDA device's name where torch sees one, else "cpu"."""
    try:
        import torch
    except ImportError:
        return "cpu"
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def write_timing_record(path: str, *, images: int, resolution: int, seconds: float) -> None:
    """Write {card, cpu_cores, images, resolution, seconds} to ``path`` (JSON, atomically)."""
    record = {"card": device_name(), "cpu_cores": os.cpu_count() or 1, "images": int(images),
              "resolution": int(resolution), "seconds": round(float(seconds), 2)}
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
