"""The fused RMSNorm / RoPE (packtool/megatron/fused.py) against independent formulas, and
their compiled form (what runs on CUDA) against the eager one, forward and backward."""
import pytest
import torch

from packtool.megatron import fused


def _rotate_half_rope(x, cos, sin):
    # megatron-core's _apply_rotary_pos_emb_bshd, non-interleaved, written out
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def test_rms_norm_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(37, 64, dtype=torch.float64)
    w = torch.randn(64, dtype=torch.float64)
    ref = torch.nn.functional.rms_norm(x, (64,), w, eps=1e-5)
    torch.testing.assert_close(fused.rms_norm(x, w, 1e-5), ref)


def test_rms_norm_bf16_normalizes_in_fp32():
    x = torch.full((2, 8), 3.0, dtype=torch.bfloat16)
    w = torch.full((8,), 2.0, dtype=torch.bfloat16)
    out = fused.rms_norm(x, w, 0.0)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.full((2, 8), 2.0, dtype=torch.bfloat16))


def test_rms_norm_keeps_activation_dtype_with_fp32_weight():
    # megatron builds bf16 linears but torch's RMSNorm weight stays fp32
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    assert fused.rms_norm(x, torch.ones(8), 1e-5).dtype == torch.bfloat16


def test_rope_matches_rotate_half():
    torch.manual_seed(0)
    q, k = torch.randn(11, 4, 16, dtype=torch.float64), torch.randn(11, 2, 16, dtype=torch.float64)
    ang = torch.randn(11, 1, 8, dtype=torch.float64)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    gq, gk = fused.rope(q, k, cos, sin)
    torch.testing.assert_close(gq, _rotate_half_rope(q, cos, sin).to(gq.dtype))
    torch.testing.assert_close(gk, _rotate_half_rope(k, cos, sin).to(gk.dtype))


def _grads(fn, *args):
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(1)
    loss = sum((o * torch.randn_like(o)).sum() for o in outs)
    loss.backward()
    return outs, [a.grad for a in args if a.grad is not None]


@pytest.mark.parametrize("n", [5, 23])  # two token counts: one dynamic-shape graph
def test_compiled_equals_eager(n):
    """The Inductor kernels that CUDA runs, built here for the CPU: same values and grads."""
    torch.manual_seed(n)
    x, w = torch.randn(n, 32), torch.randn(32)
    for fn, args in ((lambda a, b: fused.rms_norm_ref(a, b, 1e-5), (x, w)),
                     (fused.rope_ref, (torch.randn(n, 4, 16), torch.randn(n, 2, 16),
                                       torch.randn(n, 1, 16), torch.randn(n, 1, 16)))):
        eager = _grads(fn, *args)
        comp = _grads(torch.compile(fn, dynamic=True, fullgraph=True), *args)
        for a, b in zip(eager[0] + tuple(eager[1]), comp[0] + tuple(comp[1])):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_compile_only_on_cuda(monkeypatch):
    assert not fused._enabled(torch.device("cpu"))
    assert fused._enabled(torch.device("cuda"))
    monkeypatch.setenv("PACKTOOL_FUSED", "0")
    assert not fused._enabled(torch.device("cuda"))
