"""Compiled per-step loops of packtool.online: placement order, SkyRL's least-loaded heap,
CSR bins, SkyRL's bin-count adjustment and the greedy micro-batch cut.

Every loop here runs over sequences or bins, so each is `njit(cache=True)`; the callers in
step.py, skyrl.py and microbatch.py only do O(1) numpy calls around them. Sizes are
footprints (already rounded to s by `align`) and capacities are `Alignment.usable` values:
no kernel knows the alignment rules.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from packtool.packers._common import max_bins_bound, tree_build, tree_first_fit, tree_leaves, tree_set
from packtool.packers.dp import move_to_multiple


@njit(cache=True)
def order_by_size(sizes, capacity, ties_desc, out):
    """Counting sort of item indices by size descending (sizes in 0..capacity); equal
    sizes by index ascending, or descending with ties_desc. O(n + capacity)."""
    n = sizes.shape[0]
    if n * 16 < capacity:  # a comparison sort is cheaper than a pass over 0..capacity
        if ties_desc:
            rev = np.argsort(-sizes[::-1], kind="mergesort")
            for p in range(n):
                out[p] = n - 1 - rev[p]
        else:
            out[:] = np.argsort(-sizes, kind="mergesort")
        return
    start = np.zeros(capacity + 2, np.int64)
    for i in range(n):
        start[capacity - sizes[i] + 1] += 1  # bucket capacity - size: largest first
    for k in range(1, capacity + 2):
        start[k] += start[k - 1]
    if ties_desc:
        for i in range(n - 1, -1, -1):
            k = capacity - sizes[i]
            out[start[k]] = i
            start[k] += 1
    else:
        for i in range(n):
            k = capacity - sizes[i]
            out[start[k]] = i
            start[k] += 1


@njit(cache=True)
def balanced_heap(sizes, order, capacity, bin_of):
    """SkyRL's Balanced rule: items in `order`, each into the least-loaded bin (ties: the
    lowest bin id, as a min-heap of (load, bin) tuples) when it fits there, else a new bin.
    An item above the capacity opens its own bin (the soft cap). Returns the bin count."""
    n = order.shape[0]
    load = np.empty(max(n, 1), np.int64)
    heap = np.empty(max(n, 1), np.int64)  # bin ids; root = least (load, id)
    size = 0
    for p in range(n):
        i = order[p]
        s = sizes[i]
        if size > 0 and load[heap[0]] + s <= capacity:
            b = heap[0]
            bin_of[i] = b
            load[b] += s
            j = 0  # sift down: the root only grew
            while True:
                c = 2 * j + 1
                if c >= size:
                    break
                if c + 1 < size and (load[heap[c + 1]] < load[heap[c]] or (
                        load[heap[c + 1]] == load[heap[c]] and heap[c + 1] < heap[c])):
                    c += 1
                if load[heap[c]] < load[b] or (load[heap[c]] == load[b] and heap[c] < b):
                    heap[j] = heap[c]
                    j = c
                else:
                    break
            heap[j] = b
        else:
            b = size  # bins are opened in order, so the new id equals the heap size
            bin_of[i] = b
            load[b] = s
            j = size
            size += 1
            while j > 0:  # sift up
                q = (j - 1) >> 1
                if load[heap[q]] > s or (load[heap[q]] == s and heap[q] > b):
                    heap[j] = heap[q]
                    j = q
                else:
                    break
            heap[j] = b
    return size


@njit(cache=True)
def csr_by_bin(bin_of, order, nbins, offsets, items):
    """Bins as CSR: items[offsets[b]:offsets[b+1]] are bin b's items in `order`."""
    offsets[:] = 0
    for i in range(bin_of.shape[0]):
        offsets[bin_of[i] + 1] += 1
    for b in range(nbins):
        offsets[b + 1] += offsets[b]
    fill = offsets[:-1].copy()
    for p in range(order.shape[0]):
        i = order[p]
        b = bin_of[i]
        items[fill[b]] = i
        fill[b] += 1


@njit(cache=True)
def skyrl_adjust(offsets, items, donors, target, new_offsets, new_items, bin_of):
    """SkyRL's `_adjust_bin_count`: each new bin takes the LAST item of the first donor (bins
    by item count descending, ties by bin id descending) that still holds two or more;
    donors are not re-sorted as they shrink. Returns -1, or the bin count reached when the
    donors run out."""
    nbins = offsets.shape[0] - 1
    count = np.empty(nbins, np.int64)
    for b in range(nbins):
        count[b] = offsets[b + 1] - offsets[b]
    moved = np.empty(target - nbins, np.int64)
    p = 0
    for k in range(target - nbins):
        while p < donors.shape[0] and count[donors[p]] <= 1:
            p += 1
        if p == donors.shape[0]:
            return nbins + k
        d = donors[p]
        count[d] -= 1
        moved[k] = items[offsets[d] + count[d]]
    pos = 0
    for b in range(nbins):
        new_offsets[b] = pos
        for q in range(offsets[b], offsets[b] + count[b]):
            new_items[pos] = items[q]
            bin_of[items[q]] = b
            pos += 1
    for k in range(target - nbins):
        new_offsets[nbins + k] = pos
        new_items[pos] = moved[k]
        bin_of[moved[k]] = nbins + k
        pos += 1
    new_offsets[target] = pos
    return -1


