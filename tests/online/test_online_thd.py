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
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402
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


def _packed(tmp_path, align, seqs):
    if not os.path.exists(TOK):
        pytest.skip("fixtures/tokenizers/gpt2/tokenizer.json is missing")
    src = tmp_path / "rollouts.jsonl"
    with open(src, "w") as f:
        for ids, mask in seqs:
            f.write(json.dumps({"input_ids": ids.tolist(), "loss_mask": mask.tolist()}) + "\n")
    out = str(tmp_path / "packed")
    pack([str(src)], align, PackingConfig(algorithm="bfd"),
         TokenizeConfig(tokenizer=TOK, add_bos=False, add_eos=False), output=out,
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


def _assert_same(a, b):
    for k in ("input_ids", "position_ids", "labels", "loss_weight"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and torch.equal(x, y), k
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
    align = ALIGNS[ai]
    seqs = _rollouts()
    out = _packed(tmp_path, align, seqs)
    sources = _sources(out)
    ids = [torch.as_tensor(s[0]) for s in seqs]
    masks = [torch.as_tensor(s[1]) for s in seqs]
    for cp_size, ranks in ((1, [0]), (align.cp, range(align.cp))):
        for r in ranks:
            ds = PackedSlabDataset(out, cp_size=cp_size, cp_rank=r)
            for i, src in enumerate(sources):
                mine = thd_batch([ids[j] for j in src], align, [masks[j] for j in src],
                                 cp_size=cp_size, cp_rank=r, pad_id=ds.manifest.pad_id)
                _assert_same(ds.load([i]), mine)


def test_merged_micro_batches_equal_in_memory_batches(tmp_path):
    """With a token budget the reader merges slabs (tail once); the same sequences in
    memory, one micro-batch each, give the same batches."""
    align = ALIGNS[0]
    seqs = _rollouts(60, seed=1)
    out = _packed(tmp_path, align, seqs)
    sources = _sources(out)
    ds = PackedSlabDataset(out, cp_size=2, cp_rank=1, grad_accum=4, micro_batch_tokens=512)
    flat = [torch.as_tensor(s[0]) for s in seqs]
    masks = [torch.as_tensor(s[1]) for s in seqs]
    unfixed = dataclasses.replace(align, fixed_length=None)
    n = 0
    for plan in ds.plan(epoch=0):
        groups = [[j for slab in mb for j in sources[slab]] for mb in plan.micro_batches]
        mine = thd_batches(flat, unfixed, groups, masks, cp_size=2, cp_rank=1,
                           pad_id=ds.manifest.pad_id)
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
