"""Best-fit decreasing: items largest first, each into the fullest bin it still fits.

O(n + C + R log_64 C) for R logged runs, with a capacity-indexed structure as in Ding et
al., "Fewer Truncations Improve Language Modeling" (ICML 2024): bins are bucketed by
remaining capacity, and a 64-ary bitset over capacities 0..C finds the smallest remaining
capacity >= s that some bin has in a few word operations.

Ties between equally tight bins go to the bin that most recently reached that remaining
capacity (each bucket is a stack). Which tied bin is chosen never changes the bin count
(bins with equal remaining capacity are interchangeable for all later items), only labels.
Equal sizes are placed in batches: after one item of size s goes into the tightest bin
(remaining c), that bin (now c - s) is again the unique tightest fit while c - s >= s,
because no bin had a remaining capacity in [s, c). Ties between equal items: input index.

When the capacity is far above the item count (C > max(2^22, 8n)), a capacity-indexed
array would cost more memory than the items; the same rule then runs on a sorted array of
(remaining, most recent first) with binary search and shifting inserts, O(n B) worst case
but only in that sparse regime.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from packtool.packers._common import (
    RunLog,
    add_run,
    assign_runs,
    bitset_clear,
    bitset_layout,
    bitset_next,
    bitset_set,
    dense_capacity,
    max_bins_bound,
    size_table,
)


@njit(cache=True)
def _bfd_kernel(val, cnt, capacity, bits, offs, nwords, head, nxt,
                rbin, rcnt, rnxt, rhead, rtail):
    nbins = 0
    nr = 0
    for key in range(val.shape[0] - 1, -1, -1):
        k = cnt[key]
        s = val[key]
        while k > 0:
            c = bitset_next(bits, offs, nwords, s)
            if c < 0:  # nothing fits: open a bin
                b = nbins
                nbins += 1
                c = capacity
            else:
                b = head[c]
                head[c] = nxt[b]
                if head[c] < 0:
                    bitset_clear(bits, offs, c)
            m = c // s
            if m > k:
                m = k
            nr = add_run(key, b, m, rbin, rcnt, rnxt, rhead, rtail, nr)
            k -= m
            r = c - m * s
            if r > 0:
                nxt[b] = head[r]
                if head[r] < 0:
                    bitset_set(bits, offs, r)
                head[r] = b
    return nbins


@njit(cache=True)
def _bfd_sparse_kernel(val, cnt, capacity, maxbins, rbin, rcnt, rnxt, rhead, rtail):
    rems = np.empty(maxbins, np.int64)  # ascending; equal values: most recent first
    bins = np.empty(maxbins, np.int64)
    n_open = 0
    nbins = 0
    nr = 0
    for key in range(val.shape[0] - 1, -1, -1):
        k = cnt[key]
        s = val[key]
        while k > 0:
            a, z = 0, n_open  # first slot with rem >= s
            while a < z:
                mid = (a + z) >> 1
                if rems[mid] >= s:
                    z = mid
                else:
                    a = mid + 1
            if a == n_open:
                b = nbins
                nbins += 1
                c = capacity
            else:
                b = bins[a]
                c = rems[a]
                for j in range(a, n_open - 1):
                    rems[j] = rems[j + 1]
                    bins[j] = bins[j + 1]
                n_open -= 1
            m = c // s
            if m > k:
                m = k
            nr = add_run(key, b, m, rbin, rcnt, rnxt, rhead, rtail, nr)
            k -= m
            r = c - m * s
            if r > 0:
                a, z = 0, n_open  # insert before every equal value: it is the most recent
                while a < z:
                    mid = (a + z) >> 1
                    if rems[mid] >= r:
                        z = mid
                    else:
                        a = mid + 1
                for j in range(n_open, a, -1):
                    rems[j] = rems[j - 1]
                    bins[j] = bins[j - 1]
                rems[a] = r
                bins[a] = b
                n_open += 1
    return nbins


def bfd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    keys, val, cnt = size_table(sizes, capacity)
    maxbins = max_bins_bound(n, int(sizes.sum()), capacity)
    log = RunLog(n, val.shape[0])
    if dense_capacity(capacity, n):
        bits, offs, nwords = bitset_layout(capacity + 1)
        head = np.full(capacity + 1, -1, np.int64)
        nxt = np.empty(maxbins, np.int64)
        _bfd_kernel(val, cnt, capacity, bits, offs, nwords, head, nxt, *log.arrays())
    else:
        _bfd_sparse_kernel(val, cnt, capacity, maxbins, *log.arrays())
    assign_runs(keys, log.bin, log.cnt, log.nxt, log.head, out)
    return out
