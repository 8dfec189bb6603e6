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

Phases 2-3 work on counts per distinct size: "the largest remaining B item that fits" is
a predecessor query, "the smallest remaining C item" a successor query, on a bitset over
the sizes that still have items. Ties between equal sizes go by input index in every phase
(the lowest index of a size is placed first), as in ffd.

Neither FFD nor MFFD dominates the other on every input (the tests hold one instance of
each); plans report which wins, never pick the better one.
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
    bitset_prev,
    bitset_set,
    first_fit_counts,
    key_at_most,
    max_bins_bound,
    size_table,
    tree_build,
    tree_dtype,
    tree_leaves,
)


@njit(cache=True)
def _first_key_above(val, num, U):
    """First key whose value v has num * v > U (val ascending)."""
    a, z = 0, val.shape[0]
    while a < z:
        mid = (a + z) >> 1
        if num * val[mid] > U:
            z = mid
        else:
            a = mid + 1
    return a


@njit(cache=True)
def _mffd_kernel(val, cnt, capacity, tree, P, bits, offs, nwords,
                 rbin, rcnt, rnxt, rhead, rtail):
    U = capacity
    K = val.shape[0]
    kA = _first_key_above(val, 2, U)  # A: keys >= kA
    kB = _first_key_above(val, 3, U)  # B: kB <= key < kA
    kC = _first_key_above(val, 6, U)  # C: kC <= key < kB; D: key < kC
    left = cnt.copy()
    nr = 0

    # Phase 1: each A item in its own bin, largest first.
    nA = 0
    for key in range(K - 1, kA - 1, -1):
        for _ in range(left[key]):
            nr = add_run(key, nA, 1, rbin, rcnt, rnxt, rhead, rtail, nr)
            tree[P + nA] = U - val[key]
            nA += 1
        left[key] = 0
    for key in range(kA):
        if left[key] > 0:
            bitset_set(bits, offs, key)

    # Phase 2: forward through the A-bins, the largest remaining B item that fits.
    has_b = np.zeros(nA, np.bool_)
    for b in range(nA):
        room = tree[P + b]
        kk = key_at_most(val, room)
        if kk >= kA:
            kk = kA - 1
        if kk < kB:
            continue
        key = bitset_prev(bits, offs, kk)
        if key < kB:
            continue
        nr = add_run(key, b, 1, rbin, rcnt, rnxt, rhead, rtail, nr)
        left[key] -= 1
        if left[key] == 0:
            bitset_clear(bits, offs, key)
        tree[P + b] = room - val[key]
        has_b[b] = True

    # Phase 3: backward through A-bins without a B item: the smallest remaining C item,
    # then the largest remaining C item that fits beside it.
    left_c = 0
    for key in range(kC, kB):
        left_c += left[key]
    for b in range(nA - 1, -1, -1):
        if left_c < 2:
            break
        if has_b[b]:
            continue
        room = tree[P + b]
        k1 = bitset_next(bits, offs, nwords, kC)  # smallest remaining C (left_c >= 2)
        k2 = k1 if left[k1] >= 2 else bitset_next(bits, offs, nwords, k1 + 1)
        if val[k1] + val[k2] > room:
            continue
        nr = add_run(k1, b, 1, rbin, rcnt, rnxt, rhead, rtail, nr)
        left[k1] -= 1
        if left[k1] == 0:
            bitset_clear(bits, offs, k1)
        room -= val[k1]
        kk = key_at_most(val, room)
        if kk >= kB:
            kk = kB - 1
        key = bitset_prev(bits, offs, kk)  # >= k2 >= kC: the second smallest fits
        nr = add_run(key, b, 1, rbin, rcnt, rnxt, rhead, rtail, nr)
        left[key] -= 1
        if left[key] == 0:
            bitset_clear(bits, offs, key)
        tree[P + b] = room - val[key]
        left_c -= 2

    # Phases 4-5: first fit over what is left, largest first, A-bins first.
    tree_build(tree, P)
    nr, nbins = first_fit_counts(val, left, tree, P, nA, rbin, rcnt, rnxt, rhead, rtail, nr)
    return nbins


def mffd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    keys, val, cnt = size_table(sizes, capacity)
    P = tree_leaves(max_bins_bound(n, int(sizes.sum()), capacity))
    tree = np.empty(2 * P, tree_dtype(capacity))
    tree[P:] = capacity
    bits, offs, nwords = bitset_layout(val.shape[0])
    log = RunLog(n, val.shape[0])
    _mffd_kernel(val, cnt, capacity, tree, P, bits, offs, nwords, *log.arrays())
    assign_runs(keys, log.bin, log.cnt, log.nxt, log.head, out)
    return out
