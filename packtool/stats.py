"""Plan statistics: where the tokens and the padding went. One definition, used by `plan`,
the manifest, `inspect` and `verify`."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .align import Alignment
from .layout import Layout


@dataclass(frozen=True)
class PaddingStats:
    slabs: int
    real_tokens: int
    physical_tokens: int  # sum of slab lengths on disk
    layout_pad: int  # per-sequence gaps (CP multiple s)
    tail_pad: int  # once per slab (TP/SP/FP8 multiple t)
    fill_pad: int  # fixed-length fill segments
    slack: int  # usable capacity left unused and not written (non-singleton slabs)
    singleton_slabs: int
    efficiency: float  # real / physical tokens

    @property
    def capacity_tokens(self) -> int:
        return self.physical_tokens + self.slack

    def to_dict(self) -> dict:
        return asdict(self)


def padding_stats(layout: Layout, align: Alignment, singleton: np.ndarray) -> PaddingStats:
    real = int(layout.seg_len.sum())
    phys = int(layout.slab_len.sum())
    normal = ~np.asarray(singleton, bool)
    slack = int(np.maximum(align.usable - layout.slab_len[normal], 0).sum())
    return PaddingStats(
        slabs=layout.n_bins, real_tokens=real, physical_tokens=phys,
        layout_pad=int(layout.layout_pad.sum()), tail_pad=int(layout.tail_pad.sum()),
        fill_pad=int(layout.fill.sum()), slack=slack, singleton_slabs=int((~normal).sum()),
        efficiency=real / phys if phys else 1.0)
