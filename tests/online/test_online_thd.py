"""In-memory THD batches (packtool.online.thd) equal the batches PackedSlabDataset reads
back from slabs that packtool's own `pack` wrote for the same sequences."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="THD batches are torch tensors")
pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")

from packtool.align import Alignment  # noqa: E402
from packtool.layout import compute_layout  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
from packtool.megatron.thd import make_thd_batch  # noqa: E402
from packtool.online.thd import thd_batch, thd_batches  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning import PackingConfig  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, "fixtures", "tokenizers", "gpt2", "tokenizer.json")
ALIGNS = [Alignment(cp=2, fp8="tensorwise", capacity=256),
          Alignment(tp=2, cp=2, capacity=512, fixed_length=512)]


def _rollouts(n=40, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(2, 120))
        ids = rng.integers(3, 50000, L)
        mask = (np.arange(L) >= rng.integers(0, L)).astype(np.int64)  # prompt, then response
        out.append((ids, mask))
    return out


def _packed(tmp_path, align, seqs, side=None):
    """`pack` of the rollouts as pre-tokenized JSON rows; with `side`, their side columns
    too (old_logprobs float32, support int32 rows as a declared support column)."""
    if not os.path.exists(TOK):
        pytest.skip("fixtures/tokenizers/gpt2/tokenizer.json is missing")
    src = tmp_path / "rollouts.jsonl"
    with open(src, "w") as f:
        for i, (ids, mask) in enumerate(seqs):
            row = {"input_ids": ids.tolist(), "loss_mask": mask.tolist()}
            if side is not None:
                row.update({k: v.tolist() for k, v in side[i].items()})
            f.write(json.dumps(row) + "\n")
    out = str(tmp_path / "packed")
    cols = dict(side_columns=("old_logprobs:float32", "support:int32"),
                support_columns=("support",)) if side is not None else {}
    pack([str(src)], align, PackingConfig(algorithm="bfd"),
         TokenizeConfig(tokenizer=TOK, add_bos=False, add_eos=False, **cols), output=out,
         cache_dir=str(tmp_path / "cache"), plan_shard_rows=0)
    return out


def _sources(out):
    """Source rows of every slab in on-disk order (FORMAT.md's source_index, fill = -1)."""
    import pyarrow.parquet as pq
    ds = PackedSlabDataset(out, cp_size=1)
    got = []
    for name in ds.manifest.shards:
        col = pq.read_table(os.path.join(out, name), columns=["source_index"])["source_index"]
        got += [[i for i in row if i >= 0] for row in col.to_pylist()]
    return got


K = 5  # support width


def _logprob_of(ids):
    """A log-prob that is a function of the token: whoever reads it knows which token it is."""
    return (-np.asarray(ids, np.float64) / 1e5).astype(np.float32)


def _side_of(ids, mask, seed):
    """old_logprobs (float32 per token) and support (int32 K-row per token: the token once,
    other candidates, -1 at the end; all -1 outside the response), as token-aligned values."""
    rng = np.random.default_rng(seed)
    sup = np.full((len(ids), K), -1, np.int32)
    for j in np.flatnonzero(mask):
        n = int(rng.integers(1, K + 1))
        others = 50100 + rng.permutation(150)  # token ids of the vocabulary (the support rule holds them to it)
        sup[j, :n] = np.concatenate(([ids[j]], others[others != ids[j]][:n - 1]))
    return {"old_logprobs": _logprob_of(ids), "support": sup}


SIDE_FILL = {"old_logprobs": 0.0, "support": -1}


def _layout_batch(seqs, side, align, cp_size, rank, pad_id):
    """The dataset path's batch for these sequences, from slab arrays placed here one segment
    at a time (compute_layout only), not through online.packed."""
    lens = np.array([len(s[0]) for s in seqs])
    lay = compute_layout(lens, np.array([0, lens.size]), align)
    T = int(lay.slab_len[0])
    ids, mask = np.full(T, pad_id, np.int32), np.zeros(T, np.uint8)
    full = {"old_logprobs": np.zeros(T, np.float32), "support": np.full((T, K), -1, np.int32)}
    for (s, m), sd, st in zip(seqs, side, lay.seg_start):
        ids[st:st + len(s)], mask[st + 1:st + len(s)] = s, m[1:]
        for k in full:
            full[k][st:st + len(s)] = sd[k]
    return make_thd_batch(ids, mask, lay.seg_len, lay.seg_padded, cp=cp_size, cp_rank=rank,
                          side=full, side_fill=SIDE_FILL)


def _assert_targets_follow_labels(b):
    """Where the logits at p are trained they predict labels[p]: the target-aligned side
    values there are that token's (its log-prob; its support row holds it exactly once)."""
    w = b.loss_weight[0] > 0
    lab = b.labels[0][w].numpy()
    assert np.array_equal(b.side_targets["old_logprobs"][0][w].numpy(), _logprob_of(lab))
    sup = b.side_targets["support"][0][w].numpy()
    assert ((sup == lab[:, None]).sum(1) == 1).all()


def _assert_same(a, b):
    for k in ("input_ids", "position_ids", "labels", "loss_weight", "segment", "seg_loss_tokens"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and torch.equal(x, y), k
    for part in ("side", "side_targets"):
        x, y = getattr(a, part), getattr(b, part)
        assert x.keys() == y.keys(), part
        for k in x:
            assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), (part, k)
    assert a.num_tokens == b.num_tokens and a.num_loss_tokens == b.num_loss_tokens
    assert np.array_equal(a.seg_real, b.seg_real)
    pa, pb = a.params, b.params
    for k in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
              "attn_cu_q", "attn_cu_k", "kv_index"):
        x, y = getattr(pa, k), getattr(pb, k)
        assert (x is None and y is None) or torch.equal(x, y), k
    for k in ("qkv_format", "max_seqlen_q", "max_seqlen_kv", "cp_size", "cp_rank",
              "attn_max_q", "attn_max_k", "attn_cu_q_host", "attn_cu_k_host"):
        assert getattr(pa, k) == getattr(pb, k), k


