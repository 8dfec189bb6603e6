"""Sharded planning (the Ray engine's plan for corpora whose per-sequence arrays should not sit
on the driver): one shard is exactly the global plan; many shards place every segment once,
within capacity, with the bins, bounds and DP figures the driver computes from bins alone
matching the materialized plan. No Ray needed."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from packtool.align import Alignment, martello_toth_l2
from packtool.planning.bins import bounds_from_histogram
from packtool.planning.core import SEGMENT_FIELDS, PackingConfig, plan
from packtool.planning.sharded import plan_sharded
from packtool.planning.summary import plan_summary

ALIGN = Alignment(tp=2, cp=2, fp8="blockwise", capacity=4096)
REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "token_lengths_by_source.json")


def _lengths(n=6000, seed=1):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.integers(1, 600, n // 2), rng.integers(500, 9000, n - n // 2)])


def _same_plan(g, p):
    for f in dataclasses.fields(g):
        if f.name in ("seconds", "compile_seconds", "load_seconds", "layout"):
            continue
        a, b = getattr(g, f.name), getattr(p, f.name)
        if f.name == "segments":
            for k in (*SEGMENT_FIELDS, "singleton"):
                assert np.array_equal(getattr(a, k), getattr(b, k)), k
            continue
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name
    assert np.array_equal(g.layout.slab_len, p.layout.slab_len)


def _summary(d):
    d = d.to_dict()
    d.pop("plan_seconds")
    d.pop("compile_seconds")
    d.pop("load_seconds")
    return d


@pytest.mark.parametrize("dp,overflow", [(1, "split"), (4, "split"), (3, "singleton"), (2, "truncate")])
def test_one_shard_is_the_global_plan(dp, overflow):
    lengths = _lengths()
    pk = PackingConfig("mffd", overflow=overflow, dp=dp, seed=7)
    g = plan(lengths, ALIGN, pk)
    s = plan_sharded(lengths, ALIGN, pk, shard_rows=10**9)
    assert s.stats.shards == 1 and s.stats.merged_items == 0
    _same_plan(g, s.materialize())
    assert _summary(plan_summary(g)) == _summary(s.summary())


def _check(lengths, s, align=ALIGN):
    p = s.materialize()
    # every (row, chunk) exactly once, and the chunks of a row cover it
    pairs = p.segments.source * 1000 + p.segments.chunk
    assert np.unique(pairs).size == pairs.size == s.num_segments
    covered = np.bincount(p.segments.source, weights=p.segments.length, minlength=lengths.size)
    if s.packing.overflow != "truncate":
        assert np.array_equal(covered.astype(np.int64), lengths)
    fp = align.seq_footprint(p.segments.length)
    load = np.add.reduceat(fp, p.slab_offsets[:-1])
    assert (load[~p.singleton] <= align.usable).all()
    # what the driver computed from bins alone is what the materialized plan gives
    assert _summary(plan_summary(p)) == _summary(s.summary())
    assert np.array_equal(np.diff(p.slab_offsets), s.count)
    assert p.lower_bound == align.lower_bound(p.segments.length) and p.l2_bound == align.l2_bound(p.segments.length)
    return p


@pytest.mark.parametrize("algorithm", ["bfd", "mffd"])
def test_many_shards_place_every_segment_once_within_capacity(algorithm):
    lengths = _lengths(seed=2)
    pk = PackingConfig(algorithm, overflow="split", seed=3)
    s = plan_sharded(lengths, ALIGN, pk, shard_rows=500)
    p = _check(lengths, s)
    st = s.stats
    assert st.shards == 12 and st.peak_items <= max(st.merged_items, p.segments.length.size)
    assert st.kept_bins + st.merged_bins == p.num_slabs
    assert st.extra_bins == p.num_slabs - p.lower_bound >= 0
    assert p.lower_bound == plan(lengths, ALIGN, pk).lower_bound


@pytest.mark.parametrize("dp", [3, 5])
def test_dp_moves_on_bins_across_shards(dp):
    # few, long-ish sequences: the bin count is short of a multiple of dp, so items move
    rng = np.random.default_rng(5)
    lengths = rng.integers(300, 2500, 62)
    pk = PackingConfig("bfd", overflow="split", dp=dp, seed=1)
    s = plan_sharded(lengths, ALIGN, pk, shard_rows=16, underfull=0.9)
    assert s.dp_moved > 0 and s.num_slabs % dp == 0
    p = _check(lengths, s)
    per_rank = np.bincount(p.dp_rank, minlength=dp)
    assert (per_rank == per_rank[0]).all()
    # steps never decrease on disk and (step, rank) is unique
    assert (np.diff(p.step) >= 0).all()
    assert np.unique(p.step.astype(np.int64) * dp + p.dp_rank).size == p.num_slabs


def test_underfull_threshold_decides_what_is_merged():
    lengths = _lengths(seed=4)
    pk = PackingConfig("bfd", overflow="split")
    none = plan_sharded(lengths, ALIGN, pk, shard_rows=700, underfull=0.0)
    assert none.stats.merged_items == 0 and none.stats.merged_bins == 0
    some = plan_sharded(lengths, ALIGN, pk, shard_rows=700, underfull=0.98)
    assert some.stats.merged_items > 0
    assert some.num_slabs <= none.num_slabs  # merging the tails never costs bins here


def test_bounds_from_a_histogram():
    rng = np.random.default_rng(0)
    for w in (rng.integers(1, 4097, 500), rng.integers(1000, 3000, 100), rng.integers(1, 100, 50),
              np.array([2048, 2048, 2049, 1]), np.array([4096])):
        lower, l2 = bounds_from_histogram(np.bincount(w, minlength=4097), 4096)
        assert (lower, l2) == (-(-int(w.sum()) // 4096), martello_toth_l2(w, 4096))


@pytest.mark.skipif(not os.path.exists(REAL), reason="needs ../shared/data (real lengths)")
def test_real_lengths_cost_few_extra_bins():
    d = json.load(open(REAL))
    lengths = np.concatenate([np.asarray(v["mistral-7b-v0.1"]["lengths"], np.int64)
                              for v in d["sources"].values()])
    align = Alignment(tp=4, cp=2, fp8="blockwise", capacity=8192)
    pk = PackingConfig("bfd", overflow="split")
    g = plan(lengths, align, pk)
    s = plan_sharded(lengths, align, pk, shard_rows=4096)
    assert s.stats.shards >= 7
    # within a bin per shard of the global plan (each shard's tail is re-packed)
    assert s.lower_bound <= s.num_slabs <= g.num_slabs + s.stats.shards


def test_a_shard_that_keeps_no_bin_is_routed():
    """A short last shard whose only bins are underfull sends every item to the merge pool:
    it keeps no bin, and routing still places each of its items once."""
    lengths = np.concatenate((_lengths(512), [300, 200, 100]))  # last shard: 3 short rows
    sp = plan_sharded(lengths, ALIGN, PackingConfig("bfd", overflow="split"), shard_rows=512)
    assert sp.stats.shards == 2 and len(sp.local_slab[1]) == 0
    m = sp.materialize()
    assert np.array_equal(np.sort(m.segments.source[m.segments.chunk == 0]), np.arange(lengths.size))
