"""The per-step API: lengths already in memory -> bins for data-parallel ranks.

A trainer calls this every step on the rollouts' lengths (numpy, list or torch tensor). The
alignment model is `packtool.align.Alignment`: footprints come from `seq_footprint` and a
bin fits when its footprint sum is at most `usable` (the same test as `bin_footprint <=
capacity`), so no rule is re-derived here. The bin count follows SkyRL's `SeqPacker`
semantics (`min_bin_count`, then up to a multiple of `bin_count_multiple`); the extra bins
are filled by moving sequences (never by inventing empty bins), either SkyRL's way or
packtool's (`packers.dp`: largest sequence of the heaviest bin, which balances compute).
With `dp` ranks the bins are dealt to ranks by compute cost (`packers.dp.deal_steps`).

Everything over sequences is a compiled loop (`_kernels`, `packers`); this module makes
O(1) numpy calls per step and copies the lengths only when their dtype or device demands.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..align import Alignment
from ..packers import ALGORITHMS as _PACKER_ALGORITHMS
from ..packers import pack_items
from ..packers._common import max_bins_bound, tree_leaves
from ..packers.dp import ATTN_COEF, bin_costs, deal_steps, move_to_multiple
from . import _kernels as K

# "least-loaded" is SkyRL's Balanced rule (a (load, bin id) heap); packtool's "balanced"
# breaks load ties by the time a bin reached its load, which changes labels, not counts.
ALGORITHMS = ("ffd", "least-loaded") + tuple(a for a in _PACKER_ALGORITHMS if a != "ffd")
MOVES = ("balance", "skyrl")
OVERSIZE = ("error", "singleton")


class OnlinePackError(ValueError):
    """A step cannot be packed as asked; one line naming the sequence and the fix. (Not
    packtool.io's PacktoolInputError: importing packtool.io loads pyarrow, ~0.6 s.)"""


@dataclass(frozen=True)
class StepBins:
    """One step's bins. Bin b holds `items[offsets[b]:offsets[b+1]]` (sequence indices, in
    placement order: size descending). With dp ranks, rank `rank[b]` runs bin b as its
    micro-batch number `micro[b]`; every rank gets num_bins / dp bins."""

    bin_of: np.ndarray  # int64 per sequence
    offsets: np.ndarray  # int64[num_bins + 1]
    items: np.ndarray  # int64[n]
    footprint: np.ndarray  # int64 per bin: Alignment.bin_footprint of its footprint sum
    tokens: np.ndarray  # int64 per bin: real tokens
    cost: np.ndarray  # float64 per bin: footprint + attn_coef * sum(len^2) (packers.dp)
    rank: np.ndarray | None  # int32 per bin (dp given) or None
    micro: np.ndarray | None  # int32 per bin: position in its rank's micro-batch order
    moved: int  # sequences moved to reach the bin count
    dp: int | None

    @property
    def num_bins(self) -> int:
        return self.offsets.size - 1

    def bins(self) -> list[list[int]]:
        """Bins as lists of sequence indices (SkyRL's `pack` return value)."""
        flat = self.items.tolist()
        o = self.offsets.tolist()
        return [flat[o[b]:o[b + 1]] for b in range(len(o) - 1)]

    def rank_bins(self, r: int) -> list[np.ndarray]:
        """Rank r's bins in micro-batch order, each an int64 array of sequence indices."""
        if self.rank is None:
            raise OnlinePackError("rank_bins needs dp: pack with dp=<data-parallel size>")
        mine = np.flatnonzero(self.rank == r)
        mine = mine[np.argsort(self.micro[mine], kind="stable")]
        return [self.items[self.offsets[b]:self.offsets[b + 1]] for b in mine.tolist()]

    def imbalance(self) -> float:
        """(max - mean) / mean of per-rank total cost; 0 is perfect."""
        if self.rank is None:
            return 0.0
        tot = np.bincount(self.rank, weights=self.cost, minlength=self.dp)
        m = tot.mean()
        return float((tot.max() - m) / m) if m > 0 else 0.0


def as_lengths(lengths) -> np.ndarray:
    """A 1-D integer numpy view of `lengths`: numpy arrays pass through, torch tensors are
    viewed (a CUDA tensor is copied to the host once), lists are converted."""
    mod = type(lengths).__module__
    if mod.startswith("torch"):
        lengths = lengths.detach()
        if lengths.device.type != "cpu":
            lengths = lengths.cpu()
        lengths = lengths.numpy()
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise OnlinePackError(f"sequence lengths must be a 1-D integer array, got "
                              f"{arr.dtype} {arr.shape}: pass one length per sequence")
    if arr.dtype != np.int64:
        arr = arr.astype(np.int64)  # the kernels are compiled for int64 only (start-up)
    return arr


class StepPacker:
    """Settings checked once; `pack(lengths)` per step. See `pack_step` for the arguments."""

    def __init__(self, alignment: Alignment | None = None, *, capacity: int | None = None,
                 algorithm: str = "ffd", dp: int | None = None,
                 min_bin_count: int | None = None, bin_count_multiple: int | None = None,
                 moves: str = "balance", oversize: str | None = None,
                 attn_coef: float = ATTN_COEF, ties: str = "ascending"):
        if alignment is None:
            alignment = Alignment(capacity=capacity if capacity is not None else 8192)
        elif capacity is not None and capacity != alignment.capacity:
            raise OnlinePackError(f"capacity {capacity} disagrees with the alignment's "
                                  f"{alignment.capacity}: pass one of them")
        if algorithm not in ALGORITHMS:
            raise OnlinePackError(f"algorithm must be one of {', '.join(ALGORITHMS)}, "
                                  f"got {algorithm!r}")
        if moves not in MOVES:
            raise OnlinePackError(f"moves must be one of {', '.join(MOVES)}, got {moves!r}")
        if ties not in ("ascending", "descending"):
            raise OnlinePackError(f"ties must be ascending or descending, got {ties!r}")
        oversize = oversize or ("singleton" if algorithm in ("least-loaded", "balanced")
                                else "error")
        if oversize not in OVERSIZE:
            raise OnlinePackError(f"oversize must be error or singleton, got {oversize!r}")
        for name, v in (("dp", dp), ("bin_count_multiple", bin_count_multiple)):
            if v is not None and (isinstance(v, bool) or int(v) != v or v < 1):
                raise OnlinePackError(f"{name} must be a positive integer, got {v!r}")
        if min_bin_count is not None and min_bin_count < 0:
            raise OnlinePackError(f"min_bin_count must be nonnegative, got {min_bin_count!r}")
        if dp is not None:  # every rank needs the same number of bins, at least one
            min_bin_count = max(min_bin_count or 0, dp)
            bcm = bin_count_multiple or 1
            bin_count_multiple = bcm * dp // np.gcd(bcm, dp)
        self.align, self.algorithm, self.dp = alignment, algorithm, dp
        self.min_bin_count, self.bin_count_multiple = min_bin_count, bin_count_multiple
        self.moves, self.oversize, self.attn_coef = moves, oversize, float(attn_coef)
        self.ties_desc = ties == "descending"

    def target_bins(self, nbins: int) -> int:
        """SkyRL's `_adjust_bin_count` target: at least min_bin_count, then up to a multiple."""
        t = max(nbins, self.min_bin_count or 0)
        m = self.bin_count_multiple
        return t if not m or t % m == 0 else t + m - t % m

    def pack(self, lengths) -> StepBins:
        lens = as_lengths(lengths)
        fp = self.align.seq_footprint(lens)
        U = self.align.usable
        n = lens.size
        if n and int(lens.min()) < 0:
            i = int(np.argmin(lens))
            raise OnlinePackError(f"sequence {i} has length {int(lens[i])}: lengths must be "
                                  f"nonnegative token counts")
        order = np.empty(n, np.int64)
        if n:
            cap = int(fp.max())
            if cap > U and self.oversize == "error":
                i = int(np.argmax(fp))
                raise OnlinePackError(
                    f"Sequence length {int(lens[i])} (sequence {i}, footprint {int(fp[i])}) "
                    f"exceeds bin capacity {U} ({self.align.describe()}): raise the capacity, "
                    f"truncate the rollout, or pack with oversize='singleton'")
            K.order_by_size(fp, max(cap, U), self.ties_desc, order)
        bin_of = np.empty(n, np.int64)
        nbins = self._place(fp, order, bin_of, U) if n else 0
        target = self.target_bins(nbins)
        if target > n:
            raise OnlinePackError(
                f"Cannot create {target} bins with only {n} sequences (min_bin_count="
                f"{self.min_bin_count}, bin_count_multiple={self.bin_count_multiple}): each "
                f"bin needs at least one sequence; lower dp/min_bin_count/bin_count_multiple "
                f"or pack more sequences")
        offsets = np.empty(target + 1, np.int64)
        items = np.empty(n, np.int64)
        moved = target - nbins
        if moved and self.moves == "skyrl":
            off0 = np.empty(nbins + 1, np.int64)
            it0 = np.empty(n, np.int64)
            K.csr_by_bin(bin_of, order, nbins, off0, it0)
            cnt = np.diff(off0)
            donors = np.lexsort((-np.arange(nbins), -cnt))  # count desc, then bin id desc
            K.skyrl_adjust(off0, it0, donors, target, offsets, items, bin_of)
        else:
            if moved:
                move_to_multiple(bin_of, fp, nbins, target)
            K.csr_by_bin(bin_of, order, target, offsets, items)
        return self._finish(lens, fp, bin_of, offsets, items, moved)

    def _place(self, fp, order, bin_of, U) -> int:
        """Bins for the items; oversized ones (fp > U, only with oversize='singleton') come
        first in `order` and take bins 0..k-1 each alone, as SkyRL's Balanced opens them."""
        if self.algorithm == "least-loaded":  # the soft cap is part of SkyRL's rule
            return int(K.balanced_heap(fp, order, U, bin_of))
        nbig = int(np.count_nonzero(fp > U))
        bin_of[order[:nbig]] = np.arange(nbig)
        rest = order[nbig:]
        if self.algorithm == "ffd":
            P = tree_leaves(max_bins_bound(rest.size, int(fp[rest].sum()), U))
            nb = int(K.first_fit(fp, rest, U, P, bin_of))
        else:  # packtool's packers break ties by index ascending: reverse for descending
            idx = np.sort(rest)[::-1] if self.ties_desc else np.sort(rest)
            sub = pack_items(fp[idx], U, self.algorithm)
            bin_of[idx] = sub
            nb = int(sub.max()) + 1 if sub.size else 0
        if nbig:
            bin_of[rest] += nbig
        return nbig + nb

    def _finish(self, lens, fp, bin_of, offsets, items, moved) -> StepBins:
        nb = offsets.size - 1
        fsum = np.bincount(bin_of, weights=fp, minlength=nb).astype(np.int64)
        tokens = np.bincount(bin_of, weights=lens, minlength=nb).astype(np.int64)
        cost = bin_costs(bin_of, fp, lens, nb, self.attn_coef)
        rank = micro = None
        if self.dp is not None and nb:
            rank, micro, _ = deal_steps(cost, self.dp)
        return StepBins(bin_of=bin_of, offsets=offsets, items=items,
                        footprint=self.align.bin_footprint(fsum), tokens=tokens, cost=cost,
                        rank=rank, micro=micro, moved=moved, dp=self.dp)


def pack_step(lengths, alignment: Alignment | None = None, **kw) -> StepBins:
    """Bins for one step.

    lengths: one length per sequence (numpy, list, torch tensor; CPU or GPU).
    alignment: packtool.align.Alignment (tp, cp, fp8, capacity...); or capacity=C alone.
    algorithm: "ffd" (default), "least-loaded" (SkyRL's Balanced), or packtool's "bfd",
      "mffd", "balanced".
    dp: data-parallel size: at least dp bins, a multiple of dp, dealt to ranks by cost.
    min_bin_count, bin_count_multiple: SkyRL's SeqPacker semantics (combined with dp).
    moves: "balance" (packtool: largest sequence of the heaviest bin) or "skyrl" (last
      sequence of the bin holding the most sequences).
    oversize: "error" (ffd's default) or "singleton" (a bin of its own; balanced default).
    ties: order of equal lengths, "ascending" index (packtool) or "descending" (SkyRL FFD).
    Build a StepPacker once and call .pack(lengths) per step to skip argument checks."""
    return StepPacker(alignment, **kw).pack(lengths)
