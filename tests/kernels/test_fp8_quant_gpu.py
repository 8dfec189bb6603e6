"""The Triton FP8 quantizers compiled for a GPU: bit-exact against the eager torch reference, and
the scaled-mm GEMMs they feed against the fp32 reference product. Run this file in a process of
its own (test_fp8_quant.py interprets triton; see test_kernels_gpu.py)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton)")


@pytest.fixture(autouse=True)
def mods(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    from packtool.kernels import fp8, fp8_quant

    monkeypatch.setattr(fp8, "QUANT", "triton")
    return fp8, fp8_quant


def _x(T, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, K, device="cuda", generator=g)
    x *= torch.exp2(torch.randint(-6, 6, (T, 1), device="cuda", generator=g).float())
    return x.bfloat16()


def _same_bits(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("T,K", [(4112, 2064), (4096, 4096), (48, 144)])
def test_triton_quantizers_bit_exact_on_gpu(mods, T, K):
    fp8, fq = mods
    x = _x(T, K, T + K)
    for dt in (fp8.E4M3, fp8.E5M2):
        q, qt, s = fq.tensor_q_both_triton(x, dt)
        rq, rs = fp8._tensor_q(x, dt)
        assert _same_bits(q, rq) and _same_bits(qt, rq.t().contiguous()) and torch.equal(s, rs)
    q, s, qt, st = fq.rows_q_both_triton(x, fp8.E4M3)
    rq, rs = fp8._rows_q(x, fp8.E4M3)
    rqt, rst = fp8._rows_q(x.t(), fp8.E4M3)
    assert _same_bits(q, rq) and _same_bits(qt, rqt)
    assert torch.equal(s, rs) and torch.equal(st, rst)
    q, s, qt, st = fq.tiles_q_both_triton(x, fp8.E4M3)
    ref = fp8._tiles_q(x, fp8.E4M3)
    assert _same_bits(q, ref[0]) and _same_bits(qt, ref[0].t().contiguous())
    assert torch.equal(s, ref[1]) and torch.equal(st, ref[1].t().contiguous())


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_linear_gemms_with_triton_operands(mods, recipe):
    fp8, _ = mods
    T, K, N = 4112, 1024, 1536
    x, g = _x(T, K, 1), _x(T, N, 2)
    w = (torch.randn(N, K, device="cuda") * 0.02).bfloat16()
    y, saved = fp8.fprop(x, w, recipe)
    dx, dw = fp8.backward(g, saved, recipe)
    ry, rsaved = fp8.fprop(x, w, recipe, impl="reference")
    rdx, rdw = fp8.backward(g, rsaved, recipe, impl="reference")
    for a, b in ((y, ry), (dx, rdx), (dw, rdw)):
        rel = ((a.double() - b.double()).norm() / b.double().norm()).item()
        assert rel < 2e-2, rel
