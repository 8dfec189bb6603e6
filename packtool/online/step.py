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

import math

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.integers import INT32_MAX, INT64_MAX, LENGTH_MAX, int_array, int_value, short
from packtool.params import expect
from packtool.online import _kernels as K
from packtool.packers import ALGORITHMS as _PACKER_ALGORITHMS
from packtool.packers import pack_items
from packtool.packers.dp import ATTN_COEF, bin_costs, deal_steps

# "least-loaded" is SkyRL's Balanced rule (a (load, bin id) heap); packtool's "balanced"
# breaks load ties by the time a bin reached its load, which changes labels, not counts.
ALGORITHMS = ("ffd", "least-loaded") + tuple(a for a in _PACKER_ALGORITHMS if a != "ffd")
MOVES = ("balance", "skyrl")
OVERSIZE = ("error", "singleton")


class OnlinePackError(PacktoolInputError):
    """A step cannot be packed as asked; one line naming the sequence and the fix. A
    ValueError, as SkyRL's packer raises."""


class StepBins:
    """One step's bins. Bin b holds `items[offsets[b]:offsets[b+1]]` (sequence indices, in
    placement order: footprint descending). With dp ranks, rank `rank[b]` runs bin b as its
    micro-batch number `micro[b]`; every rank gets num_bins / dp bins. Per-bin figures are
    computed on first use, so a step that only needs the bins pays for nothing else."""

    __slots__ = ("lengths", "seq_footprint", "bin_of", "offsets", "items", "_packer",
                 "_cache")

    def __init__(self, lengths, seq_footprint, bin_of, offsets, items, packer):
        self.lengths = lengths  # int64 per sequence (a view of the caller's array if it was one)
        self.seq_footprint = seq_footprint  # Alignment.seq_footprint(lengths)
        self.bin_of = bin_of  # int64 per sequence
        self.offsets = offsets  # int64[num_bins + 1]
        self.items = items  # int64[n]
        self._packer = packer
        self._cache = {}

    @property
    def num_bins(self) -> int:
        return self.offsets.size - 1

    @property
    def dp(self) -> int | None:
        return self._packer.dp

    def _get(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    @property
    def footprint(self) -> np.ndarray:
        """int64 per bin: Alignment.bin_footprint of its footprint sum (the padded row)."""
        return self._get("footprint", lambda: self._packer.align.bin_footprint(np.bincount(
            self.bin_of, weights=self.seq_footprint, minlength=self.num_bins).astype(np.int64)))

    @property
    def tokens(self) -> np.ndarray:
        """int64 per bin: real tokens."""
        return self._get("tokens", lambda: np.bincount(
            self.bin_of, weights=self.lengths, minlength=self.num_bins).astype(np.int64))

    @property
    def cost(self) -> np.ndarray:
        """float64 per bin: footprint + attn_coef * sum(len^2) (packers.dp.bin_costs)."""
        return self._get("cost", lambda: bin_costs(self.bin_of, self.seq_footprint,
                                                    self.lengths, self.num_bins,
                                                    self._packer.attn_coef))

    def _deal(self):
        if self.dp is None:
            return None, None
        rank, micro, _ = deal_steps(self.cost, self.dp)
        return rank, micro

    @property
    def rank(self) -> np.ndarray | None:
        """int32 per bin: its DP rank (bins dealt by cost, packers.dp.deal_steps); None
        without dp."""
        return self._get("deal", self._deal)[0]

    @property
    def micro(self) -> np.ndarray | None:
        """int32 per bin: its position in its rank's micro-batch order; None without dp."""
        return self._get("deal", self._deal)[1]

    def bins(self) -> list[list[int]]:
        """Bins as lists of sequence indices (SkyRL's `pack` return value)."""
        flat = self.items.tolist()
        o = self.offsets.tolist()
        return [flat[o[b]:o[b + 1]] for b in range(len(o) - 1)]

    def rank_bins(self, r: int) -> list[np.ndarray]:
        """Rank r's bins in micro-batch order, each an int64 array of sequence indices. Packed
        without dp there is one rank, 0, holding every bin in bin order."""
        dp = self.dp or 1
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < dp:
            if self.dp:
                raise OnlinePackError(f"rank {short(r)} is not a rank of these bins, which were dealt to "
                                      f"dp={self.dp} ranks: pass an int from 0 to {dp - 1}")
            raise OnlinePackError(f"rank {short(r)} is not a rank of these bins, which were packed without "
                                  f"dp and so form one rank: pass 0 (it holds every bin), or pack with "
                                  f"dp=N to deal the bins to N ranks")
        if self.rank is None:
            return [self.items[self.offsets[b]:self.offsets[b + 1]] for b in range(self.num_bins)]
        mine = np.flatnonzero(self.rank == r)
        mine = mine[np.argsort(self.micro[mine], kind="stable")]
        return [self.items[self.offsets[b]:self.offsets[b + 1]] for b in mine.tolist()]

    def rank_rows(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Rank r's bins as packed rows for `micro_batches`: (sequence indices, row
        offsets), rows in micro-batch order; lengths[indices] are the segment lengths."""
        rows = self.rank_bins(r)
        offs = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([x.size for x in rows], out=offs[1:])
        return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), offs

    def imbalance(self) -> float:
        """(max - mean) / mean of per-rank total cost; 0 is perfect."""
        if self.rank is None:
            return 0.0
        tot = np.bincount(self.rank, weights=self.cost, minlength=self.dp)
        m = tot.mean()
        return float((tot.max() - m) / m) if m > 0 else 0.0


def check_int(name: str, value, minimum: int = 0, optional: bool = False, maximum: int = INT64_MAX) -> int | None:
    """`value` as an int when it is an integer from `minimum` to `maximum` (None too when
    `optional`); else the one line naming the argument and its range, as the CLI names its
    flag (2.0, '2' and True are not integers here; 10**19 is not an int64)."""
    return int_value(name, value, minimum, maximum, optional, error=OnlinePackError)


def check_float(name: str, value, minimum: float = 0.0) -> float:
    """`value` as a float when it is a finite real number >= `minimum` (nan and inf are not,
    nor an int too large for a float)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    try:
        ok = ok and bool(np.isfinite(float(value))) and value >= minimum
    except OverflowError:
        ok = False
    if not ok:
        raise OnlinePackError(f"{name} must be a finite number >= {minimum}, got {short(value)}")
    return float(value)


def as_lengths(lengths, name: str = "lengths", what: str = "one length per sequence",
               maximum: int = LENGTH_MAX) -> np.ndarray:
    """A 1-D int64 numpy view of `lengths` (argument `name`): numpy arrays pass through, torch
    tensors are viewed (a CUDA tensor is copied to the host once), lists are converted; floats,
    booleans, negatives and values beyond `maximum` (2^62: a length; an index: the last one)
    are refused (packtool.integers)."""
    mod = type(lengths).__module__
    if mod.startswith("torch"):
        lengths = lengths.detach()
        if lengths.device.type != "cpu":
            lengths = lengths.cpu()
        lengths = lengths.numpy()
    return int_array(lengths, name, OnlinePackError, what, maximum)


class StepPacker:
    """Settings checked once; `pack(lengths)` per step. See `pack_step` for the arguments."""

    def __init__(self, alignment: Alignment | None = None, *, capacity: int | None = None,
                 algorithm: str = "ffd", dp: int | None = None,
                 min_bin_count: int | None = None, bin_count_multiple: int | None = None,
                 moves: str = "balance", oversize: str | None = None,
                 attn_coef: float = ATTN_COEF, ties: str = "ascending"):
        capacity = check_int("capacity", capacity, 1, optional=True, maximum=INT32_MAX)  # a slab's offsets are int32
        expect(alignment, Alignment, "StepPacker", "alignment", optional=True)
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
        dp = check_int("dp", dp, 1, optional=True, maximum=INT32_MAX)  # a bin's rank is an int32
        bin_count_multiple = check_int("bin_count_multiple", bin_count_multiple, 1, optional=True)
        min_bin_count = check_int("min_bin_count", min_bin_count, 0, optional=True)
        attn_coef = check_float("attn_coef", attn_coef)
        if dp is not None:  # every rank needs the same number of bins, at least one
            min_bin_count = max(min_bin_count or 0, dp)
            bcm = bin_count_multiple or 1
            bin_count_multiple = bcm * dp // math.gcd(bcm, dp)  # Python ints: numpy's would wrap
            if bin_count_multiple > INT64_MAX:
                raise OnlinePackError(f"bin_count_multiple={bcm} with dp={dp} needs a bin count that is a "
                                      f"multiple of {bin_count_multiple:,}, above 2^63-1: lower either")
        self.align, self.algorithm, self.dp = alignment, algorithm, dp
        self.min_bin_count, self.bin_count_multiple = min_bin_count, bin_count_multiple
        self.moves, self.oversize, self.attn_coef = moves, oversize, float(attn_coef)
        self.ties_desc = ties == "descending"

    def pack(self, lengths) -> StepBins:
        lens = as_lengths(lengths)
        fp = self.align.seq_footprint(lens)
        U = self.align.usable
        n = lens.size
        order = np.empty(n, np.int64)
        bin_of = np.empty(n, np.int64)
        offsets = np.empty(n + 2, np.int64)
        items = np.empty(n, np.int64)
        mb, mul = self.min_bin_count or 0, self.bin_count_multiple or 1
        skyrl = self.moves == "skyrl"
        # first fit walks the max-tree per item; packers.ffd batches equal sizes, which
        # wins once sizes repeat (n >= 2U measured, BENCHMARKS.md "Online packing"): same bins
        # (packers take sizes >= 1 only; SkyRL accepts empty sequences)
        if self.algorithm == "least-loaded" or (self.algorithm == "ffd" and (
                n < 2 * U or int(fp.min()) < 1)):
            st, v = K.pack_fast(fp, U, self.algorithm == "least-loaded",
                                self.oversize == "error", self.ties_desc, mb, mul, skyrl,
                                order, bin_of, offsets, items)
        else:
            if n and int(lens.min()) == 0:
                i = int(np.argmin(lens))
                raise OnlinePackError(f"sequence {i} has length 0: algorithm {self.algorithm!r} places "
                                      f"sequences of at least one token; drop empty rollouts or use "
                                      f"algorithm='ffd' or 'least-loaded', which place them (a batch "
                                      f"holds each as a segment of no token)")
            st, v = K.check_sizes(fp, U, self.oversize == "error")
            if st == K.OK:
                nb = self._place(fp, order, bin_of, U)
                st, v = K.finish_bins(fp, order, bin_of, nb, mb, mul, skyrl, offsets, items)
        if st != K.OK:
            raise self._error(st, v, lens, fp, n)
        return StepBins(lens, fp, bin_of, offsets[:v + 1], items, self)

    def _error(self, st: int, v: int, lens, fp, n: int) -> OnlinePackError:
        if st == K.NEGATIVE:
            return OnlinePackError(f"sequence {v} has length {int(lens[v])}: lengths must be "
                                   f"nonnegative token counts")
        if st == K.OVERSIZE:
            return OnlinePackError(
                f"Sequence length {int(lens[v])} (sequence {v}, footprint {int(fp[v])}) "
                f"exceeds bin capacity {self.align.usable} ({self.align.describe()}): raise "
                f"the capacity, truncate the rollout, or pack with oversize='singleton'")
        return OnlinePackError(
            f"Cannot create {v} bins with only {n} sequences (min_bin_count="
            f"{self.min_bin_count}, bin_count_multiple={self.bin_count_multiple}): each bin "
            f"needs at least one sequence; lower dp/min_bin_count/bin_count_multiple or pack "
            f"more sequences")

    def _place(self, fp, order, bin_of, U) -> int:
        """packtool's other packers; oversized items (oversize='singleton') take bins
        0..k-1 alone, largest first. `order` gets the placement order (size descending)."""
        n = fp.size
        K.order_by_size(fp, max(U, int(fp.max())) if n else U, self.ties_desc, order)
        nbig = int(np.count_nonzero(fp > U))
        if nbig == 0 and n:  # every item fits: the packer sees them all, no index sort
            sub = pack_items(fp[::-1] if self.ties_desc else fp, U, self.algorithm)
            bin_of[:] = sub[::-1] if self.ties_desc else sub
            return int(sub.max()) + 1
        bin_of[order[:nbig]] = np.arange(nbig)
        rest = order[nbig:]
        idx = np.sort(rest)[::-1] if self.ties_desc else np.sort(rest)  # packers: ties by index
        sub = pack_items(fp[idx], U, self.algorithm) if idx.size else idx
        bin_of[idx] = sub + nbig
        return nbig + (int(sub.max()) + 1 if sub.size else 0)


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
