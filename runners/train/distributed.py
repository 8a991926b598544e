"""Data-parallel plumbing for ``torchrun``: process group, rank-0-only side effects, reductions.

Started with ``torchrun --nproc_per_node=K``, every process sees WORLD_SIZE, RANK and LOCAL_RANK;
:func:`setup` joins the process group (NCCL on CUDA, gloo on CPU) and picks ``cuda:LOCAL_RANK``.
Without those variables everything here is a no-op for a single process.

The group is made once per process and kept (ended at interpreter exit), so a runner can call
``train`` several times (e.g. S4, then a Transformer baseline): tearing a group down and making a
new one on the same MASTER_PORT can race with another rank's stale rendezvous store and hang.
"""
from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None


def setup(device: torch.device) -> tuple[DistInfo, torch.device]:
    """Join the process group named by the torchrun variables; returns (info, this process's device)."""
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
        local = _env_int("LOCAL_RANK", rank)
    else:
        world = _env_int("WORLD_SIZE", 1)
        rank = _env_int("RANK", 0)
        local = _env_int("LOCAL_RANK", 0)
        if world > 1:
            if not dist.is_available():
                raise RuntimeError("WORLD_SIZE > 1 but torch.distributed is not available in this build")
            backend = "nccl" if device.type == "cuda" else "gloo"
            if device.type == "cuda":
                torch.cuda.set_device(local)
            dist.init_process_group(backend=backend)
            atexit.register(_destroy)
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    return DistInfo(world, rank, local), device


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over processes, in place (and returned). On NCCL the tensor must live on the GPU."""
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def any_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every process if ``flag`` is True on any (keeps ranks stopping together)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every process."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
