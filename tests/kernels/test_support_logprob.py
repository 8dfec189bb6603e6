"""Sample-support scoring (packtool/kernels/support_logprob.py) under the Triton interpreter on CPU, fp32,
against the dense float64 reference `logit[s] - logsumexp(logit[row])`: values, entropy, grad
hidden and grad weight, for each path (Triton gather, chunked torch gather, dense GEMMs over the
local vocabulary, dense GEMMs over the union of the candidate ids).

Shapes are small and odd: V = 300 and H = 40 leave ragged blocks, K = 7 pads its tile.
"""

import os

import subprocess
import sys

import numpy as np
import pytest

from spawned_ranks import join_gloo

from packtool.errors import PacktoolInputError
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from packtool.kernels.reference import torch_reference_logprobs_entropy
from packtool.kernels.reference import torch_reference_support_logprob as reference
from packtool.kernels.support_logprob import support_logprob

# CPU tensors under the Triton interpreter, which tests/conftest.py turns on where no GPU is; where one is,
# the compiled kernels are tested in the *_gpu.py modules (the interpreter cannot be a per-module choice:
# set at import it leaked into every later module of the process, stop 43's 67 GPU failures).
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests on CPU tensors; see *_gpu.py")

N, H, V, K = 13, 40, 300, 7
PATHS = ["gather", "torch", "dense", "union"]


def _inputs(seed=0, n=N, k=K, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64) * scale
    sup = torch.stack([torch.randperm(V, generator=g)[:k] for _ in range(n)]).int()
    sup[2, 4:] = -1  # trailing padding (top-p cut)
    sup[3, :] = -1  # no support: a prompt token
    sup[4, 1:] = -1  # a single-member row: logp = 0
    col = torch.randint(0, 4, (n,), generator=g)
    col[4] = 0
    samp = sup[torch.arange(n), col].long()
    samp[3] = 17  # ignored: the row is invalid
    up = torch.randn(2, n, generator=g, dtype=torch.float64)
    return h, w, samp, sup, up


def _run(fn, h, w, dtype, up):
    hh = h.detach().clone().to(dtype).requires_grad_()
    ww = w.detach().clone().to(dtype).requires_grad_()
    lp, ent, valid = fn(hh, ww)
    ((lp * up[0].to(lp.dtype)).sum() + (ent * up[1].to(ent.dtype)).sum()).backward()
    return lp.detach(), ent.detach(), hh.grad, ww.grad, valid


def _ref(h, w, samp, sup, temp, up):
    return _run(lambda hh, ww: reference(hh, ww, samp, sup, temp), h, w, torch.float64, up)


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _close(got, ref, rel):
    for what, a, b in zip(("logp", "entropy", "dh", "dW"), got[:4], ref[:4]):
        assert torch.isfinite(a).all(), what
        assert _rel(a, b) <= rel, (what, _rel(a, b))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("temp", [1.0, 0.7, 1.9])
def test_values_and_grads_match_the_dense_fp64_reference(path, temp):
    h, w, samp, sup, up = _inputs()
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, temperature=temp, entropy=True,
                                              impl=path), h, w, torch.float32, up)
    ref = _ref(h, w, samp, sup, temp, up)
    _close(got, ref, 2e-6)
    lp, ent, dh, _, valid = got
    assert valid.tolist() == [i != 3 for i in range(N)]
    assert lp[3] == 0 and ent[3] == 0 and (dh[3] == 0).all()  # no support: 0, no gradient
    assert lp[4] == 0 and ent[4] == 0  # a single-member row is certain
    assert (ent >= 0).all()


@pytest.mark.parametrize("path", ["torch", "dense", "union"])  # the Triton kernels accumulate in fp32
def test_fp64_paths_agree_to_rounding(path):
    h, w, samp, sup, up = _inputs(1)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, temperature=0.8, entropy=True,
                                              impl=path), h, w, torch.float64, up)
    _close(got, _ref(h, w, samp, sup, 0.8, up), 1e-12)


