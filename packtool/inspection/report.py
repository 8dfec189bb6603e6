"""`packtool inspect`'s report: its types and `build_report`, the figures of a `SlabSet`.

Three ways in, one report: a packed output (`inspection.packed`), a plan Parquet written by
`packtool plan --output` or a list of lengths (`inspection.planned`). Each becomes a `SlabSet`
(which real segments sit in which slab); the layout is recomputed with `layout.compute_layout`
and the padding counted with `stats.padding_stats`, the same code the packer and `verify`
use, so the figures cannot drift from what is on disk.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.inspection.compare import CompareRow, WhatIf
from packtool.layout import compute_layout
from packtool.packers import ATTN_COEF
from packtool.planning.core import OverflowStats, PackingConfig
from packtool.planning.summary import PaddingStats, overflow_dict, padding_stats

SCHEMA = "packtool-inspect"
SCHEMA_VERSION = 1
FILL_BINS = 10
WORST = 10


class InspectError(PacktoolInputError):
    """The input cannot be inspected as asked; the message names the file and the fix."""


@dataclass(frozen=True)
class SlabSet:
    """What sits in each slab, however it was learned (plan, plan file, packed output)."""

    alignment: Alignment
    packing: PackingConfig
    seg_len: np.ndarray  # int64 real tokens of each real segment, slab by slab
    slab_offsets: np.ndarray  # int64[n_slabs+1]
    singleton: np.ndarray  # bool per slab
    dp_rank: np.ndarray  # int per slab
    step: np.ndarray  # int per slab
    overflow: OverflowStats
    num_sequences: int
    source_lengths: np.ndarray  # int64 per source row (reassembled chunks for packed input)
    loss_tokens: np.ndarray | None = None  # per slab, packed outputs only
    locations: list[str] | None = None  # "shard row" per slab, packed outputs only


@dataclass(frozen=True)
class Histogram:
    edges: list[float]  # bin b counts values in [edges[b], edges[b+1]) (last bin closed)
    counts: list[int]
    unit: str


@dataclass(frozen=True)
class RankLoad:
    rank: int
    slabs: int
    real_tokens: int
    physical_tokens: int
    compute: float  # sum over segments of footprint + ATTN_COEF * len^2 (packers.dp's cost)


@dataclass(frozen=True)
class DpReport:
    dp: int
    ranks: list[RankLoad]
    token_imbalance: float  # (max - mean) / mean of the ranks' real tokens
    compute_imbalance: float  # the same over the ranks' compute
    step_imbalance: float  # mean over steps of (max - mean) / mean of per-rank compute


@dataclass(frozen=True)
class SlabLoad:
    slab: int  # position in on-disk / plan order
    location: str  # "slabs-00003.parquet row 17" for packed outputs, else "slab N"
    segments: int
    real_tokens: int
    physical_tokens: int
    layout_pad: int
    tail_pad: int
    fill_pad: int
    slack: int
    fill: float  # real tokens / usable capacity
    singleton: bool



@dataclass(frozen=True)
class InspectReport:
    kind: str  # packed | plan | lengths
    path: str | None
    alignment: dict
    packing: dict
    sequences: int
    segments: int
    slabs: int
    real_tokens: int
    loss_tokens: int | None  # packed outputs only
    physical_tokens: int
    capacity_tokens: int  # physical + slack
    lower_bound: int
    l2_bound: int
    excess_over_bound: int  # slabs - max(lower_bound, l2_bound)
    efficiency: float  # real / physical
    waste: float  # (padding + slack) / capacity_tokens
    padding: PaddingStats
    overflow: OverflowStats
    fill_histogram: Histogram  # real tokens / U per non-singleton slab
    length_histogram: Histogram  # source sequence lengths (power-of-two bins)
    dp: DpReport
    worst_slabs: list[SlabLoad]
    compare: list[CompareRow] = field(default_factory=list)
    what_if: WhatIf | None = None
    seconds: float = 0.0
    side_columns: list = field(default_factory=list)  # inspection/side.SideColumnReport, packed outputs

    @property
    def loss_counted(self) -> bool:
        """Whether the loss masks were read (an output): a plan file's cuts took targets it cannot count."""
        return self.loss_tokens is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["overflow"] = overflow_dict(self.overflow, self.loss_counted)  # plan's rule: null, never 0
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **d}


# --- segments to a SlabSet's fields, shared by every way in ------------------------------

def reassemble(source: np.ndarray, seg_len: np.ndarray) -> np.ndarray:
    """Length of each source row: the sum of its segments (its chunks when split)."""
    if source.size == 0:
        return np.zeros(0, np.int64)
    return np.bincount(source, weights=seg_len, minlength=int(source.max()) + 1).astype(np.int64)


# --- the report --------------------------------------------------------------------------

