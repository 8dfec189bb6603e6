"""Sharded planning: plan a corpus without holding a per-sequence array on the driver.

The input rows are cut into shards (contiguous runs of rows). A task per shard (a Ray task
under the Ray engine) reads its lengths, applies the overflow policy, packs, keeps every bin
at least `underfull` full and returns to the driver only per-bin figures plus the items of
its underfull bins (the merge pool). Each item's placement (row, chunk, offset, length, bin)
stays with the shard as a `Placement` (a Ray object; in-process for the library call). The
driver re-packs the pool in one merge pass, then does the DP assignment and the seeded slab
order over bins, so it holds O(bins + pool), never O(rows). At write time each shard turns its
placement into `Routing` rows (`shard_routing`: output shard and position of every item) and
each output shard rebuilds its own sub-plan (`plan_slabs.SlabSpec.plan`).

The cost is a few extra bins: each shard's tail is packed without the other shards' items
where a global packer would top it up. `ShardStats` reports the bins against the global lower
bound. With one shard the result is exactly `plan.plan` (tested).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from packtool.align import Alignment
from packtool.integers import int_array, int_value
from packtool.packers import pack_items
from packtool.packers.dp import bin_costs, deal_steps, dp_target
from packtool.planning.bins import bounds_from_histogram, dp_moves
from packtool.planning.bounds import check_capacity
from packtool.planning.core import SEGMENT_FIELDS, OverflowStats, PackingConfig, Plan, apply_overflow, slab_order
from packtool.planning.core import PlanError, SequenceError, planning_seconds
from packtool.progress import compile_seconds, kernel_seconds
from packtool.planning.slabs import Routing, SlabSpec, routing_pieces, segment_base, shard_of_slab
from packtool.planning.summary import PaddingStats, PlanSummary


@dataclass(frozen=True)
class Placement:
    """Items of one shard after the overflow policy, in input order (row, then chunk)."""
    source: np.ndarray  # int64 row
    offset: np.ndarray  # int64 first token in the row
    length: np.ndarray  # int64 real tokens
    chunk: np.ndarray   # int32
    bin: np.ndarray     # int64 local bin: packed 0..K-1, singletons K.., -1 = merge pool

    def take(self, idx: np.ndarray) -> "Placement":
        return Placement(self.source[idx], self.offset[idx], self.length[idx], self.chunk[idx],
                         self.bin[idx])

    @property
    def size(self) -> int:
        return int(self.bin.size)

    def piece(self, a: int, e: int) -> "Placement":
        return Placement(self.source[a:e], self.offset[a:e], self.length[a:e], self.chunk[a:e], self.bin[a:e])


@dataclass(frozen=True)
class ShardSummary:
    """What one shard task sends to the driver: per local bin, the pool, the bounds' input."""
    rows: int             # input rows of the shard
    items: int            # segments after the overflow policy
    n_kept: int           # local bins 0..n_kept-1 are packed bins, the rest singletons
    bin_fp: np.ndarray    # int64 sum of segment footprints
    bin_len: np.ndarray   # int64 real tokens
    bin_count: np.ndarray  # int64 segments
    bin_cost: np.ndarray  # float64 DP compute cost (empty without --dp)
    pool: Placement       # items of the underfull bins, input order
    fp_hist: np.ndarray   # int64[U+1]: footprints of the items that fit
    overflow: OverflowStats


