"""Conformance of packtool.layout: CP zigzag chunking against a transcription of
TransformerEngine's thd_get_partitioned_indices, the inverse (cp_merge), local offsets, and
compute_layout on hand-built slabs plus property tests over random alignments."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool import layout as layout_mod
from packtool.align import CONVENTIONS, FP8_RECIPES, Alignment
from packtool.layout import compute_layout, cp_chunk_ranges, cp_local_cu_seqlens_padded, cp_merge, cp_rank_index


# --- reference: TransformerEngine thd_get_partitioned_indices -------------------------
# NVIDIA/TransformerEngine@a79955f transformer_engine/common/fused_attn/context_parallel.cu,
# thd_partition_indices_kernel + binary_search, one loop iteration per output token.
def _te_binary_search(target, array, length):
    left, right = 1, length - 1
    while left < right:
        mid = (left + right) // 2
        if array[mid] <= target:
            left = mid + 1
        else:
            right = mid
    return left - 1


def te_thd_get_partitioned_indices(cu_seqlens, total_tokens, world_size, rank):
    batch = len(cu_seqlens) - 1
    assert all(c % (world_size * 2) == 0 for c in cu_seqlens)
    cu_seqlens_s = [c // world_size for c in cu_seqlens]
    output = []
    for token_id in range(total_tokens // world_size):
        seq_id = _te_binary_search(token_id, cu_seqlens_s, batch + 1)
        seq_len = cu_seqlens_s[seq_id + 1] - cu_seqlens_s[seq_id]
        index = token_id - cu_seqlens_s[seq_id]
        offset = rank if index < seq_len // 2 else (world_size - 1) * 2 - rank
        index += cu_seqlens_s[seq_id] * world_size + seq_len // 2 * offset
        output.append(index)
    return output


def _starts(padded):
    return np.concatenate(([0], np.cumsum(padded)[:-1])).astype(np.int64)


@settings(max_examples=200, deadline=None)
@given(cp=st.integers(2, 4), chunks=st.lists(st.integers(1, 12), min_size=1, max_size=12))
def test_cp_rank_index_matches_transformer_engine(cp, chunks):
    padded = np.array(chunks, np.int64) * 2 * cp
    start = _starts(padded)
    cu = [0] + list(np.cumsum(padded))
    total = int(padded.sum())
    for rank in range(cp):
        got = cp_rank_index(start, padded, cp, rank)
        assert got.tolist() == te_thd_get_partitioned_indices(cu, total, cp, rank)


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_cp1_rank_index_is_identity(chunks):
    padded = np.array(chunks, np.int64)
    assert cp_rank_index(_starts(padded), padded, 1, 0).tolist() == list(range(int(padded.sum())))


@settings(max_examples=150, deadline=None)
@given(tp=st.integers(1, 4), cp=st.integers(1, 4), fp8=st.sampled_from(FP8_RECIPES),
       lengths=st.lists(st.integers(1, 300), min_size=1, max_size=8), fill=st.integers(0, 3))
def test_cp_on_real_layouts(tp, cp, fp8, lengths, fill):
    """Through compute_layout (tail pad and fixed-length fill segment included): TE's
    indices per rank, cp_merge reassembles the slab, cu_seqlens_padded // cp are the local
    starts of every segment in each rank's local slab."""
    t = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=1 << 20).t
    fp_total = sum(-(-n // (2 * cp if cp > 1 else 1)) * (2 * cp if cp > 1 else 1) for n in lengths)
    L = (-(-fp_total // t) + fill) * t
    a = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=L, fixed_length=L)
    lay = compute_layout(np.array(lengths), np.array([0, len(lengths)]), a)
    start, padded = lay.seg_start, lay.seg_padded
    cu = lay.cu_seqlens_padded(0)
    T = int(lay.slab_len[0])
    assert T == L and cu[-1] == T
    slab = np.random.default_rng(len(lengths)).integers(0, 1 << 30, T)
    local_cu = cp_local_cu_seqlens_padded(cu, cp)
    assert local_cu.tolist() == [c // cp for c in cu.tolist()]
    locals_ = []
    for r in range(cp):
        idx = cp_rank_index(start, padded, cp, r)
        if cp > 1:
            assert idx.tolist() == te_thd_get_partitioned_indices(cu.tolist(), T, cp, r)
        assert idx.size == T // cp
        # segment i starts in the local slab at cu_padded[i] // cp with chunk r's first token
        chunk = padded // (2 * cp) if cp > 1 else padded
        assert np.array_equal(idx[local_cu[:-1]], start + r * chunk)
        locals_.append(slab[idx])
    assert np.array_equal(cp_merge(locals_, start, padded, cp), slab)


def test_cp_chunk_ranges_hand_example():
    # DESIGN: for cp=2 a rank holds chunks r and 3-r of each segment: [8,8] gives each rank 8.
    a = Alignment(tp=1, cp=2, capacity=64)
    lay = compute_layout(np.array([6, 5]), np.array([0, 2]), a)
    assert lay.seg_padded.tolist() == [8, 8]
    rng = cp_chunk_ranges(lay.seg_start, lay.seg_padded, 2)
    assert rng[0].tolist() == [[[0, 2], [6, 8]], [[2, 4], [4, 6]]]
    assert rng[1].tolist() == [[[8, 10], [14, 16]], [[10, 12], [12, 14]]]
    assert cp_rank_index(lay.seg_start, lay.seg_padded, 2, 0).tolist() == [0, 1, 6, 7, 8, 9, 14, 15]
    assert cp_rank_index(lay.seg_start, lay.seg_padded, 2, 1).tolist() == [2, 3, 4, 5, 10, 11, 12, 13]


def test_cp_chunk_ranges_rejects_indivisible_segments():
    with pytest.raises(ValueError, match="2\\*cp=4"):
        cp_chunk_ranges(np.array([0, 8]), np.array([8, 6]), 2)
    with pytest.raises(ValueError, match="out of range"):
        cp_rank_index(np.array([0]), np.array([8]), 2, 2)


# --- compute_layout on hand-built slabs -----------------------------------------------
def test_tail_pad_lands_on_the_last_real_segment():
    # tp=4, cp=2: s=4, t=8. [17,15] -> footprints 20,16 = 36 -> slab 40, tail 4 on segment 2
    a = Alignment(tp=4, cp=2, capacity=64)
    lay = compute_layout(np.array([17, 15]), np.array([0, 2]), a)
    assert lay.seg_len.tolist() == [17, 15]
    assert lay.seg_padded.tolist() == [20, 20]
    assert lay.seg_start.tolist() == [0, 20]
    assert lay.is_fill.tolist() == [False, False]
    assert (lay.footprint.tolist(), lay.layout_pad.tolist(), lay.tail_pad.tolist(),
            lay.fill.tolist(), lay.slab_len.tolist()) == ([40], [4], [4], [0], [40])
    assert lay.cu_seqlens(0).tolist() == [0, 17, 32]
    assert lay.cu_seqlens_padded(0).tolist() == [0, 20, 40]


def test_many_bins_at_once():
    a = Alignment(tp=4, cp=2, capacity=64)  # s=4, t=8
    lay = compute_layout(np.array([17, 15, 3, 8]), np.array([0, 1, 3, 4]), a)
    # bin 0: [17] -> 20 -> 24 (tail 4); bin 1: [15,3] -> 16+4=20 -> 24 (tail 4); bin 2: [8] -> 8
    assert lay.seg_offsets.tolist() == [0, 1, 3, 4]
    assert lay.seg_padded.tolist() == [24, 16, 8, 8]
    assert lay.seg_start.tolist() == [0, 0, 16, 0]
    assert lay.footprint.tolist() == [24, 24, 8]
    assert lay.layout_pad.tolist() == [3, 2, 0]
    assert lay.tail_pad.tolist() == [4, 4, 0]
    assert lay.cu_seqlens(1).tolist() == [0, 15, 18]
    assert lay.cu_seqlens_padded(1).tolist() == [0, 16, 24]
    assert lay.bin_of_segment().tolist() == [0, 1, 1, 2]


def test_fixed_length_fill_is_its_own_segment():
    a = Alignment(tp=4, cp=2, fixed_length=64)  # s=4, t=8, L=64
    lay = compute_layout(np.array([17, 15, 5]), np.array([0, 2, 3]), a)
    # bin 0: footprint 40, fill 24 as a third segment; bin 1: [5] -> 8, fill 56
    assert lay.seg_offsets.tolist() == [0, 3, 5]
    assert lay.seg_len.tolist() == [17, 15, 0, 5, 0]
    assert lay.seg_padded.tolist() == [20, 20, 24, 8, 56]
    assert lay.is_fill.tolist() == [False, False, True, False, True]
    assert lay.seg_start.tolist() == [0, 20, 40, 0, 8]
    assert lay.fill.tolist() == [24, 56]
    assert lay.slab_len.tolist() == [64, 64]
    assert lay.cu_seqlens(0).tolist() == [0, 17, 32, 32]
    assert lay.cu_seqlens_padded(0).tolist() == [0, 20, 40, 64]
    assert lay.cu_seqlens_padded(1).tolist() == [0, 8, 64]
    for b in range(2):
        real = int(lay.seg_len[lay.seg_offsets[b]:lay.seg_offsets[b + 1]].sum())
        assert real + lay.layout_pad[b] + lay.tail_pad[b] + lay.fill[b] == lay.slab_len[b]


def test_fixed_length_bin_that_already_fills_gets_no_fill_segment():
    a = Alignment(tp=4, cp=2, fixed_length=16)
    lay = compute_layout(np.array([13, 30]), np.array([0, 1, 2]), a)
    # bin 0: 16 == L, no fill; bin 1: a declared singleton of 32 > L keeps its footprint
    assert lay.seg_offsets.tolist() == [0, 1, 2]
    assert lay.fill.tolist() == [0, 0]
    assert lay.slab_len.tolist() == [16, 32]
    assert not lay.is_fill.any()


def test_blockwise_tail_pad_without_cp():
    a = Alignment(tp=4, fp8="blockwise", capacity=1024)  # s=1, t=16 (FP8 rule on gathered tokens)
    lay = compute_layout(np.array([7, 5]), np.array([0, 2]), a)
    assert lay.seg_padded.tolist() == [7, 9]
    assert (lay.layout_pad[0], lay.tail_pad[0], lay.slab_len[0]) == (0, 4, 16)


def test_empty_plan():
    lay = compute_layout(np.zeros(0, np.int64), np.array([0]), Alignment(tp=2, cp=2))
    assert lay.n_bins == 0 and lay.seg_len.size == 0 and lay.slab_len.size == 0


def test_bin_without_segments_is_rejected():
    with pytest.raises(ValueError, match="slab 1"):
        compute_layout(np.array([4, 4]), np.array([0, 2, 2]), Alignment())


# --- property tests -------------------------------------------------------------------
@st.composite
def plans(draw):
    tp = draw(st.integers(1, 8))
    cp = draw(st.integers(1, 4))
    sp = draw(st.booleans())
    fp8 = draw(st.sampled_from(FP8_RECIPES))
    conv = draw(st.sampled_from(CONVENTIONS))
    probe = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=1 << 24, convention=conv)
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=8))
    lengths = draw(st.lists(st.integers(1, 3000), min_size=sum(counts), max_size=sum(counts)))
    offsets = np.concatenate(([0], np.cumsum(counts)))
    fixed = None
    if draw(st.booleans()):
        fp_sum = np.add.reduceat(probe.seq_footprint(lengths), offsets[:-1])
        most = int(probe.bin_footprint(fp_sum).max())
        fixed = most + draw(st.integers(0, 3)) * probe.t
    a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, convention=conv, fixed_length=fixed,
                  capacity=1 << 24)
    return a, np.array(lengths, np.int64), offsets


