"""Write a spilled sharded plan (packtool.planning.spill): each output shard from its own files.

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

import numba as nb
import numpy as np

from packtool.errors import PacktoolCacheError
from packtool.heap import trim
from packtool.planning.core import SEGMENT_FIELDS
from packtool.planning.sharded import ShardedPlan
from packtool.planning.slabs import SlabSpec, routing_pieces
from packtool.planning.spill import PlacementFile, StoreOffsets
from packtool.slabs.format import ShardInfo
from packtool.slabs.names import shard_file
from packtool.slabs.schema import slab_schema
from packtool.slabs.shard_sizes import GROUP_TOKENS, shard_ranges
from packtool.slabs.writer import ShardSlabWriter, run_shards, write_shard_file
from packtool.tokenize.flat_tokens import FlatTokens

# One segment of an output shard: source row, offset in the row, absolute token start in
# the flat store, length, chunk. ROUTED adds its position in the shard (on-disk order).
SEGMENT = np.dtype([("source", "<i8"), ("offset", "<i8"), ("start", "<i8"), ("length", "<i8"),
                    ("chunk", "<i4")])
ROUTED = np.dtype([("pos", "<i8")] + [(f, SEGMENT[f]) for f in SEGMENT.names])
assert all(ROUTED.fields[f][1] == SEGMENT.fields[f][1] + 8 for f in SEGMENT.names)  # _in_order

ROUTE_STEP = 1 << 15  # placement items routed at a time (~100 bytes of working memory each)
ORDER_STEP = 1 << 16  # records `put_in_order` holds at a time, per pass over a shard's file

_NO_TOKENS = np.zeros(0, np.int32)  # with a directory the writer preads the file, never this


class RoutedSlabWriter:
    """`SlabWriter.batch` for one output shard, from its `SlabSpec` and its routed file `path`
    (segments in on-disk order); slab numbers are the shard's. Safe in several threads."""

    def __init__(self, spec: SlabSpec, path: str, store_dir: str, pad_id: int, side=()):
        self.spec, self.path, self.store_dir, self.pad_id = spec, path, store_dir, pad_id
        self.side = tuple(side)  # the store's side columns (tokenize.cache.side_file order)
        self.schema = slab_schema(self.side)
        self.first = np.concatenate(([0], np.cumsum(spec.count))).astype(np.int64)
        self.tops: dict[tuple[int, int], int] = {}  # as SlabWriter.tops: each batch's largest id

    def batch(self, b0: int, b1: int):
        s = read_segments(self.path, int(self.first[b0]), int(self.first[b1]))
        sp = self.spec
        sub = dataclasses.replace(sp, **{f: getattr(sp, f)[b0:b1] for f in _PER_SLAB})
        plan = sub.plan(*(s[f] for f in SEGMENT_FIELDS))
        store = FlatTokens(_NO_TOKENS, s["start"], self.store_dir, self.side)
        w = ShardSlabWriter(plan, store, self.pad_id)
        rb = w.batch(0, b1 - b0)
        self.tops[(b0, b1)] = w.tops.pop((0, b1 - b0))
        return rb


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
                  workers: int | None = None, side=()) -> list[ShardInfo]:
    """Write routed output shards into `directory` as slabs-NNNNN.parquet by up to `workers`
    threads (default: one per core); `store_dir` is the flat token store. A shard is written
    whole by one thread, so the bytes do not depend on `workers`."""
    def order(k: int) -> None:
        # in the main thread, just before shard k is queued: memory freed here goes back to
        # the main heap, which malloc_trim returns (a writer thread's would stay resident).
        # Returned now, not at the shard's end: below glibc's trim threshold (heap.py) the
        # pages it dirtied (~100 bytes a record, up to ORDER_STEP records: ~8 MiB once shards
        # hold 64k segments) stayed resident through every shard's write, so a 300k-row
        # pack's write peaked that much above a 20k one's (issue 23 class 8)
        put_in_order(shards.routed[k], shards.segments[k])
        trim()

    def one(k: int, rows_cb, ahead: Callable[[], bool]) -> ShardInfo:
        with open(shards.specs[k], "rb") as f:
            spec, slab_len = pickle.load(f)
        w = RoutedSlabWriter(spec, shards.routed[k], store_dir, pad_id, side)
        info = write_shard_file(w, slab_len, 0, os.path.join(directory, shard_file(k)),
                                group_tokens, rows_cb, ahead)
        os.remove(shards.routed[k])
        return info

    return run_shards(len(shards.routed), one, workers, on_rows, prepare=order)




