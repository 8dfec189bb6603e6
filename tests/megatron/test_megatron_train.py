"""Loss normalization and `packtool train` on CPU (tiny megatron-core GPTModel).

The step loss is the mean over the step's loss tokens, whatever the micro-batching:
one slab per micro-batch, merged micro-batches, or two DP ranks (simulated in-process:
the loss-token count summed over ranks as the all-reduce would, gradients summed).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")

from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape, build_gpt, loss_sum, token_losses  # noqa: E402
from packtool.megatron.parallel import init_parallel  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402

SHAPE = GPTShape(layers=2, hidden=32, heads=4, ffn=64, vocab=128, max_seq=512)
TOL = dict(rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    align = Alignment(fp8="tensorwise", capacity=64)  # t = 16
    seqs = random_sequences(30, 3, 40, seed=3)
    path = tmp_path_factory.mktemp("slabs") / "d"
    return str(write_slab_dir(str(path), seqs, greedy_bins(seqs, align), align)), seqs


def _first_step_slabs(path, **kw):
    ds = PackedSlabDataset(path, cp_size=1, seed=0, **kw)
    plan = ds.plan(0)[0]
    return ds, plan


def _reference(model, ds, slab_ids):
    """Token-mean loss and its gradient, one sequence at a time (no packing at all)."""
    model.zero_grad(set_to_none=True)
    count, losses = 0, []
    for i in slab_ids:
        r = ds.reader.row(i)
        starts = np.concatenate(([0], np.cumsum(r.seg_padded)[:-1]))
        for s0, n in zip(starts, r.seq_lens):
            ids, m = np.array(r.input_ids[s0:s0 + n]), np.array(r.loss_mask[s0:s0 + n])
            b = make_thd_batch(ids, m, [n], [n])
            losses.append((token_losses(model, b) * b.loss_weight).sum())
            count += b.num_loss_tokens
    loss = sum(losses) / count
    loss.backward()
    return float(loss), {k: p.grad.clone() for k, p in model.named_parameters()}


def _step(model, steps):
    """What the loop does for one optimizer step, DP ranks given as a list of Steps."""
    model.zero_grad(set_to_none=True)
    n_loss = sum(s.loss_tokens for s in steps)  # the DP all-reduce
    acc = 0.0
    for st in steps:  # gradients accumulate = the DP sum
        for mb in st.micro_batches:
            if mb is None:
                continue
            ls = loss_sum(model, mb)
            (ls / n_loss).backward()
            acc += float(ls)
    return acc / n_loss, {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("layout", ["one-slab-each", "merged", "dp2"])
def test_step_loss_is_the_token_mean_whatever_the_micro_batching(data, layout):
    init_parallel(1, 1, "cpu")
    model = build_gpt(SHAPE, seed=0)
    path, _ = data
    ds, plan = _first_step_slabs(path, grad_accum=4)
    slab_ids = [i for mb in plan.micro_batches for i in mb]
    ref_loss, ref_grads = _reference(model, ds, slab_ids)
    if layout == "one-slab-each":
        steps = [next(ds.steps(max_steps=1))]
    elif layout == "merged":
        ds2 = PackedSlabDataset(path, cp_size=1, seed=0, grad_accum=4, micro_batch_tokens=160)
        assert sorted(i for mb in ds2.plan(0)[0].micro_batches for i in mb) == sorted(slab_ids)
        assert len(ds2.plan(0)[0].micro_batches) < 4
        steps = [next(ds2.steps(max_steps=1))]
    else:
        ranks = [PackedSlabDataset(path, cp_size=1, seed=0, grad_accum=2, dp_rank=r, dp_size=2)
                 for r in range(2)]
        got = sorted(i for d in ranks for mb in d.plan(0)[0].micro_batches for i in mb)
        assert got == sorted(slab_ids)
        steps = [next(d.steps(max_steps=1)) for d in ranks]
    loss, grads = _step(model, steps)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for k in grads:
        torch.testing.assert_close(grads[k], ref_grads[k], **TOL)


def test_train_loop_reports_the_token_mean(data, tmp_path):
    path, _ = data
    log = tmp_path / "log.jsonl"
    cfg = TrainConfig(data_dir=path, shape=SHAPE, steps=1, grad_accum=4, lr=1e-3, quiet=True,
                      json_log=str(log), micro_batch_tokens=160)
    rec = train(cfg).records[0]
    init_parallel(1, 1, "cpu")
    model = build_gpt(SHAPE, seed=0)
    ds, plan = _first_step_slabs(path, grad_accum=4)
    ref_loss, _ = _reference(model, ds, [i for mb in plan.micro_batches for i in mb])
    assert rec.loss == pytest.approx(ref_loss, rel=1e-5)
    assert json.loads(log.read_text().splitlines()[0])["loss"] == pytest.approx(rec.loss)
    assert rec.real_tokens == sum(int(ds.index.num_tokens[i]) for mb in plan.micro_batches
                                  for i in mb)


def test_checkpoint_resume_continues_exactly(data, tmp_path):
    path, _ = data
    base = dict(data_dir=path, shape=SHAPE, grad_accum=2, lr=3e-3, quiet=True, warmup=2)
    straight = train(TrainConfig(**base, steps=5)).records
    train(TrainConfig(**base, steps=3, save=str(tmp_path / "ck")))
    resumed = train(TrainConfig(**{**base, "shape": None}, steps=2, load=str(tmp_path / "ck"))).records
    assert [r.step for r in resumed] == [3, 4]
    for a, b in zip(straight[3:], resumed):
        assert b.loss == pytest.approx(a.loss, rel=1e-5)
