"""Data-parallel assignment: bins -> (rank, step), balancing compute per step.

1. The bin count becomes a multiple of dp, and at least dp, by moving sequences out of
   bins into new bins (never by inventing tokens or empty bins). Each move takes the
   largest sequence (ties: lowest index) of the heaviest bin (by footprint tokens, ties:
   lowest bin id) that still holds two or more; fewer than dp moves are ever needed once
   there are dp bins. Moving the largest item of the heaviest bin lowers the heaviest
   cost, which is what bounds a step's time.
2. Compute cost of a bin = sum over its sequences of (footprint + ATTN_COEF * len^2).
   The constant: per token, a dense transformer layer costs ~24 h^2 FLOPs (QKV 6h^2,
   output 2h^2, 4h MLP 16h^2) and causal attention ~2 L h (scores + AV, half of the L x L
   square), so a sequence of length L costs ~24 h^2 L + 2 h L^2, proportional to
   L + L^2 / (12 h). ATTN_COEF = 1 / (12 * 4096), i.e. h = 4096; pass attn_coef for others.
3. Bins sorted by cost descending (ties: bin id) are dealt dp at a time to steps, so each
   step runs bins of similar cost; within a step the ranks are snaked (rank order reversed
   on odd steps) so no rank always gets the heaviest bin. Steps come out heaviest first;
   the caller shuffles step order with its seed (a permutation of steps keeps every
   property here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from packtool.errors import PacktoolConfigError, PacktoolInputError, arg

ATTN_COEF = 1.0 / (12 * 4096)


class DPError(PacktoolConfigError):
    """--dp cannot be satisfied for this input; the message says why and what to change."""


@dataclass(frozen=True)
class DPAssignment:
    """Bins assigned to data-parallel ranks and steps.

    imbalance: mean over steps of (max - mean) / mean of the dp per-rank bin costs of that
        step, the fraction of a step that the slowest rank spends beyond the average rank
        (0 is perfect). max_step_imbalance: the worst step. rank_imbalance: the same ratio
        over whole-epoch per-rank totals.
    """

    bin_of_item: np.ndarray  # int64, bins 0..num_bins-1 (new bins appended after the old)
    rank: np.ndarray  # int32 per bin
    step: np.ndarray  # int32 per bin
    moved_items: int
    imbalance: float
    max_step_imbalance: float
    rank_imbalance: float
    cost: np.ndarray  # float64 per bin
    num_bins: int
    num_steps: int
    dp: int


@njit(cache=True)
def _heavier(load, a, b):
    return load[a] > load[b] or (load[a] == load[b] and a < b)


@njit(cache=True)
def _sift_down(heap, size, load, i):
    while True:
        best = i
        for c in (2 * i + 1, 2 * i + 2):
            if c < size and _heavier(load, heap[c], heap[best]):
                best = c
        if best == i:
            return
        heap[i], heap[best] = heap[best], heap[i]
        i = best


@njit(cache=True)
def _sift_up(heap, load, i):
    while i > 0:
        p = (i - 1) >> 1
        if not _heavier(load, heap[i], heap[p]):
            return
        heap[i], heap[p] = heap[p], heap[i]
        i = p


@njit(cache=True)
def _move_to_multiple(bin_of_item, sizes, nbins, target):
    """Open bins nbins..target-1, each with the largest item of the heaviest donor."""
    n = bin_of_item.shape[0]
    load = np.zeros(nbins, np.int64)
    count = np.zeros(nbins, np.int64)
    for i in range(n):
        load[bin_of_item[i]] += sizes[i]
        count[bin_of_item[i]] += 1
    start = np.zeros(nbins + 1, np.int64)  # CSR of items per original bin
    for b in range(nbins):
        start[b + 1] = start[b] + count[b]
    fill = start[:-1].copy()
    items = np.empty(n, np.int64)
    for i in range(n):
        b = bin_of_item[i]
        items[fill[b]] = i
        fill[b] += 1
    heap = np.empty(nbins, np.int64)
    size = 0
    for b in range(nbins):
        if count[b] >= 2:
            heap[size] = b
            size += 1
            _sift_up(heap, load, size - 1)
    for new in range(nbins, target):
        d = heap[0]
        best = -1
        for k in range(start[d], start[d + 1]):
            it = items[k]
            if bin_of_item[it] == d and (best < 0 or sizes[it] > sizes[best]):
                best = it
        bin_of_item[best] = new
        load[d] -= sizes[best]
        count[d] -= 1
        if count[d] >= 2:
            _sift_down(heap, size, load, 0)
        else:
            size -= 1
            heap[0] = heap[size]
            _sift_down(heap, size, load, 0)
    return target - nbins


def bin_costs(bin_of_item: np.ndarray, sizes: np.ndarray, seq_lens: np.ndarray, nbins: int,
              attn_coef: float = ATTN_COEF) -> np.ndarray:
    """DP compute cost per bin: footprint plus the attention term of each real length,
    summed item by item in input order (so sharded planning gets the same floats)."""
    L = np.asarray(seq_lens, np.float64)
    return np.bincount(bin_of_item, weights=np.asarray(sizes, np.float64) + attn_coef * L * L,
                       minlength=nbins)


def dp_target(n_items: int, nbins: int, dp: int) -> int:
    """The bin count after DP rounding (a multiple of dp, at least dp); DPError naming --dp
    when there are too few sequences to give every rank a bin at every step."""
    target = max(dp, -(-nbins // dp) * dp)
    if n_items < target:
        raise DPError(
            f"{arg('dp', dp)}: every rank needs a bin at every step, so the bin count must be a "
            f"multiple of {dp} (here {target}), but the input has only {n_items} sequences in "
            f"{nbins} bins: lower {arg('dp')} to at most {max(1, n_items)} or add data")
    return target


def deal_steps(cost: np.ndarray, dp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bins by cost descending, dealt dp at a time to steps, ranks snaked so that no rank
    takes every step's heaviest bin. Returns rank, step and each step's imbalance
    (max - mean) / mean."""
    by_cost = np.argsort(-cost, kind="stable")
    pos = np.empty(cost.size, np.int64)
    pos[by_cost] = np.arange(cost.size)
    step = pos // dp
    within = pos % dp
    rank = np.where(step % 2 == 0, within, dp - 1 - within)
    per_step = cost[by_cost].reshape(-1, dp)
    mean = per_step.mean(axis=1)
    ratio = (per_step.max(axis=1) - mean) / np.maximum(mean, 1e-300)
    return rank.astype(np.int32), step.astype(np.int32), ratio