def pack_shard(lengths, first_row: int, alignment: Alignment, packing: PackingConfig,
               underfull: float) -> tuple[ShardSummary, Placement]:
    """One shard. `lengths`: an int array, or a zero-argument callable that reads it where the
    task runs (so the driver never holds it)."""
    if not isinstance(lengths, np.ndarray):
        lengths = lengths()
    segs, ovf = apply_overflow(lengths, alignment, packing.overflow, first_row)
    U = alignment.usable
    fp = alignment.seq_footprint(segs.length)
    fits = ~segs.singleton
    b = np.full(fp.size, -1, np.int64)
    n_kept = 0
    if fits.any():
        pb = pack_items(fp[fits], U, packing.algorithm)
        load = np.bincount(pb, weights=fp[fits])
        keep = load >= underfull * U
        n_kept = int(keep.sum())
        new = np.full(load.size, -1, np.int64)
        new[keep] = np.arange(n_kept)  # kept bins keep their opening order
        b[fits] = new[pb]
    b[~fits] = n_kept + np.arange(int((~fits).sum()))
    nb = n_kept + int((~fits).sum())
    placed = b >= 0
    pb, pfp, plen = b[placed], fp[placed], segs.length[placed]
    summary = ShardSummary(
        rows=int(lengths.size), items=int(fp.size), n_kept=n_kept,
        bin_fp=np.bincount(pb, weights=pfp, minlength=nb).astype(np.int64),
        bin_len=np.bincount(pb, weights=plen, minlength=nb).astype(np.int64),
        bin_count=np.bincount(pb, minlength=nb).astype(np.int64),
        bin_cost=bin_costs(pb, pfp, plen, nb) if packing.dp > 1 else np.zeros(0),
        pool=None, fp_hist=np.bincount(fp[fits], minlength=U + 1).astype(np.int64), overflow=ovf)
    pl = Placement(segs.source, segs.offset, segs.length, segs.chunk, b)
    return replace(summary, pool=pl.take(np.flatnonzero(b < 0))), pl


def bin_items(pl: Placement, local_bins: np.ndarray) -> tuple[np.ndarray, Placement]:
    """Indices and items of the given local bins (input order): the DP step's donors."""
    idx = np.flatnonzero(np.isin(pl.bin, local_bins))
    return idx, pl.take(idx)


def shard_routing(pl: Placement, bin_shard: np.ndarray, bin_base: np.ndarray,
                  pool_shard: np.ndarray, pool_pos: np.ndarray, moved_idx: np.ndarray,
                  moved_shard: np.ndarray, moved_pos: np.ndarray) -> Routing:
    """Output shard and position of every item of a shard, in one piece (`routing_pieces`)."""
    return next(routing_pieces(pl, bin_shard, bin_base, pool_shard, pool_pos, moved_idx, moved_shard,
                               moved_pos, pl.size))


class LocalRunner:
    """Shard tasks in this process; placements stay here (the library call, tests).
    `map` yields (summary, placement handle) per task, in order."""

    def map(self, f: Callable, args: list[tuple]):
        return (f(*a) for a in args)

    def call(self, f: Callable, handle: Any, *args):
        return f(handle, *args)

    def get(self, handle: Any):
        return handle


