"""Shared numba pieces for the packers: descending order, a max-tree over bins, a bitset.

Every packer sorts items by size, largest first, ties by input index, so that results are
deterministic. The max-tree answers "first bin with remaining capacity >= s" in O(log B);
the multi-level bitset answers "smallest remaining capacity >= s that some bin has" in
O(log_64 C). Both are flat int arrays so the kernels stay allocation-free in their loops.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True)
def descending_order(sizes, capacity):
    """Item indices by size descending, ties by index ascending (a stable sort).

    Sizes are bounded by the capacity, so a counting sort (O(n + C), two passes) is used
    whenever C is not much larger than n; otherwise a stable merge sort."""
    n = sizes.shape[0]
    if capacity <= 4 * n + 4096:
        counts = np.zeros(capacity + 1, np.int64)
        for i in range(n):
            counts[sizes[i]] += 1
        # start of each size's run in descending order = number of items strictly larger
        acc = 0
        for v in range(capacity, -1, -1):
            c = counts[v]
            counts[v] = acc
            acc += c
        order = np.empty(n, np.int64)
        for i in range(n):
            v = sizes[i]
            order[counts[v]] = i
            counts[v] += 1
        return order
    return np.argsort(-sizes, kind="mergesort").astype(np.int64)


def max_bins_bound(n: int, total: int, capacity: int) -> int:
    """Upper bound on the bins of any any-fit packer (a new bin only opens when nothing
    fits): at most one bin can be at most half full, so B <= 2*total/C + 1; and B <= n."""
    return max(1, min(n, 2 * total // capacity + 2))


def tree_dtype(capacity: int):
    """int32 leaves halve the tree's memory and cache footprint whenever capacities fit."""
    return np.int32 if capacity < 2**31 - 1 else np.int64


def tree_leaves(nbins: int) -> int:
    """Leaf count of a max-tree that can hold nbins bins (a power of two)."""
    p = 1
    while p < nbins:
        p <<= 1
    return p


@njit(cache=True)
def tree_build(tree, P):
    """Fill the internal nodes of a max-tree whose leaves tree[P:2P] are set."""
    for i in range(P - 1, 0, -1):
        a = tree[2 * i]
        b = tree[2 * i + 1]
        tree[i] = a if a >= b else b


@njit(cache=True)
def tree_first_fit(tree, P, s):
    """Leftmost leaf with value >= s; the caller checks tree[1] >= s first."""
    i = 1
    while i < P:
        i <<= 1
        if tree[i] < s:
            i += 1
    return i - P


@njit(cache=True)
def tree_set(tree, P, leaf, value):
    """Set a leaf and repair the maxima above it, stopping once a node is unchanged."""
    i = leaf + P
    tree[i] = value
    i >>= 1
    while i >= 1:
        a = tree[2 * i]
        b = tree[2 * i + 1]
        m = a if a >= b else b
        if tree[i] == m:
            break
        tree[i] = m
        i >>= 1


@njit(cache=True)
def first_fit_sorted(order, start, sizes, tree, P, bin_of_item, nbins):
    """First fit of items order[start:] (already descending) into the bins of a max-tree.

    Leaves hold remaining capacity; leaves of bins not yet opened hold the full capacity,
    so the first leaf that fits is either an open bin or the next bin to open (open bins
    are a prefix). A run of equal sizes is placed in batches: the first bin that fits one
    item of size s stays the first fit until fewer than s remain (earlier bins only lose
    space), so floor(rem / s) items of the run go there at once -- exactly first fit,
    with far fewer tree walks. Returns the number of bins opened."""
    n = order.shape[0]
    i = start
    while i < n:
        s = sizes[order[i]]
        j = i + 1
        while j < n and sizes[order[j]] == s:
            j += 1
        while i < j:
            if tree[1] < s:
                raise RuntimeError("first_fit_sorted: max-tree too small (internal bound)")
            b = tree_first_fit(tree, P, s)
            rem = tree[P + b]
            m = rem // s
            if m > j - i:
                m = j - i
            for k in range(i, i + m):
                bin_of_item[order[k]] = b
            i += m
            tree_set(tree, P, b, rem - m * s)
            if b >= nbins:
                nbins = b + 1
    return nbins


# --- multi-level bitset over 0..C (successor queries) ---------------------------------

def bitset_layout(universe: int):
    """Word offsets and word counts of each level of a bitset over 0..universe-1."""
    offs, nwords = [], []
    size, off = universe, 0
    while True:
        w = (size + 63) // 64
        offs.append(off)
        nwords.append(w)
        off += w
        if w == 1:
            break
        size = w
    return (np.zeros(off, np.uint64), np.array(offs, np.int64), np.array(nwords, np.int64))


@njit(cache=True)
def bitset_next(bits, offs, nwords, x):
    """Smallest set position >= x, or -1."""
    nlev = offs.shape[0]
    lev = 0
    pos = x
    while lev < nlev:
        w = pos >> 6
        if w >= nwords[lev]:
            return -1
        word = bits[offs[lev] + w] & (_ALL << np.uint64(pos & 63))
        if word != 0:
            pos = (w << 6) + np.int64(trailing_zeros(word))
            while lev > 0:
                lev -= 1
                pos = (pos << 6) + np.int64(trailing_zeros(bits[offs[lev] + pos]))
            return pos
        pos = w + 1
        lev += 1
    return -1


@njit(cache=True)
def bitset_prev(bits, offs, x):
    """Largest set position <= x (x inside the universe), or -1."""
    nlev = offs.shape[0]
    lev = 0
    pos = x
    while lev < nlev:
        if pos < 0:
            return -1
        w = pos >> 6
        word = bits[offs[lev] + w] & (_ALL >> np.uint64(63 - (pos & 63)))
        if word != 0:
            pos = (w << 6) + 63 - np.int64(leading_zeros(word))
            while lev > 0:
                lev -= 1
                pos = (pos << 6) + 63 - np.int64(leading_zeros(bits[offs[lev] + pos]))
            return pos
        pos = w - 1
        lev += 1
    return -1


@njit(cache=True)
def bitset_set(bits, offs, x):
    for lev in range(offs.shape[0]):
        w = x >> 6
        idx = offs[lev] + w
        old = bits[idx]
        bits[idx] = old | (_ONE << np.uint64(x & 63))
        if old != 0:
            return
        x = w


@njit(cache=True)
def bitset_clear(bits, offs, x):
    for lev in range(offs.shape[0]):
        w = x >> 6
        idx = offs[lev] + w
        new = bits[idx] & ~(_ONE << np.uint64(x & 63))
        bits[idx] = new
        if new != 0:
            return
        x = w