move_to_multiple = _move_to_multiple


def assign_dp(bin_of_item: np.ndarray, sizes: np.ndarray, seq_lens: np.ndarray,
              capacity: int, dp: int, attn_coef: float = ATTN_COEF) -> DPAssignment:
    """Make the bin count a multiple of dp (>= dp) and assign bins to (rank, step).

    bin_of_item: int64 bin per item (0..B-1, every bin non-empty); sizes: footprints;
    seq_lens: real lengths (the attention term); capacity: only checked, moves never add
    to a bin. Raises DPError naming --dp when the input has too few sequences."""
    if isinstance(dp, bool) or not isinstance(dp, (int, np.integer)) or dp < 1:
        raise DPError(f"{arg('dp')} must be a positive integer, got {dp!r}")
    dp = int(dp)
    bin_of_item = np.array(bin_of_item, dtype=np.int64)  # a copy: moves change it
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    seq_lens = np.ascontiguousarray(seq_lens, dtype=np.int64)
    n = bin_of_item.shape[0]
    if sizes.shape[0] != n or seq_lens.shape[0] != n:
        raise PacktoolInputError(f"assign_dp: bin_of_item ({n}), sizes ({sizes.shape[0]}) and "
                         f"seq_lens ({seq_lens.shape[0]}) must have one entry per sequence")
    nbins = int(bin_of_item.max()) + 1 if n else 0
    target = dp_target(n, nbins, dp)
    if n and np.bincount(bin_of_item, minlength=nbins).min() == 0:
        raise PacktoolInputError("assign_dp: bin_of_item must number the bins 0..B-1 with none empty "
                                 "(pack_items' ids are)")
    moved = 0
    if target > nbins:
        moved = int(_move_to_multiple(bin_of_item, sizes, nbins, target))
    loads = np.bincount(bin_of_item, weights=sizes, minlength=target)
    if loads.max() > capacity:
        raise PacktoolInputError(f"assign_dp: a bin holds {int(loads.max())} > {arg('capacity', capacity)}: "
                                 f"pass the capacity the bins were packed for")
    cost = bin_costs(bin_of_item, sizes, seq_lens, target, float(attn_coef))
    rank, step, ratio = deal_steps(cost, dp)
    ratio = np.maximum(ratio, 0.0)  # max >= mean; a float mean of equal costs can land a hair above
    totals = np.bincount(rank, weights=cost, minlength=dp)
    tmean = totals.mean()
    return DPAssignment(
        bin_of_item=bin_of_item, rank=rank, step=step,
        moved_items=moved, imbalance=float(ratio.mean()),
        max_step_imbalance=float(ratio.max()),
        rank_imbalance=max(0.0, float((totals.max() - tmean) / tmean)) if tmean > 0 else 0.0,
        cost=cost, num_bins=target, num_steps=target // dp, dp=dp)
