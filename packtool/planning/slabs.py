"""A plan split for writing: per-slab values on the driver, segments routed to their shard.

A writer of slabs [s0, s1) needs their segments in on-disk order and a few values per slab.
`SlabSpec` carries the per-slab values (one entry per slab, ~30x fewer than sequences); the
segments arrive tagged with `Routing` (output shard, position inside the shard), and
`SlabSpec.plan(...)` rebuilds the `Plan` of just those slabs (layout by `compute_layout`), which
the shard writer takes unchanged. The global planner and the sharded one both end here, so a
write task never needs the whole plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from packtool.align import Alignment
from packtool.layout import compute_layout
from packtool.planning.core import SEGMENT_FIELDS, OverflowStats, PackingConfig, Plan, Segments


@dataclass(frozen=True)
class Routing:
    """Segments (sorted by source row, then offset) and where each one goes."""
    source: np.ndarray  # int64 source row (tokenized cache row)
    offset: np.ndarray  # int64 first token in the row
    length: np.ndarray  # int64 tokens
    chunk: np.ndarray   # int32 chunk number (split), 0 for a whole sequence
    shard: np.ndarray   # int32 output shard
    pos: np.ndarray     # int64 index among the shard's real segments (on-disk order)

    FIELDS = (*SEGMENT_FIELDS, "shard", "pos")

    def take(self, a: int, b: int) -> "Routing":
        return Routing(*(getattr(self, f)[a:b] for f in self.FIELDS))


@dataclass(frozen=True)
class SlabSpec:
    """Per-slab values of a run of slabs in on-disk order, plus the plan's scalars."""
    alignment: Alignment
    packing: PackingConfig
    count: np.ndarray       # int64 real segments per slab
    singleton: np.ndarray   # bool
    slab_index: np.ndarray  # int64: plan order before the seeded shuffle
    dp_rank: np.ndarray     # int32
    step: np.ndarray        # int32
    num_sequences: int
    overflow: OverflowStats
    lower_bound: int
    l2_bound: int
    dp_imbalance: float
    dp_moved: int

    def plan(self, source: np.ndarray, offset: np.ndarray, length: np.ndarray,
             chunk: np.ndarray) -> Plan:
        """The `Plan` of these slabs, given their segments in on-disk order."""
        n = int(self.count.sum())
        if length.size != n:
            raise RuntimeError(f"slab spec: {length.size} segments for {self.count.size} slabs "
                               f"that hold {n}; the routing does not match the plan")
        offsets = np.concatenate(([0], np.cumsum(self.count))).astype(np.int64)
        seg_len = np.asarray(length, np.int64)
        alone = np.repeat(self.singleton, self.count)
        segs = Segments(np.asarray(source, np.int64), np.asarray(offset, np.int64), seg_len,
                        np.asarray(chunk, np.int32), alone)
        return Plan(
            alignment=self.alignment, packing=self.packing, num_sequences=self.num_sequences,
            segments=segs, slab_offsets=offsets,
            singleton=self.singleton, slab_index=self.slab_index, dp_rank=self.dp_rank,
            step=self.step, microbatch=np.zeros(self.count.size, np.int32),
            layout=compute_layout(seg_len, offsets, self.alignment), overflow=self.overflow,
            lower_bound=self.lower_bound, l2_bound=self.l2_bound, dp_imbalance=self.dp_imbalance,
            dp_moved=self.dp_moved, seconds=0.0)


def spec_of_plan(p: Plan, s0: int, s1: int) -> SlabSpec:
    """Slabs [s0, s1) of a global `Plan` as a spec."""
    return SlabSpec(p.alignment, p.packing, np.diff(p.slab_offsets[s0:s1 + 1]), p.singleton[s0:s1],
                    p.slab_index[s0:s1], p.dp_rank[s0:s1], p.step[s0:s1], p.num_sequences,
                    p.overflow, p.lower_bound, p.l2_bound, p.dp_imbalance, p.dp_moved)


