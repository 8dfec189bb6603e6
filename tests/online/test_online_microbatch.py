"""Worker-side micro-batches: never above the budget once laid out by packtool.layout."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool.align import Alignment
from packtool.layout import compute_layout
from packtool.online import OnlinePackError, micro_batches

ALIGNS = [Alignment(), Alignment(tp=2, cp=2, fp8="blockwise"), Alignment(cp=4, fp8="mxfp8"),
          Alignment(tp=4, convention="skyrl", fp8="tensorwise")]


@st.composite
def rows(draw):
    """A rank's rows: already-packed bins of several segments, or single sequences."""
    seg = draw(st.lists(st.integers(1, 2500), min_size=0, max_size=80))
    if draw(st.booleans()):
        return seg, None
    cuts = draw(st.lists(st.integers(0, len(seg)), max_size=20))
    return seg, np.array(sorted({0, len(seg), *cuts}), np.int64) if seg else np.array([0])


@settings(max_examples=200, deadline=None)
@given(r=rows(), ai=st.integers(0, len(ALIGNS) - 1), budget=st.integers(1, 12000),
       order=st.sampled_from(["keep", "least-loaded", "ffd", "bfd"]))
def test_micro_batches_never_exceed_the_budget_after_alignment(r, ai, budget, order):
    seg, offs = r
    align = ALIGNS[ai]
    seg = np.array(seg, np.int64)
    if budget < align.t:
        with pytest.raises(OnlinePackError, match="below the per-slab multiple"):
            micro_batches(seg, align, budget, offs, order=order)
        return
    mb = micro_batches(seg, align, budget, offs, order=order)
    offs = np.arange(seg.size + 1) if offs is None else offs
    n_rows = offs.size - 1
    assert sorted(mb.rows.tolist()) == list(range(n_rows))
    if order == "keep":
        assert mb.rows.tolist() == list(range(n_rows))
    for m, members in enumerate(mb.lists()):
        segs = np.concatenate([seg[offs[i]:offs[i + 1]] for i in members] + [seg[:0]])
        if segs.size == 0:  # rows with no segment
            continue
        lay = compute_layout(segs, np.array([0, segs.size]), align)
        # every segment padded to s and the tail once: layout's length is the figure
        assert lay.slab_len[0] == mb.footprint[m]
        if len(members) > 1:
            assert lay.slab_len[0] <= budget
        assert mb.over_budget[m] == (lay.slab_len[0] > budget)


def test_packed_rows_are_pre_aligned():
    """Two packed rows whose raw token sums fit but whose segment gaps do not."""
    align = Alignment(cp=2, capacity=64)  # s=4, t=4
    seg = np.array([5, 5, 5, 5, 5, 5])  # each pads to 8: a row of 3 is 24, not 15
    mb = micro_batches(seg, align, 40, np.array([0, 3, 6]))
    assert mb.num_micro_batches == 2  # 15 + 15 = 30 <= 40, but 24 + 24 = 48 > 40
    assert mb.row_size.tolist() == [24, 24]


def test_tail_is_charged_once_per_micro_batch():
    align = Alignment(tp=8, fp8="mxfp8", capacity=4096)  # t = 32 * tp_sp = 256
    assert align.t == 256
    # 3 * 100 = 300 -> one tail -> 512 fits; a tail per row would be 3 * 256 = 768
    mb = micro_batches([100, 100, 100], align, 512, order="keep")
    assert mb.lists() == [[0, 1, 2]] and mb.footprint.tolist() == [512]
    mb = micro_batches([100, 100, 100, 300], align, 512, order="keep")
    assert mb.lists() == [[0, 1, 2], [3]]


def test_pad_to_keeps_ranks_in_step():
    mb = micro_batches([10, 20, 30], Alignment(), 35, pad_to=4)
    assert mb.lists() == [[0, 1], [2], [], []] and mb.num_empty == 2
    with pytest.raises(OnlinePackError, match="pad_to=1"):
        micro_batches([10, 20, 30], Alignment(), 35, pad_to=1)


def test_rank_rows_of_a_step_feed_micro_batches():
    from packtool.online import pack_step
    align = Alignment(cp=2, capacity=4096)
    lens = np.random.default_rng(4).integers(1, 1500, 300)
    step = pack_step(lens, align, dp=4)
    for r in range(4):
        idx, offs = step.rank_rows(r)
        mb = micro_batches(lens[idx], align, 8192, offs)
        assert sorted(mb.rows.tolist()) == list(range(offs.size - 1))
        assert (mb.footprint <= 8192).all()  # rows fit 4096 each, so two fit 8192
