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

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .align import Alignment
from .packers import pack_items
from .plan import PackingConfig, Plan, plan_with


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
    out: dict = {}

    def pack_fn(fp: np.ndarray) -> np.ndarray:
        fit_bins, out["stats"] = _pack_fitting(fp, alignment.usable, packing.algorithm,
                                               shard_rows, underfull, map_fn)
        out["bins"] = int(fit_bins.max()) + 1 if fit_bins.size else 0
        return fit_bins

    p = plan_with(lengths, alignment, packing, pack_fn)
    stats = out.get("stats") or _pack_fitting(np.zeros(0, np.int64), alignment.usable,
                                              packing.algorithm, shard_rows, underfull, map_fn)[1]
    packed_bins = out.get("bins", 0) + int(p.singleton.sum())  # before any DP adjustment
    lb = p.lower_bound
    return ShardedPlan(plan=p, lower_bound=lb, extra_bins=packed_bins - lb, **stats)
