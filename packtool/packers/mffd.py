"""Modified first-fit decreasing (MFFD).

Reference: D. S. Johnson and M. R. Garey, "A 71/60 theorem for bin packing",
Journal of Complexity 1 (1985) 65-106; MFFD(L) <= 71/60 OPT(L) + 31/6 (FFD: 11/9 OPT).
With U the capacity, items fall into size classes
    A (large)  s > U/2       B (medium) U/3 < s <= U/2
    C (small)  U/6 < s <= U/3          D (rest) s <= U/6
(Johnson & Garey split D further at 11U/71 for the proof only; the algorithm treats the
rest alike.) Boundaries are tested in integers: 2s > U, 3s > U, 6s > U. Within a class,
items are ordered by size descending, ties by input index.

Phase 1  Every A item opens its own bin, largest first: the A-bins, bin ids 0..|A|-1.
Phase 2  Forward through the A-bins (largest A first, so remaining space grows): if the
         smallest remaining B item fits, put in the largest remaining B item that fits.
Phase 3  Backward through the A-bins that got no B item (remaining space shrinks): if the
         two smallest remaining C items fit together, put in the smallest remaining C item,
         then the largest remaining C item that fits beside it.
Phase 4  Forward through all bins: while the largest remaining item that fits exists, put
         it in; then the next bin.
Phase 5  FFD on what is left, into new bins.
Phases 4-5 together are exactly first fit decreasing over the remaining items with the
A-bins as the first bins (filling bin by bin with the largest item that fits is the same
as item by item first fit, for items in decreasing order), so they run as one true first
fit on the max-tree of ffd.

"Largest remaining item that fits" in phases 2-3 is a successor query over a class's
descending array with deletions: binary search the first position whose size fits, then
the next unused position via path-compressed "next free" links (and "previous free" links
for the smallest remaining C items). Ties: the largest-that-fits is the lowest input index
among equal sizes; the smallest remaining is the highest.

Neither FFD nor MFFD dominates the other on every input (the tests hold one instance of
each); plans report which wins, never pick the better one.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._common import (descending_order, first_fit_sorted, max_bins_bound, tree_build, tree_dtype,
                      tree_leaves)


@njit(cache=True)
def _find(par, x):
    """Root of x in a path-compressed forest (the next/previous free slot)."""
    r = x
    while par[r] != r:
        r = par[r]
    while par[x] != r:
        nx = par[x]
        par[x] = r
        x = nx
    return r


@njit(cache=True)
def _first_fitting(order, sizes, lo, hi, room):
    """First position p in [lo, hi) of the descending order with size <= room (hi if none)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) >> 1
        if sizes[order[mid]] <= room:
            b = mid
        else:
            a = mid + 1
    return a


@njit(cache=True)
def _mffd_kernel(order, sizes, capacity, tree, P, out):
    n = order.shape[0]
    U = capacity
    a_end = 0
    while a_end < n and 2 * sizes[order[a_end]] > U:
        a_end += 1
    b_end = a_end
    while b_end < n and 3 * sizes[order[b_end]] > U:
        b_end += 1
    c_end = b_end
    while c_end < n and 6 * sizes[order[c_end]] > U:
        c_end += 1
    nA = a_end
    used = np.zeros(c_end - a_end, np.bool_)  # B and C items placed in phases 2-3

    # Phase 1: each A item in its own bin.
    for k in range(nA):
        out[order[k]] = k
        tree[P + k] = U - sizes[order[k]]

    # Phase 2: forward through the A-bins, largest fitting B item.
    nB = b_end - a_end
    has_b = np.zeros(nA, np.bool_)
    nextB = np.arange(nB + 1)  # nextB root of q: first unused B slot >= q (nB: none)
    for k in range(nA):
        room = tree[P + k]
        p = _first_fitting(order, sizes, a_end, b_end, room) - a_end
        q = _find(nextB, p)
        if q < nB:
            it = order[a_end + q]
            out[it] = k
            tree[P + k] = room - sizes[it]
            used[q] = True
            nextB[q] = q + 1
            has_b[k] = True

    # Phase 3: backward through A-bins without a B item, smallest C + largest C that fits.
    nC = c_end - b_end
    nextC = np.arange(nC + 1)  # first unused C slot >= q, nC: none
    prevC = np.arange(nC + 1)  # shifted by one: root of q+1 is 1 + last unused slot <= q
    left = nC
    for k in range(nA - 1, -1, -1):
        if left < 2:
            break
        if has_b[k]:
            continue
        room = tree[P + k]
        t = _find(prevC, nC) - 1  # smallest remaining C
        t2 = _find(prevC, t) - 1  # second smallest
        s1 = sizes[order[b_end + t]]
        if s1 + sizes[order[b_end + t2]] > room:
            continue
        it = order[b_end + t]
        out[it] = k
        room -= s1
        used[nB + t] = True
        nextC[t] = t + 1
        prevC[t + 1] = t
        p = _first_fitting(order, sizes, b_end, c_end, room) - b_end
        q = _find(nextC, p)  # exists: the second smallest fits
        it = order[b_end + q]
        out[it] = k
        room -= sizes[it]
        used[nB + q] = True
        nextC[q] = q + 1
        prevC[q + 1] = q
        left -= 2
        tree[P + k] = room

    # Phases 4-5: first fit over what is left, in descending order, A-bins first.
    tree_build(tree, P)
    w = a_end  # compact the unused B and C items in place; D follows unchanged
    for r in range(a_end, c_end):
        if not used[r - a_end]:
            order[w] = order[r]
            w += 1
    for r in range(c_end, n):
        order[w] = order[r]
        w += 1
    return first_fit_sorted(order[:w], a_end, sizes, tree, P, out, nA)


def mffd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    P = tree_leaves(max_bins_bound(n, int(sizes.sum()), capacity))
    tree = np.empty(2 * P, tree_dtype(capacity))
    tree[P:] = capacity
    _mffd_kernel(order, sizes, capacity, tree, P, out)
    return out
