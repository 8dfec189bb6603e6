"""Sampler-support replay on packed batches: each target's log-prob over the candidates its
sampler kept (packtool/kernels/support_logprob.py), from a packed batch and the model's last hidden
states and output weight (docs/RL.md, "Sampler-support replay").

The support column is a K-wide side column (`pack --support-columns`, or `side=` of
`thd_batch` / `pack_tensors`); what pairs with the logits at position p is its target-
aligned row (token p+1's): `ThdBatch.side_targets[name]` on the Megatron path and
`batch["shift_" + name]` from `packtool.hf.SlabCollator`. The sampled id at p is the target
(`labels` of the THD batch; the HF batch's unshifted `labels` moved one left). Positions
that are not loss targets (prompt, pads, every segment's last position) score 0 and get no
gradient: their rows are masked to -1 here, so a row the batch carries there never needs a
sampled id. A loss target without a support row is an error (no full-vocabulary fallback).

The result is one value per local position, shaped like the batch's labels, ready for
`clipped_policy_loss` (docs/RL.md). Needs torch and Triton on CUDA (the torch path on CPU).
"""
from __future__ import annotations

import torch

from packtool.kernels import args as A
from packtool.kernels.support_logprob import support_logprob
from packtool.errors import PacktoolInputError, spelled_as

IGNORE_INDEX = -100  # transformers' label for "no target" (packtool.hf.IGNORE_INDEX)

__all__ = ["support_logprobs_thd", "support_logprobs_hf"]


def _rows(hidden: torch.Tensor, n: int, where: str) -> torch.Tensor:
    """Megatron's [t, 1, H], HF's [1, T, H] or plain [t, H] -> [t, H], one row per position."""
    if A.tensor("hidden", hidden).dim() == 0:
        raise PacktoolInputError(f"{where}: hidden is a 0-d tensor: expected the batch's hidden states [..., H]")
    h = hidden.reshape(-1, hidden.shape[-1])
    if h.shape[0] != n:
        raise PacktoolInputError(f"{where}: hidden {tuple(hidden.shape)} holds {h.shape[0]} positions but the batch "
                         f"holds {n}; pass the final hidden states of this batch (with sequence parallel, "
                         "gathered over TP first, and reduce_grad_hidden=False)")
    return h


def _support(side: dict, key: str, column: str, n: int, where: str, said: str) -> torch.Tensor:
    if key not in side:
        raise PacktoolInputError(f"{where}: the batch has no {key!r} (keys: {sorted(side)}); pack the support column "
                       f"with support_columns=({column!r},) (`packtool pack --support-columns {column}`) or pass it "
                       f"in side=, and give it to the collator")
    s = side[key]
    A.integer_ids(f"{where}: {said}[{key!r}]", s, "candidate ids")
    if s.dim() < 2 or s.reshape(-1, s.shape[-1]).shape[0] != n:
        raise PacktoolInputError(f"{where}: {key!r} has shape {tuple(s.shape)}; expected one K-wide row per position "
                         f"({n} positions): declare it a support column (width K)")
    return s.reshape(n, s.shape[-1])


def _labels(labels, where: str, said: str) -> torch.Tensor:
    """The batch's labels, refused under the caller's key where the kernel would refuse them
    as `sampled` (a name the caller never passed)."""
    return A.integer_ids(f"{where}: {said}", labels)


def _score(hidden, weight, sampled, support, active, shape, names: dict, **kw):
    # names: the batch's keys, so that an argument on another device is named as the caller has it
    A.same_device("hidden", hidden, {"weight": A.tensor("weight", weight), names["labels"]: sampled,
                                     f"{names['caller']}: {names['support']}": support, **names.get("more", {})})
    rows = torch.where(active[:, None], support, torch.full_like(support, -1))
    t = torch.where(active, sampled, torch.zeros_like(sampled))
    # the kernel reads int32 or int64 rows as given; a narrowing cast would wrap an id past
    # int32 onto a real token (2^32 + 5 scored as token 5), so only the narrower integers
    # (int8, int16, uint8: floats were refused) are widened
    if rows.dtype not in (torch.int32, torch.int64):
        rows = rows.to(torch.int64)
    # the kernel's messages index its flat [N] / [N, K] views: spelled as expressions of the batch
    with spelled_as({A.CALLER: names["caller"], "sampled": names["sampled"], "loss_mask": names["loss_mask"],
                     "support": names["support"] + ".flatten(0, -2)"}):
        lp, ent, valid = support_logprob(hidden, weight, t, rows, loss_mask=active, **kw)
    return lp.reshape(shape), (None if ent is None else ent.reshape(shape)), valid.reshape(shape)


