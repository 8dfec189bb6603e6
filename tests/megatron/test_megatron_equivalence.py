"""Packing changes nothing but speed: megatron-core's GPTModel with packtool's THD attention
gives the same per-sequence losses and gradients fed one sequence at a time (no padding at
all) as fed packed slabs, for several alignments, for merged micro-batches, and for cp=2
simulated in one process (two ranks as threads, K/V gathered by concatenating the ranks').

Tolerance (fp32 on CPU): losses and gradients agree to rtol 1e-4, atol 1e-5; observed
differences are ~1e-6 (summation order of the attention and loss reductions).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")

from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron_slabs import greedy_bins, random_sequences, run_threads, thread_cp_groups, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.model import GPTShape, build_gpt, token_losses  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402

SHAPE = GPTShape(layers=2, hidden=32, heads=4, ffn=64, vocab=128, kv_heads=2, max_seq=512)
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", params=["packtool", "megatron"])
def model(request):
    """Both RoPE paths: megatron's own THD RoPE, and packtool's per-micro-batch one."""
    init_parallel(1, 1, "cpu")
    return build_gpt(SHAPE, seed=1, rope=request.param)


def _reference(model, seqs):
    """Per-sequence loss alone, and the gradient of their sum."""
    model.zero_grad(set_to_none=True)
    losses = {}
    for ids, mask in seqs:
        n = len(ids)
        b = make_thd_batch(ids, mask, [n], [n])
        loss = (token_losses(model, b) * b.loss_weight).sum()
        loss.backward()
        losses[tuple(ids.tolist())] = loss.detach()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    return losses, grads


def _segment_losses(model, batch, full_ids, full_cu, cp=1):
    """Per-segment losses of a THD batch keyed by the segment's real tokens."""
    tok = token_losses(model, batch) * batch.loss_weight
    cu_local = np.asarray(full_cu) // cp
    out = {}
    for i, n in enumerate(batch.seg_real):
        if n == 0:
            continue
        key = tuple(full_ids[full_cu[i]:full_cu[i] + n].tolist())
        out[key] = tok[0, cu_local[i]:cu_local[i + 1]].sum()
    return out


def _packed(model, path, **ds_kw):
    model.zero_grad(set_to_none=True)
    losses = {}
    ds = PackedSlabDataset(path, seed=3, **ds_kw)
    for st in ds.steps(max_steps=ds.steps_per_epoch()):
        for mb in st.micro_batches:
            if mb is None:
                continue
            cu = mb.params.cu_seqlens_q_padded.numpy()
            seg = _segment_losses(model, mb, mb.input_ids[0].numpy(), cu)
            sum(seg.values()).backward()
            losses.update({k: v.detach() for k, v in seg.items()})
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    return losses, grads


def _assert_same(ref, got):
    (rl, rg), (gl, gg) = ref, got
    assert set(rl) == set(gl)
    for k in rl:
        torch.testing.assert_close(gl[k], rl[k], **TOL)
    for k in rg:
        torch.testing.assert_close(gg[k], rg[k], **TOL, msg=lambda m: f"grad {k}: {m}")


ALIGNMENTS = {
    "tp1-cp1": Alignment(capacity=64),
    "cp2-layout": Alignment(cp=2, capacity=64),  # segments padded to 4, run here on one rank
    "fp8-blockwise-tail": Alignment(fp8="blockwise", capacity=64),  # t = 16
    "tp2-mxfp8-tail": Alignment(tp=2, fp8="mxfp8", capacity=128),  # t = 64: long tails
    "cp2-fixed-length": Alignment(cp=2, capacity=64, fixed_length=64),  # fill segments
}


@pytest.mark.parametrize("name", list(ALIGNMENTS))
def test_packed_equals_one_by_one(model, tmp_path, name):
    align = ALIGNMENTS[name]
    seqs = random_sequences(7, 3, 21, seed=len(name))
    path = write_slab_dir(str(tmp_path / name), seqs, greedy_bins(seqs, align), align,
                          rows_per_group=2)
    ref = _reference(model, seqs)
    _assert_same(ref, _packed(model, str(path), cp_size=1))


def test_merged_micro_batches_equal_one_by_one(model, tmp_path):
    align = Alignment(fp8="blockwise", capacity=32)
    seqs = random_sequences(9, 3, 15, seed=5)
    path = write_slab_dir(str(tmp_path / "m"), seqs, greedy_bins(seqs, align), align)
    ref = _reference(model, seqs)
    _assert_same(ref, _packed(model, str(path), grad_accum=4, micro_batch_tokens=96))


