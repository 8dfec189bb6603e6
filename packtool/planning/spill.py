"""Sharded planning for the local engine with every per-item array on disk: memory flat in rows.

`plan_sharded.plan_shards` packs row shards and keeps each shard's `Placement` behind a
handle. Here the handle is a file (`SpillRunner`): a shard's placement is written as soon as it
is packed, so planning holds per-bin arrays and one shard's items at a time. Each shard reads
its own rows' lengths from the tokenized cache and checks them against the flat token store's
offsets (`CheckedLengths`), so no per-row array of the whole input is ever in memory either.

`route_to_files` then turns one placement at a time into routing rows (`shard_routing`) and
appends them to one file per output shard: a `ROUTED` record per segment, with its position
inside the shard and its absolute token start in the flat store. `put_in_order` rewrites a
shard's file in on-disk order (before its writer thread starts), so the writer reads just
the segments of one row group at a time (slabs/routed.py).

With one shard the plan is exactly `plan.plan`. Disk: ~36 bytes per item for the
placements, then ~44 per segment for the routed files (each placement goes once routed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolCacheError, PacktoolConfigError, arg
from packtool.free_memory import mapped
from packtool.planning.core import PackingConfig
from packtool.planning.sharded import Placement, ShardedPlan, plan_shards

PLAN_SHARD_ROWS = 1 << 17  # default rows per plan shard (`pack --plan-shard-rows`)


_FIELDS = ("source", "offset", "length", "chunk", "bin")


def save_placement(pl: Placement, path: str) -> None:
    with open(path, "wb") as f:  # plain arrays back to back: no zip, no checksum
        for name in _FIELDS:
            np.save(f, getattr(pl, name), allow_pickle=False)


def load_placement(path: str) -> Placement:
    with open(path, "rb") as f:
        return Placement(*(np.load(f, allow_pickle=False) for _ in _FIELDS))


class PlacementFile:
    """A spilled placement read a piece at a time (`routing_pieces`): each field's slice read
    from the file at its offset, never the whole placement (~36 bytes an item) and never a
    mapping whose touched pages would count as resident."""

    def __init__(self, path: str):
        self.path, self.fields = path, []
        with open(path, "rb") as f:
            for _ in _FIELDS:
                major, _ = np.lib.format.read_magic(f)  # save_placement's np.save: 1.0 (2.0 past 64 KiB headers)
                read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
                self.fields.append((f.tell(), dtype))
                f.seek(int(np.prod(shape)) * dtype.itemsize, os.SEEK_CUR)
        self.size = int(shape[0])

    def piece(self, a: int, e: int) -> Placement:
        return Placement(*(np.fromfile(self.path, dt, e - a, offset=off + a * dt.itemsize) for off, dt in self.fields))


class SpillRunner:
    """`plan_shards`' runner with placements in files under `directory` (the handle is the
    path). Shards are packed one at a time, in this thread: the numba packers hold the GIL,
    and what other threads free stays resident in glibc's per-thread arenas (malloc_trim
    does not return it): packing in two threads measured no faster at 1M rows and left
    ~14 MB more resident through the write."""

    def __init__(self, directory: str):
        self.directory = directory

    def map(self, f: Callable, args: list[tuple]):
        for j, a in enumerate(args):
            summary, pl = f(*a)
            path = os.path.join(self.directory, f"placement-{j:05d}.npy")
            save_placement(pl, path)
            del pl
            yield summary, path

    def call(self, f: Callable, handle: str, *args):
        return f(load_placement(handle), *args)

    def get(self, handle: str) -> Placement:
        return load_placement(handle)


class StoreOffsets:
    """Slices of the flat token store's offsets.npy, read from the file: never the whole array
    (8 bytes a row) and never a mapping whose touched pages would count as resident."""

    def __init__(self, store_dir: str):
        self.path = os.path.join(store_dir, "offsets.npy")
        with mapped(self.path, "the flat token store"):  # its header only: the mapping touches no page
            m = np.load(self.path, mmap_mode="r")
        self.rows, self.header, self.dtype = m.size - 1, int(m.offset), m.dtype
        del m

    def read(self, a: int, n: int) -> np.ndarray:
        """offsets[a:a+n] as int64."""
        if a < 0 or a + n > self.rows + 1:
            raise PacktoolCacheError(f"rows {a}..{a + n - 1} asked, the flat token store has {self.rows}; "
                                     f"delete it (it is rebuilt from the cache) and re-run", path=self.path)
        out = np.fromfile(self.path, self.dtype, n, offset=self.header + a * self.dtype.itemsize)
        return out.astype(np.int64, copy=False)


@dataclass(frozen=True)
class CheckedLengths:
    """The lengths of cache rows [first, first + n), read where the shard is packed and checked
    against the flat token store (the writer reads the tokens there)."""
    read: Callable[[], np.ndarray]
    store: StoreOffsets
    first: int
    cache_path: str

    def __call__(self) -> np.ndarray:
        lengths = self.read()
        if not np.array_equal(np.diff(self.store.read(self.first, lengths.size + 1)), lengths):
            raise PacktoolCacheError(f"tokenized cache is inconsistent with its flat token store (rows "
                                     f"from {self.first}); delete it and re-run", path=self.cache_path)
        return lengths


def plan_spilled(cache, alignment: Alignment, packing: PackingConfig, shard_rows: int,
                 store_dir: str, directory: str, underfull: float = 0.98) -> ShardedPlan:
    """Plan the cache's rows in shards of `shard_rows`, each placement spilled to `directory`.
    The flat token store in `store_dir` must exist (its offsets are checked and routed)."""
    from packtool.tokenize.cache import cache_shards  # reads a row range's lengths from the cache

    if shard_rows < 1:
        raise PacktoolConfigError(f"{arg('plan_shard_rows')} must be >= 1 to plan in shards, got {shard_rows}; "
                                  f"0 plans every row at once (packtool.planning.core.plan)")
    store = StoreOffsets(store_dir)
    if store.rows != cache.num_rows:
        raise PacktoolCacheError(f"the flat token store has {store.rows} rows, the cache {cache.num_rows}; "
                                 f"delete the cache and re-run", path=cache.path)
    shards = [(r0, CheckedLengths(reader, store, r0, cache.path))
              for r0, reader in cache_shards(cache, shard_rows)]
    return plan_shards(shards, alignment, packing, underfull, SpillRunner(directory))


