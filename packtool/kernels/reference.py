"""Plain torch LM head + losses: the dense reference (N x V logits held), same signatures as the
fused entry points. Half-precision inputs are upcast to fp32 after the matmul, as eager training
code does; float64 inputs stay float64 (the tests' ground truth).
"""

from __future__ import annotations

import torch
from packtool.kernels import args as A
from packtool.errors import PacktoolInputError


def _logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = hidden @ weight.t()
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _active(targets, loss_weights, vocab):
    A.integer_ids("targets", targets)  # the public references are called directly too
    active = torch.ones_like(targets, dtype=torch.bool) if loss_weights is None else loss_weights != 0
    bad = active & ((targets < 0) | (targets >= vocab))
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise PacktoolInputError(
            f"targets[{row}] = {int(targets[row])} is outside the vocabulary [0, {vocab}) "
            "on an active row; give that row loss weight 0 (e.g. prompt or pad tokens)"
        )
    return active, torch.where(active, targets, torch.zeros_like(targets))


def torch_reference_cross_entropy(hidden, weight, targets, loss_weights=None, reduction="sum"):
    """sum_i w_i * -log softmax(h_i W^T)[t_i]; reduction 'none' gives the [N] terms."""
    active, t = _active(targets, loss_weights, weight.shape[0])
    logp = torch.log_softmax(_logits(hidden, weight), dim=-1)
    lp = logp.gather(1, t[:, None]).squeeze(1)
    w = torch.ones_like(lp) if loss_weights is None else loss_weights.to(lp.dtype)
    per_token = torch.where(active, -w * lp, torch.zeros_like(lp))
    if reduction == "sum":
        return per_token.sum()
    if reduction == "none":
        return per_token
    raise PacktoolInputError(f"reduction {reduction!r}: expected 'sum' or 'none'")


def torch_reference_logprobs_entropy(hidden, weight, targets, temperature=1.0, loss_weights=None):
    """(log p(t_i), entropy_i) of softmax(h_i W^T / T); zeros on rows with zero loss weight."""
    active, t = _active(targets, loss_weights, weight.shape[0])
    z = _logits(hidden, weight) / temperature
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    # lse - E_p[z] rather than -sum p log p: no 0 * -inf where p underflows
    ent = lse - (p * z).sum(-1)
    lp = z.gather(1, t[:, None]).squeeze(1) - lse
    zero = torch.zeros_like(lp)
    return torch.where(active, lp, zero), torch.where(active, ent, zero)


def torch_reference_support_logprob(hidden, weight, sampled, support, temperature=1.0):
    """(logp, entropy, valid) over each row's candidates, from the dense [N, V] logits:
    logit[s] - logsumexp(logit[row]); rows whose support starts with -1 score 0."""
    A.integer_ids("sampled", sampled)
    A.integer_ids("support", support, "candidate ids")
    z = _logits(hidden, weight) / temperature
    ids = support.long()
    real = ids >= 0
    zr = z.gather(1, ids.clamp_min(0)).masked_fill(~real, float("-inf"))
    valid = real[:, 0] if ids.shape[1] else torch.zeros_like(sampled, dtype=torch.bool)
    safe = torch.where(valid[:, None], zr, torch.zeros_like(zr))  # no all -inf row
    lse = torch.logsumexp(safe, dim=-1)
    p = torch.softmax(safe, dim=-1)
    ent = lse - (p * safe.masked_fill(~real & valid[:, None], 0.0)).sum(-1)
    lp = z.gather(1, sampled.long().clamp_min(0)[:, None]).squeeze(1) - lse
    zero = torch.zeros_like(lp)
    return torch.where(valid, lp, zero), torch.where(valid, ent, zero), valid