@settings(max_examples=300, deadline=None)
@given(plans())
def test_layout_properties(plan):
    a, lengths, offsets = plan
    lay = compute_layout(lengths, offsets, a)
    n_bins = offsets.size - 1
    assert lay.n_bins == n_bins
    assert (lay.footprint % a.t == 0).all()
    assert (lay.seg_padded % a.s == 0).all()
    assert (lay.seg_padded >= lay.seg_len).all()
    if a.fixed_length is not None:
        assert (lay.slab_len == a.fixed_length).all()
    else:
        assert (lay.slab_len == lay.footprint).all()
    # the real segments, in order, are the input
    assert np.array_equal(lay.seg_len[~lay.is_fill], lengths)
    assert (lay.seg_len[lay.is_fill] == 0).all()
    for b in range(n_bins):
        lo, hi = lay.seg_offsets[b], lay.seg_offsets[b + 1]
        cu, cup = lay.cu_seqlens(b), lay.cu_seqlens_padded(b)
        assert cu.size == cup.size == hi - lo + 1
        assert (np.diff(cu) >= 0).all() and (np.diff(cup) > 0).all()
        assert cu[0] == cup[0] == 0
        assert cup[-1] == lay.slab_len[b]
        assert cu[-1] == lengths[offsets[b]:offsets[b + 1]].sum()
        assert np.array_equal(cup[:-1], lay.seg_start[lo:hi])
        assert np.array_equal(cu, np.concatenate(([0], np.cumsum(lay.seg_len[lo:hi]))))
        assert np.array_equal(cup, np.concatenate(([0], np.cumsum(lay.seg_padded[lo:hi]))))
        # only the last real segment carries more than its own round_up(len, s)
        real = np.flatnonzero(~lay.is_fill[lo:hi]) + lo
        extra = lay.seg_padded[real] - a.seq_footprint(lay.seg_len[real])
        assert (extra[:-1] == 0).all() and extra[-1] == lay.tail_pad[b]
        fills = np.flatnonzero(lay.is_fill[lo:hi])
        assert fills.size == (lay.fill[b] > 0)
        if fills.size:
            assert fills[0] == hi - lo - 1 and lay.seg_padded[hi - 1] == lay.fill[b]
        assert (lay.seg_len[lo:hi].sum() + lay.layout_pad[b] + lay.tail_pad[b] + lay.fill[b]
                == lay.slab_len[b])
        assert lay.tail_pad[b] < a.t
    if hasattr(layout_mod, "flat_cu"):  # the writer's columnar form of the same arrays
        b0, b1 = 0, n_bins
        cu, cup, off = layout_mod.flat_cu(lay, b0, b1)
        assert off.tolist() == np.concatenate(([0], np.cumsum(np.diff(lay.seg_offsets) + 1))).tolist()
        for b in range(n_bins):
            assert np.array_equal(cu[off[b]:off[b + 1]], lay.cu_seqlens(b))
            assert np.array_equal(cup[off[b]:off[b + 1]], lay.cu_seqlens_padded(b))