def build_report(kind: str, path: str | None, ss: SlabSet, compare: bool = False,
                 what_if: bool = True, t0: float | None = None) -> InspectReport:
    import time
    t0 = time.perf_counter() if t0 is None else t0
    a = ss.alignment
    lay = compute_layout(ss.seg_len, ss.slab_offsets, a)
    pad = padding_stats(lay, a, ss.singleton)
    real_per_slab = np.add.reduceat(ss.seg_len, ss.slab_offsets[:-1]) if lay.n_bins else np.zeros(0, np.int64)
    lb, l2 = a.lower_bound(ss.seg_len), a.l2_bound(ss.seg_len)
    cap = pad.capacity_tokens
    from packtool.inspection.compare import compare_rows, what_if_capacity
    rep = InspectReport(
        kind=kind, path=path,
        alignment=dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                       fixed_length=a.fixed_length, convention=a.convention, s=a.s, t=a.t, usable=a.usable),
        packing=asdict(ss.packing), sequences=ss.num_sequences, segments=int(ss.seg_len.size),
        slabs=lay.n_bins, real_tokens=pad.real_tokens,
        loss_tokens=None if ss.loss_tokens is None else int(ss.loss_tokens.sum()),
        physical_tokens=pad.physical_tokens, capacity_tokens=cap, lower_bound=lb, l2_bound=l2,
        excess_over_bound=lay.n_bins - max(lb, l2), efficiency=pad.efficiency,
        waste=(cap - pad.real_tokens) / cap if cap else 0.0, padding=pad, overflow=ss.overflow,
        fill_histogram=_fill_histogram(real_per_slab[~ss.singleton], a.usable),
        length_histogram=_length_histogram(ss.source_lengths),
        dp=_dp_report(ss, lay, real_per_slab), worst_slabs=_worst(ss, lay, real_per_slab),
        compare=compare_rows(ss) if compare else [],
        what_if=what_if_capacity(ss, pad) if what_if else None)
    return _with_seconds(rep, time.perf_counter() - t0)


def _with_seconds(rep: InspectReport, s: float) -> InspectReport:
    from dataclasses import replace
    return replace(rep, seconds=s)


def _fill_histogram(real: np.ndarray, usable: int) -> Histogram:
    edges = np.linspace(0.0, 1.0, FILL_BINS + 1)
    counts = np.histogram(np.minimum(real / usable, 1.0), bins=edges)[0] if real.size else np.zeros(FILL_BINS, int)
    return Histogram([round(float(e), 4) for e in edges], [int(c) for c in counts], "fraction of U")


def _length_histogram(lengths: np.ndarray) -> Histogram:
    """Power-of-two bins [1,2), [2,4), ... up to the longest sequence: SFT lengths are long-tailed."""
    top = int(lengths.max()) if lengths.size else 1
    k = max(1, int(np.ceil(np.log2(top + 1))))
    edges = 2 ** np.arange(k + 1)
    counts = np.histogram(lengths, bins=edges)[0] if lengths.size else np.zeros(k, int)
    return Histogram([int(e) for e in edges], [int(c) for c in counts], "tokens")


def _dp_report(ss: SlabSet, lay, real_per_slab: np.ndarray) -> DpReport:
    a = ss.alignment
    dp = int(ss.packing.dp)
    slab_of = np.repeat(np.arange(lay.n_bins), np.diff(ss.slab_offsets))
    cost = np.bincount(slab_of, weights=a.seq_footprint(ss.seg_len) + ATTN_COEF * ss.seg_len.astype(float) ** 2,
                       minlength=lay.n_bins)
    rank = np.asarray(ss.dp_rank, np.int64)
    n_ranks = max(dp, int(rank.max()) + 1 if rank.size else 1)
    loads = [RankLoad(r, int((rank == r).sum()), int(real_per_slab[rank == r].sum()),
                      int(lay.slab_len[rank == r].sum()), float(cost[rank == r].sum())) for r in range(n_ranks)]
    imb = lambda x: float((x.max() - x.mean()) / x.mean()) if x.size and x.mean() > 0 else 0.0  # noqa: E731
    step = np.asarray(ss.step, np.int64)
    steps = []
    if dp > 1 and step.size:
        per = np.zeros((int(step.max()) + 1, n_ranks))
        np.add.at(per, (step, rank), cost)
        steps = [imb(row) for row in per if row.sum() > 0]
    return DpReport(dp, loads, imb(np.array([x.real_tokens for x in loads], float)),
                    imb(np.array([x.compute for x in loads])), float(np.mean(steps)) if steps else 0.0)


def _worst(ss: SlabSet, lay, real_per_slab: np.ndarray) -> list[SlabLoad]:
    """Slabs that waste the most: unused capacity plus padding (physical - real for singletons)."""
    U = ss.alignment.usable
    waste = np.where(ss.singleton, lay.slab_len - real_per_slab, np.maximum(U, lay.slab_len) - real_per_slab)
    order = np.lexsort((np.arange(waste.size), -waste))[:WORST]
    out = []
    for b in order:
        b = int(b)
        out.append(SlabLoad(
            slab=b, location=ss.locations[b] if ss.locations else f"slab {b}",
            segments=int(ss.slab_offsets[b + 1] - ss.slab_offsets[b]), real_tokens=int(real_per_slab[b]),
            physical_tokens=int(lay.slab_len[b]), layout_pad=int(lay.layout_pad[b]),
            tail_pad=int(lay.tail_pad[b]), fill_pad=int(lay.fill[b]),
            slack=0 if ss.singleton[b] else int(max(U - lay.slab_len[b], 0)),
            fill=float(real_per_slab[b] / U), singleton=bool(ss.singleton[b])))
    return out