@pytest.mark.parametrize("ai", range(len(ALIGNS)))
def test_in_memory_batch_equals_the_packed_slab(tmp_path, ai):
    """Tokens and side columns (scalar float32, 5-wide int32 support): `pack` -> slabs ->
    PackedSlabDataset equals thd_batch of the same rollouts in memory, every CP rank; and
    both equal the batch of slab arrays placed here one segment at a time."""
    align = ALIGNS[ai]
    seqs = _rollouts()
    side = [_side_of(*s, seed=i) for i, s in enumerate(seqs)]
    out = _packed(tmp_path, align, seqs, side)
    sources = _sources(out)
    ids = [torch.as_tensor(s[0]) for s in seqs]
    masks = [torch.as_tensor(s[1]) for s in seqs]
    for cp_size, ranks in ((1, [0]), (align.cp, range(align.cp))):
        for r in ranks:
            ds = PackedSlabDataset(out, cp_size=cp_size, cp_rank=r)
            for i, src in enumerate(sources):
                mine = thd_batch([ids[j] for j in src], align, [masks[j] for j in src],
                                 cp_size=cp_size, cp_rank=r, pad_id=ds.manifest.pad_id,
                                 side={k: [torch.as_tensor(side[j][k]) for j in src] for k in SIDE_FILL})
                _assert_same(ds.load([i]), mine)
                _assert_same(_layout_batch([seqs[j] for j in src], [side[j] for j in src], align,
                                           cp_size, r, ds.manifest.pad_id), mine)
                _assert_targets_follow_labels(mine)


def test_merged_micro_batches_equal_in_memory_batches(tmp_path):
    """With a token budget the reader merges slabs (tail once); the same sequences in
    memory, one micro-batch each, give the same batches."""
    align = ALIGNS[0]
    seqs = _rollouts(60, seed=1)
    side = [_side_of(*s, seed=i) for i, s in enumerate(seqs)]
    out = _packed(tmp_path, align, seqs, side)
    sources = _sources(out)
    ds = PackedSlabDataset(out, cp_size=2, cp_rank=1, grad_accum=4, micro_batch_tokens=512)
    side_t = {k: [torch.as_tensor(d[k]) for d in side] for k in SIDE_FILL}
    flat = [torch.as_tensor(s[0]) for s in seqs]
    masks = [torch.as_tensor(s[1]) for s in seqs]
    unfixed = dataclasses.replace(align, fixed_length=None)
    n = 0
    for plan in ds.plan(epoch=0):
        groups = [[j for slab in mb for j in sources[slab]] for mb in plan.micro_batches]
        mine = thd_batches(flat, unfixed, groups, masks, cp_size=2, cp_rank=1,
                           pad_id=ds.manifest.pad_id, side=side_t)
        for mb, m in zip(plan.micro_batches, mine):
            _assert_same(ds.load(mb), m)
            n += len(mb) > 1
    assert n > 0  # some micro-batch really merged slabs


