"""Per-bin steps of sharded planning (packtool.planning.sharded): the bounds from a footprint
histogram, and the DP assignment run on bins, fetching items only for the few donor bins.

Both give what `plan.plan` computes from every item (tested): `align.lower_bound` /
`align.l2_bound`, and `packers.dp.assign_dp`'s moves, costs, ranks and steps.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from packtool.align import Alignment
from packtool.packers.dp import bin_costs, move_to_multiple


def bounds_from_histogram(hist: np.ndarray, capacity: int) -> tuple[int, int]:
    """(ceil(sum / C), Martello-Toth L2) of the items counted by `hist` (hist[w] items of size
    w <= C): `align.martello_toth_l2`'s formula with counts and sums read off prefix sums."""
    C = int(capacity)
    hist = np.asarray(hist, np.int64)[:C + 1]
    if hist.sum() == 0:
        return 0, 0
    v = np.arange(hist.size, dtype=np.int64)
    ncum = np.cumsum(hist)          # items <= x
    scum = np.cumsum(hist * v)      # their total size
    n = int(ncum[-1])
    lower = int(-(-int(scum[-1]) // C))
    ks = np.concatenate(([0], np.flatnonzero((hist > 0) & (2 * v <= C))))
    ks = np.unique(ks)
    half = C // 2
    n_le_cmk, s_le_cmk = ncum[C - ks], scum[C - ks]
    n1 = n - n_le_cmk
    n2 = np.maximum(n_le_cmk - ncum[half], 0)
    s2 = s_le_cmk - scum[half]      # C - k >= C/2 for every k here
    s_lt_k = np.where(ks > 0, scum[np.maximum(ks - 1, 0)], 0)
    s3 = scum[half] - s_lt_k
    extra = np.maximum(0, -(-(s3 - (n2 * C - s2)) // C))
    return lower, int((n1 + n2 + extra).max())


def dp_moves(fp_b, len_b, cnt_b, cost_b, target: int, kept_base: np.ndarray, pool, pool_fp,
             pool_gid, fetch: Callable, alignment: Alignment):
    """`assign_dp` step 1 on bins: open bins up to `target`, each with the largest item of the
    heaviest bin holding two or more. Each move takes one bin, and a bin never touched keeps
    its load, so the donors are among the (target - bins) heaviest such bins: only their items
    are fetched (`fetch(shard, local bins) -> (item indices, Placement)`; merge bins are in the
    pool). Returns the per-bin arrays extended to `target`, the pool's bins and the moves of
    shard items as (shard, item index, new bin)."""
    n_bins = fp_b.size
    k = target - n_bins
    cand = np.flatnonzero(cnt_b >= 2)
    cand = np.sort(cand[np.lexsort((cand, -fp_b[cand]))][:k])
    K = int(kept_base[-1])
    src, chunk, length, gid, shard, idx = [], [], [], [], [], []
    for j in range(kept_base.size - 1):
        mine = cand[(cand >= kept_base[j]) & (cand < kept_base[j + 1])]
        if mine.size:
            i, pl = fetch(j, mine - kept_base[j])
            src.append(pl.source), chunk.append(pl.chunk), length.append(pl.length)
            gid.append(kept_base[j] + pl.bin), shard.append(np.full(i.size, j)), idx.append(i)
    in_pool = np.flatnonzero(np.isin(pool_gid, cand[cand >= K]))
    src.append(pool.source[in_pool]), chunk.append(pool.chunk[in_pool])
    length.append(pool.length[in_pool]), gid.append(pool_gid[in_pool])
    shard.append(np.full(in_pool.size, -1)), idx.append(in_pool)
    src, chunk, length, gid, shard, idx = (np.concatenate(a) for a in (src, chunk, length, gid, shard, idx))
    order = np.lexsort((chunk, src))  # input order: the tie-break assign_dp uses
    length, gid, shard, idx = length[order], gid[order], shard[order], idx[order]
    fp = alignment.seq_footprint(length)
    sub = np.searchsorted(cand, gid)
    move_to_multiple(sub, fp, cand.size, cand.size + k)
    moved = sub >= cand.size
    new_gid = np.where(moved, n_bins + sub - cand.size, gid)
    ext = lambda a, v: np.concatenate((a, np.zeros(k, a.dtype)))  # noqa: E731
    fp_b, len_b, cnt_b, cost_b = (ext(a, 0) for a in (fp_b, len_b, cnt_b, cost_b))
    np.subtract.at(fp_b, gid[moved], fp[moved])
    np.subtract.at(len_b, gid[moved], length[moved])
    np.subtract.at(cnt_b, gid[moved], 1)
    fp_b[new_gid[moved]], len_b[new_gid[moved]], cnt_b[new_gid[moved]] = fp[moved], length[moved], 1
    # costs re-summed over each touched bin's remaining items, in input order (as assign_dp)
    cost_b[cand] = bin_costs(np.searchsorted(cand, gid[~moved]), fp[~moved], length[~moved], cand.size)
    cost_b[new_gid[moved]] = bin_costs(new_gid[moved] - n_bins, fp[moved], length[moved], k)
    pool_new = pool_gid.copy()
    pm = moved & (shard < 0)
    pool_new[idx[pm]] = new_gid[pm]
    sm = moved & (shard >= 0)
    return (fp_b, len_b, cnt_b, cost_b, pool_new, shard[sm].astype(np.int64), idx[sm].astype(np.int64),
            new_gid[sm].astype(np.int64))
