"""FP8 linears on CPU: packtool/kernels/fp8.py's quantizers and fp32 reference GEMMs (small, odd
shapes), the token rule packtool.align now uses, and the negative tests: a local token
count off the rule, mxfp8, and weight dims blockwise cannot take all fail loudly with one
line. The same code on an H200 with torch._scaled_mm: tests/megatron/test_megatron_gpu.py.

Tolerances (relative L2 against the fp32 product of the unquantized operands): e4m3
(3 mantissa bits) GEMMs within 6%, GEMMs with an e5m2 gradient (2 bits) within 10%; seen
3.4-3.8% and 5.9%.
"""
from __future__ import annotations

import math

import pytest
import torch

from packtool.kernels import fp8 as k
from packtool.align import Alignment, AlignmentError, fp8_token_multiple


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("kind,shape,scale_shape", [
    ("tensor", (37, 200), ()), ("1x128", (37, 200), (37, 2)), ("128x128", (130, 200), (2, 2))])
def test_quantize_shapes_and_roundtrip(kind, shape, scale_shape):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    q = k.quantize(x, kind)
    assert q.data.dtype == k.E4M3 and q.data.shape == x.shape
    assert tuple(q.scale.shape) == scale_shape
    assert _rel(k.dequantize(q), x) < 0.05
    assert q.data.float().abs().max() <= 448


def test_block_scales_are_local():
    # an outlier moves only its own block's scale: the point of blockwise over tensorwise
    x = torch.randn(4, 256)
    x[1, 5] = 1e6  # pushes the other values under e4m3's smallest subnormal at one scale
    q = k.quantize(x, "1x128")
    assert q.scale[1, 0] > 1e4 * q.scale[1, 1] and torch.allclose(q.scale[0], q.scale[2], rtol=2)
    assert _rel(k.dequantize(q)[:, 128:], x[:, 128:]) < 0.05
    assert _rel(k.dequantize(k.quantize(x, "tensor"))[:, 128:], x[:, 128:]) > 0.5


def test_a_1x128_operand_is_requantized_not_transposed():
    with pytest.raises(ValueError, match="re-quantized"):
        k.quantize(torch.randn(8, 128), "1x128").t()


@pytest.mark.parametrize("recipe", k.RECIPES)
@pytest.mark.parametrize("T,K,N", [(48, 200, 72), (37, 136, 260)])
def test_reference_gemms_match_fp32(recipe, T, K, N):
    torch.manual_seed(1)
    x, w, g = torch.randn(T, K), torch.randn(N, K) * 0.05, torch.randn(T, N)
    y, saved = k.fprop(x, w, recipe, impl="reference")
    dx, dw = k.backward(g, saved, recipe, impl="reference")
    grad_tol = 0.10 if recipe == "tensorwise" else 0.06  # e5m2 gradients vs e4m3
    assert _rel(y, x @ w.t()) < 0.06
    assert _rel(dx, g @ w) < grad_tol and _rel(dw, g.t() @ x) < grad_tol


# --- the token rule -------------------------------------------------------------------
def test_fp8_token_multiples_are_the_measured_ones():
    # BENCHMARKS.md "FP8 training": torch._scaled_mm on an H200 accepted (and got right) every T that is
    # a multiple of 16 and no other, for both recipes (wgrad reduces over T)
    assert {r: fp8_token_multiple(r) for r in ("none", "tensorwise", "blockwise")} == {
        "none": 1, "tensorwise": 16, "blockwise": 16}


@pytest.mark.parametrize("fp8", ["tensorwise", "blockwise"])
@pytest.mark.parametrize("tp,cp", [(1, 1), (2, 1), (4, 1), (8, 1), (32, 1), (1, 2), (4, 2),
                                   (2, 4)])