@pytest.mark.parametrize("light_max", [2, 512])  # 2: the hot ids go to the heavy launch
def test_deterministic_grad_weight_is_bitwise_reproducible_and_matches_atomic(monkeypatch, light_max):
    from packtool.kernels import support_det

    monkeypatch.setattr(support_det, "LIGHT_MAX", light_max)
    h, w, samp, sup, up = _inputs(2, n=16, k=5)
    sup[:, 0] = torch.arange(16) % 3  # hot ids: many rows share them
    sup[:, 1:] = torch.where(sup[:, 1:] < 3, sup[:, 1:] + 3, sup[:, 1:])
    sup[3, :] = -1
    sup[2, 4:] = -1
    sup[4, 1:] = -1
    samp = sup[:, 0].long()
    outs = [_run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True, impl="gather",
                                                deterministic=det), h, w, torch.float32, up)
            for det in (True, True, False)]
    assert torch.equal(outs[0][3], outs[1][3])
    assert _rel(outs[2][3], outs[0][3]) < 1e-6
    _close(outs[0], _ref(h, w, samp, sup, 1.0, up), 2e-6)


@pytest.mark.parametrize("path", ["torch", "dense", "union"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_hidden(path, dtype):
    h, w, samp, sup, up = _inputs(3)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True, impl=path),
               h, w, dtype, up)
    ref = _ref(h.to(dtype).double(), w.to(dtype).double(), samp, sup, 1.0, up)
    _close(got, ref, 1e-2)


def test_half_hidden_triton_gather():
    # one dtype through the interpreter (slow); fp16 and bf16 both run on the GPU tests
    h, w, samp, sup, up = _inputs(3)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True, impl="gather"),
               h, w, torch.float16, up)
    _close(got, _ref(h.half().double(), w.half().double(), samp, sup, 1.0, up), 1e-2)


def test_union_path_edges_and_the_auto_rule(monkeypatch):
    from packtool.kernels import support_path as P

    h, w, samp, sup, up = _inputs(5)
    # no row holds a support: every value 0, no gradient, and an empty union is no error
    none = torch.full_like(sup, -1)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, none, entropy=True, impl="union"),
               h, w, torch.float32, up)
    assert not got[4].any() and not got[0].any() and not got[2].any() and not got[3].any()
    # hot candidates: rows share ids, so dW rows gather several contributions
    hot = sup.clone()
    hot[:, :3] = torch.where(hot[:, :3] >= 0, torch.arange(3)[None, :].int(), hot[:, :3])
    hot[:, 3:] = torch.where((hot[:, 3:] >= 0) & (hot[:, 3:] < 3), hot[:, 3:] + 3, hot[:, 3:])
    s2 = hot[:, 0].long()
    outs = [_run(lambda hh, ww: support_logprob(hh, ww, s2, hot, entropy=True, impl="union"),
                 h, w, torch.float32, up) for _ in range(2)]
    assert torch.equal(outs[0][3], outs[1][3])  # bitwise run to run (distinct ids per add)
    _close(outs[0], _ref(h, w, s2, hot, 1.0, up), 2e-6)
    # auto (the interpreter counts as Triton): gather under the probe share without looking at the
    # union; past it, GEMMs over the union while it is a small share of the vocabulary (and gather
    # when the candidates are few against the union's rows), over the whole vocabulary once the
    # union is most of it
    seen = []
    probe, pick = P.named_ids, P.auto_path
    monkeypatch.setattr(P, "named_ids", lambda *a: seen.append("probe") or probe(*a))
    monkeypatch.setattr(P, "auto_path", lambda *a: (lambda r: seen.append(r[0]) or r)(pick(*a)))
    owned = int((sup >= 0).sum())
    u = int(torch.unique(sup[sup >= 0]).numel())
    at = 2.0 * owned / (N * V)  # the gather limit over V at twice the candidates: probes the union
    cases = [(0.0, 0.9, ["probe", "union"]), (0.0, 0.01, ["probe", "dense"]),
             (at, 0.01, ["probe", "gather"]), (at * 10, 0.9, ["gather"]),
             (at * 0.9, 0.9, ["probe", "union"]), (0.0, 0.01, ["dense"])]
    # the last case: candidates under the gather limit over V (1.8x them) but past it over U rows
    assert 1.8 * owned * u / V < owned
    for i, (share, union_share, want) in enumerate(cases):
        # the last case: the first 3 rows (UNION_PREFIX x V ids) name over 1 % of V: no probe
        monkeypatch.setattr(P, "UNION_PREFIX", 0.05 if i == len(cases) - 1 else 8)
        monkeypatch.setattr(P, "GATHER_MAX_SHARE", {"train": share, "forward": share})
        monkeypatch.setattr(P, "UNION_MAX_SHARE", union_share)
        seen.clear()
        got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True), h, w, torch.float32, up)
        assert seen == want, (share, union_share, seen)
        _close(got, _ref(h, w, samp, sup, 1.0, up), 2e-6)