@dataclass(frozen=True)
class ShardStats:
    shards: int              # length shards packed independently
    kept_bins: int           # bins kept from the shard plans (at least `underfull` full)
    merged_items: int        # items re-packed in the merge pass
    merged_bins: int         # bins the merge pass opened
    peak_items: int          # most items one packer call held (a shard or the merge pool)
    lower_bound: int         # global: singletons + ceil(sum footprints / usable)
    extra_bins: int          # packed bins (before DP rounding) - lower_bound

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class ShardedPlan:
    """The driver's side of a sharded plan: per slab (on-disk order) and per bin only."""
    alignment: Alignment
    packing: PackingConfig
    num_sequences: int
    num_segments: int
    count: np.ndarray       # int64 real segments per slab
    fp_sum: np.ndarray      # int64 sum of segment footprints per slab
    real: np.ndarray        # int64 real tokens per slab
    singleton: np.ndarray   # bool per slab
    slab_index: np.ndarray  # int64 per slab: bin id before the seeded shuffle
    dp_rank: np.ndarray     # int32 per slab
    step: np.ndarray        # int32 per slab
    handles: list           # per shard: its Placement (or a Ray reference to it)
    first_rows: np.ndarray  # int64 per shard: its first input row
    local_slab: list        # per shard: int64 slab of each local bin
    pool_shard_items: np.ndarray  # int64 per shard: how many pool items it holds
    pool_slab: np.ndarray   # int64 slab of each merge-pool item (pool in input order)
    moved: tuple            # DP moves of packed items: (shard, item index, slab) int64 arrays
    overflow: OverflowStats
    lower_bound: int
    l2_bound: int
    dp_imbalance: float
    dp_moved: int
    stats: ShardStats
    seconds: float = field(compare=False)  # planning only: kernel compiles are apart
    compile_seconds: float = field(default=0.0, compare=False)
    load_seconds: float = field(default=0.0, compare=False)

    @property
    def num_slabs(self) -> int:
        return int(self.count.size)

    def slab_len(self) -> np.ndarray:
        fp = self.alignment.bin_footprint(self.fp_sum)
        fl = self.alignment.fixed_length
        return np.maximum(fp, fl) if fl is not None else fp

    def spec(self, s0: int, s1: int) -> SlabSpec:
        return SlabSpec(self.alignment, self.packing, self.count[s0:s1], self.singleton[s0:s1],
                        self.slab_index[s0:s1], self.dp_rank[s0:s1], self.step[s0:s1],
                        self.num_sequences, self.overflow, self.lower_bound, self.l2_bound,
                        self.dp_imbalance, self.dp_moved)

    def routing_args(self, ranges: list[tuple[int, int]]) -> list[tuple]:
        """Per shard, `shard_routing`'s arguments after the placement (all per bin or pool)."""
        shard, starts = shard_of_slab(ranges, self.num_slabs)
        base = segment_base(self.count, shard, starts)
        # pool items: rank inside their slab in input order (merge slabs hold pool items only)
        ps = self.pool_slab
        order = np.argsort(ps, kind="stable")
        first = np.concatenate(([0], np.flatnonzero(np.diff(ps[order])) + 1)) if ps.size else order
        rank = np.empty(ps.size, np.int64)
        rank[order] = np.arange(ps.size) - np.repeat(first, np.diff(np.append(first, ps.size)))
        pool_pos = base[ps] + rank
        cut = np.concatenate(([0], np.cumsum(self.pool_shard_items)))
        m_shard, m_idx, m_slab = self.moved
        out = []
        for j, ls in enumerate(self.local_slab):
            a, e = cut[j], cut[j + 1]
            m = m_shard == j
            out.append((shard[ls], base[ls], shard[ps[a:e]], pool_pos[a:e], m_idx[m],
                        shard[m_slab[m]], base[m_slab[m]]))
        return out

    def materialize(self, runner=None) -> Plan:
        """The whole `Plan` in one process (tests, small inputs): every segment routed to one
        shard holding every slab."""
        runner = runner or LocalRunner()
        routes = [runner.call(shard_routing, h, *a)
                  for h, a in zip(self.handles, self.routing_args([(0, self.num_slabs)]))]
        cols = {f: np.concatenate([getattr(r, f) for r in routes]) for f in (*SEGMENT_FIELDS, "pos")}
        out = {}
        for f, v in cols.items():
            out[f] = np.empty_like(v)
            out[f][cols["pos"]] = v
        p = self.spec(0, self.num_slabs).plan(*(out[f] for f in SEGMENT_FIELDS))
        return replace(p, seconds=self.seconds, compile_seconds=self.compile_seconds,
                       load_seconds=self.load_seconds)

    def summary(self) -> PlanSummary:
        """`report.plan_summary`'s figures, from the per-slab arrays."""
        a = self.alignment
        slab_len = self.slab_len()
        fp = a.bin_footprint(self.fp_sum)
        phys = int(slab_len.sum())
        real = int(self.real.sum())
        pad = PaddingStats(
            slabs=self.num_slabs, real_tokens=real, physical_tokens=phys,
            layout_pad=int((self.fp_sum - self.real).sum()), tail_pad=int((fp - self.fp_sum).sum()),
            fill_pad=int((slab_len - fp).sum()),
            slack=int(np.maximum(a.usable - slab_len[~self.singleton], 0).sum()),
            singleton_slabs=int(self.singleton.sum()), efficiency=real / phys if phys else 1.0)
        return PlanSummary(
            alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                           fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t,
                           usable=a.usable),
            packing=asdict(self.packing), sequences=self.num_sequences, segments=self.num_segments,
            slabs=self.num_slabs, lower_bound=self.lower_bound, l2_bound=self.l2_bound,
            excess_over_bound=self.num_slabs - max(self.lower_bound, self.l2_bound), padding=pad,
            overflow=self.overflow, dp_imbalance=self.dp_imbalance, dp_moved=self.dp_moved,
            plan_seconds=self.seconds, compile_seconds=self.compile_seconds,
            load_seconds=self.load_seconds)


