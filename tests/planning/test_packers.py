"""Packers: invariants, determinism, bounds, and equality with plain references."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_packers_refs import REFS

from packtool.packers import ALGORITHMS, pack_items


def check_packing(sizes, C, bins):
    """Every item placed once in a bin 0..B-1, bins in opening order, none over C."""
    sizes = np.asarray(sizes, np.int64)
    assert bins.dtype == np.int64 and bins.shape == sizes.shape
    if sizes.size == 0:
        return 0
    B = int(bins.max()) + 1
    assert bins.min() == 0
    loads = np.bincount(bins, weights=sizes, minlength=B)
    assert (loads > 0).all(), "a bin id is unused"
    assert loads.max() <= C
    # opening order: in descending processing order, bin ids first appear as 0, 1, 2, ...
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    first_seen = list(dict.fromkeys(int(bins[i]) for i in order))
    if first_seen != list(range(B)):
        # mffd opens its A-bins first, in phase 1; they are also first in descending order
        raise AssertionError(f"bins not numbered in opening order: {first_seen[:20]}")
    assert B >= -(-int(sizes.sum()) // C), "below the lower bound ceil(sum/C)"
    assert B <= 2 * int(sizes.sum()) // C + 1, "any-fit bound: at most one bin half empty"
    return B


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_on_random_inputs(algorithm, seed):
    rng = np.random.default_rng(seed)
    C = int(rng.choice([7, 16, 100, 1000]))
    n = int(rng.integers(1, 300))
    hi = C if seed % 2 else max(1, C // 5)  # big items and many small equal ones
    sizes = rng.integers(1, hi + 1, n)
    bins = pack_items(sizes, C, algorithm)
    check_packing(sizes, C, bins)
    assert bins.tolist() == REFS[algorithm](sizes.tolist(), C)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_deterministic_and_input_untouched(algorithm):
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 4097, 20000)
    keep = sizes.copy()
    a = pack_items(sizes, 4096, algorithm)
    b = pack_items(sizes, 4096, algorithm)
    assert np.array_equal(a, b)
    assert np.array_equal(sizes, keep)
    check_packing(sizes, 4096, a)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("spread", ["large", "small", "ties"])
def test_large_capacity_sparse_paths(algorithm, spread):
    # C far above n takes the stable merge sort instead of the counting sort, and bfd its
    # sorted-array structure instead of the capacity-indexed one
    rng = np.random.default_rng(3)
    C = 10**9
    if spread == "large":
        sizes = rng.integers(1, C + 1, 300)
    elif spread == "small":
        sizes = rng.integers(1, C // 40, 300)
    else:
        sizes = rng.choice(np.array([C // 3, C // 7, C // 9, C // 40]) + 1, 300)
    bins = pack_items(sizes, C, algorithm)
    check_packing(sizes, C, bins)
    assert bins.tolist() == REFS[algorithm](sizes.tolist(), C)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_edge_cases(algorithm):
    assert pack_items(np.array([], np.int64), 10, algorithm).size == 0
    assert pack_items(np.array([10]), 10, algorithm).tolist() == [0]
    assert pack_items(np.array([1] * 25), 10, algorithm).max() + 1 == 3
    assert pack_items(np.array([5, 5, 5, 5], np.int32), 10, algorithm).max() + 1 == 2


def test_equal_size_items_fill_bins_in_index_order():
    # ties by input index: the first C//s equal items share bin 0
    assert pack_items(np.array([3] * 7), 9, "ffd").tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert pack_items(np.array([3] * 7), 9, "bfd").tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert pack_items(np.array([3] * 7), 9, "balanced").tolist() == [0, 0, 0, 1, 1, 1, 2]


def test_balanced_by_hand():
    # C=10: 6 opens bin0 (rem 4); 5 > 4 opens bin1 (rem 5); 4 -> least loaded bin1 (rem 1);
    # 3 -> least loaded bin0 (rem 1); 2 fits nowhere -> bin2. FFD puts 4 into bin0 (rem 0),
    # 3 and 2 into bin1 (rem 0): 2 bins, balanced pays a bin for even loads.
    assert pack_items(np.array([6, 5, 4, 3, 2]), 10, "balanced").tolist() == [0, 1, 1, 0, 2]
    assert pack_items(np.array([6, 5, 4, 3, 2]), 10, "ffd").tolist() == [0, 1, 0, 1, 1]


def test_bfd_picks_tightest_ffd_picks_first():
    # C=10: 7 -> bin0 (rem 3); 5 -> bin1 (rem 5); 4 does not fit bin0 -> bin1 (rem 1).
    # The last item (1) fits both: first fit takes bin0, best fit the tighter bin1.
    sizes = np.array([7, 5, 4, 1])
    assert pack_items(sizes, 10, "ffd").tolist() == [0, 1, 1, 0]
    assert pack_items(sizes, 10, "bfd").tolist() == [0, 1, 1, 1]


def test_bfd_tie_goes_to_most_recently_filled_bin():
    # C=10: 9 -> bin0 (rem 1); 7 -> bin1 (rem 3); 2 -> bin1 (rem 1). Both bins have rem 1;
    # bin1 was placed into last, so the 1 goes there (the bin count cannot depend on it).
    assert pack_items(np.array([9, 7, 2, 1]), 10, "bfd").tolist() == [0, 1, 1, 1]


@pytest.mark.parametrize("bad,msg", [(np.array([0, 3]), r"sizes\[0\] = 0"),
                                     (np.array([3, 11]), r"sizes\[1\] = 11 .*overflow")])
def test_rejects_sizes_outside_capacity(bad, msg):
    with pytest.raises(ValueError, match=msg):
        pack_items(bad, 10, "ffd")


def test_rejects_unknown_algorithm_and_capacity():
    with pytest.raises(ValueError, match="^algorithm must"):
        pack_items(np.array([1]), 10, "nfd")
    with pytest.raises(ValueError, match="^capacity must"):
        pack_items(np.array([1]), 0, "ffd")


@st.composite
def instances(draw):
    C = draw(st.integers(1, 2000))
    small = draw(st.booleans())
    hi = max(1, C // 7) if small else C
    sizes = draw(st.lists(st.integers(1, hi), min_size=0, max_size=120))
    return np.array(sizes, np.int64), C


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=120, deadline=None)
@given(inst=instances())
def test_property_valid_and_equal_to_reference(algorithm, inst):
    sizes, C = inst
    bins = pack_items(sizes, C, algorithm)
    check_packing(sizes, C, bins)
    assert np.array_equal(bins, pack_items(sizes, C, algorithm))
    assert bins.tolist() == REFS[algorithm](sizes.tolist(), C)