BAD = {
    "missing": (lambda s, t: t.__setitem__(5, int(s[5].max()) + 1 if int(s[5].max()) + 1 < V else 0),
                r"^sampled\[5\] = \d+ is not among its support row's candidates \(support\[5\]\)"),
    "duplicate": (lambda s, t: s.__setitem__((6, 2), int(s[6, 1])), r"^support\[6\] holds id \d+ twice \(columns 1 and 2\)"),
    "above_vocab": (lambda s, t: s.__setitem__((7, 3), V), r"support\[7, 3\] = 300 is outside the vocabulary \[0, 300\)"),
    "below_pad": (lambda s, t: s.__setitem__((8, 1), -2), r"support\[8, 1\] = -2 is outside"),
    "padding_gap": (lambda s, t: s.__setitem__((9, 2), -1), r"^support\[9, 3\] = \d+ follows -1 padding in its row"),
}


def _bad_inputs(case: str):
    """The inputs with BAD[case]'s corruption planted (tokens 5 and 9 sample their first candidate)."""
    h, w, samp, sup, _ = _inputs()
    samp = samp.clone()
    samp[5] = sup[5, 0]
    samp[9] = sup[9, 0]
    BAD[case][0](sup, samp)
    return h, w, samp, sup


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_support_is_an_error_naming_the_token(case):
    h, w, samp, sup = _bad_inputs(case)
    with pytest.raises(PacktoolInputError, match=BAD[case][1]):
        support_logprob(h.float(), w.float(), samp, sup, impl="torch")


@pytest.mark.parametrize("path", ["dense", "union", "gather"])
def test_repeated_id_is_found_by_the_checks_bitmaps(path):
    # where Triton runs, the checks find a repeated id by per-program bitmaps (no sort), in the
    # same host sync as the other verdicts, whichever path then runs
    h, w, samp, sup, up = _inputs(6)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True, impl=path),
               h, w, torch.float32, up)
    _close(got, _ref(h, w, samp, sup, 1.0, up), 2e-6)
    sup[6, 2] = sup[6, 1]
    with pytest.raises(PacktoolInputError, match=r"^support\[6\] holds id \d+ twice"):
        support_logprob(h.float(), w.float(), samp, sup, impl=path)


def _spy_checks(monkeypatch):
    """The calls of support_logprob's checks-then-pick (empty: the call speculated dense), and the
    path rules' module (packtool/kernels/support_path.py), which owns the speculation's bounds."""
    from packtool.kernels import support_logprob as S
    from packtool.kernels import support_path as P

    seen, check = [], S.check_support
    monkeypatch.setattr(S, "check_support", lambda *a, **k: seen.append("sync") or check(*a, **k))
    return P, seen


@pytest.mark.parametrize("speculate", [True, False])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_support_through_the_triton_checks_names_the_same_token(monkeypatch, case, speculate):
    # the one Triton pass counts the verdicts; any of them re-runs the torch checks for the message,
    # also where a forward-only call queued the dense path before reading them (speculated)
    P, seen = _spy_checks(monkeypatch)
    if not speculate:
        monkeypatch.setattr(P, "SPECULATE_MAX_FLOP", 0)
    h, w, samp, sup = _bad_inputs(case)
    with pytest.raises(PacktoolInputError, match=BAD[case][1]):
        support_logprob(h.float(), w.float(), samp, sup)
    assert seen == ([] if speculate else ["sync"])


