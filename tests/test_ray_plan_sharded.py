"""Sharded planning (the Ray engine's plan for corpora whose packing outgrows one process):
one shard is exactly the global plan; many shards place every segment once, within
capacity, and report their bins against the lower bound. No Ray needed."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from packtool.align import Alignment
from packtool.plan import PackingConfig, plan
from packtool.plan_sharded import plan_sharded

ALIGN = Alignment(tp=2, cp=2, fp8="blockwise", capacity=4096)
REAL = "/work/shared/data/token_lengths_by_source.json"


def _lengths(n=6000, seed=1):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.integers(1, 600, n // 2), rng.integers(500, 9000, n - n // 2)])


@pytest.mark.parametrize("dp", [1, 4])
def test_one_shard_is_the_global_plan(dp):
    lengths = _lengths()
    pk = PackingConfig("mffd", overflow="split", dp=dp, seed=7)
    g = plan(lengths, ALIGN, pk)
    s = plan_sharded(lengths, ALIGN, pk, shard_rows=10**9)
    assert s.shards == 1 and s.merged_items == 0
    for f in dataclasses.fields(g):
        if f.name in ("seconds", "layout"):
            continue
        a, b = getattr(g, f.name), getattr(s.plan, f.name)
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name
    assert np.array_equal(g.layout.slab_len, s.plan.layout.slab_len)


@pytest.mark.parametrize("algorithm", ["bfd", "mffd"])
def test_many_shards_place_every_segment_once_within_capacity(algorithm):
    lengths = _lengths(seed=2)
    pk = PackingConfig(algorithm, overflow="split", seed=3)
    s = plan_sharded(lengths, ALIGN, pk, shard_rows=500)
    p = s.plan
    assert s.shards == -(-p.seg_source.size // 500) > 1
    assert s.peak_items <= max(500, s.merged_items)
    # every (row, chunk) exactly once, and the chunks of a row cover it
    pairs = p.seg_source * 1000 + p.seg_chunk
    assert np.unique(pairs).size == pairs.size
    covered = np.bincount(p.seg_source, weights=p.seg_len, minlength=lengths.size)
    assert np.array_equal(covered.astype(np.int64), lengths)
    fp = ALIGN.seq_footprint(p.seg_len)
    load = np.add.reduceat(fp, p.slab_offsets[:-1])
    assert (load <= ALIGN.usable).all()
    assert s.kept_bins + s.merged_bins == p.num_slabs
    assert s.extra_bins == p.num_slabs - p.lower_bound >= 0
    assert p.lower_bound == plan(lengths, ALIGN, pk).lower_bound


def test_underfull_threshold_decides_what_is_merged():
    lengths = _lengths(seed=4)
    pk = PackingConfig("bfd", overflow="split")
    none = plan_sharded(lengths, ALIGN, pk, shard_rows=700, underfull=0.0)
    assert none.merged_items == 0 and none.merged_bins == 0
    some = plan_sharded(lengths, ALIGN, pk, shard_rows=700, underfull=0.98)
    assert some.merged_items > 0
    assert some.plan.num_slabs <= none.plan.num_slabs  # merging the tails never costs bins here


@pytest.mark.skipif(not os.path.exists(REAL), reason="needs ../shared/data (real lengths)")
def test_real_lengths_cost_few_extra_bins():
    d = json.load(open(REAL))
    lengths = np.concatenate([np.asarray(v["mistral-7b-v0.1"]["lengths"], np.int64)
                              for v in d["sources"].values()])
    align = Alignment(tp=4, cp=2, fp8="blockwise", capacity=8192)
    pk = PackingConfig("bfd", overflow="split")
    g = plan(lengths, align, pk)
    s = plan_sharded(lengths, align, pk, shard_rows=4096)
    assert s.shards >= 7
    # within a bin per shard of the global plan (each shard's tail is re-packed)
    assert s.plan.lower_bound <= s.plan.num_slabs <= g.num_slabs + s.shards
