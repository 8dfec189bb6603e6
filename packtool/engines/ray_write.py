"""Write slabs on Ray Data: route every segment's tokens to its shard, then one task per shard
writes it with packtool's `SlabWriter`.

Slabs are shuffled, so any shard needs rows from anywhere in the cache. Instead of random
reads into a shared token store, the tokens move once through Ray Data's shuffle:
    read(cache row groups) -> map_batches(route): (shard, position, tokens) per segment
    -> groupby(shard).map_groups(write): sort by position, gather, write slabs-NNNNN.parquet
Shard boundaries are `writer._chunks(slab_len, shard_tokens)`, the local writer's, and each
shard's row groups are `_chunks(..., group_tokens)` inside it, so the files are the same bytes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.io.flat_tokens import FlatTokens
from packtool.io.writer import SCHEMA, ShardInfo, SlabWriter, _chunks, _list, write_shard_file
from packtool.plan import Plan

# Test hook, read on the driver when the write starts: a directory where the first attempt of
# every shard-write task leaves a marker and kills its worker process (os._exit); Ray's
# retry must finish the job.
FAIL_ONCE_ENV = "PACKTOOL_RAY_FAIL_ONCE_DIR"
WRITE_MAX_RETRIES = 3

_SRC = SCHEMA.get_field_index("source_index")
_OFF = SCHEMA.get_field_index("source_offset")


@dataclass(frozen=True)
class Routing:
    """Real segments sorted by (cache row, offset in the row): where each one's tokens go."""
    row: np.ndarray     # int64 cache row
    off: np.ndarray     # int64 first token in the row
    length: np.ndarray  # int64 tokens
    shard: np.ndarray   # int32 shard number
    pos: np.ndarray     # int64 index among the shard's real segments (on-disk order)


def shard_ranges(plan: Plan, shard_tokens: int) -> list[tuple[int, int]]:
    return _chunks(plan.layout.slab_len, shard_tokens)


def build_routing(plan: Plan, ranges: list[tuple[int, int]]) -> Routing:
    slab_of = np.repeat(np.arange(plan.num_slabs), np.diff(plan.slab_offsets))
    starts = np.asarray([s0 for s0, _ in ranges], np.int64)
    shard_of_slab = (np.searchsorted(starts, np.arange(plan.num_slabs), side="right") - 1).astype(np.int32)
    shard = shard_of_slab[slab_of]
    pos = np.arange(plan.seg_source.size, dtype=np.int64) - plan.slab_offsets[starts[shard]]
    order = np.lexsort((plan.seg_offset, plan.seg_source))
    return Routing(plan.seg_source[order], plan.seg_offset[order], plan.seg_len[order],
                   shard[order], pos[order])


def slice_plan(p: Plan, s0: int, s1: int) -> Plan:
    """Slabs [s0, s1) of a plan as a plan of their own (same per-slab values)."""
    lay = p.layout
    lo, hi = int(lay.seg_offsets[s0]), int(lay.seg_offsets[s1])
    rlo, rhi = int(p.slab_offsets[s0]), int(p.slab_offsets[s1])
    sub_lay = replace(lay, seg_offsets=lay.seg_offsets[s0:s1 + 1] - lo, seg_len=lay.seg_len[lo:hi],
                      seg_padded=lay.seg_padded[lo:hi], seg_start=lay.seg_start[lo:hi],
                      is_fill=lay.is_fill[lo:hi], footprint=lay.footprint[s0:s1],
                      layout_pad=lay.layout_pad[s0:s1], tail_pad=lay.tail_pad[s0:s1],
                      fill=lay.fill[s0:s1], slab_len=lay.slab_len[s0:s1])
    return replace(p, seg_source=p.seg_source[rlo:rhi], seg_offset=p.seg_offset[rlo:rhi],
                   seg_len=p.seg_len[rlo:rhi], seg_chunk=p.seg_chunk[rlo:rhi],
                   slab_offsets=p.slab_offsets[s0:s1 + 1] - rlo, singleton=p.singleton[s0:s1],
                   slab_index=p.slab_index[s0:s1], dp_rank=p.dp_rank[s0:s1], step=p.step[s0:s1],
                   microbatch=p.microbatch[s0:s1], layout=sub_lay)


