"""Conformance of packtool.align: DESIGN section 2's worked examples, every convention against
an independent transcription of the cited framework function (tests/transcriptions.py),
input validation, and the lower bounds (simple bound and Martello-Toth L2)."""
from __future__ import annotations

import itertools
import math
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool.align import CONVENTIONS, FP8_RECIPES, Alignment, AlignmentError, martello_toth_l2

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import transcriptions as tr  # noqa: E402

# --- DESIGN section 2 worked examples -------------------------------------------------
# Bins are decided by footprints and U: two items share a slab iff fp1 + fp2 <= U, where
# fp = round_up(len, s) and U = C - C % t; a slab is round_up(sum of its footprints, t).
#
# tp=4, cp=1, none, [7,5], C=64 (sp on):
#   packtool     s=1, t=lcm(1, 4, 1*4)=4.  fp 7+5=12 <= 64 -> one slab round_up(12,4)=12
#   skyrl        sequence=1 (cp=1); total=layout_align=tp=4 (fp8 off).        -> 12
#   nemo-rl      pad_individual=(1)*(tp=4 with SP)=4; no FP8 -> packed multiple 1, so t=4.
#                fp 8+8=16 <= 64                                             -> 16
#   verl         align_size=tp=4 for every sequence; fp 8+8=16               -> 16
#   per-sequence s=t=4: 8+8                                                  -> 16
# tp=4, cp=1, blockwise, [7,5], C=1024 (sp on):
#   packtool     s=1, r=16 on the SP-gathered tokens (measured, BENCHMARKS.md "FP8 training"),
#                t=lcm(1, 4, 16*1)=16. fp 12 <= 1024 -> round_up(12,16)=16
#   skyrl        sequence=1; total=lcm(4, _fp8_token_align=128*4*1)=512        -> 512
#   nemo-rl      (derive) pad_individual=4; get_fp8_token_alignment=128 (blockwise) ->
#                pad_packed_seq_to_multiple_of=128*4=512; U=1024-1024%512=1024.
#                fp 8+8=16 <= 1024; cu_seqlens_padded[-1]=round_up(16,512)    -> 512
#   verl         (derive) align_size=tp=4; use_fp8_padding: per sequence lcm(16,4)=16,
#                last to align_size*128=512; U=1024. fp 16+16=32 <= 1024 ->
#                cu_seqlens_padded[-1]=round_up(32,512)                      -> 512
#   per-sequence s=t=16: 16+16=32 <= 1024                                    -> 32
# tp=1, cp=2, none, [6,5], C=64 (sp off since tp=1):
#   packtool     s=4, t=lcm(4, 2, 2)=4. fp 8+8=16                            -> 16
#   skyrl        sequence=tp*cp*2=4, total=layout_align=4                     -> 16
#   nemo-rl      pad_individual=2*cp=4, no FP8                               -> 16
#   verl         align_size=tp*cp*2=4                                        -> 16
#   per-sequence s=t=4                                                       -> 16
# tp=4, cp=2, none, [17,15], C=32 (sp on):
#   packtool     s=4, t=lcm(4, 8, 8)=8, U=32. fp 20+16=36 > 32: two slabs 24 and 16
#   skyrl        sequence=4*2*2=16, total=16. fp 32+16=48 > 32: 32 and 16
#   nemo-rl      pad_individual=(2*2)*4=16, no FP8. fp 32+16 > 32: 32 and 16
#   verl         align_size=4*2*2=16. 32 and 16
#   per-sequence s=t=8: fp 24+16=40 > 32: 24 and 16
WORKED = {
    "tp4-cp1-none-C64": (4, 1, "none", [7, 5], 64,
                         {"packtool": [12], "skyrl": [12], "nemo-rl": [16], "verl": [16],
                          "per-sequence": [16]}),
    "tp4-cp1-blockwise-C1024": (4, 1, "blockwise", [7, 5], 1024,
                                {"packtool": [16], "skyrl": [512], "nemo-rl": [512],
                                 "verl": [512], "per-sequence": [32]}),
    "tp1-cp2-none-C64": (1, 2, "none", [6, 5], 64,
                         {"packtool": [16], "skyrl": [16], "nemo-rl": [16], "verl": [16],
                          "per-sequence": [16]}),
    "tp4-cp2-none-C32": (4, 2, "none", [17, 15], 32,
                         {"packtool": [24, 16], "skyrl": [32, 16], "nemo-rl": [32, 16],
                          "verl": [32, 16], "per-sequence": [24, 16]}),
}


def _two_item_bins(fp: list[int], usable: int) -> list[list[int]]:
    """Indices per slab for the two-item worked examples."""
    assert len(fp) == 2
    return [[0, 1]] if fp[0] + fp[1] <= usable else [[0], [1]]