def test_per_sequence_gradient_inside_a_slab(model):
    """Each sequence's own gradient, taken from inside a packed slab, equals its gradient
    alone: nothing leaks between segments (attention, RoPE positions, shifted labels)."""
    align = Alignment(fp8="tensorwise", capacity=64)
    seqs = random_sequences(3, 5, 17, seed=11)
    lens = np.array([len(s[0]) for s in seqs])
    from packtool.layout import compute_layout
    lay = compute_layout(lens, np.array([0, 3]), align)
    T = int(lay.slab_len[0])
    ids, mask = np.zeros(T, np.int32), np.zeros(T, np.uint8)
    for (s, m), st in zip(seqs, lay.seg_start):
        ids[st:st + len(s)], mask[st:st + len(s)] = s, m
    b = make_thd_batch(ids, mask, lay.seg_len, lay.seg_padded)
    cu = lay.cu_seqlens_padded(0)
    for i, (s, m) in enumerate(seqs):
        model.zero_grad(set_to_none=True)
        ((token_losses(model, b) * b.loss_weight)[0, cu[i]:cu[i + 1]].sum()).backward()
        packed = {k: p.grad.clone() for k, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        one = make_thd_batch(s, m, [len(s)], [len(s)])
        ((token_losses(model, one) * one.loss_weight).sum()).backward()
        for k, p in model.named_parameters():
            torch.testing.assert_close(packed[k], p.grad, **TOL)


@pytest.mark.parametrize("fixed", [None, 64])
def test_cp2_simulated_in_process(model, tmp_path, fixed):
    """Two CP ranks as threads, each with its zigzag chunks and K/V gathered from both;
    losses summed over ranks and gradients summed over ranks equal the one-by-one run."""
    align = Alignment(cp=2, capacity=64, fixed_length=fixed)
    seqs = random_sequences(6, 3, 25, seed=21)
    path = str(write_slab_dir(str(tmp_path / "cp"), seqs, greedy_bins(seqs, align), align))
    ref = _reference(model, seqs)
    full = PackedSlabDataset(path, seed=3, cp_size=1)  # full slabs, to name the segments
    groups = thread_cp_groups(2)
    ranks = []
    for r in range(2):
        pg = ProcessGroupCollection.use_mpu_process_groups()
        pg.cp = groups[r]  # megatron's THD RoPE asks the group for size() and rank()
        m = build_gpt(SHAPE, cp=2, pg_collection=pg,
                      rope="megatron" if hasattr(model, "rotary_pos_emb") else "packtool")
        m.load_state_dict(model.state_dict())
        ranks.append((m, PackedSlabDataset(path, seed=3, cp_rank=r, cp_group=groups[r])))

    def run(r):
        m, ds = ranks[r]
        out = {}
        for st_full, st in zip(full.steps(max_steps=full.steps_per_epoch()),
                               ds.steps(max_steps=ds.steps_per_epoch())):
            for mf, mb in zip(st_full.micro_batches, st.micro_batches):
                cu = mf.params.cu_seqlens_q_padded.numpy()
                seg = _segment_losses(m, mb, mf.input_ids[0].numpy(), cu, cp=2)
                sum(seg.values()).backward()
                out.update({k: v.detach() for k, v in seg.items()})
        return out

    per_rank = run_threads([lambda r=r: run(r) for r in range(2)])
    losses = {k: per_rank[0][k] + per_rank[1][k] for k in per_rank[0]}
    grads = {k: p0.grad + p1.grad for (k, p0), p1 in
             zip(ranks[0][0].named_parameters(), ranks[1][0].parameters())}
    _assert_same(ref, (losses, grads))


def test_both_rope_paths_agree():
    """packtool's RoPE and megatron's THD RoPE give the same losses on the same weights."""
    init_parallel(1, 1, "cpu")
    a, b = build_gpt(SHAPE, seed=2, rope="megatron"), build_gpt(SHAPE, seed=2, rope="packtool")
    b.load_state_dict(a.state_dict())
    align = Alignment(cp=2, capacity=64)
    seqs = random_sequences(4, 5, 30, seed=9)
    from packtool.layout import compute_layout
    lens = np.array([len(s[0]) for s in seqs])
    lay = compute_layout(lens, np.array([0, 4]), align)
    T = int(lay.slab_len[0])
    ids, mask = np.zeros(T, np.int32), np.zeros(T, np.uint8)
    for (s, m), st in zip(seqs, lay.seg_start):
        ids[st:st + len(s)], mask[st:st + len(s)] = s, m
    la = token_losses(a, make_thd_batch(ids, mask, lay.seg_len, lay.seg_padded))
    lb = token_losses(b, make_thd_batch(ids, mask, lay.seg_len, lay.seg_padded))
    torch.testing.assert_close(la, lb, **TOL)