def route_to_files(sp: ShardedPlan, ranges: list[tuple[int, int]], store_dir: str,
                   directory: str) -> list[str]:
    """Every segment of a spilled plan appended to the file of its output shard (`ranges`:
    runs of slabs) as a `ROUTED` record, one placement at a time (deleted once routed; in
    this thread, as `SpillRunner` packs) and `ROUTE_STEP` items of it at a time, so what this holds
    does not grow with the plan shard's rows. Returns the file of each output shard, for
    `put_in_order` (which puts records in place whatever order they were appended in)."""
    store = StoreOffsets(store_dir)
    paths = [os.path.join(directory, f"routed-{k:05d}.bin") for k in range(len(ranges))]
    for p in paths:
        open(p, "wb").close()  # a shard with no segment cannot exist, but its file always does
    kind = np.int16 if len(ranges) < 1 << 15 else np.int32  # int16 sorts by radix: faster
    for handle, args in zip(sp.handles, sp.routing_args(ranges)):
        for r in routing_pieces(PlacementFile(handle), *args, ROUTE_STEP):
            if r.source.size:
                _append_routed(r, store, kind, paths)
        os.remove(handle)
    return paths


def _append_routed(r, store: StoreOffsets, kind, paths: list[str]) -> None:
    """One piece of routing rows appended to its shards' files, with absolute token starts."""
    lo = int(r.source.min())
    offs = store.read(lo, int(r.source.max()) - lo + 2)
    local = r.source - lo
    if (r.offset + r.length > np.diff(offs)[local]).any():
        raise PacktoolCacheError(f"a planned segment runs past its row (rows from {lo}); the flat token "
                                 f"store does not match the cache: delete it (it is rebuilt) and re-run",
                                 path=store.path)
    shard = r.shard.astype(kind)
    order = np.argsort(shard, kind="stable")
    rec = np.empty(order.size, ROUTED)
    rec["pos"], rec["source"], rec["offset"] = r.pos[order], r.source[order], r.offset[order]
    rec["start"] = offs[local[order]] + rec["offset"]
    rec["length"], rec["chunk"] = r.length[order], r.chunk[order]
    cut = np.searchsorted(shard[order], np.arange(len(paths) + 1))
    for k in np.flatnonzero(np.diff(cut)):
        with open(paths[k], "ab") as f:
            rec[cut[k]:cut[k + 1]].tofile(f)