# --- target alignment of per-token values (FORMAT.md "Side columns") -----------------
def _naive_shift(values, cu, fill):
    """One segment at a time: position p of a segment gets the value of p+1, the last fill."""
    out = np.empty_like(values)
    for a, b in zip(cu[:-1], cu[1:]):
        if b > a:
            out[a:b - 1] = values[a + 1:b]
            out[b - 1] = fill
    return out


def _shift_ok(shift, values, cu, fill):
    """The value paired with the logits at p is the one of the token they predict (p+1)."""
    got = np.asarray(shift(values, cu, fill))
    return got.shape == values.shape and np.array_equal(got, _naive_shift(values, cu, fill))


_PLANTED = {
    "unshifted": lambda v, cu, fill: v.copy(),
    "shifted by 2": lambda v, cu, fill: np.concatenate((v[2:], np.full_like(v[:2], fill))),
    "no fill at segment ends": lambda v, cu, fill: np.concatenate((v[1:], np.full_like(v[:1], fill))),
    "fill at segment starts": lambda v, cu, fill: _fill_at(np.concatenate((v[1:], np.full_like(v[:1], fill))),
                                                          np.asarray(cu[:-1]), fill),
}


def _fill_at(v, where, fill):
    v[where] = fill
    return v


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=8), width=st.sampled_from([1, 3]),
       torch_in=st.booleans())
