"""Tensor parallelism through megatron-core's own layers on CPU: two gloo ranks (no SP:
gloo has no reduce-scatter) give the same packed losses and the same gradient shards as
one rank. With CPU initialization megatron builds each full weight from the same seed and
splits it, so the TP=2 model holds exactly the TP=1 model's shards."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")

from spawned_ranks import join_gloo, spawn_ranks  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.layout import compute_layout  # noqa: E402

SHAPE_KW = dict(layers=2, hidden=32, heads=4, ffn=64, vocab=128, max_seq=256)


def _batch_arrays():
    rng = np.random.default_rng(4)
    lens = np.array([7, 19, 4, 11])
    lay = compute_layout(lens, np.array([0, 4]), Alignment(tp=2, capacity=64))
    T = int(lay.slab_len[0])
    ids, mask = np.zeros(T, np.int32), np.zeros(T, np.uint8)
    for n, st in zip(lens, lay.seg_start):
        ids[st:st + n] = rng.integers(1, 128, n)
        mask[st + 1:st + n] = 1
    return ids, mask, lay.seg_len, lay.seg_padded


def _run(tp, rank=0, init_file=None):
    from packtool.megatron.model import GPTShape, build_gpt, token_losses
    from packtool.megatron.parallel import init_parallel
    from packtool.megatron.thd import make_thd_batch
    if tp > 1:
        join_gloo(rank, tp, init_file)
    init_parallel(tp, 1, "cpu")
    model = build_gpt(GPTShape(**SHAPE_KW), seed=3, tp=tp)
    b = make_thd_batch(*_batch_arrays())
    loss = token_losses(model, b) * b.loss_weight
    loss.sum().backward()
    grads = {k: (p.grad.clone(), getattr(p, "partition_dim", -1)
                 if getattr(p, "tensor_model_parallel", False) else -1)
             for k, p in model.named_parameters()}
    return loss.detach(), grads


def _worker(rank, init_file, out):
    l, g = _run(2, rank, init_file)
    torch.save({"loss": l, "grads": g}, f"{out}.{rank}")


def test_tp2_equals_tp1(tmp_path):
    out = str(tmp_path / "r")
    codes = spawn_ranks(_worker, 2, (str(tmp_path / "init"), out), timeout=240)
    assert codes == [0, 0], codes
    ref_loss, ref_grads = _run(1)
    shards = [torch.load(f"{out}.{r}", weights_only=False) for r in range(2)]
    for s in shards:
        torch.testing.assert_close(s["loss"], ref_loss, rtol=1e-4, atol=1e-5)
    for k, (g, _) in ref_grads.items():
        g0, dim = shards[0]["grads"][k]
        parts = [shards[r]["grads"][k][0] for r in range(2)]
        if "linear_fc1" in k:  # SwiGLU: each rank holds [its gate rows; its up rows]
            halves = [p.chunk(2, dim=0) for p in parts]
            full = torch.cat([halves[0][0], halves[1][0], halves[0][1], halves[1][1]])
        else:
            full = g0 if dim < 0 else torch.cat(parts, dim=dim)
        torch.testing.assert_close(full, g, rtol=1e-4, atol=1e-5, msg=lambda m: f"{k}: {m}")
