"""Public LM-head losses for the trainer: `impl='fused'` (Triton, chunked, logits never stored) or
`impl='torch'` (dense reference). Both take hidden [..., H] and weight [V_local, H].

    loss = fused_linear_cross_entropy(h, W, targets, loss_weights)           # SFT, scalar
    lp, ent = fused_linear_logprobs_entropy(h, W, targets, temperature=T)    # RL, per token

loss_weights [N]: zero marks an inactive row (prompt, pad), which costs nothing on the fused
path; for cross-entropy the nonzero values weight each row's term, for log-probs/entropy only the
zero pattern is used. Targets are integer ids on hidden's device (a float or bool tensor is
refused, never cast: 1.7 would be token 1); those of active rows must lie in [0, V). tp_group
shards the vocab: each rank passes its weight rows and gets the full-vocab results; grad_hidden
is all-reduced over the group unless reduce_grad_hidden=False (then each rank gets its shard's partial sum: use that
under sequence parallelism, where the all-gather of hidden reduce-scatters the gradient itself).
"""

from __future__ import annotations

import torch

from packtool.kernels import args as A
from packtool.kernels._triton import check_device
from packtool.kernels.fused_ce import FusedLinearCrossEntropy
from packtool.kernels.fused_logprobs import FusedLinearLogprobsEntropy
from packtool.kernels.head_loop import HeadOptions
from packtool.kernels.reference import torch_reference_cross_entropy, torch_reference_logprobs_entropy
from packtool.kernels.vocab_parallel import VocabShard
from packtool.errors import PacktoolInputError

IMPLS = ("fused", "torch")

__all__ = [
    "IMPLS",
    "fused_linear_cross_entropy",
    "fused_linear_logprobs_entropy",
    "torch_reference_cross_entropy",
    "torch_reference_logprobs_entropy",
]


def _flatten(hidden, weight, targets, loss_weights):
    A.hidden_and_weight(hidden, weight)
    lead = hidden.shape[:-1]
    A.integer_ids("targets", targets)
    if targets.shape != lead or (loss_weights is not None and A.tensor("loss_weights", loss_weights).shape != lead):
        raise PacktoolInputError(
            f"targets {tuple(targets.shape)} / loss_weights "
            f"{None if loss_weights is None else tuple(loss_weights.shape)} must match hidden's "
            f"leading shape {tuple(lead)}"
        )
    A.same_device("hidden", hidden, {"targets": targets, "loss_weights": loss_weights})
    if hidden.dtype != weight.dtype:
        raise PacktoolInputError(f"hidden is {hidden.dtype} but weight is {weight.dtype}: cast one of them")
    h = hidden.reshape(-1, hidden.shape[-1])
    w = None if loss_weights is None else loss_weights.reshape(-1)
    return lead, h, targets.reshape(-1).long(), w


def _shard_checked(weight, tp_group):
    # both impls: a TP rank's vocab slice without its group is refused (the fused path's own
    # VocabShard.of runs inside autograd, after the torch path has already returned)
    if tp_group is None:
        VocabShard.of(weight)


def _check_impl(impl, tp_group):
    A.choice("impl", impl, IMPLS)
    if impl == "torch" and tp_group is not None:
        raise PacktoolInputError("impl='torch' has no vocab sharding; use impl='fused' with tp_group")


def fused_linear_cross_entropy(
    hidden, weight, targets, loss_weights=None, reduction="sum", *,
    impl="fused", tp_group=None, chunk_rows=None, reduce_grad_hidden=True,
):
    """Weighted cross-entropy of h W^T: a scalar sum ('sum') or the per-row terms ('none')."""
    _check_impl(impl, tp_group)
    chunk_rows = A.count("chunk_rows", chunk_rows, 1)
    if reduction not in ("sum", "none"):
        raise PacktoolInputError(f"reduction {reduction!r}: expected 'sum' or 'none'")
    lead, h, t, w = _flatten(hidden, weight, targets, loss_weights)
    _shard_checked(weight, tp_group)
    if impl == "torch":
        out = torch_reference_cross_entropy(h, weight, t, w, reduction)
        return out if reduction == "sum" else out.reshape(lead)
    check_device(h, weight)
    opts = HeadOptions(chunk_rows=chunk_rows, tp_group=tp_group, reduce_grad_hidden=reduce_grad_hidden)
    if reduction == "sum":
        return FusedLinearCrossEntropy.apply(h, weight, t, w, opts)
    # Per-row losses need per-row upstream gradients, known only in backward: the log-prob path.
    lp, _ = FusedLinearLogprobsEntropy.apply(h, weight, t, w, 1.0, opts)
    scale = torch.ones_like(lp) if w is None else w.to(torch.float32)
    return (-scale * lp).reshape(lead)


def fused_linear_logprobs_entropy(
    hidden, weight, targets, temperature=1.0, loss_weights=None, *,
    impl="fused", tp_group=None, chunk_rows=None, reduce_grad_hidden=True,
):
    """(log p(target), entropy) per row of softmax(h W^T / temperature), fp32, shaped like targets."""
    _check_impl(impl, tp_group)
    temperature, chunk_rows = A.temperature(temperature), A.count("chunk_rows", chunk_rows, 1)
    lead, h, t, w = _flatten(hidden, weight, targets, loss_weights)
    _shard_checked(weight, tp_group)
    if impl == "torch":
        lp, ent = torch_reference_logprobs_entropy(h, weight, t, temperature, w)
    else:
        check_device(h, weight)
        opts = HeadOptions(chunk_rows=chunk_rows, tp_group=tp_group, reduce_grad_hidden=reduce_grad_hidden)
        lp, ent = FusedLinearLogprobsEntropy.apply(h, weight, t, w, float(temperature), opts)
    return lp.reshape(lead), ent.reshape(lead)