def shard_of_slab(ranges: list[tuple[int, int]], n_slabs: int) -> tuple[np.ndarray, np.ndarray]:
    """Output shard of every slab (shards are runs of slabs `ranges`) and the position of each
    slab's first segment inside its shard, given per-slab segment counts by the caller."""
    starts = np.asarray([s0 for s0, _ in ranges], np.int64)
    shard = (np.searchsorted(starts, np.arange(n_slabs), side="right") - 1).astype(np.int32)
    return shard, starts


def segment_base(count: np.ndarray, shard: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """int64 per slab: index of its first segment among its shard's segments."""
    first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    return first - first[starts[shard]] if count.size else first


def routing_of_plan(p: Plan, ranges: list[tuple[int, int]]) -> Routing:
    """A global `Plan`'s segments sorted by (row, offset), each tagged with shard and position."""
    count = np.diff(p.slab_offsets)
    shard, starts = shard_of_slab(ranges, p.num_slabs)
    slab_of = np.repeat(np.arange(p.num_slabs), count)
    sg = p.segments
    pos = np.arange(sg.source.size, dtype=np.int64) - p.slab_offsets[starts[shard[slab_of]]]
    order = np.lexsort((sg.offset, sg.source))
    return Routing(sg.source[order], sg.offset[order], sg.length[order], sg.chunk[order],
                   shard[slab_of][order], pos[order])


def routing_pieces(pl, bin_shard: np.ndarray, bin_base: np.ndarray, pool_shard: np.ndarray,
                   pool_pos: np.ndarray, moved_idx: np.ndarray, moved_shard: np.ndarray,
                   moved_pos: np.ndarray, step: int) -> Iterator[Routing]:
    """`Routing` of a shard's placement `pl` (items in input order, `bin` per item: local bin,
    -1 merge pool; a `Placement` or a spilled one: `size`, `piece(a, e)`), `step` items at a time. Per local bin the driver gives the output shard
    and the position of the bin's first segment; inside a bin, segments keep input order (as
    `plan` orders them), counted across pieces. Pool items take `pool_shard`/`pool_pos` in
    input order; items DP moved (`moved_idx`) come with their own place. Working memory is a
    piece's and a counter per bin, not the placement's: route_to_files holds one piece."""
    n = pl.size
    seen = np.zeros(bin_base.size, np.int64)  # segments of each bin in earlier pieces
    m_order = np.argsort(moved_idx, kind="stable")
    m_idx = moved_idx[m_order]
    pooled = 0
    for a in range(0, max(n, 1), max(step, 1)):
        e = min(a + step, n)
        it = pl.piece(a, e)
        b = it.bin.copy()
        m0, m1 = np.searchsorted(m_idx, (a, e))
        mk = m_order[m0:m1]
        b[m_idx[m0:m1] - a] = -2
        shard = np.empty(b.size, np.int32)
        pos = np.empty(b.size, np.int64)
        k = np.flatnonzero(b >= 0)
        kb = b[k]
        # rank of each segment among its bin's in this piece: arrays of the piece's size, never
        # of the bins' count (a plan shard's bins are ~a tenth of its rows)
        order = np.argsort(kb, kind="stable")
        ks = kb[order]
        first = np.flatnonzero(np.diff(ks, prepend=-1)) if ks.size else ks
        rank = np.empty(kb.size, np.int64)
        rank[order] = np.arange(ks.size) - np.repeat(first, np.diff(np.append(first, ks.size)))
        shard[k], pos[k] = bin_shard[kb], bin_base[kb] + seen[kb] + rank
        seen[ks[first]] += np.diff(np.append(first, ks.size))
        p = np.flatnonzero(b == -1)
        shard[p], pos[p] = pool_shard[pooled:pooled + p.size], pool_pos[pooled:pooled + p.size]
        pooled += p.size
        shard[m_idx[m0:m1] - a], pos[m_idx[m0:m1] - a] = moved_shard[mk], moved_pos[mk]
        yield Routing(it.source, it.offset, it.length, it.chunk, shard, pos)
