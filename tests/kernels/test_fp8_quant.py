"""The Triton FP8 quantizers (packtool/kernels/fp8_quant.py) under the interpreter (CPU) against the torch
reference quantizers of packtool/kernels/fp8.py, bit for bit on the fp8 data and the scales.

Odd shapes: T not a multiple of 128 (ragged last block along T, hence along the transpose's
rows), K = 128 + 16 (ragged last block along K), tiles smaller than one block, rows of zeros.
"""

import pytest

from packtool.errors import PacktoolConfigError
import torch

from packtool.kernels import fp8
from packtool.kernels import fp8_quant as fq

# CPU tensors under the Triton interpreter, which tests/conftest.py turns on where no GPU is; where one is,
# the compiled kernels are tested in the *_gpu.py modules (the interpreter cannot be a per-module choice:
# set at import it leaked into every later module of the process, stop 43's 67 GPU failures).
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests on CPU tensors; see *_gpu.py")

SHAPES = [(200, 144), (16, 128), (130, 272), (48, 16), (257, 40)]
DTYPES = [fp8.E4M3, fp8.E5M2]


def _x(T, K, seed, spread=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g)
    if spread:  # magnitudes over ~8 binades per row so blocks get different scales
        x = x * torch.exp2(torch.randint(-4, 4, (T, 1), generator=g).float())
        x = x * torch.exp2(torch.randint(-2, 2, (1, K), generator=g).float())
    return x.bfloat16()


def _bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), \
        int((a.view(torch.uint8) != b.view(torch.uint8)).sum())


@pytest.mark.parametrize("T,K", SHAPES)
def test_amax_matches_torch(T, K):
    x = _x(T, K, seed=T * K)
    assert fq.amax_triton(x).item() == x.abs().amax().float().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,K", SHAPES)
def test_tensorwise_both_match_reference(T, K, dtype):
    x = _x(T, K, seed=T + K)
    q, qt, s = fq.tensor_q_both_triton(x, dtype)
    rq, rs = fp8._tensor_q(x, dtype)
    _bits_equal(q, rq)
    _bits_equal(qt, rq.t().contiguous())
    assert s.dtype == torch.float32 and s.dim() == 0 and s.item() == rs.item()


def test_empty_inputs():
    x = torch.zeros(0, 144, dtype=torch.bfloat16)
    q, qt, s = fq.tensor_q_both_triton(x, fp8.E4M3)
    assert q.shape == (0, 144) and qt.shape == (144, 0) and s.item() == 1.0
    q, s, qt, st = fq.rows_q_both_triton(x, fp8.E4M3)
    assert q.shape == (0, 144) and s.shape == (0, 2) and qt.shape == (144, 0) and st.shape == (144, 0)


def test_tensorwise_all_zero_input_scale_one():
    x = torch.zeros(32, 144, dtype=torch.bfloat16)
    q, qt, s = fq.tensor_q_both_triton(x, fp8.E4M3)
    assert s.item() == 1.0 and not q.float().any() and not qt.float().any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,K", SHAPES)
def test_blockwise_both_match_reference(T, K, dtype):
    x = _x(T, K, seed=3 * T + K)
    x[5 % T] = 0  # a row of zeros: its scales fall back to 1, as the reference's do
    q, s, qt, st = fq.rows_q_both_triton(x, dtype)
    rq, rs = fp8._rows_q(x, dtype)
    rqt, rst = fp8._rows_q(x.t(), dtype)
    _bits_equal(q, rq)
    _bits_equal(qt, rqt)
    assert torch.equal(s, rs) and torch.equal(st, rst)
    # block-major storage: the layout _scale_a / _scale_b pass on without a copy
    assert s.stride() == (1, T) and st.stride() == (1, K)


@pytest.mark.parametrize("R,C", [(200, 144), (384, 256), (16, 40)])
def test_weight_tiles_both_match_reference(R, C):
    w = _x(R, C, seed=R - C)
    w[:128, :128] = 0  # an all-zero block: scale 1
    q, s, qt, st = fq.tiles_q_both_triton(w, fp8.E4M3)
    ref = fp8.quantize(w, "128x128", fp8.E4M3)
    ref_t = ref.t()
    _bits_equal(q, ref.data)
    _bits_equal(qt, ref_t.data)
    assert torch.equal(s, ref.scale) and torch.equal(st, ref_t.scale)


@pytest.mark.parametrize("recipe", ["tensorwise", "blockwise"])
def test_linear_gemms_same_with_triton_quantizers(monkeypatch, recipe):
    # packtool.kernels.fp8's three GEMMs with the Triton quantizers forced on CPU (interpreted) give
    # exactly what the torch quantizers give: same operands, same reference product
    T, K, N = 144, 272, 144
    x, w, g = _x(T, K, 1), _x(N, K, 2, spread=False) * 0.05, _x(T, N, 3)
    out = {}
    for mode in ("triton", "torch"):
        monkeypatch.setattr(fp8, "QUANT", mode)
        monkeypatch.setattr(fp8, "_triton_on", lambda x, m=mode: m == "triton")
        y, saved = fp8.fprop(x, w, recipe, impl="reference")
        dx, dw = fp8.backward(g, saved, recipe, impl="reference")
        out[mode] = (y, dx, dw)
    for a, b in zip(out["triton"], out["torch"]):
        assert torch.equal(a, b)


def test_triton_quantizer_refuses_cpu_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(PacktoolConfigError, match="TRITON_INTERPRET=1"):
        fq.rows_q_both_triton(torch.ones(16, 16, dtype=torch.bfloat16), fp8.E4M3)


def test_division_is_the_ieee_quotient():
    # _div (reciprocal, product, one fma correction) against torch's IEEE x / s on 2^18 pairs:
    # s as the quantizers make it (amax * (1/448), amax from bf16), x any bf16 up to amax
    import triton
    import triton.language as tl

    @triton.jit
    def div_kernel(x_ptr, a_ptr, o_ptr, inv_fmax, N: tl.constexpr):
        i = tl.arange(0, N)
        s, r = fq._scales(tl.load(a_ptr + i), inv_fmax)
        tl.store(o_ptr + i, fq._div(tl.load(x_ptr + i), s, r))

    g = torch.Generator().manual_seed(7)
    n = 1 << 18
    amax = (torch.rand(n, generator=g) * 2.0 ** torch.randint(-20, 20, (n,), generator=g)).bfloat16().float()
    x = (torch.rand(n, generator=g) * 2 - 1).mul(amax).bfloat16().float()
    out = torch.empty(n)
    div_kernel[(1,)](x, amax, out, fp8.INV_FMAX[fp8.E4M3], N=n)
    s = torch.where(amax > 0, amax * fp8.INV_FMAX[fp8.E4M3], torch.ones_like(amax))
    assert torch.equal(out, x / s)
