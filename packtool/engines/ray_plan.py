"""Sharded planning on Ray: plan shards are runs of tokenized-cache pieces; each Ray task reads
its own rows' lengths from the cache, packs them and keeps its placement in the object store.

The driver receives per-bin figures and the merge pool only (packtool.planning.sharded), so its
memory grows with bins, not rows; the write step (ray_write.write_slabs) routes segments
from the placements without bringing them to the driver.
"""
from __future__ import annotations

from packtool.align import Alignment
from packtool.engines.ray_env import remote
from packtool.planning.core import PackingConfig
from packtool.planning.sharded import ShardedPlan, plan_shards
from packtool.tokenize.cache_pieces import cache_shards


class RayRunner:
    """Shard packs as Ray tasks: the summary comes back, the placement stays in the object
    store (its reference is the handle); later calls run where the placement is read."""

    def map(self, f, args: list[tuple]):
        """Every task submitted at once; summaries fetched one by one, in order."""
        import ray
        rf = remote(f, num_returns=2)
        refs = [rf.remote(*a) for a in args]
        for summary_ref, placement_ref in refs:
            yield ray.get(summary_ref), placement_ref

    def call(self, f, handle, *args):
        import ray
        return ray.get(remote(f).remote(handle, *args))



def plan_on_ray(cache, alignment: Alignment, packing: PackingConfig, shard_rows: int,
                underfull: float = 0.98) -> ShardedPlan:
    return plan_shards(cache_shards(cache, shard_rows), alignment, packing, underfull, RayRunner())