def _sum_overflow(stats: list[OverflowStats], policy: str) -> OverflowStats:
    keys = ("sequences", "chunks", "targets_lost", "tokens_dropped", "singletons")
    return OverflowStats(policy, **{k: sum(getattr(s, k) for s in stats) for k in keys})


@dataclass
class _Bins:
    """Every bin's figures, numbered as `plan()` numbers them: packed bins (each shard's kept
    bins, then the merge bins), then the singletons in input order."""
    fp: np.ndarray
    length: np.ndarray
    count: np.ndarray
    cost: np.ndarray      # empty without --dp
    gid: list             # per shard: bin id of each local bin
    kept_base: np.ndarray  # per shard: id of its first kept bin (K at the end)
    merged: int           # merge bins, ids K..K+merged-1
    singletons: int       # ids K+merged.. (before any DP bins)
    pool: Placement
    pool_fp: np.ndarray
    pool_gid: np.ndarray  # bin of each pool item


def _merge(sums: list[ShardSummary], alignment: Alignment, packing: PackingConfig) -> _Bins:
    """The shards' bins plus one merge pass over their underfull bins' items."""
    n_kept = np.asarray([s.n_kept for s in sums], np.int64)
    n_single = np.asarray([s.bin_fp.size - s.n_kept for s in sums], np.int64)
    K = int(n_kept.sum())
    pool = Placement(*(np.concatenate([getattr(s.pool, f) for s in sums]) for f in
                       ("source", "offset", "length", "chunk", "bin")))
    pool_fp = alignment.seq_footprint(pool.length)
    mb = pack_items(pool_fp, alignment.usable, packing.algorithm) if pool_fp.size else np.zeros(0, np.int64)
    M = int(mb.max()) + 1 if mb.size else 0
    kept_base = np.concatenate(([0], np.cumsum(n_kept)))
    single_base = K + M + np.concatenate(([0], np.cumsum(n_single)))
    gid = [np.concatenate((kept_base[j] + np.arange(s.n_kept), single_base[j] + np.arange(n_single[j])))
           for j, s in enumerate(sums)]
    n = int(single_base[-1])
    fp, length, count = (np.zeros(n, np.int64) for _ in range(3))
    cost = np.zeros(n if packing.dp > 1 else 0)
    for g, s in zip(gid, sums):
        fp[g], length[g], count[g] = s.bin_fp, s.bin_len, s.bin_count
        if cost.size:
            cost[g] = s.bin_cost
    fp[K:K + M] = np.bincount(mb, weights=pool_fp, minlength=M)
    length[K:K + M] = np.bincount(mb, weights=pool.length, minlength=M)
    count[K:K + M] = np.bincount(mb, minlength=M)
    if cost.size:
        cost[K:K + M] = bin_costs(mb, pool_fp, pool.length, M)
    return _Bins(fp, length, count, cost, gid, kept_base, M, int(n_single.sum()), pool, pool_fp, K + mb)


