"""Write a spilled sharded plan (packtool.plan_spill): each output shard from its own file.

The segments are routed to one file per output shard first (`plan_spill.route_to_files`).
Then one thread per core writes whole shards, as `writer.write_shards` does: a thread puts
its shard's file in on-disk order (`plan_spill.put_in_order`), then for every row group
reads that group's segments from the file (36 bytes each), rebuilds the group's `Plan`
(`ShardedPlan.spec(...).plan`) and writes it through `write_shard_file` and the Ray
engine's `ShardSlabWriter` (row k of its token store is segment k: here the store's offsets
are the segments' absolute starts in the flat token file, read with pread). So a thread
holds one row group's segments, not its shard's, and the bytes are the global plan's
writer's: same shards, row groups and columns (tested), whatever the number of threads.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Callable

import numpy as np

from ..engines.ray_write import ShardSlabWriter
from ..plan_sharded import ShardedPlan
from ..plan_spill import put_in_order, read_segments, route_to_files
from .flat_tokens import FlatTokens
from .writer import ShardInfo, _chunks, release_memory, write_shard_file, write_shards

# the row-group size write_shards uses by default, so both paths cut the same row groups
GROUP_TOKENS = inspect.signature(write_shards).parameters["group_tokens"].default
# With a store directory the writer preads the token files and never reads the store's
# in-memory token arrays: those fields (whatever the store's layout) stay empty.
_NO_TOKENS = {f.name: np.zeros(0, np.int32) for f in dataclasses.fields(FlatTokens)
              if f.name not in ("offsets", "directory")}


class RoutedSlabWriter:
    """`SlabWriter.batch` for the slabs [s0, s1) of a sharded plan, whose segments are in the
    routed file `path` (on-disk order); slab numbers are relative to s0. Safe in several
    threads."""

    def __init__(self, sp: ShardedPlan, s0: int, s1: int, path: str, store_dir: str, pad_id: int):
        self.sp, self.s0, self.path, self.store_dir, self.pad_id = sp, s0, path, store_dir, pad_id
        self.first = np.concatenate(([0], np.cumsum(sp.count[s0:s1]))).astype(np.int64)

    def batch(self, b0: int, b1: int):
        s = read_segments(self.path, int(self.first[b0]), int(self.first[b1]))
        sub = self.sp.spec(self.s0 + b0, self.s0 + b1).plan(s["row"], s["off"], s["length"], s["chunk"])
        store = FlatTokens(offsets=s["start"], directory=self.store_dir, **_NO_TOKENS)
        return ShardSlabWriter(sub, store, self.pad_id).batch(0, b1 - b0)


class _Cancelled(Exception):
    pass


def write_spilled(sp: ShardedPlan, store_dir: str, spill_dir: str, directory: str, pad_id: int,
                  shard_tokens: int = 64 << 20, group_tokens: int = GROUP_TOKENS,
                  on_rows: Callable[[int], None] | None = None,
                  workers: int | None = None) -> list[ShardInfo]:
    """Route every segment of `sp` (placements in `spill_dir`) to its output shard's file, then
    write the shards into `directory` as slabs-NNNNN.parquet by up to `workers` threads
    (default: one per core); `store_dir` is the flat token store. A shard is written whole by
    one thread, so the bytes do not depend on `workers`."""
    cores = max(1, workers or os.cpu_count() or 1)
    slab_len = sp.slab_len()
    ranges = _chunks(slab_len, shard_tokens)
    routed = route_to_files(sp, ranges, store_dir, spill_dir)
    release_memory()  # the routing's freed temporaries, before the writer threads start
    n_threads = min(len(ranges), cores)
    # the last shards would leave cores idle: those gather a row group ahead (write_shards' rule)
    last = len(ranges) - (cores - 1) if cores > 1 else len(ranges)
    lock, failed = threading.Lock(), threading.Event()

    def group_done(n: int) -> None:
        if failed.is_set():  # another shard failed, or Ctrl-C: stop at this row group
            raise _Cancelled()
        if on_rows:
            with lock:
                on_rows(n)

    def order(k: int) -> None:
        s0, s1 = ranges[k]
        put_in_order(routed[k], int(sp.count[s0:s1].sum()))

    def one(k: int) -> ShardInfo:
        s0, s1 = ranges[k]
        w = RoutedSlabWriter(sp, s0, s1, routed[k], store_dir, pad_id)
        info = write_shard_file(w, slab_len[s0:s1], 0, os.path.join(directory, f"slabs-{k:05d}.parquet"),
                                group_tokens, group_done if n_threads > 1 else on_rows, k >= last)
        os.remove(routed[k])
        return info

    if n_threads == 1:
        out = []
        for k in range(len(ranges)):
            order(k)
            out.append(one(k))
        return out
    with ThreadPoolExecutor(n_threads, thread_name_prefix="packtool-shard") as ex:
        futs = []
        try:
            # this thread puts each shard's file in order just before queueing it, while the
            # writers run: its memory is freed in the main heap, which malloc_trim returns
            # (a writer thread's would stay resident through its shard)
            for k in range(len(ranges)):
                if any(f.done() and f.exception() is not None for f in futs):
                    break
                order(k)
                futs.append(ex.submit(one, k))
            wait(futs, return_when=FIRST_EXCEPTION)  # the first failure, not the first shard
            for f in futs:
                if f.done() and f.exception() is not None:
                    raise f.exception()
            return [f.result() for f in futs]
        except BaseException:
            failed.set()
            for f in futs:
                f.cancel()
            raise