def _slabs(a: Alignment, lengths: list[int]) -> list[int]:
    fp = a.seq_footprint(lengths)
    return [int(a.bin_footprint(fp[b].sum())) for b in _two_item_bins(list(fp), a.usable)]


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("case", list(WORKED))
def test_worked_example(case, convention):
    tp, cp, fp8, lengths, C, expected = WORKED[case]
    a = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=C, convention=convention)
    assert _slabs(a, lengths) == expected[convention]


def _framework_slab_lengths(convention, tp, cp, fp8, lengths, C):
    """Slab lengths from each framework's own packed-layout routine (transcribed), with the
    bins decided by that framework's multiples."""
    s, t = tr.TRANSCRIPTIONS[convention](tp, cp, tp > 1, fp8)
    fp = [-(-n // s) * s for n in lengths]
    out = []
    for b in _two_item_bins(fp, C - C % t):
        lens = [lengths[i] for i in b]
        if convention == "skyrl":
            _, cu = tr.skyrl_packed_segment_layout(lens, tp_size=tp, cp_size=cp,
                                                   fp8_enabled=fp8 != "none",
                                                   fp8_recipe=None if fp8 == "none" else fp8)
        elif convention == "nemo-rl":
            cfg = tr.nemo_rl_megatron_cfg(tp, cp, tp > 1, fp8)
            ind, packed, to = tr.nemo_rl_get_pack_sequence_parameters_for_megatron(
                cfg, tr.nemo_rl_get_parallel_token_alignment(cfg), max(lens))
            cu = tr.nemo_rl_cu_seqlens_padded(lens, ind, packed, to)
        else:
            cu = tr.verl_cu_seqlens_padded(lens, tp, cp, use_fp8_padding=fp8 != "none")
        out.append(cu[-1])
    return out


@pytest.mark.parametrize("convention", ["skyrl", "nemo-rl", "verl"])
@pytest.mark.parametrize("case", list(WORKED))
def test_worked_example_matches_framework_layout(case, convention):
    """The table's cells equal what the framework's own padding code produces."""
    tp, cp, fp8, lengths, C, expected = WORKED[case]
    assert _framework_slab_lengths(convention, tp, cp, fp8, lengths, C) == expected[convention]


# --- grid: every convention against its transcription ---------------------------------
GRID = list(itertools.product(range(1, 9), range(1, 5), FP8_RECIPES, (True, False)))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_convention_grid_matches_transcription(convention):
    ref = tr.TRANSCRIPTIONS[convention]
    bad = []
    for tp, cp, fp8, sp in GRID:
        a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=1 << 20, convention=convention)
        got, want = (a.s, a.t), ref(tp, cp, sp, fp8)
        if got != want:
            bad.append(f"tp={tp} cp={cp} fp8={fp8} sp={sp}: align {got} != transcription {want}")
        # invariants every convention must keep: the tail pad preserves segment divisibility
        assert a.t % a.s == 0 and a.usable % a.t == 0
    assert not bad, "\n".join(bad[:20])
    assert len(GRID) == 8 * 4 * 4 * 2


def test_skyrl_transcription_matches_skyrl_own_tests():
    # Values asserted by SkyRL's tests/backends/skyrl_train/distributed/test_packing_utils.py
    # (dyurk-lila/SkyRL@c6c68c5): anchors the transcription itself to the source's behaviour.
    total, seq = tr.skyrl_get_packing_align_size_total, tr.skyrl_get_packing_align_size_sequence
    assert total(tp_size=4, cp_size=1) == 4
    assert total(tp_size=1, cp_size=2) == 4
    assert seq(tp_size=4, cp_size=1) == 1
    assert seq(tp_size=4, cp_size=2) == 16
    assert total(tp_size=4, cp_size=1, fp8_enabled=True) == 512
    assert total(tp_size=1, cp_size=2, fp8_enabled=True) == 32
    assert total(tp_size=2, cp_size=1, fp8_enabled=True) == 256
    assert total(tp_size=2, cp_size=2, fp8_enabled=True) == 512
    for (tp, cp), want in {(1, 1): 32, (1, 2): 64, (2, 1): 64, (2, 2): 128, (4, 1): 128}.items():
        assert total(tp_size=tp, cp_size=cp, fp8_enabled=True, fp8_recipe="mxfp8") == want
    assert total(tp_size=1, cp_size=1, fp8_enabled=True, fp8_recipe="blockwise") == 16


def test_skyrl_tensorwise_takes_the_blockwise_branch():
    # _fp8_token_align only distinguishes mxfp8; tensorwise at tp>1 is 128*tp*cp in SkyRL.
    a = Alignment(tp=2, cp=2, fp8="tensorwise", capacity=1 << 16, convention="skyrl")
    assert (a.s, a.t) == (8, 512)
    assert Alignment(tp=1, cp=2, fp8="tensorwise", capacity=64, convention="skyrl").t == 32


@pytest.mark.parametrize("tp,cp,sp,fp8,want", [
    # hand-derived from _get_pack_sequence_parameters_for_megatron
    (4, 2, True, "blockwise", (16, 128 * 4 * 4)),
    (4, 2, False, "blockwise", (4, 128 * 4)),   # no SP: the TP factor drops out of both
    (2, 1, True, "mxfp8", (2, 32 * 2)),
    (1, 4, False, "tensorwise", (8, 16 * 8)),
    (8, 1, True, "none", (8, 8)),
])
def test_nemo_rl_hand_values(tp, cp, sp, fp8, want):
    assert tr.nemo_rl(tp, cp, sp, fp8) == want
    assert (lambda a: (a.s, a.t))(Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=1 << 16,
                                            convention="nemo-rl")) == want


