"""Write a spilled sharded plan (packtool.plan_spill): each output shard from its own files.

`SpilledShards.route` cuts the plan into output shards (`write_shards`' boundaries), routes
every segment to its shard's file (`plan_spill.route_to_files`) and saves each shard's slab
values (`SlabSpec`, slab lengths), so the caller can drop the plan during the write. Then
one thread per core writes whole shards, as `writer.write_shards` does; the main thread puts
each shard's file in on-disk order (`plan_spill.put_in_order`) just before queueing it. For
every row group a writer reads that group's segments (36 bytes each), rebuilds the group's
`Plan` (`SlabSpec.plan`) and writes it through `write_shard_file` and the Ray engine's
`ShardSlabWriter` (row k of its token store is segment k: here the store's offsets are the
segments' absolute starts in the flat token file, read with pread). So a thread holds one
row group's segments, and the bytes are the global plan's writer's: same shards, row groups
and columns (tested), whatever the number of threads.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..engines.ray_write import ShardSlabWriter
from ..plan_sharded import ShardedPlan
from ..plan_slabs import SlabSpec
from ..plan_spill import put_in_order, read_segments, route_to_files
from .flat_tokens import FlatTokens
from .writer import GROUP_TOKENS, ShardInfo, run_shards, shard_ranges, write_shard_file

_NO_TOKENS = np.zeros(0, np.int32)  # with a directory the writer preads the file, never this


class RoutedSlabWriter:
    """`SlabWriter.batch` for one output shard, from its `SlabSpec` and its routed file `path`
    (segments in on-disk order); slab numbers are the shard's. Safe in several threads."""

    def __init__(self, spec: SlabSpec, path: str, store_dir: str, pad_id: int):
        self.spec, self.path, self.store_dir, self.pad_id = spec, path, store_dir, pad_id
        self.first = np.concatenate(([0], np.cumsum(spec.count))).astype(np.int64)

    def batch(self, b0: int, b1: int):
        s = read_segments(self.path, int(self.first[b0]), int(self.first[b1]))
        sp = self.spec
        sub = dataclasses.replace(sp, **{f: getattr(sp, f)[b0:b1] for f in _PER_SLAB})
        plan = sub.plan(s["row"], s["off"], s["length"], s["chunk"])
        store = FlatTokens(_NO_TOKENS, s["start"], self.store_dir)
        return ShardSlabWriter(plan, store, self.pad_id).batch(0, b1 - b0)


_PER_SLAB = ("count", "singleton", "slab_index", "dp_rank", "step")


@dataclass(frozen=True)
class SpilledShards:
    """The output shards of a spilled plan, ready to write: per shard, its routed segments
    and its slab values (`SlabSpec` + slab lengths) are files, so the plan itself (per-slab
    arrays, ~50 bytes a slab) need not stay in memory while the shards are written."""
    routed: list[str]    # ROUTED records, put in order just before the shard is written
    specs: list[str]     # pickled (SlabSpec, slab lengths)
    segments: list[int]  # real segments per shard

    @classmethod
    def route(cls, sp: ShardedPlan, store_dir: str, spill_dir: str,
              shard_tokens: int = 64 << 20) -> "SpilledShards":
        """Cut `sp` into output shards as `write_shards` does (`shard_ranges`)
        and route every segment (placements in `spill_dir`) to its shard's file."""
        slab_len = sp.slab_len()
        ranges = shard_ranges(slab_len, shard_tokens)  # write_shards' cut
        routed = route_to_files(sp, ranges, store_dir, spill_dir)
        specs = []
        for k, (s0, s1) in enumerate(ranges):
            specs.append(os.path.join(spill_dir, f"spec-{k:05d}.pkl"))
            with open(specs[-1], "wb") as f:
                pickle.dump((sp.spec(s0, s1), slab_len[s0:s1]), f, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(routed, specs, [int(sp.count[s0:s1].sum()) for s0, s1 in ranges])


def write_spilled(shards: SpilledShards, store_dir: str, directory: str, pad_id: int,
                  group_tokens: int = GROUP_TOKENS, on_rows: Callable[[int], None] | None = None,
                  workers: int | None = None) -> list[ShardInfo]:
    """Write routed output shards into `directory` as slabs-NNNNN.parquet by up to `workers`
    threads (default: one per core); `store_dir` is the flat token store. A shard is written
    whole by one thread, so the bytes do not depend on `workers`."""
    def order(k: int) -> None:
        # in the main thread, just before shard k is queued: memory freed here goes back to
        # the main heap, which malloc_trim returns (a writer thread's would stay resident)
        put_in_order(shards.routed[k], shards.segments[k])

    def one(k: int, rows_cb, ahead: bool) -> ShardInfo:
        with open(shards.specs[k], "rb") as f:
            spec, slab_len = pickle.load(f)
        w = RoutedSlabWriter(spec, shards.routed[k], store_dir, pad_id)
        info = write_shard_file(w, slab_len, 0, os.path.join(directory, f"slabs-{k:05d}.parquet"),
                                group_tokens, rows_cb, ahead)
        os.remove(shards.routed[k])
        return info

    return run_shards(len(shards.routed), one, workers, on_rows, prepare=order)