def test_flat_tokens_and_default_mask():
    align = Alignment(cp=2, capacity=64)
    a = [torch.arange(1, 6), torch.arange(10, 13)]
    b = thd_batch(torch.cat(a), align, lengths=[5, 3], cp_size=1)
    c = thd_batch(a, align, [torch.ones(5), torch.ones(3)], cp_size=1)
    _assert_same(b, c)
    assert b.num_loss_tokens == 4 + 2  # each sequence's first token is no target
    assert b.input_ids.shape[1] == 8 + 4  # 5 -> 8, 3 -> 4 (s = 4)


def test_a_planted_off_by_one_fails_the_target_check():
    """The check above can fail: token-aligned values where target-aligned ones belong."""
    seqs = _rollouts(6, seed=3)
    side = [_side_of(*s, seed=i) for i, s in enumerate(seqs)]
    b = thd_batch([torch.as_tensor(s[0]) for s in seqs], ALIGNS[0], [torch.as_tensor(s[1]) for s in seqs],
                  side={k: [torch.as_tensor(d[k]) for d in side] for k in SIDE_FILL}, cp_size=1)
    _assert_targets_follow_labels(b)
    for planted in (b.side, {k: torch.roll(v, -2, 1) for k, v in b.side_targets.items()}):
        with pytest.raises(AssertionError):
            _assert_targets_follow_labels(dataclasses.replace(b, side_targets=planted))


@pytest.mark.parametrize("bad,msg", [
    ({"old_logprobs": [torch.zeros(3), torch.zeros(3)]}, "sequence 1 has 3 values for 2 tokens"),
    ({"old_logprobs": [torch.zeros(3)]}, "1 sequences for 2"),
    ({"support": [torch.zeros(3, 2, 2), torch.zeros(2, 2, 2)]}, "one scalar or one K-wide row"),
])
def test_side_columns_that_do_not_follow_the_tokens_are_refused(bad, msg):
    from packtool.online.step import OnlinePackError
    with pytest.raises(OnlinePackError, match=msg):
        thd_batch([torch.arange(1, 4), torch.arange(5, 7)], Alignment(cp=2, capacity=64), side=bad)


def test_side_columns_flat_with_lengths_and_default_fills():
    align = Alignment(cp=2, capacity=64)
    lp = [torch.tensor([.1, .2, .3]), torch.tensor([.4, .5])]
    sup = [torch.tensor([[1, -1], [2, 9], [3, -1]], dtype=torch.int32),
           torch.tensor([[5, -1], [6, -1]], dtype=torch.int32)]
    a = thd_batch([torch.arange(1, 4), torch.arange(5, 7)], align, side={"lp": lp, "sup": sup}, cp_size=1)
    b = thd_batch(torch.tensor([1, 2, 3, 5, 6]), align, lengths=[3, 2], cp_size=1,
                  side={"lp": torch.cat(lp), "sup": torch.cat(sup)})
    _assert_same(a, b)
    assert a.side["lp"][0].tolist() == pytest.approx([.1, .2, .3, 0, .4, .5, 0, 0])
    assert a.side_targets["lp"][0].tolist() == pytest.approx([.2, .3, 0, 0, .5, 0, 0, 0])
    assert a.side_targets["sup"][0, :, 0].tolist() == [2, 3, -1, -1, 6, -1, -1, -1]
    assert a.side["sup"].shape == (1, 8, 2) and a.side["sup"].dtype == torch.int32


# RB-10: thd_batch's CP taken from cp_group (or given as cp_size) over an Alignment packed for a CP whose
# segments do not split into 2*cp chunks ended in layout's words ("seg_padded: segment 0 ...", an
# argument thd_batch has not, kind input): refused up front naming the Alignment, kind config
@pytest.mark.parametrize("door,how", [("thd_batch", "cp_group"), ("thd_batch", "cp_size"),
                                      ("pack_tensors", "cp_size")])  # pack_tensors takes no group
def test_an_alignment_for_another_cp_is_refused_naming_it(door, how):
    from megatron_slabs import thread_cp_groups

    from packtool.errors import PacktoolConfigError
    from packtool.online.packed import pack_tensors
    kw = {"cp_group": thread_cp_groups(2)[1]} if how == "cp_group" else {"cp_size": 2}
    call = thd_batch if door == "thd_batch" else pack_tensors
    with pytest.raises(PacktoolConfigError) as e:
        call([torch.arange(1, 20), torch.arange(3, 14)], Alignment(capacity=64), **kw)
    msg = str(e.value)
    assert "alignment is for cp=1" in msg and "pass Alignment(cp=2" in msg and "\n" not in msg, msg
