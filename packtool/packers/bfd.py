"""Best-fit decreasing: items largest first, each into the fullest bin it still fits.

O(n log C) with a capacity-indexed structure, as in Ding et al., "Fewer Truncations
Improve Language Modeling" (ICML 2024): bins are bucketed by remaining capacity, and a
64-ary bitset over capacities 0..C finds the smallest remaining capacity >= s that some
bin has in O(log_64 C) word operations.

Ties between equally tight bins go to the bin that most recently reached that remaining
capacity (each bucket is a stack). Which tied bin is chosen never changes the bin count
(bins with equal remaining capacity are interchangeable for all later items), only labels.
When the capacity is far above the item count (C > max(2^22, 8n)), a capacity-indexed
array would cost more memory than the items; the same rule then runs on a sorted array of
(remaining, most recent first) with binary search and shifting inserts, O(n B) worst case
but only in that sparse regime.

A run of equal sizes is placed in batches: after one item of size s goes into the tightest
bin (remaining c), that bin (now c - s) is again the unique tightest fit while c - s >= s,
because no bin had a remaining capacity in [s, c).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._common import (bitset_clear, bitset_layout, bitset_next, bitset_set,
                      descending_order, max_bins_bound)


@njit(cache=True)
def _bfd_kernel(order, sizes, capacity, bits, offs, nwords, head, nxt, out):
    n = order.shape[0]
    nbins = 0
    i = 0
    while i < n:
        s = sizes[order[i]]
        j = i + 1
        while j < n and sizes[order[j]] == s:
            j += 1
        while i < j:
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
            if m > j - i:
                m = j - i
            for k in range(i, i + m):
                out[order[k]] = b
            i += m
            r = c - m * s
            if r > 0:
                nxt[b] = head[r]
                if head[r] < 0:
                    bitset_set(bits, offs, r)
                head[r] = b
    return nbins


@njit(cache=True)
def _bfd_sparse_kernel(order, sizes, capacity, maxbins, out):
    rems = np.empty(maxbins, np.int64)  # ascending; equal values: most recent first
    bins = np.empty(maxbins, np.int64)
    cnt = 0
    nbins = 0
    n = order.shape[0]
    i = 0
    while i < n:
        s = sizes[order[i]]
        j = i + 1
        while j < n and sizes[order[j]] == s:
            j += 1
        while i < j:
            a, z = 0, cnt  # first slot with rem >= s
            while a < z:
                mid = (a + z) >> 1
                if rems[mid] >= s:
                    z = mid
                else:
                    a = mid + 1
            if a == cnt:
                b = nbins
                nbins += 1
                c = capacity
            else:
                b = bins[a]
                c = rems[a]
                for k in range(a, cnt - 1):
                    rems[k] = rems[k + 1]
                    bins[k] = bins[k + 1]
                cnt -= 1
            m = c // s
            if m > j - i:
                m = j - i
            for k in range(i, i + m):
                out[order[k]] = b
            i += m
            r = c - m * s
            if r > 0:
                a, z = 0, cnt  # insert before every equal value: it is the most recent
                while a < z:
                    mid = (a + z) >> 1
                    if rems[mid] >= r:
                        z = mid
                    else:
                        a = mid + 1
                for k in range(cnt, a, -1):
                    rems[k] = rems[k - 1]
                    bins[k] = bins[k - 1]
                rems[a] = r
                bins[a] = b
                cnt += 1
    return nbins


def bfd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    maxbins = max_bins_bound(n, int(sizes.sum()), capacity)
    if capacity > max(1 << 22, 8 * n):
        _bfd_sparse_kernel(order, sizes, capacity, maxbins, out)
        return out
    bits, offs, nwords = bitset_layout(capacity + 1)
    head = np.full(capacity + 1, -1, np.int64)
    nxt = np.empty(maxbins, np.int64)
    _bfd_kernel(order, sizes, capacity, bits, offs, nwords, head, nxt, out)
    return out
