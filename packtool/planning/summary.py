"""Plan statistics: where the tokens and the padding went. One definition, used by `plan`,
the manifest, `inspect` and `verify`."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from packtool.align import Alignment
from packtool.layout import Layout
from packtool.planning.core import OverflowStats, Plan


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


@dataclass(frozen=True)
class PlanSummary:
    alignment: dict
    packing: dict
    sequences: int
    segments: int
    slabs: int
    lower_bound: int
    l2_bound: int
    excess_over_bound: int
    padding: PaddingStats
    overflow: OverflowStats
    dp_imbalance: float
    dp_moved: int
    plan_seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def plan_summary(p: Plan) -> PlanSummary:
    a = p.alignment
    bound = max(p.lower_bound, p.l2_bound)
    return PlanSummary(
        alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                       fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t,
                       usable=a.usable),
        packing=asdict(p.packing), sequences=p.num_sequences, segments=int(p.segments.length.size),
        slabs=p.num_slabs, lower_bound=p.lower_bound, l2_bound=p.l2_bound,
        excess_over_bound=p.num_slabs - bound,
        padding=padding_stats(p.layout, a, p.singleton), overflow=p.overflow,
        dp_imbalance=p.dp_imbalance, dp_moved=p.dp_moved, plan_seconds=p.seconds)
