"""PackedSlabDataset and token-budget micro-batching: DP splits, planned steps, per-epoch
reshuffle, resume, merged micro-batches under the alignment model, CP params from layout."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.layout import cp_rank_index  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.thd import build_thd_params, shifted_targets  # noqa: E402


@pytest.fixture
def slabs(tmp_path):
    align = Alignment(cp=2, fp8="blockwise", capacity=64)  # s=4, t=32
    seqs = random_sequences(40, 3, 40, seed=1)
    bins = greedy_bins(seqs, align)
    return str(write_slab_dir(str(tmp_path / "s"), seqs, bins, align, rows_per_group=3,
                              shards=2)), seqs, align, len(bins)


def _segments(mb):
    """Real token tuples of a full (cp_size=1) micro-batch's segments."""
    ids = mb.input_ids[0].numpy()
    cu = mb.params.cu_seqlens_q_padded.numpy()
    return [tuple(ids[cu[i]:cu[i] + n].tolist()) for i, n in enumerate(mb.seg_real) if n]


def _epoch(ds):
    return list(ds.steps(max_steps=ds.steps_per_epoch()))


def test_round_robin_dp_split_covers_every_slab_once(slabs):
    path, seqs, _, n = slabs
    got = []
    per_rank = [_epoch(PackedSlabDataset(path, dp_rank=r, dp_size=2, cp_size=1, seed=4,
                                         grad_accum=3)) for r in range(2)]
    assert len({len(p) for p in per_rank}) == 1
    for steps in zip(*per_rank):
        assert len({len(s.micro_batches) for s in steps}) == 1  # same count on every rank
        for s in steps:
            assert s.n_empty == sum(m is None for m in s.micro_batches)
            got += [seg for m in s.micro_batches if m is not None for seg in _segments(m)]
    assert sorted(got) == sorted(tuple(ids.tolist()) for ids, _ in seqs)
    total = sum(len(s.micro_batches) for p in per_rank for s in p)
    empty = sum(s.n_empty for p in per_rank for s in p)
    assert empty == total - n
    assert empty == n % 2  # rank 1 gets one slab fewer when n is odd


def test_planned_dp_follows_rank_and_step(tmp_path):
    align = Alignment(capacity=48)
    seqs = random_sequences(30, 3, 30, seed=2)
    bins = greedy_bins(seqs, align)
    nb = len(bins)
    rng = np.random.default_rng(0)
    dp_rank, step = np.arange(nb) % 2, np.arange(nb) // 4
    micro = rng.permutation(nb)
    path = str(write_slab_dir(str(tmp_path / "p"), seqs, bins, align, dp=2, dp_rank=dp_rank,
                              step=step, microbatch=micro))
    with pytest.raises(ValueError, match="re-pack with dp=3"):
        PackedSlabDataset(path, dp_size=3)
    ds = PackedSlabDataset(path, dp_rank=1, dp_size=2, seed=0)
    seen_steps = set()
    for plan in ds.plan(epoch=0):
        slab_ids = [i for mb in plan.micro_batches for i in mb]
        k = set(int(ds.index.step[i]) for i in slab_ids)
        assert len(k) == 1 and all(ds.index.dp_rank[i] == 1 for i in slab_ids)
        assert list(ds.index.microbatch[slab_ids]) == sorted(ds.index.microbatch[slab_ids])
        want = np.flatnonzero((ds.index.step == k.pop()) & (ds.index.dp_rank == 1))
        assert sorted(slab_ids) == sorted(want.tolist())
        seen_steps.add(int(ds.index.step[slab_ids[0]]))
    assert seen_steps == set(step[dp_rank == 1].tolist())


def test_reshuffles_per_epoch_with_seed(slabs):
    path = slabs[0]
    a = PackedSlabDataset(path, cp_size=1, seed=7)
    b = PackedSlabDataset(path, cp_size=1, seed=7)
    c = PackedSlabDataset(path, cp_size=1, seed=8)
    order = lambda ds, e: [i for p in ds.plan(e) for mb in p.micro_batches for i in mb]  # noqa
    assert order(a, 0) == order(b, 0)
    assert order(a, 0) != order(a, 1)
    assert sorted(order(a, 0)) == sorted(order(a, 1))
    assert order(a, 0) != order(c, 0)


