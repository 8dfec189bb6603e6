"""`verify`, one shard: what its rows add up to. The totals (tokens, pads, slack,
singletons), the per-slab scalars and the per-segment arrays a shard worker hands back for
the whole-output checks (verification/cover.py, run.py), which of those scalars were null,
and the rows no list check could pair.
"""
from __future__ import annotations

import numpy as np

SLAB_FIELDS = ("slab_index", "dp_rank", "step", "microbatch", "num_tokens", "singleton")


class Tally:
    """Per-shard accumulators: totals and the per-slab / per-segment arrays `verify` merges.
    `scalars`: the slab format's scalar columns, each with a per-slab null flag."""

    def __init__(self, scalars) -> None:
        self.tot = dict(physical_tokens=0, real_tokens=0, loss_tokens=0, layout_pad=0,
                        tail_pad=0, fill_pad=0, slack=0, singletons=0)
        self.slab = {k: [] for k in SLAB_FIELDS}
        self.null = {k: [] for k in scalars}
        self.seg = {k: [] for k in ("source", "chunk", "offset", "length", "row", "seg")}
        self.skipped = 0  # rows with inconsistent array lengths or nulls: in `slab`, not in `seg` or `tot`

    def slabs(self, S: dict, nulls: dict) -> None:
        """The per-slab scalars of some rows (a null as 0) and, per scalar column, where it is null."""
        for k in SLAB_FIELDS:
            self.slab[k].append(S[k])
        for k in self.null:
            self.null[k].append(nulls[k])

    def skip(self, S: dict, nulls: dict) -> None:
        """Rows of a batch that no list check could pair: their scalar columns still count
        (slab_index, DP), their segments and tokens cannot."""
        self.slabs(S, nulls)
        self.skipped += int(next(iter(S.values())).size)

    def finish(self):
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        slabs = {k: cat(v, bool if k == "singleton" else np.int64) for k, v in self.slab.items()}
        nulls = {k: cat(v, bool) for k, v in self.null.items()}
        # a few bytes per segment: the parent holds these for the whole output (coverage)
        wide = ("source", "offset")
        segs = {k: cat(v, np.int64 if k in wide else np.int32) for k, v in self.seg.items()}
        return dict(self.tot), slabs, segs, nulls