@pytest.mark.parametrize("tp,cp,fp8,want", [
    # hand-derived from preprocess_packed_seqs: align_size, lcm(16, align), align*128
    (4, 1, "none", (4, 4)),
    (3, 1, "mxfp8", (48, 384)),
    (2, 2, "blockwise", (16, 1024)),
    (1, 1, "tensorwise", (16, 128)),
])
def test_verl_hand_values(tp, cp, fp8, want):
    for sp in (True, False):  # verl has no SP switch
        assert tr.verl(tp, cp, sp, fp8) == want
        a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=1 << 16, convention="verl")
        assert (a.s, a.t) == want


def test_packtool_fp8_tile_follows_megatron_core_where_it_applies():
    """Without TP/SP the FP8 tile r is megatron-core's get_fp8_align_size for every recipe."""
    try:
        from megatron.core.enums import Fp8Recipe
        from megatron.core.fp8_utils import get_fp8_align_size
    except ImportError as e:  # megatron-core lives in the `train` extra
        pytest.skip(f"megatron-core not importable: {e}")
    for fp8 in ("tensorwise", "mxfp8", "blockwise"):
        want = get_fp8_align_size(Fp8Recipe(fp8))
        assert want == tr.mcore_get_fp8_align_size(fp8)
        assert Alignment(tp=1, cp=1, fp8=fp8, capacity=4096).t == want


def test_sp_defaults_on_with_tp():
    assert Alignment(tp=4).sp is True and Alignment(tp=4).tp_sp == 4
    assert Alignment(tp=1).sp is False
    assert Alignment(tp=4, sp=False).tp_sp == 1


# --- invalid input names the argument (the CLI its flag: tests/cli/test_arg_names.py) -----------------------------------------------------
@pytest.mark.parametrize("kwargs,flag", [
    (dict(tp=0), "tp"),
    (dict(tp=-2), "tp"),
    (dict(cp=0), "cp"),
    (dict(cp=-1), "cp"),
    (dict(capacity=0), "capacity"),
    (dict(capacity=-8), "capacity"),
    (dict(fp8="fp4"), "fp8"),
    (dict(fp8="e4m3"), "fp8"),
    (dict(convention="megatron"), "convention"),
    (dict(tp=4, cp=2, capacity=64, fixed_length=100), "fixed_length"),  # t=8
    (dict(fixed_length=0), "fixed_length"),
    (dict(fixed_length=-16), "fixed_length"),
    (dict(tp=4, cp=2, capacity=7), "capacity"),  # U = 7 - 7 % 8 = 0
    (dict(tp=4, fp8="blockwise", capacity=15), "capacity"),  # t=16 (gathered tokens)
])
def test_invalid_input_names_the_flag(kwargs, flag):
    with pytest.raises(AlignmentError) as e:
        Alignment(**kwargs)
    assert flag in str(e.value) and "--" not in str(e.value), e.value
    assert isinstance(e.value, ValueError)


def test_fixed_length_error_suggests_the_next_multiple():
    with pytest.raises(AlignmentError, match="use fixed_length=104"):
        Alignment(tp=4, cp=2, capacity=64, fixed_length=100)


def test_usable_capacity_and_fixed_length():
    assert Alignment(tp=4, cp=2, capacity=37).usable == 32
    assert Alignment(tp=4, cp=2, capacity=64, fixed_length=48).usable == 48
    assert list(Alignment(tp=4, cp=2, fixed_length=48).slab_length([8, 40, 60])) == [48, 48, 64]


