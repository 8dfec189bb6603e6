"""`inspect --compare` and the what-if line: re-plan the same lengths under other settings.

Both run the real planner (`plan.plan`) on the source lengths of the inspected set, so each
figure is what `pack` would produce with those flags, not an estimate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from packtool.align import CONVENTIONS, Alignment, AlignmentError, round_up
from packtool.packers import ALGORITHMS
from packtool.planning.core import PackingConfig, PlanError
from packtool.planning.core import plan as make_plan
from packtool.planning.summary import PaddingStats, padding_stats

WHAT_IF_SPAN = 0.125  # try capacities within +-12.5% of the current one
WHAT_IF_TRIES = 9
WHAT_IF_MIN_GAIN = 0.001  # report only a cut of at least 0.1 point of capacity


def _lengths(ss) -> np.ndarray:
    lengths = np.asarray(ss.source_lengths, np.int64)
    return lengths[lengths > 0]


def _waste(pad: PaddingStats) -> float:
    cap = pad.capacity_tokens
    return (cap - pad.real_tokens) / cap if cap else 0.0


def _run(lengths, align: Alignment, packing: PackingConfig):
    t0 = time.perf_counter()
    p = make_plan(lengths, align, packing)
    return p, padding_stats(p.layout, align, p.singleton), time.perf_counter() - t0


def compare_rows(ss) -> list:
    """Every algorithm under every convention, same lengths, capacity and overflow policy."""
    from packtool.inspection.compare import CompareRow
    a, pk = ss.alignment, ss.packing
    lengths = _lengths(ss)
    rows = []
    for conv in CONVENTIONS:
        for alg in ALGORITHMS:
            try:
                al = Alignment(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                               fixed_length=a.fixed_length, convention=conv)
                p, pad, secs = _run(lengths, al, PackingConfig(alg, pk.overflow, pk.dp, pk.seed))
            except (AlignmentError, PlanError, ValueError) as e:
                rows.append(CompareRow(alg, conv, 0, 0, 0, 0, 0, 0.0, 0.0, None, 0.0, str(e)))
                continue
            rows.append(CompareRow(alg, conv, al.s, al.t, p.num_slabs, p.lower_bound, p.l2_bound,
                                   pad.efficiency, _waste(pad), pad, secs))
    return rows


def what_if_capacity(ss, pad: PaddingStats):
    """The capacity (or fixed length) near the current one that cuts padding plus unused
    capacity the most, as a share of capacity; None when nothing nearby beats the current
    setting by WHAT_IF_MIN_GAIN."""
    from packtool.inspection.compare import WhatIf
    a, pk = ss.alignment, ss.packing
    lengths = _lengths(ss)
    if lengths.size == 0:
        return None
    fixed = a.fixed_length is not None
    cur = a.fixed_length if fixed else a.usable
    # at least one step of t either side, however coarse t is against the capacity
    lo = max(a.t, min(cur - a.t, round_up(int(cur * (1 - WHAT_IF_SPAN)), a.t)))
    hi = max(cur + a.t, int(cur * (1 + WHAT_IF_SPAN)) // a.t * a.t)
    grid = np.unique(np.linspace(lo, hi, WHAT_IF_TRIES) // a.t * a.t).astype(int)
    grid = [int(c) for c in grid if c >= a.t and c != cur]
    cur_waste, best = _waste(pad), None
    tried = []
    for c in grid:
        try:
            al = Alignment(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, convention=a.convention,
                           capacity=c if not fixed else max(a.capacity, c),
                           fixed_length=c if fixed else None)
            p, pd, _ = _run(lengths, al, PackingConfig(pk.algorithm, pk.overflow, pk.dp, pk.seed))
        except (AlignmentError, PlanError, ValueError):
            continue
        tried.append(c)
        w = _waste(pd)
        if best is None or w < best[1]:
            best = (c, w, p.num_slabs)
    if best is None or cur_waste - best[1] < WHAT_IF_MIN_GAIN:
        return None
    return WhatIf("--fixed-length" if fixed else "--max-tokens", int(cur), best[0], best[2],
                  ss.slab_offsets.size - 1, best[1], cur_waste, tried)


@dataclass(frozen=True)
class CompareRow:
    algorithm: str
    convention: str
    s: int
    t: int
    slabs: int
    lower_bound: int
    l2_bound: int
    efficiency: float  # real / physical
    waste: float  # 1 - real / (physical + slack): padding and unused capacity
    padding: PaddingStats | None
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class WhatIf:
    flag: str  # "--max-tokens" or "--fixed-length"
    current: int
    best: int
    slabs: int
    current_slabs: int
    waste: float
    current_waste: float
    tried: list[int]
