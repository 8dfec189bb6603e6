"""The order a packtool.hf consumer reads slabs in, per data-parallel rank (packtool/hf/__init__.py's
"DP" paragraph): the plan's per-rank streams of a `--dp N` output, or round robin; every
rank's stream the same length (a DDP rank that runs out first leaves the others waiting in
the gradient all-reduce), a short rank cycling its own first slabs."""
from __future__ import annotations

import numpy as np

from packtool.errors import PacktoolInputError
from packtool.params import checked
from packtool.slabs.reader import SlabIndex

__all__ = ["dp_order", "equal_streams", "ranks_shown", "short_ranks"]


def dp_order(index: SlabIndex, planned_dp: int, world_size: int = 1, rank: int | None = None,
             per_device_batch: int = 1) -> np.ndarray:
    """Slab indices in the order a consumer reads them. `rank` given: that rank's slabs;
    None: every rank's, interleaved in runs of `per_device_batch` (run k of rank 0, of rank
    1, ...), which is how accelerate deals a sequential sampler's batches to ranks."""
    rank, world_size, per_device_batch = (checked(k, v) for k, v in (
        ("rank", rank), ("world_size", world_size), ("per_device_batch", per_device_batch)))  # rank=True is no rank
    if rank is not None and not 0 <= rank < world_size:
        raise PacktoolInputError(f"rank {rank} out of range for world_size {world_size}")
    n = len(index)
    if planned_dp > 1:
        if world_size != planned_dp:
            raise PacktoolInputError(f"the slabs were packed with dp={planned_dp} but training runs "
                                     f"{world_size} data-parallel ranks: pass world_size={planned_dp} and this "
                                     f"process's rank, or re-pack with `packtool pack --dp {world_size}` (or "
                                     f"`packtool pack` without `--dp`, for round-robin dealing)")
        order = np.lexsort((index.microbatch, index.step, index.dp_rank))  # rank-major
        owner = index.dp_rank[order]
    else:
        order = np.argsort(np.arange(n) % world_size, kind="stable")  # i -> rank i % W
        owner = order % world_size
    order, owner, pos = equal_streams(order, owner, world_size)
    if rank is not None:
        return order[owner == rank].astype(np.int64)
    return order[np.lexsort((pos, owner, pos // per_device_batch))].astype(np.int64)


def equal_streams(order: np.ndarray, owner: np.ndarray, world_size: int) -> tuple[np.ndarray, ...]:
    """(order, owner, place in the rank's stream), rank-major, every rank's stream cycled to the
    longest one's length: a data-parallel run's ranks must take the same number of steps."""
    n = owner.size
    if n == 0:  # no slab at all: every rank takes none, equally
        return order, owner, np.zeros(0, np.int64)
    # checked before any array of world_size entries: world_size=2**31 over a few slabs is a typo
    counts = np.bincount(owner, minlength=world_size) if world_size <= n else None
    empty = world_size - n if counts is None else int((counts == 0).sum())
    if empty:
        raise PacktoolInputError(f"world_size={world_size} but the output holds {n} slabs: {empty} rank(s) would "
                                 f"get none, and every rank of a data-parallel run must take the same number of "
                                 f"steps; run at most {n} ranks, or re-pack into more slabs (`packtool pack --dp "
                                 f"{world_size}`, or `packtool pack` with a smaller `--max-tokens`)")
    longest = int(counts.max())
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))  # owner is sorted (rank-major)
    owner = np.repeat(np.arange(world_size), longest)
    pos = np.tile(np.arange(longest), world_size)
    return order[first[owner] + pos % counts[owner]], owner, pos


def short_ranks(index: SlabIndex, planned_dp: int, world_size: int) -> tuple[np.ndarray, int, int]:
    """(the ranks that take slab(s) again to match the longest stream, how many in all, the
    slabs every rank takes)."""
    if len(index) == 0:
        return np.zeros(0, np.int64), 0, 0
    counts = (np.bincount(index.dp_rank, minlength=world_size) if planned_dp > 1
              else np.bincount(np.arange(len(index)) % world_size, minlength=world_size))
    return np.flatnonzero(counts < counts.max()), int((counts.max() - counts).sum()), int(counts.max())


def ranks_shown(ranks: np.ndarray) -> str:
    shown = ", ".join(map(str, ranks[:4].tolist()))
    return shown + (f" ... {int(ranks[-1])} ({ranks.size} ranks)" if ranks.size > 4 else "")