def support_logprobs_thd(batch, hidden: torch.Tensor, weight: torch.Tensor, column: str = "support", *,
                         temperature: float = 1.0, entropy: bool = False, tp_group=None, **kw):
    """(logp, entropy | None, valid), each [1, t_local] like `batch.labels`, of a Megatron-path
    `ThdBatch` (PackedSlabDataset, `online.thd_batch`; any CP rank's shard).

    hidden: the decoder's final hidden states of this batch ([t_local, 1, H], after the final
    norm; `packtool.megatron.model.hidden_states`); weight: the output layer's weight
    ([V or V/TP, H]; with TP pass tp_group, the rank's vocab slice is rank * V/TP on).
    Further keywords go to `packtool.kernels.support_logprob.support_logprob` (impl, deterministic,
    main_grad, reduce_grad_hidden, vocab_start)."""
    where = "support_logprobs_thd"
    labels = _labels(batch.labels, where, "batch.labels").reshape(-1)
    n = labels.numel()
    h = _rows(hidden, n, where)
    s = _support(batch.side_targets, column, column, n, where, "batch.side_targets")
    active = batch.loss_weight.reshape(-1) != 0
    names = {"labels": f"{where}: batch.labels", "support": f"batch.side_targets[{column!r}]",
             "sampled": "batch.labels.flatten()", "loss_mask": "batch.loss_weight.flatten()", "caller": where,
             "more": {f"{where}: batch.loss_weight": batch.loss_weight}}
    return _score(h, weight, labels, s, active, batch.labels.shape, names, temperature=temperature,
                  entropy=entropy, tp_group=tp_group, **kw)


def support_logprobs_hf(batch: dict, hidden: torch.Tensor, weight: torch.Tensor, column: str = "support", *,
                        temperature: float = 1.0, entropy: bool = False, **kw):
    """(logp, entropy | None, valid), each [1, T] like the batch's `labels`, of a
    `packtool.hf.SlabCollator` batch built with `side_columns` holding `column`.

    hidden: the causal LM's last hidden state ([1, T, H], after the final norm: the base
    model's `last_hidden_state`, or `hidden_states[-1]` of `output_hidden_states=True`);
    weight: `model.get_output_embeddings().weight`. Position p scores labels[p + 1] (the
    target of the logits at p) over `shift_<column>`[p]; -100 labels are not targets.
    Further keywords go to `packtool.kernels.support_logprob.support_logprob`."""
    where = "support_logprobs_hf"
    if "labels" not in batch:
        raise PacktoolInputError(f"{where}: the batch has no 'labels' (keys: {sorted(batch)}); pass the "
                                 "packtool.hf.SlabCollator batch itself")
    labels = _labels(batch["labels"], where, "batch['labels']")
    flat = labels.reshape(-1)
    n = flat.numel()
    h = _rows(hidden, n, where)
    s = _support(batch, f"shift_{column}", column, n, where, "batch")
    target = torch.cat([flat[1:], flat.new_full((1,), IGNORE_INDEX)])  # each segment starts with -100
    active = target != IGNORE_INDEX
    names = {"labels": f"{where}: batch['labels']", "support": f"batch['shift_{column}']", "caller": where,
             # position p scores label p + 1, a target where that label is not -100
             "sampled": "batch['labels'].flatten()[1:]", "loss_mask": "batch['labels'].flatten()[1:]"}
    return _score(h, weight, target, s, active, labels.shape, names, temperature=temperature,
                  entropy=entropy, **kw)
