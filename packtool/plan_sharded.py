"""Sharded planning: when one packer run over every length is too big for one process.

Split the items (after the overflow policy) into contiguous length shards, pack each shard on
its own (a Ray task each, or in-process), keep every bin that is at least `underfull` full,
and re-pack the items of the underfull bins (the shards' tails) together in one merge pass.
The packer's working set is then one shard or the merge pool, never the whole corpus.

The cost is a few extra bins: each shard's last bins are left partly empty where a global
packer would have topped them up with items from other shards. `ShardedPlan` reports the
bins against the global lower bound (and, when the caller computes it, the global plan).
The result is an ordinary `Plan` (DP assignment, seeded slab order and layout as `plan`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .align import Alignment
from .layout import compute_layout
from .packers import assign_dp, pack_items
from .plan import PackingConfig, Plan, _slab_order, apply_overflow


@dataclass(frozen=True)
class ShardedPlan:
    plan: Plan
    shards: int              # length shards packed independently
    kept_bins: int           # bins kept from the shard plans (at least `underfull` full)
    merged_items: int        # items re-packed in the merge pass
    merged_bins: int         # bins the merge pass opened
    peak_items: int          # most items one packer call held (a shard or the merge pool)
    lower_bound: int         # global: singletons + ceil(sum footprints / usable)
    extra_bins: int          # packed bins (before DP rounding) - lower_bound

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("shards", "kept_bins", "merged_items", "merged_bins",
                                              "peak_items", "lower_bound", "extra_bins")}


def pack_shard(fp: np.ndarray, usable: int, algorithm: str, underfull: float) -> tuple[np.ndarray, np.ndarray]:
    """One shard: (bin id per item, True where the item's bin is kept)."""
    b = pack_items(fp, usable, algorithm)
    load = np.bincount(b, weights=fp, minlength=int(b.max()) + 1 if b.size else 0)
    return b, (load >= underfull * usable)[b]


def _pack_fitting(fp: np.ndarray, usable: int, algorithm: str, shard_rows: int, underfull: float,
                  map_fn: Callable) -> tuple[np.ndarray, dict]:
    n = fp.size
    bounds = list(range(0, n, shard_rows)) + [n]
    ranges = list(zip(bounds[:-1], bounds[1:]))
    if len(ranges) <= 1:  # one shard: nothing to merge with, the global plan
        b = pack_items(fp, usable, algorithm) if n else np.zeros(0, np.int64)
        nb = int(b.max()) + 1 if n else 0
        return b, dict(shards=len(ranges), kept_bins=nb, merged_items=0, merged_bins=0, peak_items=n)
    results = map_fn(pack_shard, [(fp[a:e], usable, algorithm, underfull) for a, e in ranges])
    bin_of = np.empty(n, np.int64)
    pool = np.zeros(n, bool)
    n_bins = 0
    for (a, e), (b, keep) in zip(ranges, results):
        # renumber this shard's kept bins after the bins so far, in opening order
        kept_ids = np.unique(b[keep])
        new = np.full(int(b.max()) + 1, -1, np.int64)
        new[kept_ids] = n_bins + np.arange(kept_ids.size)
        bin_of[a:e] = new[b]
        pool[a:e] = ~keep
        n_bins += kept_ids.size
    kept = n_bins
    idx = np.flatnonzero(pool)
    if idx.size:
        mb = pack_items(fp[idx], usable, algorithm)
        bin_of[idx] = n_bins + mb
        n_bins += int(mb.max()) + 1
    return bin_of, dict(shards=len(ranges), kept_bins=kept, merged_items=int(idx.size),
                        merged_bins=n_bins - kept, peak_items=max(max(e - a for a, e in ranges), int(idx.size)))


def plan_sharded(lengths, alignment: Alignment, packing: PackingConfig | None = None,
                 shard_rows: int = 1 << 20, underfull: float = 0.98,
                 map_fn: Callable[[Callable, Iterable[tuple]], list] | None = None) -> ShardedPlan:
    """`plan.plan` with the packing done per length shard of `shard_rows` items plus one merge
    of the underfull bins. `map_fn(f, arg_tuples)` runs the shard packs (default: in order,
    here); the Ray engine passes one that runs them as Ray tasks."""
    packing = packing or PackingConfig()
    if shard_rows < 1:
        raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
    map_fn = map_fn or (lambda f, args: [f(*a) for a in args])
    t0 = time.perf_counter()
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    segs, ovf = apply_overflow(lengths, alignment, packing.overflow)
    fp = alignment.seq_footprint(segs.length)
    fits = ~segs.singleton
    bin_of = np.empty(segs.length.size, np.int64)
    fit_bins, stats = _pack_fitting(fp[fits], alignment.usable, packing.algorithm, shard_rows,
                                    underfull, map_fn)
    bin_of[fits] = fit_bins
    n_packed = int(fit_bins.max()) + 1 if fit_bins.size else 0
    bin_of[~fits] = n_packed + np.arange(int((~fits).sum()))
    # from here on exactly plan.plan after its pack_items call (tests compare with one shard)
    n_bins = int(bin_of.max()) + 1 if bin_of.size else 0
    packed_bins = n_bins
    rank = np.zeros(n_bins, np.int32)
    step = np.arange(n_bins, dtype=np.int32)
    imbalance, moved = 0.0, 0
    if packing.dp > 1:
        cap = max(alignment.usable, int(fp.max()))
        dpa = assign_dp(bin_of, fp, segs.length, cap, packing.dp)
        bin_of, rank, step = dpa.bin_of_item, dpa.rank, dpa.step
        imbalance, moved = float(dpa.imbalance), int(dpa.moved_items)
        n_bins = rank.size
    order_bins = _slab_order(rank, step, packing.seed, packing.dp > 1)
    new_id = np.empty(n_bins, np.int64)
    new_id[order_bins] = np.arange(n_bins)
    slab_of = new_id[bin_of]
    seg_order = np.argsort(slab_of, kind="stable")  # within a slab: input order
    counts = np.bincount(slab_of, minlength=n_bins)
    slab_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    seg_len = segs.length[seg_order]
    single = np.zeros(n_bins, bool)
    single[slab_of[~fits]] = True
    steps_sorted = step[order_bins]
    if packing.dp > 1:
        steps_sorted = np.cumsum(np.concatenate(([0], np.diff(steps_sorted) != 0)))
    lay = compute_layout(seg_len, slab_offsets, alignment)
    lb = alignment.lower_bound(segs.length)
    p = Plan(
        alignment=alignment, packing=packing, num_sequences=int(lengths.size),
        seg_source=segs.source[seg_order], seg_offset=segs.offset[seg_order], seg_len=seg_len,
        seg_chunk=segs.chunk[seg_order], slab_offsets=slab_offsets, singleton=single,
        slab_index=order_bins.astype(np.int64), dp_rank=rank[order_bins].astype(np.int32),
        step=np.asarray(steps_sorted, np.int32), microbatch=np.zeros(n_bins, np.int32),
        layout=lay, overflow=ovf, lower_bound=lb,
        l2_bound=alignment.l2_bound(segs.length), dp_imbalance=imbalance, dp_moved=moved,
        seconds=time.perf_counter() - t0)
    return ShardedPlan(plan=p, lower_bound=lb, extra_bins=packed_bins - lb, **stats)
