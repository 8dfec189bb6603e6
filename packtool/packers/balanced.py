"""Balanced: items largest first, each into the least-loaded open bin if it fits there,
else into a new bin. Loads come out even (an LPT-like rule), at some cost in bins.

Bins are bucketed by remaining capacity (FIFO queues) and a 64-ary bitset over 0..C finds
the largest remaining capacity in O(log_64 C). Ties between equally loaded bins go to the
bin that has had that load longest (the head of its queue); which tied bin is chosen never
changes the bin count, only labels. If the item does not fit the least-loaded bin it fits
nowhere, so this is an any-fit rule and the usual bin bound applies.

For a capacity far above the item count (C > max(2^22, 8n)) the buckets would cost more
memory than the items; the same rule then runs on a max-tree over bins keyed by
(remaining, -time reached).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._common import (bitset_clear, bitset_layout, bitset_prev, bitset_set,
                      descending_order, max_bins_bound, tree_leaves)


@njit(cache=True)
def _balanced_kernel(order, sizes, capacity, bits, offs, head, tail, nxt, out):
    nbins = 0
    top = -1  # largest remaining capacity of any open bin (-1: none with room)
    for k in range(order.shape[0]):
        it = order[k]
        s = sizes[it]
        c = top
        if c >= s:
            b = head[c]
            head[c] = nxt[b]
            if head[c] < 0:
                tail[c] = -1
                bitset_clear(bits, offs, c)
                top = bitset_prev(bits, offs, c - 1) if c > 0 else -1
        else:
            b = nbins
            nbins += 1
            c = capacity
        out[it] = b
        r = c - s
        if r > 0:
            nxt[b] = -1
            if tail[r] < 0:
                head[r] = b
                bitset_set(bits, offs, r)
            else:
                nxt[tail[r]] = b
            tail[r] = b
            if r > top:
                top = r
    return nbins


@njit(cache=True)
def _balanced_sparse_kernel(order, sizes, capacity, rem, when, P, out):
    """Same rule with a max-tree over bins: leaf key (rem, -when), unopened bins rem -1."""
    tree = np.zeros(2 * P, np.int64)  # leaf id of the subtree's best bin
    for i in range(P):
        tree[P + i] = i
    for i in range(P - 1, 0, -1):
        tree[i] = tree[2 * i]
    nbins = 0
    for k in range(order.shape[0]):
        it = order[k]
        s = sizes[it]
        b = tree[1]
        if rem[b] < s:
            b = nbins
            nbins += 1
            rem[b] = capacity
        out[it] = b
        rem[b] -= s
        when[b] = k
        i = (b + P) >> 1
        while i >= 1:
            x = tree[2 * i]
            y = tree[2 * i + 1]
            if rem[y] > rem[x] or (rem[y] == rem[x] and when[y] < when[x]):
                x = y
            tree[i] = x
            i >>= 1
    return nbins


def balanced(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    maxbins = max_bins_bound(n, int(sizes.sum()), capacity)
    if capacity > max(1 << 22, 8 * n):
        P = tree_leaves(maxbins)
        rem = np.full(P, -1, np.int64)
        when = np.zeros(P, np.int64)
        _balanced_sparse_kernel(order, sizes, capacity, rem, when, P, out)
        return out
    bits, offs, _ = bitset_layout(capacity + 1)
    head = np.full(capacity + 1, -1, np.int64)
    tail = np.full(capacity + 1, -1, np.int64)
    nxt = np.empty(maxbins, np.int64)
    _balanced_kernel(order, sizes, capacity, bits, offs, head, tail, nxt, out)
    return out
