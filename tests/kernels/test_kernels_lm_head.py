"""Fused LM head under the Triton interpreter (CPU, fp32) against the torch reference in float64.

Shapes stay tiny (the interpreter runs each program in numpy): V = 300 is not a multiple of the
interpreter's 128-wide vocab block, and chunk_rows = 7 makes several ragged chunks.
"""

import pytest

from packtool.errors import PacktoolConfigError, PacktoolInputError
import torch

from packtool.kernels import lm_head as L
from packtool.kernels.chunking import default_chunk_rows, find_active_rows
from packtool.kernels.row_stats import row_stats_torch, row_stats_triton
from packtool.kernels.softmax_grad import softmax_grad_torch_, softmax_grad_triton_

# CPU tensors under the Triton interpreter, which tests/conftest.py turns on where no GPU is; where one is,
# the compiled kernels are tested in the *_gpu.py modules (the interpreter cannot be a per-module choice:
# set at import it leaked into every later module of the process, stop 43's 67 GPU failures).
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests on CPU tensors; see *_gpu.py")

N, H, V = 40, 32, 300


def _inputs(seed=0, scale=1.0, masked_every=3):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64) * (scale / H**0.5) * 4
    t = torch.randint(0, V, (N,), generator=g)
    lw = torch.rand(N, generator=g, dtype=torch.float64) + 0.5
    if masked_every:
        lw[::masked_every] = 0
    return h, w, t, lw


def _leaves(h, w, dtype, need_w=True):
    return h.detach().clone().to(dtype).requires_grad_(), w.detach().clone().to(dtype).requires_grad_(need_w)


def _close(a, b, rel=2e-5):
    a, b = a.detach().double(), b.detach().double()
    tol = rel * max(1.0, b.abs().max().item())
    assert torch.isfinite(a).all()
    assert (a - b).abs().max().item() <= tol, (a - b).abs().max().item()


def _ce_pair(h, w, t, lw, reduction="sum", chunk_rows=None, upstream=None):
    out = {}
    for impl, dt in (("torch", torch.float64), ("fused", torch.float32)):
        hh, ww = _leaves(h, w, dt)
        kw = {"chunk_rows": chunk_rows} if impl == "fused" else {}
        lwt = None if lw is None else lw.to(dt)
        loss = L.fused_linear_cross_entropy(hh, ww, t, lwt, reduction, impl=impl, **kw)
        scalar = loss.sum() if upstream is None else (loss * upstream.to(loss.dtype)).sum()
        scalar.backward()
        out[impl] = (loss, hh.grad, ww.grad)
    return out["fused"], out["torch"]


@pytest.mark.parametrize("chunk_rows", [None, 7])
@pytest.mark.parametrize("masked_every", [0, 3])
def test_cross_entropy_sum_matches_reference(chunk_rows, masked_every):
    h, w, t, lw = _inputs(masked_every=masked_every)
    (lf, ghf, gwf), (lr, ghr, gwr) = _ce_pair(h, w, t, lw, chunk_rows=chunk_rows)
    _close(lf, lr)
    _close(ghf, ghr)
    _close(gwf, gwr)
    if masked_every:
        assert (ghf[::masked_every] == 0).all()


def test_cross_entropy_scaled_upstream_and_no_weights():
    h, w, t, _ = _inputs()
    for impl_out in [_ce_pair(h, w, t, None, chunk_rows=16, upstream=torch.tensor(0.25))]:
        (lf, ghf, gwf), (lr, ghr, gwr) = impl_out
        _close(lf, lr)
        _close(ghf, ghr)
        _close(gwf, gwr)


def test_cross_entropy_none_reduction_per_row_upstream():
    h, w, t, lw = _inputs()
    up = torch.randn(N, dtype=torch.float64)
    (lf, ghf, gwf), (lr, ghr, gwr) = _ce_pair(h, w, t, lw, "none", chunk_rows=9, upstream=up)
    assert lf.shape == (N,)
    _close(lf, lr)
    _close(ghf, ghr)
    _close(gwf, gwr)


def _lpe_pair(h, w, t, lw, temperature, use_lp=True, use_ent=True, chunk_rows=None, need_w=True):
    g = torch.Generator().manual_seed(7)
    g_lp, g_ent = torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64)
    out = {}
    for impl, dt in (("torch", torch.float64), ("fused", torch.float32)):
        hh, ww = _leaves(h, w, dt, need_w)
        kw = {"chunk_rows": chunk_rows} if impl == "fused" else {}
        lp, ent = L.fused_linear_logprobs_entropy(hh, ww, t, temperature, lw, impl=impl, **kw)
        total = 0
        if use_lp:
            total = total + (lp * g_lp.to(lp.dtype)).sum()
        if use_ent:
            total = total + (ent * g_ent.to(ent.dtype)).sum()
        total.backward()
        out[impl] = (lp, ent, hh.grad, ww.grad)
    return out["fused"], out["torch"]