# --- lower bounds ---------------------------------------------------------------------
def l2_brute(sizes, C):
    """Martello-Toth L2 straight from its definition, every integer k in [0, C/2]: O(C*n)."""
    if not sizes:
        return 0
    best = 0
    for k in range(0, C // 2 + 1):
        j1 = [w for w in sizes if w > C - k]
        j2 = [w for w in sizes if 2 * w > C and w <= C - k]
        j3 = [w for w in sizes if k <= w and 2 * w <= C]
        free = len(j2) * C - sum(j2)
        best = max(best, len(j1) + len(j2) + max(0, -(-(sum(j3) - free) // C)))
    return best


def opt_brute(sizes, C):
    """Exact bin count by exhaustive search (tiny inputs only)."""
    best = [len(sizes)]

    def go(i, loads):
        if len(loads) >= best[0]:
            return
        if i == len(sizes):
            best[0] = len(loads)
            return
        for j in range(len(loads)):
            if loads[j] + sizes[i] <= C:
                loads[j] += sizes[i]
                go(i + 1, loads)
                loads[j] -= sizes[i]
        go(i + 1, loads + [sizes[i]])

    go(0, [])
    return best[0] if sizes else 0


@pytest.mark.parametrize("align_kw,lengths,lb,l2", [
    # s=t=1, U=10: [7,7,4,4,4] sum 26 -> lb 3; k=4: J1={7,7}, J3={4,4,4}: 2+ceil(12/10)=4
    (dict(capacity=10), [7, 7, 4, 4, 4], 3, 4),
    # three items > C/2 can never share: L2 = 3, the simple bound only ceil(18/10)=2
    (dict(capacity=10), [6, 6, 6], 2, 3),
    (dict(capacity=10), [5, 5, 5, 5], 2, 2),
    # odd C: 6 > 11/2 but 5 is not; [6,5],[6,5] is optimal
    (dict(capacity=11), [6, 6, 5, 5], 2, 2),
    # cp=2: s=t=4, U=16. fp [4,20,12,8]: 20 > U is a singleton; ceil(24/16)=2 -> 3;
    # L2 of [4,12,8]: k=0 -> 1 + ceil((12-4)/16) = 2, so 1 + 2 = 3
    (dict(cp=2, capacity=16), [3, 17, 9, 5], 3, 3),
    (dict(capacity=10), [], 0, 0),
])
def test_bounds_hand_checked(align_kw, lengths, lb, l2):
    a = Alignment(**align_kw)
    assert a.lower_bound(lengths) == lb
    assert a.l2_bound(lengths) == l2


@settings(max_examples=300, deadline=None)
@given(C=st.integers(1, 60), data=st.data())
def test_l2_matches_definition_and_dominates_simple_bound(C, data):
    sizes = data.draw(st.lists(st.integers(1, C), max_size=25))
    l2 = martello_toth_l2(np.array(sizes, dtype=np.int64), C)
    assert l2 == l2_brute(sizes, C)
    assert l2 >= -(-sum(sizes) // C)


@settings(max_examples=150, deadline=None)
@given(C=st.integers(2, 30), data=st.data())
def test_bounds_never_exceed_the_optimum(C, data):
    sizes = data.draw(st.lists(st.integers(1, C), max_size=7))
    a = Alignment(capacity=C)
    opt = opt_brute(sorted(sizes, reverse=True), C)
    assert a.lower_bound(sizes) <= a.l2_bound(sizes) <= opt


@settings(max_examples=200, deadline=None)
@given(tp=st.integers(1, 4), cp=st.integers(1, 3), fp8=st.sampled_from(FP8_RECIPES),
       mult=st.integers(1, 6), data=st.data())
def test_bounds_with_alignment_and_singletons(tp, cp, fp8, mult, data):
    t = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=1 << 20).t
    a = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=t * mult + t // 2)
    lengths = data.draw(st.lists(st.integers(1, 2 * a.usable), max_size=30))
    fp = [-(-n // a.s) * a.s for n in lengths]
    fits = [f for f in fp if f <= a.usable]
    singles = len(fp) - len(fits)
    assert a.lower_bound(lengths) == singles + -(-sum(fits) // a.usable)
    assert a.l2_bound(lengths) == singles + l2_brute(fits, a.usable)
    assert a.l2_bound(lengths) >= a.lower_bound(lengths)
    assert math.gcd(a.usable, a.t) == a.t


@pytest.mark.parametrize("L", [64.0, "64"])
def test_fixed_length_must_be_an_integer(L):
    with pytest.raises(AlignmentError, match="^fixed_length must"):
        Alignment(tp=4, cp=2, fixed_length=L)


def test_sp_with_tp1_is_off_and_noted():
    """Stranger-test R10: --tp 1 --sp was accepted silently. SP needs a TP group: packtool
    turns it off like megatron-core does, and says so."""
    from packtool.align import Alignment, sp_note
    a = Alignment(tp=1, sp=True, capacity=64)
    assert a.sp is False and (a.s, a.t) == (Alignment(tp=1, sp=False, capacity=64).s, Alignment(tp=1, capacity=64).t)
    assert "sp has no effect with tp=1" in sp_note(1, True)
    assert sp_note(1, None) is None and sp_note(2, True) is None and sp_note(1, False) is None
    assert Alignment(tp=2, sp=True, capacity=64).sp is True