def plan_shards(shards: Sequence[tuple[int, Any]], alignment: Alignment,
                packing: PackingConfig | None = None, underfull: float = 0.98,
                runner=None) -> ShardedPlan:
    """Plan shards given as (first row, lengths) in row order; lengths are an int array or a
    zero-argument callable run by the shard task. `runner` runs the shard tasks (default: here;
    the Ray engine's runs them as Ray tasks and keeps the placements in the object store)."""
    t0, c0 = time.perf_counter(), (compile_seconds(), kernel_seconds())
    packing = packing or PackingConfig()
    runner = runner or LocalRunner()
    check_capacity(alignment, sharded=True)  # before the capacity-indexed histogram
    if len(shards) == 1:
        underfull = 0.0  # nothing to merge with: the global plan
    sums, handles = [], []
    hist = np.zeros(alignment.usable + 1, np.int64)
    for s, h in runner.map(pack_shard, [(ln, r0, alignment, packing, underfull) for r0, ln in shards]):
        hist += s.fp_hist  # summed as they come: one histogram held, not one per shard
        sums.append(replace(s, fp_hist=None))
        handles.append(h)
    b = _merge(sums, alignment, packing)
    K, M, S = int(b.kept_base[-1]), b.merged, b.singletons
    n_rows, n_items = sum(s.rows for s in sums), sum(s.items for s in sums)
    pool_items = np.asarray([s.pool.length.size for s in sums], np.int64)
    overflow = _sum_overflow([s.overflow for s in sums], packing.overflow)
    lower, l2 = bounds_from_histogram(hist, alignment.usable)
    stats = ShardStats(len(shards), K, int(b.pool_fp.size), M,
                       max([s.items for s in sums] + [int(b.pool_fp.size)]), S + lower, K + M - lower)
    del sums  # their per-bin arrays are in `b` now
    n_bins = b.fp.size
    pool_gid, moved = b.pool_gid, (np.zeros(0, np.int64),) * 3
    rank, step = np.zeros(n_bins, np.int32), np.arange(n_bins, dtype=np.int32)
    imbalance, n_moved = 0.0, 0
    if packing.dp > 1:
        target = dp_target(n_items, n_bins, packing.dp)
        if target > n_bins:
            b.fp, b.length, b.count, b.cost, pool_gid, *moved = dp_moves(
                b.fp, b.length, b.count, b.cost, target, b.kept_base, b.pool, b.pool_fp, b.pool_gid,
                lambda j, local: runner.call(bin_items, handles[j], local), alignment)
            n_moved, n_bins = target - n_bins, target
        rank, step, ratio = deal_steps(b.cost, packing.dp)
        imbalance = float(ratio.mean())
    order, steps = slab_order(rank, step, packing)
    new_id = np.empty(n_bins, np.int64)
    new_id[order] = np.arange(n_bins)
    single = np.zeros(n_bins, bool)
    single[K + M:K + M + S] = True
    return ShardedPlan(
        alignment=alignment, packing=packing, num_sequences=n_rows,
        num_segments=n_items, count=b.count[order], fp_sum=b.fp[order], real=b.length[order],
        singleton=single[order], slab_index=order.astype(np.int64),
        dp_rank=rank[order].astype(np.int32), step=np.asarray(steps, np.int32), handles=handles,
        first_rows=np.asarray([r0 for r0, _ in shards], np.int64),
        local_slab=[new_id[g] for g in b.gid],
        pool_shard_items=pool_items,
        pool_slab=new_id[pool_gid], moved=(moved[0], moved[1], new_id[moved[2]]),
        overflow=overflow,
        lower_bound=S + lower, l2_bound=S + l2, dp_imbalance=imbalance, dp_moved=n_moved,
        stats=stats, **planning_seconds(t0, c0))


def plan_sharded(lengths, alignment: Alignment, packing: PackingConfig | None = None,
                 shard_rows: int = 1 << 20, underfull: float = 0.98, runner=None) -> ShardedPlan:
    """`plan_shards` over an in-memory lengths array cut into shards of `shard_rows` rows."""
    shard_rows = int_value("shard_rows", shard_rows, 1, error=PlanError)
    lengths = int_array(lengths, "lengths", PlanError, at=SequenceError, minimum=1)  # as plan(): no float cast
    starts = range(0, max(lengths.size, 1), shard_rows)
    return plan_shards([(a, lengths[a:a + shard_rows]) for a in starts], alignment, packing,
                       underfull, runner)