def test_forward_only_auto_speculates_dense_from_the_shapes(monkeypatch):
    # forward-only auto with wide rows (K 7 >= 0.78 % of V 300) and a small GEMM: the dense path
    # without the checks' sync first, the same values as impl="dense"; over the GEMM bound, with
    # backward, narrower rows or fp64 weights: the checks' sync, then the pick
    P, seen = _spy_checks(monkeypatch)
    h, w, samp, sup, up = _inputs(9)
    hf, wf = h.float(), w.float()
    lp, ent, valid = support_logprob(hf, wf, samp, sup, entropy=True)
    assert seen == []
    dense = support_logprob(hf, wf, samp, sup, entropy=True, impl="dense")
    assert torch.equal(lp, dense[0]) and torch.equal(ent, dense[1]) and torch.equal(valid, dense[2])
    ref = _ref(h, w, samp, sup, 1.0, up)
    assert _rel(lp, ref[0]) <= 2e-6 and _rel(ent, ref[1]) <= 2e-6
    assert P.speculate_dense("auto", True, False, hf, wf, 3, V) and not P.speculate_dense("auto", True, False, hf, wf, 2, V)
    seen.clear()
    support_logprob(h, w, samp, sup)  # fp64: no fused statistics
    support_logprob(hf, wf.requires_grad_(), samp, sup)  # backward will run
    monkeypatch.setattr(P, "SPECULATE_MAX_FLOP", 2.0 * N * H * V - 1)
    support_logprob(hf, wf.detach(), samp, sup)
    assert seen == ["sync"] * 3


def test_the_checks_pass_counts_the_union_probe():
    # auto's probe (distinct weight rows the first rows name) is counted in the checks' pass
    from packtool.kernels.support_check import check_support

    _, _, samp, sup, _ = _inputs(8)
    rows = check_support(samp, sup, V, 0, V, use_triton=True, probe_rows=5)
    assert rows.prefix_named == int(torch.unique(sup[:5][sup[:5] >= 0]).numel())
    assert rows.owned == int((sup >= 0).sum())
    shard = check_support(samp, sup, V, 100, 150, use_triton=True, probe_rows=13)
    loc = sup - 100
    own = (sup >= 0) & (loc >= 0) & (loc < 150)
    assert shard.prefix_named == int(torch.unique(loc[own]).numel()) and shard.owned == int(own.sum())
    assert torch.equal(shard.local_ids(), torch.where(own, loc, -1))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("start", [0, 100])
def test_support_rows_are_never_copied_and_guarded(monkeypatch, dtype, start):
    # no [N, K] copy of the ids at any vocab_start, int32 or int64: every kernel takes the
    # caller's rows with (start, V_local); changing them in place before backward is then an
    # error, not a silent gradient over other ids
    from packtool.kernels.support_check import check_support
    from packtool.kernels.vocab_parallel import VocabShard

    h, w, samp, sup, up = _inputs(7)
    sup = sup.to(dtype)
    rows = check_support(samp, sup, V + start, start, V, use_triton=True)
    assert rows.ids.data_ptr() == sup.data_ptr() and rows.start == start
    # one rank's share without its collectives: VocabShard.of gives the shard's start and no group
    # (tp_group is only passed on to it)
    shard = VocabShard(group=None, start=start, size=V - start, total=V)
    monkeypatch.setattr(VocabShard, "of", staticmethod(lambda weight, group=None: shard))
    hh, ww = h.float().requires_grad_(), w.float()[start:].clone().requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        support_logprob(hh, ww, samp, sup, impl="gather", tp_group="one rank")
    ints = [t for t in saved if t.dtype in (torch.int32, torch.int64) and t.dim() == 2]
    assert len(ints) == 1 and ints[0].data_ptr() == sup.data_ptr()
    lp, _, _ = support_logprob(hh, ww, samp, sup, impl="gather", tp_group="one rank")
    sup[0, 0] = sup[0, 0]  # an in-place write bumps the version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        lp.sum().backward()


def test_loss_active_token_without_support_is_an_error():
    h, w, samp, sup, _ = _inputs()
    mask = torch.ones(N)
    with pytest.raises(PacktoolInputError, match=r"^support\[3\] is empty \(all -1\), but loss_mask\[3\] makes that token a loss target"):
        support_logprob(h.float(), w.float(), samp, sup, loss_mask=mask)
    mask[3] = 0
    lp, _, valid = support_logprob(h.float(), w.float(), samp, sup, loss_mask=mask)
    assert not valid[3] and lp[3] == 0


