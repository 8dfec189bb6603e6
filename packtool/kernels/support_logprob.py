"""Sample-support scoring: the sampled token's log-prob over the sampler's candidates only.

With top-k / top-p / min-p sampling the engine draws each token from a filtered set and
normalizes over it; scoring over the full vocabulary biases importance ratios and KL terms.
Per token, with the candidate ids of its support row (packtool/kernels/support_check.py):

    z_c = <h, W_c> / T ;  logp = z_sampled - logsumexp_c z_c ;  entropy = -sum_c p_c log p_c

    lp, ent, valid = support_logprob(h, W, sampled, support, temperature=T, entropy=True)

K + 1 dot products per token instead of V: the projection is a gather-GEMV
(packtool/kernels/support_kernels.py), and nothing of size [N, V] or [N, K, H] exists on that path.
Forward keeps the candidates' logits [N, K] fp32 for backward (no recompute; a forward-only
call on the GEMM paths keeps none); backward recomputes the gradient over the candidates from
them inside the dh and dW kernels (per chunk of rows on the GEMM paths), so beside the dW
accumulator nothing else of size [N, K] is kept. When the candidates are a large share of the local
vocabulary the GEMM paths run instead, over the union of the micro-batch's candidate ids
("union") or, when that union is most of the local vocabulary, over all of it ("dense"): the
full-vocab head's chunked GEMM, whose buffer a Triton kernel reads the candidates from
(packtool/kernels/support_kernels.py; packtool/kernels/support_torch.py without Triton); `impl="auto"`
picks by GATHER_MAX_SHARE, UNION_PROBE, UNION_PREFIX and UNION_MAX_SHARE, measured on an H200
(packtool/kernels/support_path.py: the path rules). The support checks run as Triton passes where Triton runs
(packtool/kernels/support_rows.py: the verdicts and auto's union probe in one, repeated ids by per-program
bitmaps in another); their counts come back in one host sync before the path is chosen, and
nothing is read back after the compute, except where a forward-only `auto` call speculates the
dense path from the shapes alone (SPECULATE_MIN_WIDTH): the compute is queued behind the checks and
their one sync comes after it, still before the call returns.

Vocab-parallel (tp_group): each rank projects only the candidates it owns; one MAX and one SUM
all-reduce merge max, sum-exp, the entropy term and the sampled logit; backward needs no
collective for the softmax (each rank's candidates get their gradient from the merged lse and
entropy), and grad_hidden is all-reduced unless reduce_grad_hidden=False (sequence parallel).
grad_weight is accumulated in fp32 (atomics, or `deterministic=True`: packtool/kernels/support_det.py,
sorted, no host sync, bitwise reproducible), into `weight.main_grad` when main_grad=True
(Megatron's fp32 buffer).

Here: the call (arguments, checks, the path, the plan); packtool/kernels/support_path.py: which
path; packtool/kernels/support_autograd.py: forward and backward.
"""

from __future__ import annotations

import torch

from packtool.errors import PacktoolInputError, spelled_as
from packtool.kernels import args as A
from packtool.kernels import support_path as P
from packtool.kernels.support_autograd import Plan, SupportLogprob
from packtool.kernels.support_check import check_support, launch_checks, read_checks
from packtool.kernels.vocab_parallel import VocabShard


def support_logprob(
    hidden, weight, sampled, support, *, temperature=1.0, vocab_start=None, tp_group=None,
    entropy=False, loss_mask=None, impl="auto", deterministic=False, reduce_grad_hidden=True,
    main_grad=False,
):
    """(logp, entropy | None, valid) of each token over its support row; see the module doc.

    hidden [..., H], weight [V_local, H], sampled [...], support [..., K] (int32 or int64, -1
    trailing padding; read as given: no copy of it is made on the Triton paths). vocab_start: the
    first vocab id of this rank's weight rows (default: rank * V_local under tp_group, else 0).
    loss_mask [...]: a nonzero token without support is an error. Every tensor lies on hidden's
    device (packtool/kernels/args.py checks them all). Rows without support return logp = entropy
    = 0, valid False, and no gradient.
    """
    temperature, vocab_start = A.temperature(temperature), A.count("vocab_start", vocab_start, 0)
    A.choice("impl", impl, P.IMPLS)
    entropy, deterministic, reduce_grad_hidden, main_grad = A.switches(
        entropy=entropy, deterministic=deterministic, reduce_grad_hidden=reduce_grad_hidden, main_grad=main_grad)
    lead = A.support_arguments(hidden, weight, sampled, support, loss_mask)
    with spelled_as(A.flat_views(sampled=sampled, support=support, loss_mask=loss_mask)):
        return _support_logprob(hidden, weight, sampled, support, lead, temperature, vocab_start, tp_group,
                                entropy, loss_mask, impl, deterministic, reduce_grad_hidden, main_grad)


def _support_logprob(hidden, weight, sampled, support, lead, temperature, vocab_start, tp_group, entropy,
                     loss_mask, impl, deterministic, reduce_grad_hidden, main_grad):
    h = hidden.reshape(-1, hidden.shape[-1])
    shard = VocabShard.of(weight, tp_group)
    start = shard.start if vocab_start is None else int(vocab_start)
    if tp_group is None and start != 0:
        raise PacktoolInputError(f"vocab_start = {start} without tp_group: an unsharded weight holds the "
                         "whole vocabulary from id 0; pass tp_group to score a shard")
    sup = support.reshape(-1, support.shape[-1])
    mask = None if loss_mask is None else loss_mask.reshape(-1)
    triton_ok = P.triton_runs(h)
    need_z = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    fused = triton_ok and weight.dtype != torch.float64
    pending, union, first = None, None, None
    if P.speculate_dense(impl, fused, need_z, h, weight, sup.shape[1], shard.total):
        from packtool.kernels.support_kernels import dense_first_chunk

        first = dense_first_chunk(h, weight)  # the GPU starts on it while the checks are launched
        pending = launch_checks(sampled.reshape(-1), sup, shard.total, start, weight.shape[0], mask)
        rows, path = pending.rows, "dense"
    else:
        rows = check_support(sampled.reshape(-1), sup, shard.total, start, weight.shape[0], mask,
                             use_triton=triton_ok,
                             probe_rows=P.probe_rows(impl, triton_ok, h, weight, *sup.shape))
        path = P.choose_path(impl, h, weight, rows)
        if path == "auto":
            path, union = P.auto_path(h, weight, rows)
        elif path == "union":
            union = P.union_of(rows.cands, triton_ok)
    plan = Plan(path, shard, 1.0 / float(temperature), bool(deterministic), bool(main_grad),
                 bool(reduce_grad_hidden), union, first, fused_stats=fused, need_z=need_z)
    lp, ent = SupportLogprob.apply(h, weight, rows, plan)
    if pending is not None:
        read_checks(pending)  # the verdict: a bad row raises here, before anything is returned
    return lp.reshape(lead), (ent.reshape(lead) if entropy else None), rows.valid.reshape(lead)