def put_in_order(path: str, n: int) -> None:
    """Rewrite an output shard's routed records as its `n` SEGMENT records in on-disk order
    (the same bytes whatever order the records were appended in); every position must come
    exactly once. Up to `2 * ORDER_STEP` records are put in place in memory, read a piece at a
    time; a longer shard is a bucket sort through files beside it: records are first split by
    position range into at most `_BUCKETS` files, then each range is put in place alone, so
    what this holds is one range, not the shard's segments."""
    have = os.path.getsize(path) // ROUTED.itemsize
    if have != n:
        raise RuntimeError(f"{path}: {have} routed segments for a shard that holds {n}; the "
                           f"routing does not match the plan")
    # two pieces' worth in place: the ranges' round trip through files cost a 125k-segment
    # shard a third more than one pass, and one range's SEGMENT records (44 bytes) plus a
    # piece being read hold less than the piece, its gathered copy and a range did before
    size = max(2 * ORDER_STEP, -(-n // _BUCKETS))
    buckets = [path] if n <= size else _split_by_position(path, n, size)
    ordered = path + ".ordered"
    with open(ordered, "wb") as out_f:
        for j, bucket in enumerate(buckets):
            a = j * size
            _in_order(bucket, a, min(size, n - a)).tofile(out_f)
            if bucket != path:
                os.remove(bucket)
    os.replace(ordered, path)


_BUCKETS = 256  # most files one shard's records are split into (open at once)


def _split_by_position(path: str, n: int, size: int) -> list[str]:
    """The routed records of `path` appended to one file per position range of `size`."""
    names = [f"{path}.range-{j:03d}" for j in range(-(-n // size))]
    outs = [open(p, "wb") for p in names]
    try:
        with open(path, "rb") as fh:
            for a in range(0, n, ORDER_STEP):
                rec = np.fromfile(fh, ROUTED, min(ORDER_STEP, n - a))
                order, cut = _by_range(rec["pos"], n, size, len(names))
                if order.size != rec.size:
                    raise RuntimeError(f"{path}: a routed position is outside the shard's {n} segments")
                rec = np.take(rec, order)  # not rec[order]: a structured fancy index copies field by field (5x)
                for k in np.flatnonzero(np.diff(cut)):
                    rec[cut[k]:cut[k + 1]].tofile(outs[k])
    finally:
        for f in outs:
            f.close()
    return names


@nb.njit(nogil=True, cache=True)
def _by_range(pos, n, size, ranges):
    """A counting sort of records by position range (`pos // size`), stable: the order and each
    range's first index (`ranges + 1` cuts). An empty order when a position is outside [0, n).
    Two passes over `pos` (an argsort of the ranges cost a third of put_in_order's time)."""
    cut = np.zeros(ranges + 1, np.int64)
    for p in pos:
        if p < 0 or p >= n:
            return np.zeros(0, np.int64), cut
        cut[p // size + 1] += 1
    for k in range(ranges):
        cut[k + 1] += cut[k]
    at = cut[:-1].copy()
    order = np.empty(pos.size, np.int64)
    for i in range(pos.size):
        k = pos[i] // size
        order[at[k]] = i
        at[k] += 1
    return order, cut


def _in_order(path: str, a: int, n: int) -> np.ndarray:
    """SEGMENT records of positions [a, a + n) from the ROUTED records in `path`, each exactly
    once: read `ORDER_STEP` records at a time, each copied straight to its place."""
    if os.path.getsize(path) != n * ROUTED.itemsize:
        raise RuntimeError(f"{path}: routed positions repeat or miss; the routing does not match the plan")
    out = np.empty((n, SEGMENT.itemsize), np.uint8)
    seen = np.zeros(n, np.bool_)
    with open(path, "rb") as fh:
        for s in range(0, n, ORDER_STEP):
            rec = np.fromfile(fh, ROUTED, min(ORDER_STEP, n - s))
            bad = _place(rec["pos"], rec.view(np.uint8).reshape(rec.size, ROUTED.itemsize), a, out, seen)
            if bad:  # n records, none twice: none is missing either
                said = "a routed position is outside the shard's segments" if bad == 1 else \
                    "routed positions repeat or miss"
                raise RuntimeError(f"{path}: {said}; the routing does not match the plan")
    return out.view(SEGMENT).reshape(n)


@nb.njit(nogil=True, cache=True)
def _place(pos, rec, a, out, seen):
    """Each record's bytes after `pos` (a SEGMENT record: held at import) to row `pos - a` of
    `out`. 0, or 1 for a position outside the rows, 2 for one that comes twice."""
    n, w = out.shape
    for i in range(pos.size):
        p = pos[i] - a
        if p < 0 or p >= n:
            return 1
        if seen[p]:
            return 2
        seen[p] = True
        for b in range(w):
            out[p, b] = rec[i, 8 + b]
    return 0


def read_segments(path: str, a: int, e: int) -> dict[str, np.ndarray]:
    """Segments [a, e) of an output shard (on-disk order) from its routed file: one
    contiguous array per `SEGMENT` field."""
    rec = np.fromfile(path, SEGMENT, e - a, offset=a * SEGMENT.itemsize)
    if rec.size != e - a:
        raise RuntimeError(f"{path}: segments {a}..{e - 1} asked, the file ends before")
    return {f: np.ascontiguousarray(rec[f]) for f in SEGMENT.names}
