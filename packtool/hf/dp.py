"""The order a packtool.hf consumer reads slabs in, per data-parallel rank (packtool/hf/__init__.py's
"DP" paragraph): the plan's per-rank streams of a `--dp N` output, or round robin; every
rank's stream the same length (a DDP rank that runs out first leaves the others waiting in
the gradient all-reduce) and a whole number of `per_device_batch` runs (accelerate deals the
interleaved dataset's batches to ranks in turn: a rank's short last run took another rank's
slabs into its batch, and its wrap-around took the first rank's again, S46B-7), a rank that
is short of it cycling its own first slabs."""
from __future__ import annotations

import numpy as np

from packtool.errors import PacktoolInputError
from packtool.params import checked
from packtool.slabs.reader import SlabIndex

__all__ = ["dp_order", "equal_streams", "rank_counts", "ranks_shown", "repeats_said", "short_ranks", "stream_length"]


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
    order, owner, pos = equal_streams(order, owner, world_size, per_device_batch)
    if rank is not None:
        return order[owner == rank].astype(np.int64)
    return order[np.lexsort((pos, owner, pos // per_device_batch))].astype(np.int64)


def equal_streams(order: np.ndarray, owner: np.ndarray, world_size: int,
                  per_device_batch: int = 1) -> tuple[np.ndarray, ...]:
    """(order, owner, place in the rank's stream), rank-major, every rank's stream cycled to the
    longest one's length, rounded up to whole runs of `per_device_batch`: a data-parallel run's
    ranks must take the same number of steps, each batch of one rank's slabs."""
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
    longest = stream_length(counts, per_device_batch)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))  # owner is sorted (rank-major)
    owner = np.repeat(np.arange(world_size), longest)
    pos = np.tile(np.arange(longest), world_size)
    return order[first[owner] + pos % counts[owner]], owner, pos


def stream_length(counts: np.ndarray, per_device_batch: int = 1) -> int:
    """The slabs every rank takes: the most any rank holds, up to a whole run of `per_device_batch`
    where there are ranks (`counts`: one per rank) whose slabs a short last batch could take. One
    process has none, and no all-reduce to wait in (accelerate does not shard its sampler): its
    last batch is short, every slab taken once (S47B-4: it took slabs again, "trained twice")."""
    batch = per_device_batch if counts.size > 1 else 1
    return -(-int(counts.max()) // batch) * batch


def rank_counts(index: SlabIndex, planned_dp: int, world_size: int) -> np.ndarray:
    """The slabs each rank holds before its stream is cycled (the plan's, or round robin's)."""
    if planned_dp > 1:
        return np.bincount(index.dp_rank, minlength=world_size)
    return np.bincount(np.arange(len(index)) % world_size, minlength=world_size)


def short_ranks(index: SlabIndex, planned_dp: int, world_size: int,
                per_device_batch: int = 1) -> tuple[np.ndarray, int, int]:
    """(the ranks that take slab(s) again to fill the common stream, how many in all, the slabs
    every rank takes)."""
    if len(index) == 0:
        return np.zeros(0, np.int64), 0, 0
    counts = rank_counts(index, planned_dp, world_size)
    each = stream_length(counts, per_device_batch)
    return np.flatnonzero(counts < each), int((each - counts).sum()), each


def repeats_said(path: str, index: SlabIndex, planned_dp: int, world_size: int,
                 per_device_batch: int = 1) -> str | None:
    """The note for slabs a rank takes again (None: none): why, how many, and the fix."""
    short, repeats, each = short_ranks(index, planned_dp, world_size, per_device_batch)
    if not repeats:
        return None
    counts = rank_counts(index, planned_dp, world_size)
    most, why, fix = int(counts.max()), [], []
    if int(counts.min()) < most:
        why.append(f"{len(index)} slabs do not divide among world_size={world_size} ranks")
        fix.append(f"pack with `packtool pack --dp {world_size}`")
    if each > most:
        why.append(f"a rank's {most} slabs are not whole batches of per_device_batch={per_device_batch} "
                   f"(accelerate would fill the last batch with another rank's slabs)")
        d = np.arange(1, most + 1)
        d = d[most % d == 0]
        fix.append(f"pass a per_device_batch that divides {most} "
                   f"({', '.join(map(str, d[:8].tolist()))}{', ...' if d.size > 8 else ''})")
    return (f"{path}: {' and '.join(why)}: rank(s) {ranks_shown(short)} take their first slab(s) again "
            f"({repeats} in all, trained more than once this epoch) so that every rank takes {each} (a DDP "
            f"rank that runs out leaves the others waiting in the all-reduce); to train each slab once, "
            f"{' and '.join(fix)}")


def ranks_shown(ranks: np.ndarray) -> str:
    shown = ", ".join(map(str, ranks[:4].tolist()))
    return shown + (f" ... {int(ranks[-1])} ({ranks.size} ranks)" if ranks.size > 4 else "")