def test_resume_from_step_matches_uninterrupted(slabs):
    path = slabs[0]
    ds = PackedSlabDataset(path, cp_size=1, seed=5, grad_accum=3)
    n = ds.steps_per_epoch()
    full = list(ds.steps(max_steps=n + 3))  # crosses an epoch boundary
    k = n - 1
    resumed = list(PackedSlabDataset(path, cp_size=1, seed=5, grad_accum=3)
                   .steps(start_step=k, max_steps=4))
    assert [s.step for s in resumed] == list(range(k, k + 4))
    for a, b in zip(full[k:], resumed):
        assert a.epoch == b.epoch
        for ma, mb in zip(a.micro_batches, b.micro_batches):
            assert (ma.input_ids == mb.input_ids).all()


@pytest.mark.parametrize("budget", [64, 96, 256])
def test_token_budget_merges_and_charges_the_tail_once(slabs, budget):
    path, seqs, align, _ = slabs
    ds = PackedSlabDataset(path, cp_size=1, seed=1, grad_accum=5, micro_batch_tokens=budget)
    got, merged = [], 0
    for st in _epoch(ds):
        for mb in st.micro_batches:
            segs = mb.seg_real
            pad = mb.params.cu_seqlens_q_padded.numpy()
            T = int(pad[-1])
            fp = int(align.seq_footprint(segs).sum())
            assert T == int(align.bin_footprint(fp)) and T - fp < align.t  # tail paid once
            assert (np.diff(pad) % align.s == 0).all()
            got += _segments(mb)
            merged += 1
    assert sorted(got) == sorted(tuple(ids.tolist()) for ids, _ in seqs)
    for plan in ds.plan(0):  # over budget only when one slab alone is over it
        for mb in plan.micro_batches:
            fp = int(align.bin_footprint(ds.index.stripped[mb].sum()))
            assert fp <= budget or len(mb) == 1
    if budget >= 2 * align.usable:
        assert merged < len(ds.index)  # slabs really merged
    with pytest.raises(ValueError, match="micro_batch_tokens=31"):
        PackedSlabDataset(path, micro_batch_tokens=align.t - 1).plan(0)


def test_thd_params_and_cp_key_index_come_from_layout():
    seg_len = np.array([5, 13, 2, 8])
    seg_pad = np.array([8, 16, 4, 8])
    p = build_thd_params(seg_len, seg_pad, 1, 0)
    assert p.qkv_format == "thd"
    for t in (p.cu_seqlens_q, p.cu_seqlens_kv, p.cu_seqlens_q_padded, p.cu_seqlens_kv_padded):
        assert str(t.dtype) == "torch.int32"
    assert p.cu_seqlens_q.tolist() == [0, 5, 18, 20, 28]
    assert p.cu_seqlens_q_padded.tolist() == [0, 8, 24, 28, 36]
    assert p.max_seqlen_q == 16
    starts = np.concatenate(([0], np.cumsum(seg_pad)[:-1]))
    for cp in (2,):
        t_local = int(seg_pad.sum()) // cp
        # gathered K/V hold global positions: each rank's local slab in rank order
        gathered = np.concatenate([cp_rank_index(starts, seg_pad, cp, g) for g in range(cp)])
        for r in range(cp):
            p = build_thd_params(seg_len, seg_pad, cp, r)
            keys = gathered[p.kv_index.numpy()]
            q_pos = cp_rank_index(starts, seg_pad, cp, r)
            assert len(q_pos) == t_local == p.attn_cu_q_host[-1]
            for c in range(len(p.attn_cu_q_host) - 1):
                qs = q_pos[p.attn_cu_q_host[c]:p.attn_cu_q_host[c + 1]]
                ks = keys[p.attn_cu_k_host[c]:p.attn_cu_k_host[c + 1]]
                seg = np.searchsorted(np.cumsum(seg_pad), qs[0], side="right")
                # a chunk's keys: its segment from the start through the chunk's last query
                assert ks.tolist() == list(range(starts[seg], qs[-1] + 1))


def test_shifted_targets_stay_inside_segments():
    ids = np.arange(10, 20)
    mask = np.array([0, 1, 1, 0, 0, 1, 1, 1, 0, 0], np.uint8)
    cu = np.array([0, 4, 8, 10])
    labels, w = shifted_targets(ids, mask, cu)
    assert w.tolist() == [1, 1, 0, 0, 1, 1, 1, 0, 0, 0]
    assert labels[:2].tolist() == [11, 12] and labels[4:6].tolist() == [15, 16]
    assert labels[3] == 0 and labels[7] == 0  # segment ends never predict the next segment


def test_reader_memory_is_bounded_by_row_groups(slabs):
    ds = PackedSlabDataset(slabs[0], cp_size=1, row_group_cache=2)
    for _ in ds.steps(max_steps=ds.steps_per_epoch()):
        assert len(ds.reader._cache) <= 2