@pytest.mark.parametrize(
    "temperature,use_lp,use_ent,chunk_rows",
    [(1.0, True, True, None), (0.7, True, True, 7), (1.3, True, False, 11), (0.5, False, True, 7)],
)
def test_logprobs_entropy_match_reference(temperature, use_lp, use_ent, chunk_rows):
    h, w, t, lw = _inputs()
    f, r = _lpe_pair(h, w, t, lw, temperature, use_lp, use_ent, chunk_rows)
    for a, b in zip(f, r):
        _close(a, b)
    assert (f[0][::3] == 0).all() and (f[1][::3] == 0).all() and (f[2][::3] == 0).all()


def test_logprobs_frozen_weight_and_no_mask():
    h, w, t, _ = _inputs()
    f, r = _lpe_pair(h, w, t, None, 1.0, chunk_rows=13, need_w=False)
    for a, b in zip(f[:3], r[:3]):
        _close(a, b)
    assert f[3] is None


def test_all_rows_masked_gives_zero_loss_and_gradients():
    h, w, t, lw = _inputs()
    lw = torch.zeros_like(lw)
    (lf, ghf, gwf), _ = _ce_pair(h, w, t, lw)
    assert lf.item() == 0.0 and (ghf == 0).all() and (gwf == 0).all()
    f, _ = _lpe_pair(h, w, t, lw, 1.0)
    assert all((x == 0).all() for x in f)


def test_inactive_rows_are_never_read():
    # NaN in the hidden rows and out-of-range targets of inactive rows must not reach any output
    h, w, t, lw = _inputs()
    h[::3] = float("nan")
    t[::3] = -100
    hh, ww = _leaves(h, w, torch.float32)
    loss = L.fused_linear_cross_entropy(hh, ww, t, lw.float(), chunk_rows=8)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(ww.grad).all() and torch.isfinite(hh.grad).all()
    lp, ent = L.fused_linear_logprobs_entropy(hh.detach(), ww.detach(), t, 1.0, lw)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()


def test_extreme_logits_stay_finite_and_exact():
    h, w, t, lw = _inputs(scale=2000.0)  # logits in the thousands
    (lf, ghf, gwf), (lr, ghr, gwr) = _ce_pair(h, w, t, lw, chunk_rows=16)
    _close(lf, lr, rel=1e-5)
    _close(ghf, ghr, rel=1e-5)
    _close(gwf, gwr, rel=1e-5)
    f, r = _lpe_pair(h, w, t, lw, 1.0)
    for a, b in zip(f, r):
        _close(a, b, rel=1e-5)


def test_row_kernels_match_their_references():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, V, generator=g, dtype=torch.float64) * 30
    t = torch.randint(0, V, (9,), generator=g)
    t[2] = -1  # target owned by another vocab shard
    sr = row_stats_torch(x, t, 0.8)
    for prefetch in (False, True):
        sf = row_stats_triton(x.float(), t, 0.8, PREFETCH=prefetch)
        for a, b in ((sf.m, sr.m), (sf.s, sr.s), (sf.u, sr.u), (sf.zt, sr.zt)):
            _close(a, b)
        assert sf.zt[2] == 0
    lse = sr.m + torch.log(sr.s)
    ent = torch.log(sr.s) - sr.u / sr.s
    a, b = torch.randn(9, generator=g, dtype=torch.float64), torch.randn(9, generator=g, dtype=torch.float64)
    for with_ent in (False, True):
        args = (lse, ent if with_ent else None, a, b if with_ent else None, 0.8)
        gf = softmax_grad_triton_(x.float().clone(), t, *(v.float() if torch.is_tensor(v) else v for v in args))
        gr = softmax_grad_torch_(x.clone(), t, *args)
        _close(gf, gr)


def test_bad_target_on_active_row_names_the_row():
    h, w, t, lw = _inputs()
    t[4] = V + 5  # row 4 is active (every third row from 0 is masked)
    with pytest.raises(PacktoolInputError, match=r"targets\[4\]"):
        L.fused_linear_cross_entropy(h.float(), w.float(), t, lw.float())
    with pytest.raises(PacktoolInputError, match=r"targets\[4\]"):
        L.fused_linear_cross_entropy(h, w, t, lw, impl="torch")


def test_leading_dims_and_errors(monkeypatch):
    h, w, t, lw = _inputs()
    lp, ent = L.fused_linear_logprobs_entropy(h.float().reshape(4, 10, H), w.float(), t.reshape(4, 10))
    assert lp.shape == (4, 10) and ent.shape == (4, 10)
    with pytest.raises(PacktoolInputError, match="impl"):
        L.fused_linear_cross_entropy(h, w, t, impl="cuda")
    with pytest.raises(PacktoolInputError, match="leading shape"):
        L.fused_linear_cross_entropy(h, w, t[:5])
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(PacktoolConfigError, match="impl='torch'"):
        L.fused_linear_cross_entropy(h.float(), w.float(), t)


def test_chunking_rules():
    assert default_chunk_rows(4096, 131072, 2) == 1536
    assert default_chunk_rows(4096, 151936, 2) % 128 == 0
    assert default_chunk_rows(64, 300, 4) == 8192
    act = find_active_rows(torch.tensor([1, 2, 3]), torch.tensor([0.0, 1.0, 0.0]), 10)
    assert act.count == 1 and act.index.tolist() == [1]
    assert find_active_rows(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]), 10).index is None
