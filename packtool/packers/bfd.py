"""Best-fit decreasing: items largest first, each into the fullest bin it still fits.

O(n log C) with a capacity-indexed structure, as in Ding et al., "Fewer Truncations
Improve Language Modeling" (ICML 2024): bins are bucketed by remaining capacity, and a
64-ary bitset over capacities 0..C finds the smallest remaining capacity >= s that some
bin has in O(log_64 C) word operations.

Ties between equally tight bins go to the bin that most recently reached that remaining
capacity (each bucket is a stack). Which tied bin is chosen never changes the bin count
(bins with equal remaining capacity are interchangeable for all later items), only labels.
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


def bfd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    bits, offs, nwords = bitset_layout(capacity + 1)
    head = np.full(capacity + 1, -1, np.int64)
    nxt = np.empty(max_bins_bound(n, int(sizes.sum()), capacity), np.int64)
    _bfd_kernel(order, sizes, capacity, bits, offs, nwords, head, nxt, out)
    return out
