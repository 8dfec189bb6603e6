"""First-fit decreasing: items largest first, each into the first open bin it fits.

O(n log n): a counting sort (sizes are bounded by the capacity) and a max-tree over the
bins' remaining capacity, so finding the first bin that fits is a root-to-leaf walk, not a
scan over open bins. Runs of equal sizes are placed in batches (see first_fit_sorted).
"""
from __future__ import annotations

import numpy as np

from ._common import (descending_order, first_fit_sorted, max_bins_bound, tree_build, tree_dtype,
                      tree_leaves)


def ffd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    order = descending_order(sizes, capacity)
    P = tree_leaves(max_bins_bound(n, int(sizes.sum()), capacity))
    tree = np.empty(2 * P, tree_dtype(capacity))
    tree[P:] = capacity  # unopened bins are empty bins
    tree_build(tree, P)
    first_fit_sorted(order, 0, sizes, tree, P, out, 0)
    return out