def test_shift_like_labels_is_the_per_segment_shift(lengths, width, torch_in):
    from packtool.layout import shift_like_labels
    cu = np.concatenate(([0], np.cumsum(lengths)))
    shape = (int(cu[-1]),) if width == 1 else (int(cu[-1]), width)
    values = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if torch_in:
        torch = pytest.importorskip("torch")

        def shift(v, c, f):
            out = shift_like_labels(torch.from_numpy(v), torch.from_numpy(c), f)
            assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
            return out.numpy()
    else:
        shift = shift_like_labels
    assert _shift_ok(shift, values, cu, -7.0)


@pytest.mark.parametrize("bug", sorted(_PLANTED))
def test_a_planted_off_by_one_fails_the_shift_check(bug):
    cu = np.array([0, 4, 5, 9, 15])  # one single-token segment
    values = np.arange(1, 16, dtype=np.float32)
    assert not _shift_ok(_PLANTED[bug], values, cu, 0.0)
    assert not _shift_ok(_PLANTED[bug], np.stack([values, -values], 1), cu, 0.0)


def test_shift_like_labels_refuses_offsets_of_another_slab():
    from packtool.layout import shift_like_labels
    with pytest.raises(ValueError, match="rise from 0 to the 5 positions"):
        shift_like_labels(np.zeros(5), np.array([0, 3, 6]), 0)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=6), cp=st.integers(1, 3),
       width=st.sampled_from([1, 4]))
def test_placed_values_sit_in_their_segments(lengths, cp, width):
    """token_destinations + place_tokens put sequence k's values at the start of segment k,
    pads hold the fill; numpy and torch give the same slab."""
    from packtool.layout import place_tokens, token_destinations
    lens = np.array(lengths)
    lay = compute_layout(lens, np.array([0, lens.size]), Alignment(cp=cp, capacity=1 << 12))
    n = int(lens.sum())
    vals = np.arange(n * width, dtype=np.int32).reshape((n,) if width == 1 else (n, width))
    T = int(lay.slab_len[0])
    got = place_tokens(vals, token_destinations(lens, lay.seg_start), T, -1)
    src = 0
    for k, L in enumerate(lengths):
        st_, pad = int(lay.seg_start[k]), int(lay.seg_padded[k])
        assert np.array_equal(got[st_:st_ + L], vals[src:src + L])
        assert (got[st_ + L:st_ + pad] == -1).all()
        src += L
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(vals)
    assert np.array_equal(place_tokens(t, token_destinations(lens, lay.seg_start, like=t), T, -1).numpy(), got)
