"""Strict parity on CPU ranks (gloo, fp32): one step of DP=2, TP=2+SP, CP=2 and TP=2 x CP=2
gives the one-rank loss and every parameter's gradient (gathered to full shape), on the
same weights (TP shards cut from the one-rank model's) and the same sequences (gsm8k rows,
Mistral tokenizer, packed for each layout and verified). The tolerance is stated in
tests/parity_harness.py (4 u sqrt(n), u = 2^-24, n = max(loss tokens, vocab):
4.3e-5 here); observed errors are ~1e-7. Two planted layout bugs must fail the same check.
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("megatron.core")

from conftest import GSM8K, MISTRAL_DIR  # noqa: E402

from packtool.megatron.model import GPTShape  # noqa: E402
from parity_harness import (  # noqa: E402
    GROUPS,
    LAYOUTS,
    PLANTED_BUGS,
    Layout,
    Reference,
    cut_param,
    parse_layout,
    run_reference,
    uncut,
)
from parity_data import pack_layouts, take_rows  # noqa: E402
from spawned_ranks import join_gloo, spawn_ranks  # noqa: E402

SHAPE = GPTShape(layers=2, hidden=64, heads=4, ffn=128, vocab=32000, kv_heads=2, max_seq=1024)
TOKENIZE = {"tokenizer": MISTRAL_DIR, "prompt_field": "question", "response_field": "answer"}
TWO_RANK = ("dp2", "tp2sp", "cp2")


class _Work:
    """Slabs for every layout and the one-rank reference, built once per test session and
    shared by the xdist workers (under a file lock), then read back."""

    def __init__(self, root: str):
        import pickle

        from filelock import FileLock
        self.root = root
        os.makedirs(root, exist_ok=True)
        with FileLock(os.path.join(root, "build.lock")):
            done = os.path.join(root, "slabs.pkl")
            if not os.path.exists(done):
                inputs = [take_rows(GSM8K + "@0:10", os.path.join(root, "inputs"))]
                sets = pack_layouts(inputs, TOKENIZE, root,
                                    [LAYOUTS[n] for n in LAYOUTS if n != "1"], 512)
                run_reference(SHAPE, sets["ref"].path).save(os.path.join(root, "ref.pt"))
                with open(done, "wb") as f:
                    pickle.dump(sets, f)
            with open(done, "rb") as f:
                self.sets = pickle.load(f)
        self.ref = Reference.load(os.path.join(root, "ref.pt"))


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one folder for every worker of this run
        base = base.parent
    return _Work(str(base / "parity-cpu"))


def _worker(rank, world, init, ref_path, runs, out):
    from parity_harness import LAYOUTS, Reference, cut_param, run_layout
    join_gloo(rank, world, init)
    ref = Reference.load(ref_path)
    rows = {tag: run_layout(LAYOUTS[name], ref, data, "cpu", cut=cut or cut_param)
            for tag, name, data, cut in runs}
    if rank == 0:
        torch.save(rows, out)


def _spawn(work_dir, world, runs):
    tag = f"w{world}"
    out = os.path.join(work_dir, f"rows-{tag}.pt")
    args = (world, os.path.join(work_dir, f"init-{tag}"), os.path.join(work_dir, "ref.pt"),
            runs, out)
    # CPU ranks (parity_harness.cpu_buffers): spawn_ranks hides the GPUs from them
    codes = spawn_ranks(_worker, world, args)
    assert codes == [0] * world, codes
    return torch.load(out, weights_only=False)


def _assert_parity(row, ref: Reference):
    assert set(row.errors) == set(GROUPS)
    assert row.loss_diff <= row.tol * abs(ref.step.loss), (row.layout, row.loss, ref.step.loss)
    bad = {g: e for g, e in row.errors.items() if not e <= row.tol}
    assert not bad, f"{row.layout}: gradient groups over {row.tol:.1e}: {bad}"
    assert row.grad_norm_rel <= row.tol, row.layout
    assert row.passed, row.layout


def _assert_same_sequences(sets, names):
    ref = sets["ref"]
    for name in names:
        s, lay = sets[name], LAYOUTS[name]
        assert (s.alignment.tp, s.alignment.cp, s.alignment.sp) == (lay.tp, lay.cp, lay.sp)
        assert (s.real_tokens, s.loss_tokens) == (ref.real_tokens, ref.loss_tokens), name


def test_layout_names():
    assert parse_layout("tp2cp2", 4) == LAYOUTS["tp2cp2"]
    assert parse_layout("tp4sp", 8) == Layout("tp4sp", 8, tp=4, sp=True)  # DP=2 from the world
    assert parse_layout("dp2tp2spcp2").world == 8
    assert parse_layout("tp2", 2).sp is False  # SP only when named (LAYOUTS' tp2cp2 aside)
    with pytest.raises(ValueError, match="needs 4 ranks"):
        parse_layout("dp2tp2", 2)
    with pytest.raises(ValueError, match="use one of"):
        parse_layout("tp2x")


def test_cut_then_uncut_gives_the_full_weights():
    from packtool.megatron.model import build_gpt
    from packtool.megatron.parallel import init_parallel
    init_parallel(1, 1, "cpu")
    model = build_gpt(SHAPE, seed=5)
    sharded = 0
    for name, p in model.named_parameters():
        if not getattr(p, "tensor_model_parallel", False):
            continue
        full = torch.randn(p.shape)
        parts = [cut_param(full, name, p, model, 2, r) for r in range(2)]
        torch.testing.assert_close(uncut(parts, name, p, model), full, rtol=0, atol=0)
        if name.endswith("linear_fc1.weight"):  # gate rows of rank 1 come after rank 0's
            torch.testing.assert_close(parts[1][:SHAPE.ffn // 2], full[SHAPE.ffn // 2:SHAPE.ffn])
        sharded += 1
    assert sharded == 2 + 4 * SHAPE.layers  # embedding, output, qkv/proj/fc1/fc2 per layer


def test_two_ranks_match_one_rank(work):
    """DP=2, TP=2+SP and CP=2 in one 2-rank gloo world (parallel_state re-initialized per
    layout), plus TP=2+SP with two planted bugs (fc1 cut in contiguous halves; norm gradients
    not summed over TP), which the same check must fail far above the tolerance: the
    harness tells a layout bug from summation order."""
    sets = work.sets
    _assert_same_sequences(sets, TWO_RANK)
    assert sets["cp2"].alignment.s == 4 and sets["ref"].alignment.s == 1  # really re-laid out
    runs = [(n, n, sets[n].path, None) for n in TWO_RANK]
    runs += [(f"tp2sp-{bug}", "tp2sp", sets["tp2sp"].path, cut)
             for bug, cut in PLANTED_BUGS.items()]
    rows = _spawn(work.root, 2, runs)
    for name in TWO_RANK:
        _assert_parity(rows[name], work.ref)
    bug = rows["tp2sp-naive-fc1"]
    assert not bug.passed
    assert bug.errors["fc1"] > 100 * bug.tol
    sp_bug = rows["tp2sp-unreduced-norms"]  # SP is really on, and the error stays local
    assert not sp_bug.passed
    assert sp_bug.errors["norms"] > 100 * sp_bug.tol
    assert sp_bug.errors["embedding"] <= sp_bug.tol


@pytest.mark.slow
def test_tp2_x_cp2_matches_one_rank(work):
    sets = work.sets
    _assert_same_sequences(sets, ["tp2cp2"])
    rows = _spawn(work.root, 4, [("tp2cp2", "tp2cp2", sets["tp2cp2"].path, None)])
    _assert_parity(rows["tp2cp2"], work.ref)
