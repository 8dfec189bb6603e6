"""`verify`, one shard: what its rows add up to. The totals (tokens, pads, slack,
singletons), the per-slab scalars and the per-segment arrays a shard worker hands back for
the whole-output checks (verification/cover.py, run.py), and the rows no list check could pair.
"""
from __future__ import annotations

import numpy as np

SLAB_FIELDS = ("slab_index", "dp_rank", "step", "microbatch", "num_tokens", "singleton")


class Tally:
    """Per-shard accumulators: totals and the per-slab / per-segment arrays `verify` merges."""

    def __init__(self) -> None:
        self.tot = dict(physical_tokens=0, real_tokens=0, loss_tokens=0, layout_pad=0,
                        tail_pad=0, fill_pad=0, slack=0, singletons=0)
        self.slab = {k: [] for k in SLAB_FIELDS}
        self.seg = {k: [] for k in ("source", "chunk", "offset", "length", "row", "seg")}
        self.skipped = 0  # rows with inconsistent array lengths or nulls: in `slab`, not in `seg` or `tot`

    def skip(self, S: dict, start: int, stop: int) -> None:
        """Rows [start, stop) of a batch that no list check could pair: their scalar columns
        still count (slab_index, DP), their segments and tokens cannot."""
        for k in SLAB_FIELDS:
            self.slab[k].append(S[k][start:stop])
        self.skipped += int(stop - start)

    def finish(self):
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        slabs = {k: cat(v, bool if k == "singleton" else np.int64) for k, v in self.slab.items()}
        # a few bytes per segment: the parent holds these for the whole output (coverage)
        wide = ("source", "offset")
        segs = {k: cat(v, np.int64 if k in wide else np.int32) for k, v in self.seg.items()}
        return dict(self.tot), slabs, segs