class ShardSlabWriter(SlabWriter):
    """`SlabWriter` over a shard-local token store: row k of the store is exactly real
    segment k of the shard, so the gather runs on local ids; the provenance columns
    (source_index, source_offset) are put back to the plan's global values."""

    def __init__(self, sub: Plan, store: FlatTokens, pad_id: int):
        n = sub.seg_source.size
        local = replace(sub, seg_source=np.arange(n, dtype=np.int64), seg_offset=np.zeros(n, np.int64))
        super().__init__(local, store, pad_id)
        self.gsrc = np.full(self.real.size, -1, np.int64)
        self.gsrc[self.real] = sub.seg_source
        self.goff = np.zeros(self.real.size, np.int64)
        self.goff[self.real] = sub.seg_offset

    def batch(self, b0: int, b1: int) -> pa.RecordBatch:
        rb = super().batch(b0, b1)
        so = self.p.layout.seg_offsets
        lo, hi = int(so[b0]), int(so[b1])
        seg_off = (so[b0:b1 + 1] - lo).astype(np.int32)
        cols = list(rb.columns)
        cols[_SRC] = _list(self.gsrc[lo:hi], seg_off, pa.int64())
        cols[_OFF] = _list(self.goff[lo:hi], seg_off, pa.int64())
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


_GOT: dict = {}  # per worker process: object id -> value (the plan and routing are read once)


def _get(box):
    import ray
    key = box[0].hex()
    if key not in _GOT:
        while len(_GOT) >= 4:  # runs of earlier packs in a long-lived worker
            _GOT.pop(next(iter(_GOT)))
        _GOT[key] = ray.get(box[0])
    return _GOT[key]


def split_routing(r: Routing, starts: np.ndarray) -> list[Routing]:
    """The routing rows of each cache piece (pieces start at cache rows `starts`)."""
    cut = np.searchsorted(r.row, np.append(starts[1:], np.iinfo(np.int64).max))
    lo = np.concatenate(([0], cut[:-1]))
    return [Routing(*(getattr(r, f)[a:b] for f in ("row", "off", "length", "shard", "pos")))
            for a, b in zip(lo, cut)]


def _route(batch: pa.Table, r: Routing) -> pa.Table:
    cache_row = batch.column("cache_row").to_numpy()
    lo = np.searchsorted(r.row, cache_row, side="left")
    cnt = np.searchsorted(r.row, cache_row, side="right") - lo
    total = int(cnt.sum())
    seg = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt) + np.arange(total)
    row_local = np.repeat(np.arange(cache_row.size), cnt)
    ids, mask = batch.column("input_ids").combine_chunks(), batch.column("loss_mask").combine_chunks()
    offs = ids.offsets.to_numpy().astype(np.int64)
    lens = r.length[seg]
    if (r.off[seg] + lens > np.diff(offs)[row_local]).any():
        raise RuntimeError("ray engine: a planned segment runs past its cache row; the cache "
                           "does not match the plan (delete the cache and re-run)")
    out_off = np.concatenate(([0], np.cumsum(lens)))
    idx = np.repeat(offs[row_local] + r.off[seg] - out_off[:-1], lens) + np.arange(int(out_off[-1]))
    o = pa.array(out_off.astype(np.int32))
    return pa.table({
        "shard": pa.array(r.shard[seg], pa.int32()), "pos": pa.array(r.pos[seg], pa.int64()),
        "ids": pa.ListArray.from_arrays(o, pa.array(ids.values.to_numpy()[idx], pa.int32())),
        "mask": pa.ListArray.from_arrays(o, pa.array(mask.values.to_numpy()[idx], pa.uint8())),
    })


def route_block(batch: pa.Table, piece_starts: np.ndarray, routing_refs: list) -> pa.Table:
    """map_batches UDF: cache rows -> one output row per segment they feed. Each task fetches
    only the routing slice of its own cache piece."""
    piece = np.searchsorted(piece_starts, batch.column("cache_row").to_numpy(), side="right") - 1
    us = np.unique(piece)
    if us.size == 1:  # always, as read: one block per piece
        return _route(batch, _get([routing_refs[int(us[0])]]))
    return pa.concat_tables([_route(batch.filter(pa.array(piece == u)), _get([routing_refs[int(u)]]))
                             for u in us])


def _maybe_fail_once(k: int, d: str | None) -> None:
    if not d:
        return
    marker = os.path.join(d, f"shard-{k:05d}.killed")
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)


