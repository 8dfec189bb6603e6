"""A PPO / GRPO clipped policy objective on packed batches (docs/RL.md).

Every input is target-aligned, one value per local position of a packed micro-batch (the
positions of `labels`): `logprobs[p]` is the policy's log-probability of `labels[p]` from the
logits at p, and `old_logprobs` / `advantages` are the side columns shifted like labels
(`ThdBatch.side_targets`, `PackedTensors.side_targets`, the HF batch's `shift_NAME`). The
per-sequence sums go through the batch's `segment` index, so pads, segment boundaries and
the CP zigzag need no care here: on a CP rank every value is this rank's share, and the
shares of all ranks add up to the micro-batch's (sum the losses, or all-reduce the
gradients as for any CP loss). Needs torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from packtool.errors import PacktoolConfigError, bad_choice
from packtool.kernels import args as A

AGGREGATES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


@dataclass
class PolicyLoss:
    loss: torch.Tensor  # scalar: this rank's share of the objective
    per_sequence: torch.Tensor  # [n_seg] float32: each segment's token-mean loss, this rank's share
    per_token: torch.Tensor  # [t] float32: clipped surrogate on target positions, 0 elsewhere
    clip_fraction: torch.Tensor  # scalar: share of this rank's target positions that were clipped


def clipped_policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                        loss_weight: torch.Tensor, segment: torch.Tensor, seg_loss_tokens: torch.Tensor, *,
                        clip_low: float = 0.2, clip_high: float | None = None,
                        aggregate: str = "token-mean", num_loss_tokens: int | None = None,
                        num_sequences: int | None = None) -> PolicyLoss:
    """-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), r = exp(logprobs - old_logprobs),
    on the positions where loss_weight is nonzero (times the weight), reduced by `aggregate`:

    token-mean           sum over tokens / num_loss_tokens (default: the micro-batch's, all
                         CP ranks; pass the step's, e.g. `Step.global_loss_tokens()`, to weigh
                         every token of a step alike)
    seq-mean-token-mean  GRPO: mean over sequences of each sequence's token mean
    seq-mean-token-sum   mean over sequences of each sequence's token sum (Dr. GRPO)

    num_sequences: the sequence count to divide by (default: the micro-batch's segments that
    have a loss token). segment / seg_loss_tokens: the batch's fields of the same names.
    Shapes [t] or [1, t] alike; computed in float32 whatever the model's dtype."""
    if aggregate not in AGGREGATES:
        raise bad_choice(PacktoolConfigError, "aggregate", aggregate, AGGREGATES)
    # every argument checked before any work, by the kernels' owner of that rule (packtool/kernels/args.py)
    lp, old, adv, w, counts, seg = A.policy_tensors(logprobs, old_logprobs, advantages, loss_weight, segment,
                                                    seg_loss_tokens)
    # a lower bound 1 - clip_low above the upper 1 + clip_high zeroed the objective (clip_low=-1)
    clip_low = A.number("clip_low", clip_low, 0.0, 1.0, high_open=False)
    clip_high = clip_low if clip_high is None else A.number("clip_high", clip_high, 0.0, math.inf)
    num_loss_tokens = A.count("num_loss_tokens", num_loss_tokens, 0)
    num_sequences = A.count("num_sequences", num_sequences, 0)
    on = w != 0
    A.segments(segment, seg_loss_tokens, seg, counts, w, num_loss_tokens, num_sequences)
    # off target positions old_logprobs hold the fill: keep them out of exp()
    log_ratio = torch.where(on, lp - old, torch.zeros_like(lp))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.where(on, -torch.minimum(ratio * adv, clipped * adv) * w, torch.zeros_like(lp))
    seq_sum = torch.zeros(counts.shape[0], dtype=per_token.dtype, device=per_token.device)
    seq_sum = seq_sum.index_add(0, seg, per_token)
    per_sequence = seq_sum / counts.clamp(min=1)
    if aggregate == "token-mean":
        denom = counts.sum() if num_loss_tokens is None else torch.as_tensor(float(num_loss_tokens))
        loss = seq_sum.sum() / denom.clamp(min=1)
    else:
        n_seq = (counts > 0).sum() if num_sequences is None else torch.as_tensor(float(num_sequences))
        part = per_sequence if aggregate == "seq-mean-token-mean" else seq_sum
        loss = part.sum() / n_seq.clamp(min=1)
    was_clipped = on & (ratio != clipped) & ((clipped * adv) < (ratio * adv))
    clip_fraction = was_clipped.sum().float() / on.sum().clamp(min=1).float()
    return PolicyLoss(loss=loss, per_sequence=per_sequence, per_token=per_token, clip_fraction=clip_fraction)
