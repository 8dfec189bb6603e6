"""assign_dp: bin count a multiple of dp by moving sequences; compute-balanced (rank, step)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool.packers import ALGORITHMS, ATTN_COEF, DPError, assign_dp, pack_items


def test_moves_largest_item_of_heaviest_bin():
    # one bin of 5 sequences, dp=4: three moves. Donor is always bin0 (the only bin with
    # two or more); it gives its largest each time: 5 -> bin1, 4 -> bin2, 3 -> bin3.
    sizes = np.array([5, 4, 3, 2, 1])
    a = assign_dp(np.zeros(5, np.int64), sizes, sizes, 20, 4)
    assert a.bin_of_item.tolist() == [1, 2, 3, 0, 0]
    assert a.moved_items == 3 and a.num_bins == 4 and a.num_steps == 1


def test_donor_is_heaviest_bin_with_two_items():
    # bins: 0 = {9} (single, cannot give), 1 = {4, 3} (load 7), 2 = {2, 2, 2} (load 6).
    # dp=4 needs one move: heaviest donor with >= 2 items is bin1; its largest (4) moves.
    bins = np.array([0, 1, 1, 2, 2, 2])
    sizes = np.array([9, 4, 3, 2, 2, 2])
    a = assign_dp(bins, sizes, sizes, 10, 4)
    assert a.bin_of_item.tolist() == [0, 3, 1, 2, 2, 2]
    assert a.moved_items == 1


def test_cost_snake_and_imbalance_by_hand():
    # four single-sequence bins, attention off: cost = footprint = 8, 6, 5, 1.
    sizes = np.array([5, 8, 1, 6])
    a = assign_dp(np.arange(4), sizes, sizes, 10, 2, attn_coef=0.0)
    assert a.cost.tolist() == [5, 8, 1, 6]
    # by cost: bin1 (8), bin3 (6) -> step 0, ranks 0, 1; bin0 (5), bin2 (1) -> step 1,
    # snaked: rank 1 gets 5, rank 0 gets 1. Rank totals 9 and 11.
    assert a.step.tolist() == [1, 0, 1, 0]
    assert a.rank.tolist() == [1, 0, 0, 1]
    # step 0: mean 7, max 8 -> 1/7; step 1: mean 3, max 5 -> 2/3
    assert a.imbalance == pytest.approx((1 / 7 + 2 / 3) / 2)
    assert a.max_step_imbalance == pytest.approx(2 / 3)
    assert a.rank_imbalance == pytest.approx(1 / 10)
    assert a.rank.dtype == np.int32 and a.step.dtype == np.int32


def test_attention_term_uses_real_lengths():
    # same footprints, one bin holds a long sequence: the attention term makes it costlier
    sizes = np.array([4000, 2000, 2000])
    a = assign_dp(np.array([0, 1, 1]), sizes, sizes, 8192, 2)
    assert a.cost[0] == pytest.approx(4000 + ATTN_COEF * 4000**2)
    assert a.cost[1] == pytest.approx(4000 + ATTN_COEF * 2 * 2000**2)
    assert a.cost[0] > a.cost[1]


def test_dp_one_keeps_bins():
    sizes = np.array([3, 3, 3])
    a = assign_dp(np.array([0, 0, 1]), sizes, sizes, 6, 1)
    assert a.moved_items == 0 and a.num_bins == 2
    assert a.rank.tolist() == [0, 0] and sorted(a.step.tolist()) == [0, 1]


def test_too_few_sequences_names_dp():
    with pytest.raises(DPError, match="dp=4.*only 3 sequences"):
        assign_dp(np.array([0, 0, 1]), np.array([1, 1, 1]), np.array([1, 1, 1]), 8, 4)
    # 5 bins of one sequence each cannot become 8 bins by moving
    with pytest.raises(DPError, match="dp=4"):
        assign_dp(np.arange(5), np.ones(5, np.int64), np.ones(5, np.int64), 8, 4)
    with pytest.raises(DPError, match="^dp must be a positive integer"):
        assign_dp(np.array([0]), np.array([1]), np.array([1]), 8, 0)


@st.composite
def dp_cases(draw):
    C = draw(st.integers(1, 500))
    sizes = draw(st.lists(st.integers(1, C), min_size=1, max_size=150))
    dp = draw(st.integers(1, 16))
    algorithm = draw(st.sampled_from(ALGORITHMS))
    return np.array(sizes, np.int64), C, dp, algorithm


@settings(max_examples=200, deadline=None)
@given(case=dp_cases())
def test_property_dp_rules(case):
    sizes, C, dp, algorithm = case
    bins = pack_items(sizes, C, algorithm)
    B = int(bins.max()) + 1
    target = max(dp, -(-B // dp) * dp)
    if len(sizes) < target:
        with pytest.raises(DPError, match="dp=|dp must"):
            assign_dp(bins, sizes, sizes, C, dp)
        return
    a = assign_dp(bins, sizes, sizes, C, dp)
    assert a.num_bins == target and a.num_bins % dp == 0 and a.num_bins >= dp
    assert a.bin_of_item.shape == sizes.shape  # every sequence kept, none invented
    counts = np.bincount(a.bin_of_item, minlength=a.num_bins)
    assert counts.size == a.num_bins and (counts > 0).all()
    assert np.bincount(a.bin_of_item, weights=sizes).max() <= C
    changed = a.bin_of_item != bins
    assert int(changed.sum()) == a.moved_items == target - B
    assert (a.bin_of_item[changed] >= B).all()  # moves only go to the new bins
    pairs = set(zip(a.rank.tolist(), a.step.tolist()))
    assert pairs == {(r, s) for r in range(dp) for s in range(a.num_steps)}
    assert a.imbalance >= 0 and a.max_step_imbalance >= a.imbalance - 1e-12
    # steps are dealt by cost: every bin of step k costs at least every bin of step k+1
    for k in range(a.num_steps - 1):
        assert a.cost[a.step == k].min() >= a.cost[a.step == k + 1].max()
    assert np.array_equal(a.bin_of_item, assign_dp(bins, sizes, sizes, C, dp).bin_of_item)
