"""Sharded planning on Ray: plan shards are runs of tokenized-cache pieces; each Ray task reads
its own rows' lengths from the cache, packs them and keeps its placement in the object store.

The driver receives per-bin figures and the merge pool only (packtool.plan_sharded), so its
memory grows with bins, not rows; the write step (ray_write.write_slabs) routes segments
from the placements without bringing them to the driver.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from packtool.align import Alignment
from packtool.plan import PackingConfig
from packtool.plan_sharded import ShardedPlan, plan_shards

from .ray_write import cache_pieces


@dataclass(frozen=True)
class CacheLengths:
    """The `length` column of some cache rows: read by the shard task, where it runs."""
    pieces: tuple  # ((parquet file, row groups, first, end), ...): rows [first, end) of the groups

    def __call__(self) -> np.ndarray:
        parts = [pq.ParquetFile(path).read_row_groups(list(gs), columns=["length"]).column(0)
                 .to_numpy()[a:e] for path, gs, a, e in self.pieces]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


class RayRunner:
    """Shard packs as Ray tasks: the summary comes back, the placement stays in the object
    store (its reference is the handle); later calls run where the placement is read."""

    def map(self, f, args: list[tuple]):
        """Every task submitted at once; summaries fetched one by one, in order."""
        import ray
        rf = ray.remote(num_returns=2)(f)
        refs = [rf.remote(*a) for a in args]
        for summary_ref, placement_ref in refs:
            yield ray.get(summary_ref), placement_ref

    def call(self, f, handle, *args):
        import ray
        return ray.get(ray.remote(f).remote(handle, *args))


def cache_shards(cache, shard_rows: int) -> list[tuple[int, CacheLengths]]:
    """Plan shards of `shard_rows` cache rows (the last may be smaller), as (first row, reader)."""
    if shard_rows < 1:
        raise ValueError(f"--plan-shard-rows must be >= 1, got {shard_rows}")
    pieces = cache_pieces(cache)
    total = sum(p[3] for p in pieces)
    shards = []
    for a in range(0, total, shard_rows):
        e = min(a + shard_rows, total)
        shards.append((a, CacheLengths(tuple((path, tuple(gs), max(a - r0, 0), min(e - r0, n))
                                             for path, gs, r0, n in pieces if r0 < e and r0 + n > a))))
    return shards


def plan_on_ray(cache, alignment: Alignment, packing: PackingConfig, shard_rows: int,
                underfull: float = 0.98) -> ShardedPlan:
    return plan_shards(cache_shards(cache, shard_rows), alignment, packing, underfull, RayRunner())
