"""Balanced: items largest first, each into the least-loaded open bin if it fits there,
else into a new bin. Loads come out even (an LPT-like rule), at some cost in bins.

Bins are bucketed by remaining capacity (FIFO queues) and a 64-ary bitset over 0..C finds
the largest remaining capacity when the top bucket empties. Ties between equally loaded
bins go to the bin that has had that load longest (the head of its queue); which tied bin
is chosen never changes the bin count, only labels. Ties between equal items: input index.
If the item does not fit the least-loaded bin it fits nowhere, so this is an any-fit rule
and the usual bin bound applies. Every item is its own placement, so the log is simply the
bin per placement, in size-descending order.

For a capacity far above the item count (C > max(2^22, 8n)) the buckets would cost more
memory than the items; the same rule then runs on a max-tree over bins keyed by
(remaining, -time reached).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from packtool.packers._common import (
    bitset_clear,
    bitset_layout,
    bitset_prev,
    bitset_set,
    dense_capacity,
    index_dtype,
    max_bins_bound,
    size_table,
    tree_leaves,
)


@njit(cache=True)
def _balanced_kernel(val, cnt, capacity, bits, offs, head, tail, nxt, placed):
    nbins = 0
    top = -1  # largest remaining capacity of any open bin (-1: none with room)
    p = 0
    for key in range(val.shape[0] - 1, -1, -1):
        s = val[key]
        for _ in range(cnt[key]):
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
            placed[p] = b
            p += 1
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
def _balanced_sparse_kernel(val, cnt, capacity, rem, when, P, placed):
    """Same rule with a max-tree over bins: leaf key (rem, -when), unopened bins rem -1."""
    tree = np.zeros(2 * P, np.int64)  # leaf id of the subtree's best bin
    for i in range(P):
        tree[P + i] = i
    for i in range(P - 1, 0, -1):
        tree[i] = tree[2 * i]
    nbins = 0
    p = 0
    for key in range(val.shape[0] - 1, -1, -1):
        s = val[key]
        for _ in range(cnt[key]):
            b = tree[1]
            if rem[b] < s:
                b = nbins
                nbins += 1
                rem[b] = capacity
            placed[p] = b
            rem[b] -= s
            when[b] = p
            p += 1
            i = (b + P) >> 1
            while i >= 1:
                x = tree[2 * i]
                y = tree[2 * i + 1]
                if rem[y] > rem[x] or (rem[y] == rem[x] and when[y] < when[x]):
                    x = y
                tree[i] = x
                i >>= 1
    return nbins


@njit(cache=True)
def _assign_placed(keys, cnt, placed, out):
    """Item i of key k takes the next placement of that key (placements run by key,
    largest value first)."""
    K = cnt.shape[0]
    start = np.empty(K, np.int64)
    acc = 0
    for k in range(K - 1, -1, -1):
        start[k] = acc
        acc += cnt[k]
    for i in range(keys.shape[0]):
        k = keys[i]
        out[i] = placed[start[k]]
        start[k] += 1


def balanced(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    keys, val, cnt = size_table(sizes, capacity)
    maxbins = max_bins_bound(n, int(sizes.sum()), capacity)
    placed = np.empty(n, index_dtype(n))
    if dense_capacity(capacity, n):
        bits, offs, _ = bitset_layout(capacity + 1)
        head = np.full(capacity + 1, -1, np.int64)
        tail = np.full(capacity + 1, -1, np.int64)
        nxt = np.empty(maxbins, np.int64)
        _balanced_kernel(val, cnt, capacity, bits, offs, head, tail, nxt, placed)
    else:
        P = tree_leaves(maxbins)
        rem = np.full(P, -1, np.int64)
        when = np.zeros(P, np.int64)
        _balanced_sparse_kernel(val, cnt, capacity, rem, when, P, placed)
    _assign_placed(keys, cnt, placed, out)
    return out
