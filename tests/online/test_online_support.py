"""Sampler-support replay wired to packtool's batches (packtool/online/support.py, docs/RL.md):
a Megatron-path ThdBatch + megatron-core's GPTModel, and a packtool.hf SlabCollator batch + a
transformers Llama, both tiny and built from configs (nothing downloaded), on CPU.

Each checks (1) the helper's log-probs and entropies equal the fp64 dense reference
`logit[s] - logsumexp(logit[row])` (packtool/kernels/reference.py) on the same hidden states, and (2)
packed == each sequence alone: the sequence run alone through the model, scored in plain
torch with no packtool (the logits at j against token j+1 over token j+1's row), gives the
same values and, summed, the same gradients of every model parameter; and (3) on a CP=2 rank the
helper scores the rank's positions as the unsharded batch does. A planted off-by-one
(the token-aligned rows instead of the target-aligned ones) is caught by the same check.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool.kernels.reference import torch_reference_support_logprob  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.online.support import support_logprobs_hf, support_logprobs_thd  # noqa: E402

VOCAB, K, TEMP = 256, 6, 0.8
RTOL, ATOL = 1e-4, 1e-5  # fp32 on CPU; observed ~1e-6 (summation order)


def _rollouts(seed=0, lens=(9, 30, 5, 17)):
    """(ids, response mask, token-aligned support rows) per sequence: a response token's row
    holds it once among K distinct ids, some rows cut short by trailing -1 (top-p)."""
    rng = np.random.default_rng(seed)
    out = []
    for L in lens:
        ids = rng.integers(1, VOCAB, L)
        mask = (np.arange(L) >= 2).astype(np.float32)
        rows = np.full((L, K), -1, np.int32)
        for j in np.nonzero(mask)[0]:
            others = rng.choice(np.setdiff1d(np.arange(VOCAB), [ids[j]]), K - 1, replace=False)
            keep = int(rng.integers(1, K + 1))
            row = np.concatenate(([ids[j]], others))[:keep]
            rows[j, :keep] = rng.permutation(row)
        out.append((ids, mask, rows))
    return out


def _alone_reference(h, weight, ids, mask, rows):
    """No packtool: position j of one sequence scores token j+1 over its row (fp32 autograd)."""
    rows = torch.as_tensor(rows[1:]).long()
    active = torch.as_tensor(mask[1:]) != 0
    rows = torch.where(active[:, None], rows, torch.full_like(rows, -1))
    lp, ent, valid = torch_reference_support_logprob(h[:-1], weight, torch.as_tensor(ids[1:]), rows, TEMP)
    return lp, ent, valid


def _check_fp64(h, weight, sampled, rows, active, lp, ent):
    rows = torch.where(active[:, None], rows.long(), torch.full_like(rows.long(), -1))
    ref_lp, ref_ent, ref_valid = torch_reference_support_logprob(
        h.detach().double(), weight.detach().double(), torch.where(active, sampled, 0), rows, TEMP)
    torch.testing.assert_close(lp.double(), ref_lp, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=RTOL, atol=ATOL)
    return ref_valid


def _grads(model, scalar):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(scalar, params, retain_graph=True, allow_unused=True)


def _assert_grads(a, b):
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
            continue
        torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL * 10)


# --- Megatron path ----------------------------------------------------------------------------

def _assert_packed_is_alone(model, W, seqs, starts, lp, ent, valid, hidden_alone):
    """Each sequence scored alone (`hidden_alone(ids, mask, rows)` -> [L, H]) equals its slice of
    the packed scores, and a position-weighted sum of both has the same parameter gradients."""
    coef = torch.linspace(0.5, 1.5, lp.shape[1])  # a different weight per position
    packed_total = (lp[0] * coef).sum() + (ent[0] * coef).sum()
    alone_total = 0.0
    for (ids, mask, rows), st in zip(seqs, starts):
        a_lp, a_ent, a_valid = _alone_reference(hidden_alone(ids, mask, rows), W, ids, mask, rows)
        sl = slice(st, st + len(ids) - 1)
        torch.testing.assert_close(lp[0, sl], a_lp, rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(ent[0, sl], a_ent, rtol=RTOL, atol=ATOL)
        assert torch.equal(valid[0, sl], a_valid)
        alone_total = alone_total + (a_lp * coef[sl]).sum() + (a_ent * coef[sl]).sum()
    _assert_grads(_grads(model, packed_total), _grads(model, alone_total))


@pytest.fixture(scope="module")
def gpt():
    pytest.importorskip("megatron.core")
    from packtool.megatron.model import GPTShape, build_gpt
    from packtool.megatron.parallel import init_parallel
    init_parallel(1, 1, "cpu")
    return build_gpt(GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=VOCAB), seed=5)


def _thd(seqs, alignment, **kw):
    from packtool.online.thd import thd_batch
    return thd_batch([torch.as_tensor(s[0]) for s in seqs], alignment,
                     [torch.as_tensor(s[1]) for s in seqs],
                     side={"support": [torch.as_tensor(s[2]) for s in seqs]}, **kw)


@pytest.mark.parametrize("impl", ["torch", "dense"])
def test_thd_batch_scores_equal_the_fp64_reference_and_each_sequence_alone(gpt, impl):
    from packtool.align import Alignment
    from packtool.megatron.model import hidden_states
    seqs = _rollouts()
    b = _thd(seqs, Alignment(tp=2, fp8="tensorwise", capacity=256))  # pads inside and after segments
    h = hidden_states(gpt, b)
    W = gpt.output_layer.weight
    lp, ent, valid = support_logprobs_thd(b, h, W, temperature=TEMP, entropy=True, impl=impl)
    assert lp.shape == ent.shape == valid.shape == b.labels.shape
    active = b.loss_weight[0] != 0
    ref_valid = _check_fp64(h[:, 0], W, b.labels[0], b.side_targets["support"][0], active, lp[0], ent[0])
    assert torch.equal(valid[0], ref_valid)
    assert int(valid.sum()) == sum(int((s[2][1:, 0] >= 0).sum()) for s in seqs)

    starts = b.params.cu_seqlens_q_padded[:-1].tolist()
    _assert_packed_is_alone(gpt, W, seqs, starts, lp, ent, valid,
                            lambda ids, mask, rows: hidden_states(gpt, _thd([(ids, mask, rows)],
                                                                             Alignment(capacity=256)))[:, 0])


def test_thd_planted_off_by_one_is_caught(gpt):
    from packtool.align import Alignment
    from packtool.megatron.model import hidden_states
    seqs = _rollouts(seed=3)
    b = _thd(seqs, Alignment(capacity=256))
    b.side_targets["support"] = b.side["support"]  # token-aligned rows: the wrong pairing
    with torch.no_grad(), pytest.raises(ValueError, match="not among its support row"):
        support_logprobs_thd(b, hidden_states(gpt, b), gpt.output_layer.weight, temperature=TEMP)


def test_thd_errors_name_the_column_and_the_shape(gpt):
    from packtool.align import Alignment
    seqs = _rollouts(seed=4, lens=(6, 7))
    b = _thd(seqs, Alignment(capacity=64))
    h = torch.zeros(b.labels.shape[1], 1, 32)
    with pytest.raises(PacktoolInputError, match="--support-columns cands"):
        support_logprobs_thd(b, h, gpt.output_layer.weight, "cands")
    with pytest.raises(ValueError, match="holds 3 positions"):
        support_logprobs_thd(b, h[:3], gpt.output_layer.weight)
    b.side_targets["support"] = torch.where(b.loss_weight[..., None] != 0, -1, b.side_targets["support"])
    with pytest.raises(ValueError, match=r"^support_logprobs_thd: batch.side_targets\['support'\].flatten\(0, -2\)\[\d+\] is empty \(all -1\), "
                       r"but batch.loss_weight.flatten\(\)\[\d+\] makes that token a loss target"):
        support_logprobs_thd(b, h, gpt.output_layer.weight)


# --- HF path ----------------------------------------------------------------------------------

def _slab(seqs, mult=4):
    """One raw slab row (the columns SlabCollator reads), each segment padded to `mult`."""
    ids, mask, rows, lens, padded = [], [], [], [], []
    for s_ids, s_mask, s_rows in seqs:
        L = len(s_ids)
        P = -(-L // mult) * mult
        ids.append(np.concatenate([s_ids, np.zeros(P - L, np.int64)]))
        mask.append(np.concatenate([s_mask, np.zeros(P - L, np.float32)]).astype(np.uint8))
        rows.append(np.concatenate([s_rows, np.full((P - L, K), -1, np.int32)]))
        lens.append(L)
        padded.append(P)
    return {"input_ids": np.concatenate(ids).astype(np.int32), "loss_mask": np.concatenate(mask),
            "seq_lens": np.array(lens, np.int32),
            "cu_seqlens_padded": np.concatenate(([0], np.cumsum(padded))).astype(np.int32),
            "support": np.concatenate(rows)}


@pytest.fixture(scope="module")
def llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                   head_dim=8, attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg).float().eval()


def _hf_hidden(model, batch):
    from packtool.hf import needs_4d_mask
    kw = {k: v for k, v in batch.items() if k not in ("labels", "support", "shift_support")}
    out = model(**kw, output_hidden_states=True)
    h = out.hidden_states[-1]
    # the helper's premise: the last hidden state is what the LM head multiplies
    torch.testing.assert_close(h @ model.lm_head.weight.T, out.logits, rtol=1e-5, atol=1e-5)
    assert not needs_4d_mask(model) or "attention_mask" in kw
    return h


@pytest.mark.parametrize("keep_pads", [False, True])
def test_hf_batch_scores_equal_the_fp64_reference_and_each_sequence_alone(llama, keep_pads):
    from packtool.hf import SlabCollator, needs_4d_mask
    seqs = _rollouts(seed=1)
    feats = [_slab(seqs[:2]), _slab(seqs[2:])]
    batch = SlabCollator(keep_pads=keep_pads, mask_4d=needs_4d_mask(llama), side_columns=["support"])(feats)
    h = _hf_hidden(llama, batch)
    W = llama.lm_head.weight
    lp, ent, valid = support_logprobs_hf(batch, h, W, temperature=TEMP, entropy=True)
    assert lp.shape == ent.shape == valid.shape == batch["labels"].shape
    lab = batch["labels"][0]
    target = torch.cat([lab[1:], lab.new_full((1,), -100)])
    _check_fp64(h[0], W, target.clamp_min(0), batch["shift_support"][0], target != -100, lp[0], ent[0])

    pos = batch["position_ids"][0]
    starts = torch.nonzero(pos == 0).flatten().tolist()
    assert int(valid.sum()) == sum(int((s[2][1:, 0] >= 0).sum()) for s in seqs)
    _assert_packed_is_alone(llama, W, seqs, starts, lp, ent, valid,
                            lambda ids, mask, rows: llama(input_ids=torch.as_tensor(ids)[None],
                                                          output_hidden_states=True).hidden_states[-1][0])


def test_hf_planted_off_by_one_is_caught(llama):
    from packtool.hf import SlabCollator
    seqs = _rollouts(seed=2)
    batch = SlabCollator(side_columns=["support"])([_slab(seqs)])
    batch["shift_support"] = batch["support"]  # token-aligned rows: the wrong pairing
    with torch.no_grad(), pytest.raises(ValueError, match="not among its support row"):
        support_logprobs_hf(batch, _hf_hidden(llama, batch), llama.lm_head.weight, temperature=TEMP)


def test_thd_cp2_ranks_score_their_share_of_the_unsharded_batch():
    """On each CP rank (zigzag shard) the helper gives the values the CP=1 batch has at the same
    positions: hidden states are a fixed function of (segment, position), as a model's would be."""
    pytest.importorskip("megatron.core")
    from packtool.align import Alignment
    seqs = _rollouts(seed=6, lens=(11, 26, 7, 19))
    g = torch.Generator().manual_seed(0)
    W = torch.randn(VOCAB, 16, generator=g)
    table = torch.randn(8, 64, 16, generator=g)  # [segment, position, H]

    def score(b):
        h = table[b.segment[0], b.position_ids[0]]
        lp, ent, valid = support_logprobs_thd(b, h[:, None], W, temperature=TEMP, entropy=True)
        keys = (b.segment[0] * 64 + b.position_ids[0]).tolist()
        return {k: (a, e, v) for k, a, e, v in zip(keys, lp[0].tolist(), ent[0].tolist(), valid[0].tolist())}

    align = Alignment(cp=2, capacity=256)
    full = score(_thd(seqs, align, cp_size=1))
    seen = {}
    for r in (0, 1):
        part = score(_thd(seqs, align, cp_rank=r))
        assert not set(part) & set(seen)
        seen.update(part)
    assert seen.keys() == full.keys() and sum(v for _, _, v in full.values()) > 20
    for k, (a, e, v) in full.items():
        assert seen[k][2] == v and seen[k][0] == pytest.approx(a, rel=1e-6, abs=1e-6)
        assert seen[k][1] == pytest.approx(e, rel=1e-6, abs=1e-6)