@njit(cache=True)
def greedy_cut(sizes, capacity, group):
    """Consecutive rows into groups while the group's size sum stays <= capacity; a row
    above the capacity alone is its own group. Returns the group count."""
    g = -1
    acc = capacity + 1  # forces a new group at the first row
    for i in range(sizes.shape[0]):
        s = sizes[i]
        if acc + s > capacity or g < 0:
            g += 1
            acc = 0
        acc += s
        group[i] = g
    return g + 1


@njit(cache=True)
def first_fit(sizes, order, capacity, P, bin_of):
    """First fit over items in `order` on the packers' max-tree (packers._common): each item
    into the lowest-numbered bin with room, else a new one. Items must fit (size <= C).
    Returns the bin count."""
    tree = np.empty(2 * P, np.int64)
    tree[P:] = capacity  # unopened bins are empty bins; open bins are a prefix
    tree_build(tree, P)
    nbins = 0
    for p in range(order.shape[0]):
        i = order[p]
        s = sizes[i]
        b = tree_first_fit(tree, P, s)
        tree_set(tree, P, b, tree[P + b] - s)
        bin_of[i] = b
        if b >= nbins:
            nbins = b + 1
    return nbins


# --- one dispatch per step -------------------------------------------------------------
OK, NEGATIVE, OVERSIZE, TOO_FEW = 0, 1, 2, 3
# packers._common's bin bound and tree size, compiled as they are (not re-derived)
bins_bound = njit(cache=True)(max_bins_bound)
leaves_for = njit(cache=True)(tree_leaves)


@njit(cache=True)
def check_sizes(fp, capacity, strict):
    """(status, index): a negative size, or with `strict` a size above the capacity."""
    for i in range(fp.shape[0]):
        if fp[i] < 0:
            return NEGATIVE, i
    if strict:
        for i in range(fp.shape[0]):
            if fp[i] > capacity:
                return OVERSIZE, i
    return OK, -1


@njit(cache=True)
def target_count(nbins, min_bins, multiple):
    """SkyRL's `_adjust_bin_count` target (min_bins 0 / multiple 1 when unset)."""
    t = nbins if nbins > min_bins else min_bins
    r = t % multiple
    return t if r == 0 else t + multiple - r


@njit(cache=True)
def finish_bins(fp, order, bin_of, nbins, min_bins, multiple, skyrl_moves, offsets, items):
    """Bin count up to the target by moves, then CSR. Returns (status, bins)."""
    n = fp.shape[0]
    target = target_count(nbins, min_bins, multiple)
    if target > n:
        return TOO_FEW, target
    if target > nbins and skyrl_moves:
        off0 = np.empty(nbins + 1, np.int64)
        it0 = np.empty(n, np.int64)
        csr_by_bin(bin_of, order, nbins, off0, it0)
        key = np.empty(nbins, np.int64)
        for b in range(nbins):  # count descending, then bin id descending
            key[b] = -((off0[b + 1] - off0[b]) * (nbins + 1) + b)
        donors = np.argsort(key)
        skyrl_adjust(off0, it0, donors, target, offsets, items, bin_of)
        return OK, target
    if target > nbins:
        move_to_multiple(bin_of, fp, nbins, target)
    csr_by_bin(bin_of, order, target, offsets[:target + 1], items)
    return OK, target


@njit(cache=True)
def pack_fast(fp, capacity, least_loaded, strict, ties_desc, min_bins, multiple,
              skyrl_moves, order, bin_of, offsets, items):
    """Check, order, place (first fit or SkyRL's least-loaded), count, CSR: a whole step
    in one call. Oversized items (strict off) take bins 0..k-1 alone, largest first.
    Returns (status, bins or the index/target the status names)."""
    st, i = check_sizes(fp, capacity, strict)
    if st != OK:
        return st, i
    n = fp.shape[0]
    total, top = 0, capacity
    for i in range(n):
        total += fp[i]
        if fp[i] > top:
            top = fp[i]
    order_by_size(fp, top, ties_desc, order)
    if least_loaded:
        nb = balanced_heap(fp, order, capacity, bin_of)
    else:
        nbig = 0
        while nbig < n and fp[order[nbig]] > capacity:
            bin_of[order[nbig]] = nbig
            nbig += 1
        P = leaves_for(bins_bound(n, total, capacity))
        nb = nbig + first_fit(fp, order[nbig:], capacity, P, bin_of)
        if nbig:
            for p in range(nbig, n):
                bin_of[order[p]] += nbig
    return finish_bins(fp, order, bin_of, nb, min_bins, multiple, skyrl_moves, offsets, items)
