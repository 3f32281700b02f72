"""DDP through torchrun's environment (model.md §5): rank, world size, collectives, barriers.

Without ``RANK``/``WORLD_SIZE`` a run is single-process and every helper here is a no-op, so the
training loop calls them unconditionally. ``gloo`` on the CPU (tests), ``nccl`` on CUDA.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from c4forge.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """Read torchrun's variables; single process when they are absent."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistInfo()
    try:
        return DistInfo(
            rank=int(os.environ["RANK"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
    except ValueError as err:
        raise ConfigError(f"bad torchrun environment: {err}") from err


def init(info: DistInfo, device_kind: str) -> None:
    """Join the process group (idempotent)."""
    if not info.enabled or dist.is_initialized():
        return
    backend = "nccl" if device_kind == "cuda" else "gloo"
    kwargs = {}
    if device_kind == "cuda":
        kwargs["device_id"] = torch.device("cuda", info.local_rank)
    dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size, **kwargs)


def shutdown(synchronize: bool = True) -> None:
    """Leave the process group. After a normal run every rank first meets at a barrier: a rank
    that tears gloo down while a peer is still busy (rank 0 draws the loss curve) can abort
    with "terminate called without an active exception". After an error no barrier is
    attempted, since the other ranks may never arrive."""
    if dist.is_available() and dist.is_initialized():
        if synchronize:
            dist.barrier()
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over ranks, in place, returned for chaining (identity in a single process)."""
    if info.enabled and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def wrap_ddp(model: torch.nn.Module, info: DistInfo, device: torch.device) -> torch.nn.Module:
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [info.local_rank] if device.type == "cuda" else None
    return DDP(model, device_ids=ids)


def no_sync(model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` on non-final micro-steps (skips the gradient all-reduce)."""
    if active and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()