def write_group(group: pa.Table, plan_refs: list, ranges: list, out_dir: str, pad_id: int,
                group_tokens: int, fail_once_dir: str | None = None) -> pa.Table:
    """map_groups UDF: every segment of one shard -> slabs-NNNNN.parquet, as write_shards does."""
    k = int(group.column("shard")[0].as_py())
    _maybe_fail_once(k, fail_once_dir)
    s0, s1 = ranges[k]
    sub = _get([plan_refs[k]])  # this shard's slice of the plan, put by the driver
    group = group.take(pa.array(np.argsort(group.column("pos").to_numpy(), kind="stable")))
    if not np.array_equal(group.column("pos").to_numpy(), np.arange(sub.seg_source.size)):
        raise RuntimeError(f"ray engine: shard {k} got {group.num_rows} segments, "
                           f"expected {sub.seg_source.size}")
    ids, mask = group.column("ids").combine_chunks(), group.column("mask").combine_chunks()
    offs = ids.offsets.to_numpy().astype(np.int64)
    store = FlatTokens(np.ascontiguousarray(ids.values.to_numpy()[offs[0]:offs[-1]], np.int32),
                       np.ascontiguousarray(mask.values.to_numpy()[offs[0]:offs[-1]], np.uint8),
                       offs - offs[0])
    name = f"slabs-{k:05d}.parquet"
    info = write_shard_file(ShardSlabWriter(sub, store, pad_id), sub.layout.slab_len, 0,
                            os.path.join(out_dir, name), group_tokens)
    return pa.table({"shard": [k], "file": [info.file], "rows": [info.rows], "tokens": [info.tokens],
                     "loss_tokens": [info.loss_tokens], "bytes": [info.bytes], "sha256": [info.sha256]})


def cache_source(cache, groups_per_task: int = 8):
    """A Datasource over the tokenized cache: one read task per run of row groups, each row
    tagged with its cache row (what the plan's seg_source counts). `ray.data.read_parquet`
    would do the reading, but it does not give row positions, and its file listing costs
    ~30 s per call on this machine (Ray 2.60)."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    pieces, row = [], 0
    for path in cache.parquet_files:
        md = pq.ParquetFile(path).metadata
        for g0 in range(0, md.num_row_groups, groups_per_task):
            gs = list(range(g0, min(g0 + groups_per_task, md.num_row_groups)))
            pieces.append((path, gs, row))
            row += sum(md.row_group(g).num_rows for g in gs)

    def read(path, gs, first):
        t = pq.ParquetFile(path).read_row_groups(gs, columns=["input_ids", "loss_mask"])
        yield t.append_column("cache_row", pa.array(np.arange(first, first + t.num_rows, dtype=np.int64)))

    class TokenizedCacheSource(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(lambda p=p: read(*p), BlockMetadata(num_rows=None, size_bytes=None,
                                                                   exec_stats=None, input_files=[p[0]]))
                    for p in pieces]

        def get_name(self) -> str:
            return "TokenizedCache"

    src = TokenizedCacheSource()
    src.n_tasks = len(pieces)
    src.piece_starts = np.asarray([p[2] for p in pieces], np.int64)
    return src


def write_slabs(plan: Plan, cache, out_dir: str, pad_id: int,
                shard_tokens: int, group_tokens: int = 1 << 20) -> list[ShardInfo]:
    import ray
    import ray.data

    ranges = shard_ranges(plan, shard_tokens)
    source = cache_source(cache)
    # no task needs the whole plan: route tasks get their piece's routing rows, write tasks
    # their shard's slabs (one object each, fetched by the node that runs the task)
    routing_refs = [ray.put(r) for r in split_routing(build_routing(plan, ranges), source.piece_starts)]
    plan_refs = [ray.put(slice_plan(plan, s0, s1)) for s0, s1 in ranges]
    ds = (ray.data.read_datasource(source, override_num_blocks=source.n_tasks)
          .map_batches(route_block, batch_format="pyarrow", batch_size=None,
                       fn_kwargs={"piece_starts": source.piece_starts, "routing_refs": routing_refs})
          .groupby("shard")
          .map_groups(write_group, batch_format="pyarrow", max_retries=WRITE_MAX_RETRIES,
                      fn_kwargs={"plan_refs": plan_refs, "ranges": ranges, "out_dir": out_dir,
                                 "pad_id": pad_id, "group_tokens": group_tokens,
                                 "fail_once_dir": os.environ.get(FAIL_ONCE_ENV)}))
    t = pa.concat_tables([b for b in ray.get(ds.to_arrow_refs()) if b.num_columns]).sort_by("shard")
    if t.column("shard").to_pylist() != list(range(len(ranges))):
        raise RuntimeError(f"ray engine: wrote shards {t.column('shard').to_pylist()}, "
                           f"expected 0..{len(ranges) - 1}")
    return [ShardInfo(f, int(r), int(tk), int(ls), int(b), s) for f, r, tk, ls, b, s in
            zip(*(t.column(c).to_pylist() for c in ("file", "rows", "tokens", "loss_tokens", "bytes", "sha256")))]