def test_bounded_logprob_is_at_least_the_full_vocab_one_and_equals_topk_renormalized():
    g = torch.Generator().manual_seed(4)
    h = torch.randn(N, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64) * 0.3
    temp = 0.9
    z = (h @ w.t()) / temp
    for k in (1, 5, 40):
        top = z.topk(k, dim=1).indices
        sup = top[:, torch.randperm(k, generator=g)].int()  # the sampler's order is arbitrary
        samp = top[torch.arange(N), torch.randint(0, k, (N,), generator=g)]
        lp, ent, valid = support_logprob(h, w, samp, sup, temperature=temp, entropy=True,
                                         impl="torch")
        full, _ = torch_reference_logprobs_entropy(h, w, samp, temp)
        assert valid.all() and (lp >= full - 1e-12).all() and (ent >= -1e-12).all()
        p = torch.softmax(z, 1)
        p_topk = torch.zeros_like(p).scatter_(1, top, p.gather(1, top))
        p_topk /= p_topk.sum(1, keepdim=True)  # the engine's top-k renormalization, densely
        want = torch.log(p_topk.gather(1, samp[:, None]).squeeze(1))
        torch.testing.assert_close(lp, want, rtol=0, atol=1e-12)


def test_packed_equals_each_sequence_alone_through_the_thd_layout_cp2():
    """Sequences packed into one slab by layout.compute_layout, split over CP=2 ranks by
    layout.cp_rank_index: each rank's scores at its positions equal each sequence run alone."""
    from packtool.align import Alignment
    from packtool.layout import compute_layout, cp_rank_index

    g = torch.Generator().manual_seed(5)
    lens = np.array([5, 11, 3, 8])
    lay = compute_layout(lens, np.array([0, lens.size]), Alignment(cp=2, capacity=64))
    T, start = int(lay.slab_len[0]), lay.seg_start[~lay.is_fill]
    h_all = torch.randn(int(lens.sum()), H, generator=g)
    w = torch.randn(V, H, generator=g) * 0.5
    sup_all = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(int(lens.sum()))]).int()
    sup_all[::4, 3:] = -1
    samp_all = sup_all[:, 0].long()
    # the slab: real tokens at their layout positions, pads without support
    dst = np.concatenate([s + np.arange(n) for s, n in zip(start, lens)])
    h_slab = torch.zeros(T, H)
    sup_slab = torch.full((T, K), -1, dtype=torch.int32)
    samp_slab = torch.zeros(T, dtype=torch.long)
    h_slab[dst], sup_slab[dst], samp_slab[dst] = h_all, sup_all, samp_all
    alone, off = [], 0
    for n in lens:
        sl = slice(off, off + n)
        alone.append(support_logprob(h_all[sl], w, samp_all[sl], sup_all[sl], entropy=True,
                                     impl="gather"))
        off += n
    alone_lp = torch.cat([a[0] for a in alone])
    alone_ent = torch.cat([a[1] for a in alone])
    pos = {int(p): i for i, p in enumerate(dst)}
    for rank in range(2):
        idx = torch.as_tensor(cp_rank_index(lay.seg_start, lay.seg_padded, 2, rank))
        lp, ent, valid = support_logprob(h_slab[idx], w, samp_slab[idx], sup_slab[idx],
                                         entropy=True, impl="gather")
        mine = [(j, pos[int(p)]) for j, p in enumerate(idx) if int(p) in pos]
        assert valid.sum() == len(mine) and len(mine) > 0
        j, a = map(list, zip(*mine))
        assert torch.equal(lp[j], alone_lp[a]) and torch.equal(ent[j], alone_ent[a])


