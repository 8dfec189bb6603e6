"""Worker-side micro-batching: a rank's rows cut into micro-batches under a token budget.

A row is one sequence or an already-packed bin of several. Rows are pre-aligned before
they are counted: a row's size is the sum of its segments' footprints
(`Alignment.seq_footprint`, each segment rounded up to s), never its raw token count, so a
packed row's per-segment gaps are always paid. A micro-batch's size is
`Alignment.bin_footprint` of its rows' sizes: the per-slab tail t is charged once per
micro-batch, as `packtool.megatron.batching` charges it when it merges slabs. The budget
test is the packers' test against `usable` of an Alignment whose capacity is the budget,
which is exactly `bin_footprint(sum) <= budget`. A row that alone exceeds the budget is a
micro-batch of its own, flagged in `over_budget`.

order="keep" cuts consecutive rows greedily (the row order is the micro-batch order);
"least-loaded" (SkyRL's token-based micro-batching rule), "ffd" or packtool's packers
regroup rows (`step.StepPacker`) for fewer or more even micro-batches.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from packtool.align import Alignment
from packtool.online import _kernels as K
from packtool.integers import INT32_MAX, short
from packtool.params import expect
from packtool.online.room import check_padding
from packtool.online.step import ALGORITHMS, OnlinePackError, StepPacker, as_lengths, check_int


@dataclass(frozen=True)
class MicroBatches:
    """Micro-batch m holds rows `rows[offsets[m]:offsets[m+1]]`; the last `num_empty` are
    empty micro-batches (zero loss) that keep every DP rank at the same count."""

    rows: np.ndarray  # int64 row indices
    offsets: np.ndarray  # int64[num_micro_batches + 1]
    row_size: np.ndarray  # int64 per row: sum of its segments' footprints (pre-aligned)
    footprint: np.ndarray  # int64 per micro-batch: Alignment.bin_footprint(sum of row_size)
    over_budget: np.ndarray  # bool per micro-batch: one row above the budget
    num_empty: int
    budget: int

    @property
    def num_micro_batches(self) -> int:
        return self.offsets.size - 1

    def lists(self) -> list[list[int]]:
        flat = self.rows.tolist()
        o = self.offsets.tolist()
        return [flat[o[m]:o[m + 1]] for m in range(len(o) - 1)]


def row_sizes(seg_lens, row_offsets, align: Alignment) -> np.ndarray:
    """Pre-aligned row sizes: the sum of each row's segment footprints."""
    fp = align.seq_footprint(seg_lens)
    if row_offsets is None:
        return fp
    cs = np.concatenate(([0], np.cumsum(fp)))
    return cs[row_offsets[1:]] - cs[row_offsets[:-1]]


def micro_batches(seg_lens, alignment: Alignment, budget: int, row_offsets=None, *,
                  order: str = "keep", pad_to: int | None = None) -> MicroBatches:
    """Cut rows into micro-batches of at most `budget` tokens after alignment.

    seg_lens: real length of every segment (numpy, list or torch); row r holds segments
      seg_lens[row_offsets[r]:row_offsets[r+1]] (row_offsets None: one segment per row).
    alignment: the training run's Alignment (s, t); its capacity is not used.
    order: "keep" (consecutive greedy), "least-loaded", "ffd" or a packtool packer.
    pad_to: append empty micro-batches up to this count (the max over DP ranks)."""
    expect(alignment, Alignment, "micro_batches", "alignment")
    if not isinstance(order, str) or order not in ("keep", *ALGORITHMS):  # StepPacker's says `algorithm`
        raise OnlinePackError(f"order must be one of keep, {', '.join(ALGORITHMS)}, got {short(order)}")
    lens = as_lengths(seg_lens, "seg_lens", "one length per segment")
    if row_offsets is not None:
        row_offsets = as_lengths(row_offsets, "row_offsets", "the rows' CSR offsets into seg_lens")
        if row_offsets.size < 1 or row_offsets[0] != 0 or row_offsets[-1] != lens.size or (
                row_offsets.size > 1 and np.any(np.diff(row_offsets) < 0)):
            raise OnlinePackError(f"row_offsets must rise from 0 to len(seg_lens)="
                                  f"{lens.size}: pass the rows' CSR offsets")
    budget = check_int("budget", budget, 1, maximum=INT32_MAX)  # it becomes a slab's capacity
    pad_to = check_int("pad_to", pad_to, 0, optional=True, maximum=INT32_MAX)
    if budget < alignment.t:
        raise OnlinePackError(f"micro-batch budget {budget!r} is below the per-slab multiple "
                              f"t={alignment.t} ({alignment.describe()}): use at least "
                              f"{alignment.t} tokens")
    at_budget = dataclasses.replace(alignment, capacity=int(budget), fixed_length=None)
    size = row_sizes(lens, row_offsets, alignment)
    cap = at_budget.usable  # bin_footprint(x) <= budget  <=>  x <= usable
    n = size.size
    if order == "keep":
        group = np.empty(n, np.int64)
        nmb = int(K.greedy_cut(size, cap, group)) if n else 0
        offsets = np.concatenate(([0], np.cumsum(np.bincount(group, minlength=nmb))))
        rows = np.arange(n, dtype=np.int64)
    else:
        bins = StepPacker(at_budget, algorithm=order, oversize="singleton").pack(size)
        rows, offsets, group = bins.items, bins.offsets, bins.bin_of
        nmb = bins.num_bins
    sums = np.bincount(group, weights=size, minlength=nmb).astype(np.int64)
    footprint = alignment.bin_footprint(sums)
    over = footprint > budget
    pad = 0 if pad_to is None else int(pad_to) - nmb
    if pad < 0:
        raise OnlinePackError(f"pad_to={pad_to} is below this rank's {nmb} micro-batches: "
                              f"pass the maximum over all DP ranks")
    if pad:
        check_padding(int(pad_to), pad, n)
        offsets = np.concatenate((offsets, np.full(pad, offsets[-1])))
        footprint = np.concatenate((footprint, np.zeros(pad, np.int64)))
        over = np.concatenate((over, np.zeros(pad, bool)))
    return MicroBatches(rows=rows, offsets=offsets.astype(np.int64), row_size=size,
                        footprint=footprint, over_budget=over, num_empty=pad,
                        budget=int(budget))
