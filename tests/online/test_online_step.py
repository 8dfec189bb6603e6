"""packtool.online.step: per-step bins under the alignment model, DP counts and dealing."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packtool.align import Alignment
from packtool.layout import compute_layout
from packtool.online import OnlinePackError, StepPacker, pack_step
from packtool.packers import pack_items

ALIGNS = [Alignment(capacity=1000), Alignment(tp=2, cp=2, fp8="blockwise", capacity=4096),
          Alignment(cp=4, capacity=3000)]


def _slab_lengths(bins, lens, align):
    offs = bins.offsets
    return compute_layout(lens[bins.items], offs, align).slab_len


@settings(max_examples=150, deadline=None)
@given(lens=st.lists(st.integers(1, 3000), min_size=1, max_size=200),
       ai=st.integers(0, len(ALIGNS) - 1),
       alg=st.sampled_from(["ffd", "least-loaded", "bfd", "mffd", "balanced"]),
       dp=st.one_of(st.none(), st.integers(1, 8)), moves=st.sampled_from(["balance", "skyrl"]))
def test_bins_fit_after_alignment_and_cover_every_sequence(lens, ai, alg, dp, moves):
    align = ALIGNS[ai]
    lens = np.array(lens)
    fp = align.seq_footprint(lens)
    try:
        b = pack_step(lens, align, algorithm=alg, dp=dp, moves=moves, oversize="singleton")
    except OnlinePackError as e:  # only when dp asks for more bins than sequences
        target = int(str(e).split()[2])
        assert dp and target % dp == 0 and target > lens.size
        return
    assert np.array_equal(np.sort(b.items), np.arange(lens.size))
    assert np.array_equal(b.bin_of[b.items], np.repeat(np.arange(b.num_bins), np.diff(b.offsets)))
    slab = _slab_lengths(b, lens, align)
    assert np.array_equal(slab, b.footprint)  # align/layout agree with the per-bin figure
    multi = np.diff(b.offsets) > 1
    assert (slab[multi] <= align.capacity).all()  # only a lone oversized sequence exceeds
    assert (np.diff(b.offsets) >= 1).all()
    assert b.tokens.sum() == lens.sum()
    if dp:
        assert b.num_bins % dp == 0 and b.num_bins >= dp
        assert np.array_equal(np.bincount(b.rank, minlength=dp), np.full(dp, b.num_bins // dp))
        for r in range(dp):  # each rank's micro-batches 0..k-1 once
            assert sorted(b.micro[b.rank == r].tolist()) == list(range(b.num_bins // dp))
    else:
        nb = int((fp > align.usable).sum())
        if alg in ("bfd", "mffd", "balanced"):  # packtool's packers, unchanged
            ref = pack_items(fp[fp <= align.usable], align.usable, alg)
            assert b.num_bins == nb + (ref.max() + 1 if ref.size else 0)


def test_ffd_equals_packtool_ffd():
    rng = np.random.default_rng(0)
    for n in (1, 50, 5000):
        lens = np.clip(rng.lognormal(7, 1, n), 1, 16384).astype(np.int64)
        b = pack_step(lens, capacity=16384)
        assert np.array_equal(b.bin_of, pack_items(lens, 16384, "ffd"))


def test_inputs_without_copies_and_of_any_int_type():
    lens = np.random.default_rng(1).integers(1, 900, 500)
    p = StepPacker(capacity=1024, dp=4)
    ref = p.pack(lens)
    assert p.pack(lens).lengths is lens  # an int64 array is used as is
    for other in (lens.tolist(), lens.astype(np.int32), lens.astype(np.uint16)):
        assert np.array_equal(p.pack(other).bin_of, ref.bin_of)
    torch = pytest.importorskip("torch", reason="torch tensors as lengths")
    assert np.array_equal(p.pack(torch.as_tensor(lens)).bin_of, ref.bin_of)


def test_dp_dealing_balances_ranks():
    lens = np.clip(np.random.default_rng(2).lognormal(7, 1, 4096), 1, 16384).astype(int)
    b = pack_step(lens, capacity=16384, dp=8)
    assert b.imbalance() < 0.05
    got = np.concatenate([i for r in range(8) for i in b.rank_bins(r)])
    assert np.array_equal(np.sort(got), np.arange(lens.size))


def test_errors_name_the_sequence_and_the_fix():
    with pytest.raises(OnlinePackError, match=r"sequence 1.*footprint 1004.*oversize"):
        pack_step([5, 1001], Alignment(cp=2, capacity=1000))
    with pytest.raises(OnlinePackError, match=r"lengths\[2\] is -3"):
        pack_step([5, 6, -3], capacity=100)
    with pytest.raises(OnlinePackError, match="1-D array of integers"):
        pack_step([0.5, 2.0], capacity=100)
    with pytest.raises(OnlinePackError, match="algorithm must be one of"):
        StepPacker(capacity=100, algorithm="worst-fit")
    assert pack_step([], capacity=100).num_bins == 0


def test_import_stays_light_and_warm_cache_covers_every_path():
    """`import packtool.online` loads no pyarrow/rich/torch (start-up); the warm-up runs
    every compiled path (a kernel that fails to compile fails here)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys, packtool.online as o; o.pack_step([3, 4], capacity=8); "
            "print(sorted(m for m in ('pyarrow', 'rich', 'torch', 'typer', 'megatron') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=root).stdout.strip().splitlines()[-1]
    assert out == "[]"
    from packtool.online import warm_cache
    assert warm_cache() > 0