def test_main_grad_accumulates_in_fp32():
    h, w, samp, sup, up = _inputs(6)
    ww = w.float().requires_grad_()
    ww.main_grad = torch.ones_like(ww)
    ww.grad_added_to_main_grad = False
    lp, _, _ = support_logprob(h.float(), ww, samp, sup, impl="torch", main_grad=True)
    (lp * up[0].float()).sum().backward()
    ref = _ref(h, w, samp, sup, 1.0, torch.stack([up[0], torch.zeros(N, dtype=torch.float64)]))
    assert ww.grad is None and ww.grad_added_to_main_grad
    assert _rel(ww.main_grad - 1, ref[3]) < 2e-6


def test_cpu_without_triton_runs_the_torch_path_with_the_same_results(tmp_path):
    h, w, samp, sup, up = _inputs(7)
    got = _run(lambda hh, ww: support_logprob(hh, ww, samp, sup, entropy=True, impl="gather"),
               h, w, torch.float32, up)
    torch.save((h, w, samp, sup, up), tmp_path / "in.pt")
    code = (
        "import sys, torch; sys.modules['triton'] = None\n"  # importing triton now fails
        "from packtool.kernels.support_logprob import support_logprob\n"
        f"h, w, samp, sup, up = torch.load({str(tmp_path / 'in.pt')!r})\n"
        "hh, ww = h.float().requires_grad_(), w.float().requires_grad_()\n"
        "lp, ent, _ = support_logprob(hh, ww, samp, sup, entropy=True)\n"
        "((lp * up[0].float()).sum() + (ent * up[1].float()).sum()).backward()\n"
        f"torch.save((lp.detach(), ent.detach(), hh.grad, ww.grad), {str(tmp_path / 'out.pt')!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root)
    cpu = torch.load(tmp_path / "out.pt")
    for a, b in zip(cpu, got[:4]):
        assert _rel(a, b) < 1e-6


WORLD = 2  # V = 300: 150 rows per rank, ragged against the 128-wide H block too


def _tp_worker(rank: int, init_file: str) -> None:
    join_gloo(rank, WORLD, init_file)
    calls = []
    real_all_reduce = dist.all_reduce

    def counting(t, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append(str(op).split(".")[-1])
        return real_all_reduce(t, op=op, group=group, async_op=async_op)

    dist.all_reduce = counting
    try:
        h, w, samp, sup, up = _inputs(8)
        sup[6] = torch.tensor([5, 9, 140, 3, 77, -1, -1], dtype=torch.int32)  # rank 1 owns none
        samp[6] = 140
        sup[7, 0], samp[7] = 280, 280  # sampled id on rank 1 only
        rows = slice(rank * V // WORLD, (rank + 1) * V // WORLD)
        ref = _ref(h, w, samp, sup, 0.8, up)
        # each grad_hidden mode; int64 rows too: every kernel reads the rows as given, with this
        # rank's vocab_start (no local-id copy)
        for path, reduce, dt in (("gather", True, torch.int64), ("dense", False, torch.int32),
                                 ("union", True, torch.int64)):
            calls.clear()
            hh = h.detach().clone().float().requires_grad_()
            ww = w[rows].detach().clone().float().requires_grad_()
            lp, ent, _ = support_logprob(hh, ww, samp, sup.to(dt), temperature=0.8, entropy=True,
                                         impl=path, tp_group=dist.group.WORLD,
                                         reduce_grad_hidden=reduce)
            assert calls == ["MAX", "SUM"], (path, calls)  # one of each in forward
            ((lp * up[0].float()).sum() + (ent * up[1].float()).sum()).backward()
            assert calls == ["MAX", "SUM"] + (["SUM"] if reduce else []), (path, calls)
            dh = hh.grad
            if not reduce:  # sequence parallel: the caller's collective sums the partials
                real_all_reduce(dh)
            for what, a, b in (("logp", lp, ref[0]), ("entropy", ent, ref[1]), ("dh", dh, ref[2]),
                               ("dW", ww.grad, ref[3][rows])):
                assert _rel(a, b) < 2e-6, (rank, path, what, _rel(a, b))
    finally:
        dist.all_reduce = real_all_reduce
        dist.destroy_process_group()


def test_vocab_parallel_matches_unsharded_and_counts_collectives(tmp_path):
    mp.spawn(_tp_worker, args=(str(tmp_path / "pg_init"),), nprocs=WORLD, join=True)
