"""The PPO/GRPO clipped objective of docs/RL.md (packtool.online.rl) on packed batches gives
every sequence the loss and the gradient it gets alone.

"Alone" is plain torch with no packtool at all: one unpadded sequence, logits at j scored
against token j+1, old log-probs and advantages sliced [1:]. "Packed" is
`online.packed.pack_tensors` (the tensors `thd_batch` wraps) with pads inside and after
segments and a fixed-length fill, and for CP=2 both ranks' zigzag shards simulated in one
process, each rank's attention reading the K/V of both (concatenated, as an all-gather
gives them), the rank losses summed (as the CP gradient all-reduce sums them); and CP=2 as
two threads, each with its own model copy, shard and loss, K/V through an autograd
all-gather between the threads, gradients summed over ranks. The model is
a one-layer causal attention LM defined here, so nothing needs megatron (this file is the
one run on the H200 in bf16: `pytest tests/online/test_online_rl.py` with CUDA present).

Tolerances: fp32 (CPU) rtol 1e-4 / atol 1e-5 (observed ~1e-7, summation order). bf16 on
CUDA: 3e-2 relative on losses and gradient norms (bf16 keeps 8 bits: 2^-8 = 3.9e-3 per
rounding; packed and alone round differently in matmuls of other shapes); a planted
off-by-one moves the losses by far more (checked in both dtypes).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool.align import Alignment  # noqa: E402
from packtool.online.packed import pack_tensors  # noqa: E402
from packtool.online.rl import AGGREGATES, clipped_policy_loss  # noqa: E402

VOCAB, DIM, MAXPOS = 96, 32, 256
ALIGNS = {"cp1": (Alignment(tp=2, capacity=512), 1),
          "cp2": (Alignment(cp=2, fp8="tensorwise", capacity=512), 2),
          "cp2-fixed": (Alignment(tp=2, cp=2, capacity=512, fixed_length=512), 2)}
DEVICES = [("cpu", torch.float32)] + ([("cuda", torch.bfloat16)] if torch.cuda.is_available() else [])


class TinyLM(torch.nn.Module):
    """Embedding + position-in-segment embedding, one causal attention layer, MLP, LM head.
    Attention keeps to a query's own segment and to keys at or before it in the slab."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(VOCAB, DIM, generator=g) * 0.5)
        self.pos = torch.nn.Parameter(torch.randn(MAXPOS, DIM, generator=g) * 0.5)
        self.qkv = torch.nn.Parameter(torch.randn(DIM, 3 * DIM, generator=g) / DIM ** 0.5)
        self.mlp = torch.nn.Parameter(torch.randn(DIM, DIM, generator=g) / DIM ** 0.5)
        self.head = torch.nn.Parameter(torch.randn(DIM, VOCAB, generator=g) / DIM ** 0.5)

    def forward(self, ranks):
        """ranks: per CP rank (ids, pos, seg, index) of its local positions; logits per rank,
        all ranks in this process (K/V concatenated as an all-gather gives them)."""
        gathered = {}

        def gather_all(name, parts):
            gathered[name] = torch.cat(parts)
            return gathered[name]

        hs = [self._embed(ids, pos) for ids, pos, _, _ in ranks]
        qkv = [h @ self.qkv for h in hs]
        kv = (gather_all("k", [x[:, DIM:] for x in qkv]), gather_all("seg", [r[2] for r in ranks]),
              gather_all("idx", [r[3] for r in ranks]))
        return [self._attend(h, x, kv, seg, idx) for h, x, (_, _, seg, idx) in zip(hs, qkv, ranks)]

    def forward_rank(self, ids, pos, seg, idx, all_gather):
        """One CP rank alone: its local positions, K/V and their slab positions gathered from
        every rank through `all_gather` (autograd-aware: its backward returns each rank its
        share of the K/V gradient, as a reduce-scatter does)."""
        h = self._embed(ids, pos)
        x = h @ self.qkv
        kv = (all_gather(x[:, DIM:]), all_gather(seg), all_gather(idx))
        return self._attend(h, x, kv, seg, idx)

    def _embed(self, ids, pos):
        return self.emb[ids] + self.pos[pos]

    def _attend(self, h, x, kv, seg, idx):
        kv_all, k_seg, k_idx = kv
        k_all, v_all = kv_all[:, :DIM], kv_all[:, DIM:]
        s = (x[:, :DIM] @ k_all.T) / DIM ** 0.5
        ok = (seg[:, None] == k_seg[None, :]) & (k_idx[None, :] <= idx[:, None])
        a = torch.softmax(s.float().masked_fill(~ok, float("-inf")), -1).to(h.dtype)
        h = h + a @ v_all
        h = h + torch.tanh(h @ self.mlp)
        return h @ self.head


