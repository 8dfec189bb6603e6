"""Sample-support scoring compiled for a GPU, bf16 / fp16, against the dense float64 reference
(moderate shapes; the timed shapes and the bf16 accuracy at V = 151,936 are
`bench/support_logprob.py`). Run this file in a process of its own (see test_kernels_gpu.py)."""

import pytest

from packtool.errors import PacktoolInputError
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton)")


@pytest.fixture(autouse=True)
def S(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    from packtool.kernels import support_logprob

    return support_logprob


@pytest.fixture
def P(S):
    from packtool.kernels import support_path

    return support_path


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _inputs(n=2048, h=1024, v=50257, k=64, seed=0, scale=2.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    hid = torch.randn(n, h, generator=g, device="cuda")
    w = torch.randn(v, h, generator=g, device="cuda") * scale / h**0.5
    # distinct ids per row, a quarter of them from 64 hot ids every row draws from
    kh = min(k // 4, 32)
    hot = torch.rand(n, 64, generator=g, device="cuda").argsort(1)[:, :kh]
    cold = 64 + torch.rand(n, v - 64, generator=g, device="cuda").argsort(1)[:, : k - kh]
    sup = torch.cat([hot, cold], 1)
    sup = sup.gather(1, torch.rand(n, k, generator=g, device="cuda").argsort(1)).int()
    cut = torch.randint(1, k + 1, (n,), generator=g, device="cuda")
    sup[torch.arange(k, device="cuda")[None, :] >= cut[:, None]] = -1
    col = (torch.rand(n, generator=g, device="cuda") * cut).long()
    samp = sup.gather(1, col[:, None]).squeeze(1).long()
    sup[::7] = -1  # prompt tokens
    up = torch.randn(2, n, generator=g, device="cuda")
    return hid, w, samp, sup, up


def _run(S, hid, w, samp, sup, up, dtype, **kw):
    hh = hid.detach().to(dtype).requires_grad_()
    ww = w.detach().to(dtype).requires_grad_()
    lp, ent, valid = S.support_logprob(hh, ww, samp, sup, temperature=0.8, entropy=True, **kw)
    ((lp * up[0]).sum() + (ent * up[1]).sum()).backward()
    return lp.detach(), ent.detach(), hh.grad, ww.grad, valid


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("impl,det", [("gather", False), ("gather", True), ("dense", False), ("union", False)])
def test_half_precision_against_fp64(S, dtype, impl, det):
    from packtool.kernels.reference import torch_reference_support_logprob

    hid, w, samp, sup, up = _inputs(k=64 if impl == "gather" else 600)
    got = _run(S, hid, w, samp, sup, up, dtype, impl=impl, deterministic=det)
    hh = hid.to(dtype).double().requires_grad_()
    ww = w.to(dtype).double().requires_grad_()
    lp, ent, valid = torch_reference_support_logprob(hh, ww, samp, sup, 0.8)
    ((lp * up[0].double()).sum() + (ent * up[1].double()).sum()).backward()
    for what, a, b in zip(("logp", "entropy", "dh", "dW"), got[:4], (lp, ent, hh.grad, ww.grad)):
        assert torch.isfinite(a).all(), what
        rel = _rel(a, b)
        print(f"[{dtype} {impl} det={det}] {what} rel L2 {rel:.2e}")
        assert rel < 1e-2, (what, rel)
    assert torch.equal(got[4], valid) and (got[2][::7] == 0).all()


@pytest.mark.parametrize("impl", ["gather", "union"])  # union: distinct ids per add, always
def test_deterministic_grad_weight_is_bitwise_reproducible(S, impl):
    # k 64: the 64 hot ids get ~500 pairs each, past LIGHT_MAX: both launches of the sorted dW run
    # fp32 weights: dW comes back in fp32, so the fast mode's other summation order shows as
    # fp32 rounding, not as bf16 rounding flips
    hid, w, samp, sup, up = _inputs(n=4096, k=64, seed=1)
    runs = [_run(S, hid, w, samp, sup, up, dt, impl=impl, deterministic=True)[3]
            for dt in (torch.bfloat16, torch.bfloat16, torch.float32, torch.float32)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[2], runs[3])
    fast = _run(S, hid, w, samp, sup, up, torch.float32, impl=impl, deterministic=False)[3]
    assert _rel(runs[2], fast) < 1e-5


@pytest.mark.parametrize("impl", ["gather", "dense", "union"])
def test_forward_only_equals_the_training_forward(S, impl):
    # without grad the GEMM paths keep no [N, K] logits (the buffer kernel writes statistics only)
    hid, w, samp, sup, up = _inputs(k=600)
    hh, ww = hid.bfloat16().requires_grad_(), w.bfloat16().requires_grad_()
    train = S.support_logprob(hh, ww, samp, sup, temperature=0.8, entropy=True, impl=impl)
    with torch.no_grad():
        fwd = S.support_logprob(hh, ww, samp, sup, temperature=0.8, entropy=True, impl=impl)
    for a, b in zip(train[:2], fwd[:2]):
        assert torch.equal(a.detach(), b)


def test_speculated_forward_equals_the_dense_path(S, P):
    # forward-only auto at wide rows and a small GEMM runs dense without the checks' sync first
    hid, w, samp, sup, up = _inputs(k=600)
    hb, wb = hid.bfloat16(), w.bfloat16()
    assert P.speculate_dense("auto", True, False, hb, wb, 600, wb.shape[0])
    auto = S.support_logprob(hb, wb, samp, sup, temperature=0.8, entropy=True)
    dense = S.support_logprob(hb, wb, samp, sup, temperature=0.8, entropy=True, impl="dense")
    for a, b in zip(auto, dense):
        assert torch.equal(a, b)


def test_extreme_logits_no_nan(S):
    hid, w, samp, sup, up = _inputs(scale=2e4)
    for impl in ("gather", "dense", "union"):
        out = _run(S, hid, w, samp, sup, up, torch.bfloat16, impl=impl)
        for x in out[:4]:
            assert torch.isfinite(x).all(), impl


@pytest.mark.parametrize("impl", ["dense", "union", "gather", "auto"])
def test_wide_rows_repeated_id_is_an_error(S, P, impl):
    # the checks' bitmaps (packtool/kernels/support_rows.py, compiled: persistent programs over many rows
    # each) find the id before any path runs (auto, forward only, K 600 >= 0.78 % of V: the dense
    # path speculated, the verdict read after it is queued), and flag no row without one
    hid, w, samp, sup, up = _inputs(n=512, k=600)
    assert P.speculate_dense("auto", True, False, hid, w, 600, w.shape[0])
    S.support_logprob(hid.bfloat16(), w.bfloat16(), samp, sup, impl=impl)
    row = int(torch.nonzero(sup[:, 3] >= 0)[0, 0])
    sup[row, 3] = sup[row, 2]
    samp[row] = sup[row, 0]
    with pytest.raises(PacktoolInputError, match=rf"^support\[{row}\] holds id"):
        S.support_logprob(hid.bfloat16(), w.bfloat16(), samp, sup, impl=impl)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("start", [0, 20000])
def test_extra_memory_is_the_logits_and_the_dw_accumulator(S, monkeypatch, dtype, start):
    # fwd+bwd on the gather path keeps the [N, K] fp32 logits and the fp32 dW accumulator; the
    # gradient over the candidates is recomputed inside the dh and dW kernels (no [N, K] tensor),
    # and the support rows are read as given, int32 or int64, at any vocab_start (a TP rank's
    # share, here without its collectives: VocabShard.of gives the shard, no group). The slack
    # (2 MiB) is under one [N, K] int32 tensor (8 MiB here), so a kept gradient or id copy fails.
    from packtool.kernels.vocab_parallel import VocabShard

    hid, w, samp, sup, up = _inputs(n=4096, k=512)
    sup = sup.to(dtype)
    shard = VocabShard(group=None, start=start, size=w.shape[0] - start, total=w.shape[0])
    monkeypatch.setattr(VocabShard, "of", staticmethod(lambda weight, group=None: shard))
    hh, ww = hid.bfloat16().requires_grad_(), w[start:].bfloat16().requires_grad_()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    lp, ent, _ = S.support_logprob(hh, ww, samp, sup, temperature=0.8, entropy=True, impl="gather",
                                   tp_group="one rank")
    ((lp * up[0]).sum() + (ent * up[1]).sum()).backward()
    torch.cuda.synchronize()
    grads = sum(x.grad.numel() * x.grad.element_size() for x in (hh, ww))
    extra = torch.cuda.max_memory_allocated() - base - grads
    bound = ww.numel() * 4 + sup.shape[0] * sup.shape[1] * 4
    print(f"[{dtype} start {start}] extra {extra / 2**20:.1f} MiB, dW + z {bound / 2**20:.1f} MiB")
    assert extra <= bound + 2 * 2**20


@pytest.mark.parametrize("impl", ["auto", "gather", "dense"])
def test_wrong_arguments_on_cuda_are_refused_before_any_kernel_reads_them(S, impl):
    # S38-2 on the H200: a 3-element loss_mask for 256 tokens ran (the checks' Triton pass read
    # past its end), a CPU `sampled` beside CUDA tensors was Triton's "cannot be accessed"; S38-1:
    # float targets were truncated on the fused LM head (1.7 scored as token 1)
    from packtool.kernels.lm_head import fused_linear_cross_entropy

    hid, w, samp, sup, _ = _inputs(n=256, h=64, v=1000, k=8)
    hid, w = hid.bfloat16(), w.bfloat16()
    with pytest.raises(PacktoolInputError, match=r"^loss_mask \(3,\) must match hidden's leading shape \(256,\)"):
        S.support_logprob(hid, w, samp, sup, loss_mask=torch.ones(3, device="cuda"), impl=impl)
    with pytest.raises(PacktoolInputError, match=r"^sampled is on cpu but hidden is on cuda:0"):
        S.support_logprob(hid, w, samp.cpu(), sup, impl=impl)
    with pytest.raises(PacktoolInputError, match=r"^support \(256, 0\) holds K = 0"):
        S.support_logprob(hid, w, samp, sup[:, :0], impl=impl)
    with pytest.raises(PacktoolInputError, match=r"^targets is torch.float32: expected integer token ids"):
        fused_linear_cross_entropy(hid, w, torch.full((256,), 1.7, device="cuda"))
