"""Balanced: items largest first, each into the least-loaded open bin if it fits there,
else into a new bin. Loads come out even (an LPT-like rule), at some cost in bins.

The least-loaded bin is the leftmost maximum of a max-tree over remaining capacity
(ties: the lowest bin id). If the item does not fit there it fits nowhere, so this is an
any-fit rule and the usual bin bound applies. O(n log B).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._common import (descending_order, max_bins_bound, tree_first_fit, tree_leaves,
                      tree_set)


@njit(cache=True)
def _balanced_kernel(order, sizes, capacity, tree, P, out):
    nbins = 0
    for k in range(order.shape[0]):
        it = order[k]
        s = sizes[it]
        top = tree[1]
        if top >= s:
            b = tree_first_fit(tree, P, top)
            rem = top
        else:
            if nbins >= P:
                raise RuntimeError("balanced: max-tree too small (internal bound)")
            b = nbins
            nbins += 1
            rem = capacity
        out[it] = b
        tree_set(tree, P, b, rem - s)
    return nbins


def balanced(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    P = tree_leaves(max_bins_bound(n, int(sizes.sum()), capacity))
    tree = np.full(2 * P, -1, np.int64)  # -1: bin not open, never chosen
    _balanced_kernel(order, sizes, capacity, tree, P, out)
    return out
