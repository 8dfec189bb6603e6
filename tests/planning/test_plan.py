"""Plan-level properties: overflow policies, footprints, bounds, determinism, DP rules."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool.align import Alignment, round_up
from packtool.packers import DPError
from packtool.planning.core import PackingConfig, PlanError, SequenceError, apply_overflow, plan

RECIPES = ["none", "tensorwise", "mxfp8", "blockwise"]


@st.composite
def cases(draw):
    tp = draw(st.integers(1, 8))
    cp = draw(st.integers(1, 4))
    sp = draw(st.sampled_from([None, True, False]))
    fp8 = draw(st.sampled_from(RECIPES))
    conv = draw(st.sampled_from(["packtool", "skyrl", "nemo-rl", "verl", "per-sequence"]))
    probe = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, convention=conv, capacity=1 << 20)
    cap = draw(st.integers(probe.t, probe.t * 8))
    fixed = draw(st.sampled_from([None, cap - cap % probe.t]))  # at most cap
    align = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, convention=conv, capacity=cap, fixed_length=fixed)
    algo = draw(st.sampled_from(["ffd", "bfd", "mffd", "balanced"]))
    policy = draw(st.sampled_from(["singleton", "truncate", "split"]))
    n = draw(st.integers(1, 60))
    lengths = draw(st.lists(st.integers(1, 3 * align.usable), min_size=n, max_size=n))
    dp = draw(st.sampled_from([1, 1, 2, 3]))
    if dp > 1 and n < dp:
        dp = 1
    return align, PackingConfig(algorithm=algo, overflow=policy, dp=dp, seed=draw(st.integers(0, 9))), np.array(lengths)


def _check(align: Alignment, cfg: PackingConfig, lengths: np.ndarray) -> None:
    if align.fixed_length is not None and cfg.overflow == "singleton" and \
            (align.seq_footprint(lengths) > align.usable).any():
        with pytest.raises(SequenceError, match="fixed_length"):  # a singleton slab: longer than promised
            plan(lengths, align, cfg)
        return
    try:
        p = plan(lengths, align, cfg)
    except DPError as e:
        # legitimate only when there are too few segments to give every rank a slab per step
        p1 = plan(lengths, align, dataclasses.replace(cfg, dp=1))
        assert p1.segments.length.size < round_up(p1.num_slabs, cfg.dp), e
        assert "dp=" in str(e)
        return
    lay = p.layout
    U = align.usable
    over = align.seq_footprint(lengths) > U
    # every source token is placed exactly once, or counted by the policy
    covered = np.zeros(int(lengths.sum()), np.int64)
    base = np.concatenate(([0], np.cumsum(lengths)))
    for src, off, ln in zip(p.segments.source, p.segments.offset, p.segments.length):
        covered[base[src] + off: base[src] + off + ln] += 1
    assert covered.max() <= 1
    if cfg.overflow == "truncate":
        assert int(lengths.sum() - covered.sum()) == p.overflow.tokens_dropped
        assert p.overflow.tokens_dropped == int(np.maximum(lengths - U, 0).sum())
    else:
        assert covered.min() == 1
    if cfg.overflow == "split":  # the targets its cuts lose are the loss masks' (L6): lengths alone say 0
        assert p.overflow.targets_lost == 0
        assert p.overflow.chunks == int(np.where(over, -(-lengths // U), 1)[over].sum())
    assert p.overflow.sequences == int(over.sum())
    # footprints, paddings and capacity
    assert (lay.seg_padded % align.s == 0).all()
    assert (lay.footprint % align.t == 0).all()
    assert ((lay.footprint <= U) | p.singleton).all()
    assert p.singleton.sum() == (int(over.sum()) if cfg.overflow == "singleton" else 0)
    if align.fixed_length is not None:
        assert (lay.slab_len == align.fixed_length).all()  # singletons included
    assert p.num_slabs >= p.lower_bound
    assert p.lower_bound >= 0 and p.l2_bound >= 0
    # dp: slab count a multiple of dp, every (rank, step) once, steps contiguous on disk
    if cfg.dp > 1:
        assert p.num_slabs % cfg.dp == 0 and p.num_slabs >= cfg.dp
        pairs = set(zip(p.dp_rank.tolist(), p.step.tolist()))
        assert len(pairs) == p.num_slabs
        assert (np.diff(p.step) >= 0).all()
    # deterministic
    q = plan(lengths, align, cfg)
    for name in ("source", "offset", "length", "chunk"):
        assert np.array_equal(getattr(p.segments, name), getattr(q.segments, name))
    for name in ("slab_offsets", "dp_rank", "step"):
        assert np.array_equal(getattr(p, name), getattr(q, name))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_plan_properties(case):
    _check(*case)


def test_overflow_error_names_row_and_flags():
    a = Alignment(capacity=16)
    with pytest.raises(PlanError, match=r"sequence 1 has 17 tokens.*raise capacity or use overflow='split'"):
        plan(np.array([3, 17, 4]), a, PackingConfig(algorithm="ffd"))


def test_split_chunks_hand_checked():
    a = Alignment(tp=1, cp=2, capacity=16)  # s=4, t=4, U=16
    segs, st_ = apply_overflow(np.array([5, 40]), a, "split")
    assert segs.source.tolist() == [0, 1, 1, 1]
    assert segs.offset.tolist() == [0, 0, 16, 32]
    assert segs.length.tolist() == [5, 16, 16, 8]
    assert segs.chunk.tolist() == [0, 0, 1, 2]
    assert (st_.sequences, st_.chunks, st_.targets_lost) == (1, 3, 0)  # targets lost: the masks' (L6)


def test_default_overflow_per_algorithm():
    assert PackingConfig(algorithm="ffd").overflow == "error"
    assert PackingConfig(algorithm="bfd").overflow == "error"
    assert PackingConfig(algorithm="mffd").overflow == "singleton"
    assert PackingConfig(algorithm="balanced").overflow == "singleton"


def test_seed_shuffles_order_not_content():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 500, 400)
    a = Alignment(capacity=1024)
    p0 = plan(lengths, a, PackingConfig(seed=0))
    p1 = plan(lengths, a, PackingConfig(seed=1))
    assert not np.array_equal(p0.segments.source, p1.segments.source)

    def slabs(p):
        return sorted(tuple(sorted(p.segments.source[p.slab_offsets[b]:p.slab_offsets[b + 1]].tolist()))
                      for b in range(p.num_slabs))
    assert slabs(p0) == slabs(p1)
    # not sorted by length on disk
    assert not (np.diff(p0.layout.footprint) <= 0).all()


def test_worked_example_two_slabs():
    # DESIGN section 2: tp=4, cp=2, none, [17, 15], C=32 -> packtool 24 + 16
    p = plan(np.array([17, 15]), Alignment(tp=4, cp=2, capacity=32), PackingConfig(algorithm="ffd"))
    assert sorted(p.layout.footprint.tolist()) == [16, 24]
    assert p.layout.tail_pad.sum() == 4 and p.layout.layout_pad.sum() == 4
