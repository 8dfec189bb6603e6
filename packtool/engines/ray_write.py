"""Write slabs on Ray Data: route every segment's tokens to its shard, then one task per shard
writes it with packtool's `SlabWriter`.

Slabs are shuffled, so any shard needs rows from anywhere in the cache. Instead of random
reads into a shared token store, the tokens move once through Ray Data's shuffle:
    read(cache row groups) -> map_batches(route): (shard, position, tokens) per segment
    -> groupby(shard).map_groups(write): sort by position, build the shard's sub-plan from
       its segments and the driver's per-slab values (plan_slabs.SlabSpec), write slabs-NNNNN.parquet
Shard boundaries are `shard_sizes.shard_ranges(slab_len, shard_tokens)`, the local writer's, and each
shard's row groups are `shard_sizes.group_ranges(..., group_tokens)` inside it, so the files are the same bytes.
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyarrow as pa

from packtool.engines.ray_env import remote, task_options
from packtool.errors import spelled_as, spelling_now
from packtool.planning.core import Plan
from packtool.planning.sharded import ShardedPlan, shard_routing
from packtool.planning.slabs import Routing, SlabSpec, routing_of_plan, spec_of_plan
from packtool.progress import bar
from packtool.slabs.format import ShardInfo
from packtool.slabs.names import shard_file
from packtool.storage import locate
from packtool.slabs.shard_sizes import GROUP_TOKENS, shard_ranges
from packtool.slabs.writer import ShardSlabWriter, write_shard_file
from packtool.tokenize.cache_parts import mask_values
from packtool.tokenize.cache_pieces import cache_pieces
from packtool.tokenize.flat_tokens import FlatTokens

# a write task whose worker dies (a node lost, OOM-killed) is run again; the test suite's
# fault injection (tests/engines/ray_faults.py) stands in for write_group to show it
WRITE_MAX_RETRIES = 3


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
    cut = np.searchsorted(r.source, np.append(starts[1:], np.iinfo(np.int64).max))
    lo = np.concatenate(([0], cut[:-1]))
    return [r.take(a, b) for a, b in zip(lo, cut)]


def _route(batch: pa.Table, r: Routing, side=()) -> pa.Table:
    cache_row = batch.column("cache_row").to_numpy()
    lo = np.searchsorted(r.source, cache_row, side="left")
    cnt = np.searchsorted(r.source, cache_row, side="right") - lo
    total = int(cnt.sum())
    seg = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt) + np.arange(total)
    row_local = np.repeat(np.arange(cache_row.size), cnt)
    ids = batch.column("input_ids").combine_chunks()
    mask = mask_values(ids, batch.column("loss_mask"))  # from ids' first value, null rows as ones
    offs = ids.offsets.to_numpy().astype(np.int64)
    lens = r.length[seg]
    if (r.offset[seg] + lens > np.diff(offs)[row_local]).any():
        raise RuntimeError("ray engine: a planned segment runs past its cache row; the cache "
                           "does not match the plan (delete the cache and re-run)")
    out_off = np.concatenate(([0], np.cumsum(lens)))
    idx = np.repeat(offs[row_local] + r.offset[seg] - out_off[:-1], lens) + np.arange(int(out_off[-1]))
    o = pa.array(out_off.astype(np.int32))
    side_cols = {}
    for k, c in enumerate(side):  # token-aligned like the ids: each token's `width` values
        col = batch.column(f"side{k}").combine_chunks()
        so = col.offsets.to_numpy().astype(np.int64)
        w = c.width
        vals = col.values.to_numpy()[so[0]:so[-1]]
        sidx = ((idx - offs[0])[:, None] * w + np.arange(w)).ravel()
        side_cols[f"side{k}"] = pa.ListArray.from_arrays(pa.array((out_off * w).astype(np.int32)), pa.array(vals[sidx]))
    return pa.table({
        "shard": pa.array(r.shard[seg], pa.int32()), "pos": pa.array(r.pos[seg], pa.int64()),
        "source": pa.array(r.source[seg], pa.int64()), "offset": pa.array(r.offset[seg], pa.int64()),
        "chunk": pa.array(r.chunk[seg], pa.int32()),
        "ids": pa.ListArray.from_arrays(o, pa.array(ids.values.to_numpy()[idx], pa.int32())),
        "mask": pa.ListArray.from_arrays(o, pa.array(mask[idx - offs[0]], pa.uint8())),
        **side_cols,
    })


def route_block(batch: pa.Table, piece_starts: np.ndarray, routing_refs: list, side=()) -> pa.Table:
    """map_batches UDF: cache rows -> one output row per segment they feed. Each task fetches
    only the routing rows of its own cache piece: a slice of the global plan's routing, or the
    routings of the plan shards that overlap the piece (each routes only its own rows)."""
    piece = np.searchsorted(piece_starts, batch.column("cache_row").to_numpy(), side="right") - 1
    parts = []
    for u in np.unique(piece):  # one piece per block, as read
        b = batch if piece[0] == piece[-1] else batch.filter(pa.array(piece == u))
        parts += [_route(b, _get([ref]), side) for ref in routing_refs[int(u)]]
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def write_group(group: pa.Table, spec_refs: list, out_dir: str | None, pad_id: int,
                group_tokens: int, side=(),
                dests: list[str] | None = None, lease=None, spelling: dict | None = None) -> pa.Table:
    """map_groups UDF: every segment of one shard -> slabs-NNNNN.parquet, as write_shards does.
    The shard's sub-plan is built here from its segments and the driver's per-slab values.
    Into the folder `out_dir`, or (`dests`: each shard's object URI and its proof's, named by
    the driver's store commit) written on this node's own scratch and uploaded from here, each
    put only while the run still holds `lease` (the commit's storage.lease.LeaseTicket).
    `spelling`: the caller's words for its arguments (errors.arg), so a refused put names -o / output."""
    k = int(group.column("shard")[0].as_py())
    spec: SlabSpec = _get([spec_refs[k]])
    group = group.take(pa.array(np.argsort(group.column("pos").to_numpy(), kind="stable")))
    n = int(spec.count.sum())
    if not np.array_equal(group.column("pos").to_numpy(), np.arange(n)):
        raise RuntimeError(f"ray engine: shard {k} got {group.num_rows} segments, expected {n}")
    ids, mask = group.column("ids").combine_chunks(), group.column("mask").combine_chunks()
    offs = ids.offsets.to_numpy().astype(np.int64)
    sub = spec.plan(group.column("source").to_numpy(), group.column("offset").to_numpy(), np.diff(offs),
                    group.column("chunk").to_numpy())
    side_values = []
    for j, c in enumerate(side):
        col = group.column(f"side{j}").combine_chunks()
        so = col.offsets.to_numpy().astype(np.int64)
        side_values.append(np.ascontiguousarray(col.values.to_numpy()[so[0]:so[-1]], c.np_dtype))
    store = FlatTokens.from_arrays(ids.values.to_numpy()[offs[0]:offs[-1]],
                                   mask.values.to_numpy()[offs[0]:offs[-1]], offs - offs[0], side, side_values)
    writer = ShardSlabWriter(sub, store, pad_id)
    if dests is None:
        info = write_shard_file(writer, sub.layout.slab_len, 0, os.path.join(out_dir, shard_file(k)), group_tokens)
    else:
        from packtool.output.store import scratch, upload_proven
        with scratch("shard") as d, spelled_as(spelling or {}):
            info = write_shard_file(writer, sub.layout.slab_len, 0, os.path.join(d, shard_file(k)), group_tokens)
            dest = locate(dests[k][0], name="output")
            upload_proven(os.path.join(d, info.file), *dests[k], info, lease)
        info = replace(info, file=dest.name)
    return pa.table({"shard": [k], "file": [info.file], "rows": [info.rows], "tokens": [info.tokens],
                     "loss_tokens": [info.loss_tokens], "bytes": [info.bytes], "xxh3_128": [info.xxh3_128],
                     "max_token_id": [info.max_token_id]})



def cache_source(cache, groups_per_task: int = 8):
    """A Datasource over the tokenized cache: one read task per run of row groups, each row
    tagged with its cache row (what the plan's segments.source counts). `ray.data.read_parquet`
    would do the reading, but it does not give row positions, and its file listing costs
    ~30 s per call on this machine (Ray 2.60)."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    pieces = [p[:3] for p in cache_pieces(cache, groups_per_task)]

    def read(path, gs, first):
        t = cache.token_lists(path, gs, first)  # from flat/ when only it holds them
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


def _sharded_routing_refs(sp: ShardedPlan, ranges: list, piece_starts: np.ndarray) -> list:
    """Per cache piece, the routing of the plan shard that holds its rows: one task per plan
    shard turns its placement (in the object store) into routing rows, on a worker."""
    rf = remote(shard_routing)
    refs = [rf.remote(h, *a) for h, a in zip(sp.handles, sp.routing_args(ranges))]
    first = np.asarray(sp.first_rows, np.int64)
    lo = np.searchsorted(first, piece_starts, side="right") - 1
    hi = np.searchsorted(first, np.append(piece_starts[1:], sp.num_sequences), side="left")
    return [refs[a:max(b, a + 1)] for a, b in zip(lo, hi)]


def write_slabs(plan: Plan | ShardedPlan, cache, out_dir, pad_id: int,
                shard_tokens: int, group_tokens: int = GROUP_TOKENS, progress: bool = False) -> list[ShardInfo]:
    """Write a global `Plan` or a `ShardedPlan` (whose segments never reach the driver);
    `progress`: packtool's own bar, a step per shard written. `out_dir`: a folder, or an
    `output.store.StoreCommit` (an object-store output): the write tasks then upload each
    shard under the name the commit gives, and no shard passes through the driver."""
    import ray
    import ray.data

    source = cache_source(cache)
    # no task needs the whole plan: route tasks get their piece's routing rows, write tasks
    # their shard's per-slab values (one object each, fetched by the node that runs the task)
    if isinstance(plan, ShardedPlan):
        ranges = shard_ranges(plan.slab_len(), shard_tokens)
        routing_refs = _sharded_routing_refs(plan, ranges, source.piece_starts)
        spec_refs = [ray.put(plan.spec(s0, s1)) for s0, s1 in ranges]
    else:
        ranges = shard_ranges(plan.layout.slab_len, shard_tokens)
        routing = routing_of_plan(plan, ranges)
        routing_refs = [[ray.put(r)] for r in split_routing(routing, source.piece_starts)]
        del routing
        spec_refs = [ray.put(spec_of_plan(plan, s0, s1)) for s0, s1 in ranges]
    dests = lease = None
    if not isinstance(out_dir, str):  # a StoreCommit: the intent names every shard first
        commit, out_dir = out_dir, None
        dests = commit.task_dests([shard_file(k) for k in range(len(ranges))])  # (shard, its proof) URIs
        lease = commit.ticket()  # each task asks it before its puts, as the local engine's uploads do
    env = task_options()
    ds = (ray.data.read_datasource(source, override_num_blocks=source.n_tasks, **env)
          .map_batches(route_block, batch_format="pyarrow", batch_size=None,
                       fn_kwargs={"piece_starts": source.piece_starts, "routing_refs": routing_refs,
                                  "side": tuple(cache.side_columns)}, **env)
          .groupby("shard")
          .map_groups(write_group, batch_format="pyarrow", max_retries=WRITE_MAX_RETRIES,
                      fn_kwargs={"spec_refs": spec_refs, "out_dir": out_dir,
                                 "pad_id": pad_id, "group_tokens": group_tokens,
                                 "side": tuple(cache.side_columns), "dests": dests, "lease": lease,
                                 "spelling": spelling_now()}, **env))
    got = []
    with bar("Writing (Ray)", len(ranges), "shards", progress) as advance:
        for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):  # one row per shard written
            if b.num_columns and b.num_rows:
                got.append(pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b)
                advance(b.num_rows)
    t = pa.concat_tables(got).sort_by("shard")
    if t.column("shard").to_pylist() != list(range(len(ranges))):
        raise RuntimeError(f"ray engine: wrote shards {t.column('shard').to_pylist()}, "
                           f"expected 0..{len(ranges) - 1}")
    return [ShardInfo(f, int(r), int(tk), int(ls), int(b), s, int(mx)) for f, r, tk, ls, b, s, mx in
            zip(*(t.column(c).to_pylist() for c in ("file", "rows", "tokens", "loss_tokens", "bytes", "xxh3_128",
                                                      "max_token_id")))]
