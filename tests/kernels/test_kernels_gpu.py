"""Fused LM head compiled for a GPU, bf16, against a float32 dense reference (moderate shapes; the
full N=16384, H=4096, V=131072/151936 check is `bench/lm_head.py --check`)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton)")


@pytest.fixture(autouse=True)
def L(monkeypatch):
    # Imported here, not at collection: importing triton fixes the mode of its jit'd library, and
    # the interpreter test modules need it interpreted. Run this file in its own process on a GPU.
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    from packtool.kernels import lm_head

    return lm_head


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _inputs(n=4096, h=1024, v=50257, scale=2.0, masked=0.3):
    g = torch.Generator(device="cuda").manual_seed(0)
    hid = torch.randn(n, h, generator=g, device="cuda").bfloat16()
    w = (torch.randn(v, h, generator=g, device="cuda") * scale / h**0.5).bfloat16()
    t = torch.randint(0, v, (n,), generator=g, device="cuda")
    lw = (torch.rand(n, generator=g, device="cuda") >= masked).float()
    return hid, w, t, lw


@pytest.mark.parametrize("masked", [0.0, 0.3])
def test_bf16_cross_entropy_and_logprobs_vs_fp32(L, masked):
    hid, w, t, lw = _inputs(masked=masked)
    g = torch.Generator(device="cuda").manual_seed(1)
    g_lp, g_ent = torch.randn(t.shape[0], generator=g, device="cuda"), torch.randn(t.shape[0], generator=g, device="cuda")
    for mode in ("ce", "rl"):
        grads = {}
        for impl, dt in (("torch", torch.float32), ("fused", torch.bfloat16)):
            hh = hid.detach().to(dt).requires_grad_()
            ww = w.detach().to(dt).requires_grad_()
            if mode == "ce":
                out = L.fused_linear_cross_entropy(hh, ww, t, lw, impl=impl)
            else:
                lp, ent = L.fused_linear_logprobs_entropy(hh, ww, t, 0.8, lw, impl=impl)
                out = (lp * g_lp).sum() + (ent * g_ent).sum()
            out.backward()
            grads[impl] = (out.detach(), hh.grad, ww.grad)
        (of, ghf, gwf), (orf, ghr, gwr) = grads["fused"], grads["torch"]
        assert _rel(of, orf) < 1e-2
        assert _rel(ghf, ghr) < 1e-2 and _rel(gwf, gwr) < 1e-2, (mode, _rel(ghf, ghr), _rel(gwf, gwr))
        if masked:
            assert (ghf[lw == 0] == 0).all()


def test_bf16_extreme_logits_no_nan(L):
    hid, w, t, lw = _inputs(scale=2e4)
    hh, ww = hid.requires_grad_(), w.requires_grad_()
    loss = L.fused_linear_cross_entropy(hh, ww, t, lw)
    loss.backward()
    lp, ent = L.fused_linear_logprobs_entropy(hh, ww, t, 1.0, lw)
    (lp.sum() + ent.sum()).backward()
    for x in (loss, lp, ent, hh.grad, ww.grad):
        assert torch.isfinite(x).all()
