"""The real model on a GPU (skipped without CUDA): packing changes nothing but speed, and the
FP8 GEMMs are what they claim. Run in its own process on the GPU machine:
    python -m pytest -q -s tests/megatron/test_megatron_gpu.py

1. Packed vs one-at-a-time: megatron-core's GPTModel (bf16; packtool's THD attention,
   varlen_attn) gives each sequence the same loss, and the summed gradient, fed alone or
   packed into one THD micro-batch, with megatron's LM head + CE and with the fused Triton
   head. bf16 tolerance: losses rtol 1e-2, gradients 2e-2 relative L2 (the only difference
   is which GEMM kernel cuBLAS picks for each M); fp32 where varlen_attn takes fp32.
2. FP8 GEMMs (torch._scaled_mm) vs packtool/kernels/fp8.py's fp32 reference on the same quantized
   operands (rel 1e-2: only accumulation order and the bf16 output differ), and vs the
   bf16 product of the unquantized operands (e4m3: 6%, e5m2 gradients: 10%).
3. The token rule against the kernels: wgrad (tokens = reduction dim) runs at every
   multiple of 16 and cuBLASLt/torch refuse 8 and 24: the 16 of packtool.align's
   FP8_TOKEN_MULTIPLE. And the negative test: a micro-batch off the rule stops with
   AlignmentError before any FP8 kernel runs.
4. The FP8 model vs the bf16 model with the same weights: loss within 2%, gradients within
   15% relative L2.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("megatron.core")

from megatron_slabs import random_sequences

from packtool.align import AlignmentError

SEQ_LENS = (45, 200, 5, 91, 128, 64)  # 533 tokens: 536 is a multiple of 8, not 16


@pytest.fixture(autouse=True)
def _compiled_triton(monkeypatch):
    # like test_kernels_gpu.py: the LM head's Triton kernels compiled, not interpreted
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture(scope="module")
def mods():
    from packtool.kernels import fp8 as kfp8
    from packtool.kernels import lm_head
    from packtool.megatron import fp8, model, parallel, thd
    parallel.init_parallel(1, 1, "cuda")
    return dict(model=model, thd=thd, fp8=fp8, kfp8=kfp8, lm_head=lm_head)


def _shape(mods):
    return mods["model"].GPTShape(layers=2, hidden=512, heads=4, kv_heads=2, ffn=1536,
                                  vocab=256, max_seq=1024)


def _seqs():
    rng = np.random.default_rng(5)
    out = []
    for n in SEQ_LENS:
        ids, mask = random_sequences(1, n, n, seed=int(rng.integers(1 << 30)))[0]
        out.append((ids, mask))
    return out


def _packed_batch(mods, seqs, multiple=16):
    lens = np.array([len(s[0]) for s in seqs])
    pad = -int(lens.sum()) % multiple
    seg_pad = lens.copy()
    seg_pad[-1] += pad  # the slab's tail pad rides on the last segment, as in FORMAT.md
    ids = np.concatenate([s[0] for s in seqs] + [np.zeros(pad, np.int32)])
    mask = np.concatenate([s[1] for s in seqs] + [np.zeros(pad, np.uint8)])
    return mods["thd"].make_thd_batch(ids, mask, lens, seg_pad, device="cuda"), lens


def _token_losses(mods, m, b, head):
    if head == "torch":
        return (mods["model"].token_losses(m, b) * b.loss_weight)[0]
    h = mods["model"].hidden_states(m, b)
    return mods["lm_head"].fused_linear_cross_entropy(
        h[:, 0], m.output_layer.weight, b.labels[0], b.loss_weight[0], reduction="none")


def _alone(mods, m, seqs, head):
    m.zero_grad(set_to_none=True)
    losses = []
    for ids, mask in seqs:
        b = mods["thd"].make_thd_batch(ids, mask, [len(ids)], [len(ids)], device="cuda")
        loss = _token_losses(mods, m, b, head).sum()
        loss.backward()
        losses.append(loss.detach().float())
    return torch.stack(losses), {k: p.grad.float().clone() for k, p in m.named_parameters()}


def _packed(mods, m, seqs, head):
    m.zero_grad(set_to_none=True)
    b, lens = _packed_batch(mods, seqs)
    tok = _token_losses(mods, m, b, head)
    cu = np.concatenate(([0], np.cumsum(lens)))
    losses = torch.stack([tok[cu[i]:cu[i + 1]].sum() for i in range(len(lens))])
    losses.sum().backward()
    return losses.detach().float(), {k: p.grad.float().clone() for k, p in m.named_parameters()}


def _grad_rel(a, b):
    num = sum(float((a[k] - b[k]).norm() ** 2) for k in a)
    return (num / sum(float(b[k].norm() ** 2) for k in b)) ** 0.5


@pytest.mark.parametrize("dtype,head,rtol,grad_tol", [
    (torch.bfloat16, "torch", 1e-2, 2e-2), (torch.bfloat16, "fused", 1e-2, 2e-2),
    (torch.float32, "torch", 1e-4, 1e-4)])
def test_packed_equals_one_at_a_time(mods, dtype, head, rtol, grad_tol):
    m = mods["model"].build_gpt(_shape(mods), device="cuda", dtype=dtype, seed=2)
    seqs = _seqs()
    try:
        la, ga = _alone(mods, m, seqs, head)
    except RuntimeError as e:
        if dtype == torch.float32:
            pytest.skip(f"varlen_attn does not take fp32 here: {str(e).splitlines()[0][:120]}")
        raise
    lp, gp = _packed(mods, m, seqs, head)
    dl, dg = float(((lp - la).abs() / la.abs()).max()), _grad_rel(gp, ga)
    print(f"\n[{dtype} {head}] per-sequence loss max rel diff {dl:.2e} "
          f"(bitwise equal: {bool(torch.equal(lp, la))}); grad rel L2 {dg:.2e}")
    assert dl < rtol and dg < grad_tol


# --- FP8 GEMMs ------------------------------------------------------------------------
def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_fp8_gemms_vs_references(mods, recipe):
    k = mods["kfp8"]
    g = torch.Generator(device="cuda").manual_seed(0)
    T, K, N = 4112, 1024, 1536
    x = torch.randn(T, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.03).bfloat16()
    gy = torch.randn(T, N, device="cuda", generator=g).bfloat16()
    y, saved = k.fprop(x, w, recipe)
    dx, dw = k.backward(gy, saved, recipe)
    y_r, saved_r = k.fprop(x, w, recipe, impl="reference")
    dx_r, dw_r = k.backward(gy, saved_r, recipe, impl="reference")
    errs = {"fprop_vs_ref": _rel(y, y_r), "dgrad_vs_ref": _rel(dx, dx_r),
            "wgrad_vs_ref": _rel(dw, dw_r),
            "fprop_vs_bf16": _rel(y, x.float() @ w.float().t()),
            "dgrad_vs_bf16": _rel(dx, gy.float() @ w.float()),
            "wgrad_vs_bf16": _rel(dw, gy.float().t() @ x.float())}
    print(f"\n[{recipe}] " + " ".join(f"{n} {v:.2e}" for n, v in errs.items()))
    grad_tol = 0.10 if recipe == "tensorwise" else 0.06
    assert max(errs[n] for n in errs if n.endswith("_ref")) < 1e-2
    assert errs["fprop_vs_bf16"] < 0.06
    assert errs["dgrad_vs_bf16"] < grad_tol and errs["wgrad_vs_bf16"] < grad_tol


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_kernels_take_token_counts_in_multiples_of_16(mods, recipe):
    from packtool.align import fp8_token_multiple
    k = mods["kfp8"]
    K, N = 512, 1024
    w = torch.randn(N, K, device="cuda").bfloat16()

    def wgrad(T):
        x = torch.randn(T, K, device="cuda").bfloat16()
        _, saved = k.fprop(x, w, recipe)
        _, dw = k.backward(torch.randn(T, N, device="cuda").bfloat16(), saved, recipe)
        torch.cuda.synchronize()
        return dw

    r = fp8_token_multiple(recipe)
    for T in (r, 2 * r, 3 * r, 17 * r):
        assert torch.isfinite(wgrad(T)).all()
    for T in (r // 2, r + r // 2):
        with pytest.raises(RuntimeError, match="divisible by 16"):
            wgrad(T)


@pytest.fixture(scope="module")
def fp8_models(mods):
    build = mods["model"].build_gpt
    return {r: build(_shape(mods), device="cuda", dtype=torch.bfloat16, seed=4, fp8=r)
            for r in ("none", "tensorwise", "blockwise")}


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_fp8_model_vs_bf16(mods, fp8_models, recipe):
    seqs = _seqs()
    lb, gb = _packed(mods, fp8_models["none"], seqs, "fused")
    lf, gf = _packed(mods, fp8_models[recipe], seqs, "fused")
    dl, dg = abs(float(lf.sum() / lb.sum()) - 1), _grad_rel(gf, gb)
    print(f"\n[{recipe} model] loss rel diff {dl:.2e}, grad rel L2 {dg:.2e}")
    assert dl < 0.02 and dg < 0.15


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_fp8_model_refuses_a_micro_batch_off_the_rule(mods, fp8_models, recipe):
    b, _ = _packed_batch(mods, _seqs(), multiple=8)
    n = b.input_ids.shape[1]
    assert n % 16 and n % 8 == 0
    with pytest.raises(AlignmentError, match=f"FP8 {recipe} GEMM on {n} local tokens"):
        mods["model"].loss_sum(fp8_models[recipe], b, "fused")