def _rollouts(n, device, seed=0):
    """Token ids, response masks, per-token old log-probs and advantages (token-aligned: the
    value given for token j belongs to token j; token 0 and the prompt have none)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(3, 60))
        ids = torch.as_tensor(rng.integers(1, VOCAB, L), device=device)
        mask = torch.as_tensor((np.arange(L) >= rng.integers(1, L - 1)).astype(np.float32), device=device)
        old = torch.as_tensor(rng.normal(-4.6, 0.4, L).astype(np.float32), device=device) * mask
        adv = torch.full((L,), float(rng.normal()), device=device) * mask  # GRPO: one per sequence
        out.append((ids, mask, old, adv))
    return out


def _token_logprobs(logits, labels):
    return torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None]).squeeze(-1)


def _alone(model, seq, aggregate, n_seq, n_tok, **clip):
    """One sequence, plain torch: its own loss and its share of the micro-batch objective."""
    ids, mask, old, adv = seq
    L = ids.numel()
    dev = ids.device
    z = torch.zeros(L, dtype=torch.int64, device=dev)
    logits = model([(ids, torch.arange(L, device=dev), z, torch.arange(L, device=dev))])[0]
    lp = _token_logprobs(logits[:-1], ids[1:])
    w = mask[1:]
    ratio = torch.exp((lp - old[1:]) * (w != 0))
    a = adv[1:]
    per_tok = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip["clip_low"], 1 + clip["clip_high"]) * a) * w
    own = per_tok.sum() / w.sum()
    share = {"token-mean": per_tok.sum() / n_tok, "seq-mean-token-mean": own / n_seq,
             "seq-mean-token-sum": per_tok.sum() / n_seq}[aggregate]
    return own, share


def _packed(model, seqs, align, cp, aggregate, shift=True, **clip):
    """Per-sequence losses and the objective of the packed micro-batch, CP ranks summed."""
    parts = [pack_tensors([s[0] for s in seqs], align, [s[1] for s in seqs],
                          side={"old_logprobs": [s[2] for s in seqs], "advantages": [s[3] for s in seqs]},
                          cp_size=cp, cp_rank=r) for r in range(cp)]
    logits = model([(p.input_ids, p.position_ids, p.segment, p.index) for p in parts])
    per_seq, loss, clipped = 0, 0, []
    for p, lg in zip(parts, logits):
        side = p.side_targets if shift else p.side  # shift=False: a planted off-by-one
        out = clipped_policy_loss(_token_logprobs(lg, p.labels), side["old_logprobs"], side["advantages"],
                                  p.loss_weight, p.segment, p.seg_loss_tokens, aggregate=aggregate, **clip)
        per_seq, loss = per_seq + out.per_sequence, loss + out.loss
        clipped.append(float(out.clip_fraction))
    real = torch.as_tensor(parts[0].seg_len > 0, device=per_seq.device)
    return per_seq[real], loss, clipped


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    return torch.cat([p.grad.reshape(-1).float() for p in model.parameters()])


def _close(a, b, dtype):
    if dtype == torch.float32:
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-4, atol=1e-5)
    else:  # bf16: relative to the size of the whole vector
        assert float((a.float() - b.float()).norm()) <= 3e-2 * float(b.float().norm()) + 1e-6


CLIP = dict(clip_low=0.2, clip_high=0.28)


@pytest.mark.parametrize("device,dtype", DEVICES)
@pytest.mark.parametrize("name", list(ALIGNS))
@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_packed_losses_and_gradients_equal_each_sequence_alone(device, dtype, name, aggregate):
    align, cp = ALIGNS[name]
    model = TinyLM().to(device=device, dtype=dtype)
    seqs = _rollouts(7, device)
    n_seq = len(seqs)
    n_tok = sum(float(s[1][1:].sum()) for s in seqs)
    per_seq, loss, clipped = _packed(model, seqs, align, cp, aggregate, **CLIP)
    assert 0 < sum(clipped) and max(clipped) < 1  # both branches of the clip are exercised
    alone = [_alone(model, s, aggregate, n_seq, n_tok, **CLIP) for s in seqs]
    _close(per_seq, torch.stack([a[0] for a in alone]), dtype)
    _close(loss, sum(a[1] for a in alone), dtype)
    # the objective's gradient, and each sequence's own (its loss alone vs its packed share)
    _close(_grads(model, loss), _grads(model, sum(a[1] for a in alone)), dtype)
    for k in (0, n_seq - 1):
        _close(_grads(model, per_seq[k]), _grads(model, alone[k][0]), dtype)


@pytest.mark.parametrize("device,dtype", DEVICES)
def test_a_planted_off_by_one_fails(device, dtype):
    """Token-aligned side columns where target-aligned ones belong (ratios against the wrong
    token's old log-prob) fail the same comparison."""
    align, cp = ALIGNS["cp2"]
    model = TinyLM().to(device=device, dtype=dtype)
    seqs = _rollouts(7, device, seed=1)
    per_seq, _, _ = _packed(model, seqs, align, cp, "token-mean", shift=False, **CLIP)
    alone = torch.stack([_alone(model, s, "token-mean", 7, 1.0, **CLIP)[0] for s in seqs])
    with pytest.raises(AssertionError):
        _close(per_seq, alone, dtype)


@pytest.mark.parametrize("aggregate", ["token-mean", "seq-mean-token-mean"])
def test_cp2_ranks_as_threads_equal_each_sequence_alone(aggregate):
    """CP=2 as two threads, each with its own copy of the model, its own zigzag shard
    (`pack_tensors(cp_rank=r)`) and K/V from an autograd all-gather between the threads
    (tests/megatron_slabs.thread_cp_groups); each rank backpropagates its own loss, the
    gradients are summed over ranks (the CP all-reduce). fp32, CPU."""
    from megatron_slabs import run_threads, thread_cp_groups
    align, cp = ALIGNS["cp2"]
    ref = TinyLM()
    seqs = _rollouts(7, "cpu", seed=4)
    n_tok = sum(float(s[1][1:].sum()) for s in seqs)
    groups = thread_cp_groups(cp)
    models = [TinyLM() for _ in range(cp)]
    for m in models:
        m.load_state_dict(ref.state_dict())

    def rank(r):
        p = pack_tensors([s[0] for s in seqs], align, [s[1] for s in seqs], cp_size=cp, cp_rank=r,
                         side={"old_logprobs": [s[2] for s in seqs], "advantages": [s[3] for s in seqs]})
        logits = models[r].forward_rank(p.input_ids, p.position_ids, p.segment, p.index, groups[r].all_gather)
        out = clipped_policy_loss(_token_logprobs(logits, p.labels), p.side_targets["old_logprobs"],
                                  p.side_targets["advantages"], p.loss_weight, p.segment, p.seg_loss_tokens,
                                  aggregate=aggregate, **CLIP)
        out.loss.backward()
        return out.per_sequence.detach()[torch.as_tensor(p.seg_len > 0)], out.loss.detach()

    per_rank = run_threads([lambda r=r: rank(r) for r in range(cp)])
    alone = [_alone(ref, s, aggregate, len(seqs), n_tok, **CLIP) for s in seqs]
    _close(sum(x[0] for x in per_rank), torch.stack([a[0] for a in alone]).detach(), torch.float32)
    _close(sum(x[1] for x in per_rank), sum(a[1] for a in alone).detach(), torch.float32)
    summed = torch.cat([sum(m.get_parameter(k).grad for m in models).reshape(-1)
                        for k, _ in ref.named_parameters()])
    _close(summed, _grads(ref, sum(a[1] for a in alone)), torch.float32)


def test_the_loss_refuses_values_of_another_layout():
    x = torch.zeros(6)
    with pytest.raises(ValueError, match="one value per local position"):
        clipped_policy_loss(x, x[:5], x, x, torch.zeros(6, dtype=torch.int64), torch.ones(1))
    with pytest.raises(ValueError, match="aggregate"):
        clipped_policy_loss(x, x, x, x, torch.zeros(6, dtype=torch.int64), torch.ones(1), aggregate="mean")


def test_tensors_match_their_own_slab_positions():
    """pack_tensors' `index` is the zigzag: every rank's tokens are the full slab's at index."""
    seqs = _rollouts(5, "cpu", seed=2)
    align = ALIGNS["cp2-fixed"][0]
    full = pack_tensors([s[0] for s in seqs], align, [s[1] for s in seqs], cp_size=1)
    for r in range(2):
        p = pack_tensors([s[0] for s in seqs], align, [s[1] for s in seqs], cp_size=2, cp_rank=r)
        for f in ("input_ids", "labels", "loss_weight", "position_ids", "segment"):
            assert torch.equal(getattr(p, f), getattr(full, f)[p.index]), f
    assert dataclasses.is_dataclass(full) and full.index.tolist() == list(range(full.input_ids.numel()))
