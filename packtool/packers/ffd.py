"""First-fit decreasing: items largest first, each into the first open bin it fits.

O(n + C + R log B) for R logged runs (R <= n): a count per size instead of a sort (sizes
are bounded by the capacity), and a max-tree over the bins' remaining capacity, so finding
the first bin that fits is a root-to-leaf walk, not a scan over open bins. Equal sizes are
placed in batches (see first_fit_counts); ties between equal sizes go by input index.
"""
from __future__ import annotations

import numpy as np

from packtool.packers._common import (
    RunLog,
    assign_runs,
    first_fit_counts,
    max_bins_bound,
    size_table,
    tree_build,
    tree_dtype,
    tree_leaves,
)


def ffd(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Bin id per item (bins numbered in opening order). sizes: int64, 1 <= size <= C."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    keys, val, cnt = size_table(sizes, capacity)
    P = tree_leaves(max_bins_bound(n, int(sizes.sum()), capacity))
    tree = np.empty(2 * P, tree_dtype(capacity))
    tree[P:] = capacity  # unopened bins are empty bins
    tree_build(tree, P)
    log = RunLog(n, val.shape[0])
    first_fit_counts(val, cnt, tree, P, 0, *log.arrays(), 0)
    assign_runs(keys, log.bin, log.cnt, log.nxt, log.head, out)
    return out
