"""Shared numba pieces for the packers: size tables, run logs, a max-tree, a bitset.

Every packer handles items by size, largest first, ties by input index, so results are
deterministic. No packer sorts the items: sizes are bounded by the capacity, so a table of
counts per distinct size (a bincount, or np.unique when C is far above n) drives the
packing, and each placement is logged as a run (key, bin, count): "the next `count` items
of this size, in input order, go to `bin`". One final sequential pass over the items hands
each item the bin of its size's current run. This replaces a sort and a random scatter of
n item indices by a pass that only touches per-size state, and the memory is the output
plus the runs actually logged (arrays are allocated with np.empty and only the pages
written become resident).

The max-tree answers "first bin with remaining capacity >= s" in O(log B); the multi-level
bitset answers successor/predecessor queries over 0..C in O(log_64 C).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def size_table(sizes: np.ndarray, capacity: int):
    """(keys, val, cnt): per-item key into val/cnt, which list the distinct sizes ascending.

    Dense (C not far above n): the key is the size itself (no copy), val = 0..C.
    Sparse: np.unique's inverse (8 bytes per item, only in that regime)."""
    n = sizes.shape[0]
    if dense_capacity(capacity, n):
        return sizes, np.arange(capacity + 1, dtype=np.int64), np.bincount(
            sizes, minlength=capacity + 1).astype(np.int64)
    val, keys, cnt = np.unique(sizes, return_inverse=True, return_counts=True)
    return keys.astype(np.int64).reshape(-1), val.astype(np.int64), cnt.astype(np.int64)


def dense_capacity(capacity: int, n: int) -> bool:
    """Whether arrays indexed by capacity (0..C) cost no more than the items themselves."""
    return capacity <= max(1 << 22, 8 * n)


def index_dtype(n: int):
    """int32 for per-item scratch whenever item and bin counts fit: half the memory."""
    return np.int32 if n < 2**31 - 1 else np.int64


class RunLog:
    """Arrays of a run log; runs of one key are linked in placement order."""

    def __init__(self, n: int, nkeys: int):
        dt = index_dtype(n)  # bins, counts and run ids are all < n
        self.bin = np.empty(max(n, 1), dt)
        self.cnt = np.empty(max(n, 1), dt)
        self.nxt = np.empty(max(n, 1), dt)
        self.head = np.full(nkeys, -1, np.int64)
        self.tail = np.full(nkeys, -1, np.int64)

    def arrays(self):
        return self.bin, self.cnt, self.nxt, self.head, self.tail


@njit(cache=True)
def add_run(key, b, m, rbin, rcnt, rnxt, head, tail, nr):
    """Log that the next m items of this key go to bin b; returns the new run count."""
    t = tail[key]
    if t >= 0 and rbin[t] == b:
        rcnt[t] += m
        return nr
    rbin[nr] = b
    rcnt[nr] = m
    rnxt[nr] = -1
    if t < 0:
        head[key] = nr
    else:
        rnxt[t] = nr
    tail[key] = nr
    return nr + 1


@njit(cache=True)
def assign_runs(keys, rbin, rcnt, rnxt, head, out):
    """Items in input order take their key's runs in placement order."""
    K = head.shape[0]
    cur = head.copy()
    left = np.zeros(K, np.int64)
    for k in range(K):
        if cur[k] >= 0:
            left[k] = rcnt[cur[k]]
    for i in range(keys.shape[0]):
        k = keys[i]
        r = cur[k]
        out[i] = rbin[r]
        left[k] -= 1
        if left[k] == 0:
            r = rnxt[r]
            cur[k] = r
            if r >= 0:
                left[k] = rcnt[r]


@njit(cache=True)
def key_at_most(val, x):
    """Largest key whose value is <= x (-1 if none); val ascending."""
    a, z = 0, val.shape[0]
    while a < z:
        mid = (a + z) >> 1
        if val[mid] <= x:
            a = mid + 1
        else:
            z = mid
    return a - 1


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
def first_fit_counts(val, cnt, tree, P, nbins, rbin, rcnt, rnxt, head, tail, nr):
    """First fit, largest size first, of cnt[key] items of each size val[key].

    Leaves hold remaining capacity; leaves of bins not yet opened hold the full capacity,
    so the first leaf that fits is either an open bin or the next bin to open (open bins
    are a prefix). Equal sizes are placed in batches: the first bin that fits one item of
    size s stays the first fit until fewer than s remain (earlier bins only lose space),
    so floor(rem / s) of them go there at once -- exactly first fit, with far fewer tree
    walks. Returns (runs logged, bins opened)."""
    for key in range(val.shape[0] - 1, -1, -1):
        k = cnt[key]
        s = val[key]
        while k > 0:
            if tree[1] < s:
                raise RuntimeError("first_fit_counts: max-tree too small (internal bound)")
            b = tree_first_fit(tree, P, s)
            rem = tree[P + b]
            m = rem // s
            if m > k:
                m = k
            nr = add_run(key, b, m, rbin, rcnt, rnxt, head, tail, nr)
            k -= m
            tree_set(tree, P, b, rem - m * s)
            if b >= nbins:
                nbins = b + 1
    return nr, nbins


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