def test_packtool_slab_multiple_is_the_least_the_gemms_take(fp8, tp, cp):
    a = Alignment(tp=tp, cp=cp, fp8=fp8, capacity=1 << 20)
    s = 2 * cp if cp > 1 else 1
    # each CP rank's GEMMs see t/cp SP-gathered tokens: a multiple of 16, split evenly over TP
    assert (a.t // cp) % 16 == 0 and a.t % (cp * tp) == 0 and a.t % s == 0
    assert a.t == math.lcm(s, cp * tp, 16 * cp)  # and nothing more


# --- the FP8 linear and the model, fp32 reference on CPU -------------------------------
megatron = pytest.importorskip("megatron.core")

from packtool.megatron import fp8 as mfp8
from packtool.megatron.model import GPTShape, build_gpt, token_losses
from packtool.megatron.parallel import init_parallel
from packtool.megatron.thd import make_thd_batch

SHAPE = GPTShape(layers=1, hidden=512, heads=4, ffn=1024, vocab=128, max_seq=256)


@pytest.mark.parametrize("recipe", k.RECIPES)
def test_fp8_linear_refuses_tokens_off_the_rule(recipe):
    w = (torch.randn(512, 512) * 0.02).requires_grad_()
    with pytest.raises(AlignmentError, match="multiple of 16"):
        mfp8.fp8_linear(torch.randn(24, 1, 512), w, None, recipe, "reference")
    y = mfp8.fp8_linear(torch.randn(32, 1, 512), w, None, recipe, "reference")
    y.sum().backward()
    assert y.shape == (32, 1, 512) and torch.isfinite(w.grad).all()


def _batch(n_tokens, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 128, (n_tokens,), generator=g).numpy()
    mask = torch.ones(n_tokens, dtype=torch.uint8).numpy()
    return make_thd_batch(ids, mask, [n_tokens - 7, 7], [n_tokens - 7, 7])


@pytest.fixture(scope="module")
def models():
    init_parallel(1, 1, "cpu")
    return {r: build_gpt(SHAPE, seed=3, fp8=r) for r in ("none", *k.RECIPES)}


@pytest.mark.parametrize("recipe", k.RECIPES)
def test_fp8_model_is_close_to_fp32(models, recipe):
    m = models[recipe]
    lin = m.decoder.layers[0].mlp.linear_fc1
    assert isinstance(lin, mfp8.Fp8ColumnParallelLinear) and lin.fp8_recipe == recipe
    assert not isinstance(m.output_layer, mfp8.Fp8ColumnParallelLinear)  # LM head stays
    ref_sd = models["none"].state_dict()
    assert all(torch.equal(v, ref_sd[n]) for n, v in m.state_dict().items()
               if torch.is_tensor(v))  # same init: only the GEMMs differ
    b = _batch(48)
    got, ref = token_losses(m, b).sum(), token_losses(models["none"], b).sum()
    assert abs(float(got / ref) - 1) < 0.02


@pytest.mark.parametrize("recipe", k.RECIPES)
def test_fp8_model_refuses_a_slab_off_the_rule(models, recipe):
    with pytest.raises(AlignmentError, match=f"FP8 {recipe} GEMM on 40 local tokens"):
        token_losses(models[recipe], _batch(40))


def test_mxfp8_is_refused_in_one_line():
    with pytest.raises(AlignmentError, match="Blackwell") as e:
        mfp8.check_recipe("mxfp8", "cuda")
    assert "\n" not in str(e.value)


def test_blockwise_refuses_weight_dims_cublas_gets_wrong():
    with pytest.raises(ValueError, match="multiple of 512; got hidden=256"):
        build_gpt(GPTShape(layers=1, hidden=256, heads=2, ffn=512, vocab=128), fp8="blockwise")


def test_train_cli_refuses_mxfp8_before_any_repack_advice(tmp_path):
    import typer
    from megatron_slabs import greedy_bins, random_sequences, write_slab_dir
    from typer.testing import CliRunner

    from packtool.cli.failure import guarded
    from packtool.megatron.train_cli import train_command
    app = typer.Typer()
    app.command("train")(guarded(train_command))
    app.command("noop")(lambda: None)
    align = Alignment(fp8="mxfp8", capacity=64)
    seqs = random_sequences(6, 3, 30, seed=1)
    d = str(write_slab_dir(str(tmp_path / "d"), seqs, greedy_bins(seqs, align), align))
    r = CliRunner().invoke(app, ["train", d, "--device", "cpu", "--fp8", "mxfp8"])
    assert r.exit_code == 2 and "Blackwell" in r.output and "Re-pack" not in r.output
