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
(packtool/kernels/support_kernels.py; packtool/kernels/support_torch.py without Triton); `impl="auto"` picks by
GATHER_MAX_SHARE, UNION_PROBE, UNION_PREFIX and UNION_MAX_SHARE, measured on an H200
(`auto_path`). The support checks run as Triton passes where Triton runs
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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from packtool.kernels import args as A
from packtool.kernels import support_torch
from packtool.kernels.support_check import SupportRows, check_support, launch_checks, local_ids, read_checks
from packtool.kernels.vocab_parallel import VocabShard
from packtool.errors import PacktoolConfigError, PacktoolInputError, spelled_as

IMPLS = ("auto", "gather", "dense", "union", "torch")
# impl="auto" on a GPU: the gather path while the candidates this rank projects, per row, are
# under this share of its vocabulary rows, the dense GEMM path above it; one share for calls that
# will run backward, one for forward-only calls (old log-probs, no grad). Measured on an H200
# (BENCHMARKS.md, "Sample-support scoring", hidden 4096, V 151,936, 16k tokens): the gather path's
# time grows with the share, the dense path's hardly, and they cross near these shares.
GATHER_MAX_SHARE = {"train": 0.0025, "forward": 0.0039}
# The GEMM paths run over the union of the micro-batch's candidate ids (support_torch.union_rows)
# while that union is under UNION_MAX_SHARE of the local vocabulary, else over the whole of it; and
# the gather rule above then compares the candidates with the rows the GEMMs would cover (U or V).
# H200, H 4096, V 151,936, 16k tokens (BENCHMARKS.md): the union path takes about a fixed 4-5 ms
# plus the dense path's time x U / V (K 512: 9.5 ms at U = 0.054 V, 23 ms at 0.22 V, against 59 ms
# gather and 93 ms dense), and 7 % more than the dense path at U = V. Finding U costs a mark per
# named row and a host sync, so `auto` only looks once the candidates reach UNION_PROBE of the
# gather limit over V: below it (K <= 64 in that bench) the gather path's few ms stand.
UNION_MAX_SHARE = 0.85
UNION_PROBE = 0.25
# ...and looks at the first rows' UNION_PREFIX x V_local ids first (spread candidates, half of
# them padding, cover 1 - e^-4 = 98 % of V from 8 V ids): enough of them named, it is done
UNION_PREFIX = 8
# A forward-only `auto` call (old log-probs, no grad) runs the dense path without waiting for the
# checks' sync ("speculated": its first GEMM queued before the checks, whose launches then overlap
# it, their verdict read once the compute is queued, any error still raised before the call returns) where the shapes alone make dense the likely pick
# and the pick cheap: rows at least SPECULATE_MIN_WIDTH of the vocabulary wide (candidates spread
# over the vocabulary then put twice the gather limit on every rank) and a local GEMM of at most
# SPECULATE_MAX_FLOP. H200 (BENCHMARKS.md, forward sweep at K 2048/4096): below that size the
# sync and the pick (0.3-0.6 ms of host time with the GPU idle) were the whole margin over the
# full-vocab head (0.93-1.00x at 16k tokens, H 2048-8192, V_local 18,992); a wrong guess (rows
# mostly padding, candidates on few ranks) costs at most the dense path, which is not slower than
# the full-vocab head, and the pick stays a function of the shapes (same inputs, same path).
SPECULATE_MIN_WIDTH = 2 * GATHER_MAX_SHARE["forward"]
SPECULATE_MAX_FLOP = 6e12


@dataclass(frozen=True)
class _Plan:
    path: str  # "gather" (Triton), "torch" (chunked torch gather), "dense" or "union"
    shard: VocabShard
    inv_temp: float
    deterministic: bool
    main_grad: bool
    reduce_grad_hidden: bool
    union: tuple | None = None  # path "union": (ids [U], slot [V_local]: each named row's column)
    first: torch.Tensor | None = None  # speculated dense: the buffer, its first chunk's GEMM queued
    fused_stats: bool = False  # GEMM paths: row statistics by the Triton buffer kernel
    need_z: bool = True  # keep the [N, K] logits (for backward); forward-only calls do not


def _logits_op(path: str):
    if path == "gather":
        from packtool.kernels.support_kernels import logits_triton
        return logits_triton
    return support_torch.logits_torch


def _stats(z: torch.Tensor, pos: torch.Tensor):
    """This rank's (max, sum-exp, entropy numerator, sampled logit) per row; empty rows: -inf, 0, 0, 0."""
    if z.shape[1] == 0:
        zero = z.new_zeros(z.shape[0])
        return zero - float("inf"), zero, zero, zero
    m = z.max(dim=1).values
    m0 = torch.where(m > float("-inf"), m, torch.zeros_like(m))
    d = z - m0[:, None]
    e = torch.exp(d)
    u = (e * d.masked_fill(e == 0, 0.0)).sum(1)  # relative to the max: no cancellation
    zt = z.gather(1, pos[:, None]).squeeze(1)
    zt = torch.where(zt > float("-inf"), zt, torch.zeros_like(zt))
    return m, e.sum(1), u, zt


def _merge(m, s, u, zt, group):
    """Merge the ranks' statistics: one MAX then one SUM all-reduce (none without a group)."""
    m0 = torch.where(m > float("-inf"), m, torch.zeros_like(m))
    if group is not None:
        m_all = m.clone()
        dist.all_reduce(m_all, op=dist.ReduceOp.MAX, group=group)
        m_all0 = torch.where(m_all > float("-inf"), m_all, torch.zeros_like(m_all))
        has = s > 0  # a rank owning none of a row's candidates adds nothing (and no 0 * -inf)
        scale = torch.where(has, torch.exp(m0 - m_all0), torch.zeros_like(s))
        shifted = torch.where(has, scale * (u + (m0 - m_all0) * s), torch.zeros_like(u))
        packed = torch.stack([scale * s, shifted, zt])
        dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=group)
        s, u, zt, m0 = packed[0], packed[1], packed[2], m_all0
    log_s = torch.log(s)
    return m0 + log_s, log_s - u / s, zt  # lse, entropy, sampled logit


class SupportLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, rows: SupportRows, plan: _Plan):
        cands = rows.cands
        if plan.fused_stats and (plan.path == "dense" or (plan.path == "union" and plan.union[0].numel())):
            from packtool.kernels.support_kernels import dense_logits_stats

            w, slot = ((weight, None) if plan.path == "dense"
                       else (weight.index_select(0, plan.union[0]), plan.union[1]))
            z, stats = dense_logits_stats(hidden, w, cands, rows.pos, plan.inv_temp, plan.need_z,
                                          slot=slot, first=plan.first)
        else:
            if plan.path == "union":
                z = support_torch.logits_union(hidden, weight, plan.union, cands, plan.inv_temp)
            else:
                logits_op = support_torch.logits_dense if plan.path == "dense" else _logits_op(plan.path)
                z = logits_op(hidden, weight, cands, plan.inv_temp)
            stats = _stats(z, rows.pos)
        lse, ent, zt = _merge(*stats, plan.shard.group)
        zero = torch.zeros_like(lse)
        logp = torch.where(rows.valid, zt - lse, zero)
        ent = torch.where(rows.valid, ent, zero)
        # the ids saved as a tensor: they are the caller's support rows themselves
        # (support_rows.check_rows), and unpacking checks that nothing changed them in place
        ctx.save_for_backward(hidden, weight, z, lse, ent, rows.ids)
        ctx.rows, ctx.plan = rows, replace(plan, first=None)  # the buffer is not kept
        return logp, ent  # fp32 (fp64 for fp64 inputs: the tests' ground truth)

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):
        hidden, weight, z, lse, ent, ids = ctx.saved_tensors
        rows, plan = replace(ctx.rows, ids=ids), ctx.plan
        cands = rows.cands
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_h or need_w):
            return None, None, None, None
        zero = torch.zeros_like(lse)
        a = torch.where(rows.valid, grad_lp.to(z.dtype), zero) if grad_lp is not None else zero
        b = torch.where(rows.valid, grad_ent.to(z.dtype), zero) if grad_ent is not None else None
        grad_h = torch.empty_like(hidden) if need_h else None
        dw = _grad_weight_buffer(weight, plan) if need_w else None
        # g, the gradient over the candidates, never exists as an [N, K] tensor on the Triton
        # paths: the gather kernels recompute it from z, the GEMM paths per chunk of rows
        if plan.path in ("dense", "union"):
            def g_of(s: int, e: int):
                return _grad_logits(z[s:e], lse[s:e], ent[s:e], (ids[s:e],) + cands[1:],
                                    rows.pos[s:e], a[s:e], None if b is None else b[s:e],
                                    plan.inv_temp, plan.fused_stats)

            if plan.path == "dense":
                support_torch.grads_dense(g_of, hidden, weight, cands, grad_h, dw)
            else:
                support_torch.grads_union(g_of, hidden, weight, plan.union, cands, grad_h, dw)
        elif plan.path == "gather":
            from packtool.kernels import support_kernels as SK

            gs = SK.grad_stats(z, lse, ent, a, b, rows.pos, plan.inv_temp)
            if need_h:
                grad_h = SK.grad_hidden_triton(gs, weight, cands, hidden.dtype)
            if need_w:
                SK.grad_weight_triton_(dw, gs, hidden, cands, plan.deterministic, accumulate=True)
        else:  # the chunked torch gather (CPU without Triton, the bench's reference)
            g = _grad_logits(z, lse, ent, cands, rows.pos, a, b, plan.inv_temp)
            if need_h:
                grad_h = support_torch.grad_hidden_torch(g, weight, cands, hidden.dtype)
            if need_w:
                support_torch.grad_weight_torch_(dw, g, hidden, cands, plan.deterministic, accumulate=True)
        if grad_h is not None and plan.reduce_grad_hidden:
            plan.shard.all_reduce_sum_(grad_h)
        return grad_h, _finish_grad_weight(weight, dw, plan), None, None


def _grad_logits(z, lse, ent, cands, pos, a, b, inv_temp, fused=False):
    """d(a * logp + b * entropy)/dz over the candidates cands = (ids, start, v_local) of these
    rows, [rows, K]: a (1[c = s] - p_c) - b p_c (log p_c + H), / T; a, b zero on rows without
    support (b None: no entropy term)."""
    if fused:  # one Triton pass, no [rows, K] temporaries
        from packtool.kernels.support_kernels import grad_logits_triton

        return grad_logits_triton(z, cands, lse, ent, a, b, pos, inv_temp)
    own = local_ids(*cands) >= 0
    lp_c = torch.where(own, z - lse[:, None], torch.zeros_like(z))
    p = torch.where(own, torch.exp(lp_c), torch.zeros_like(z))
    g = -a[:, None] * p
    if b is not None:
        g = g - b[:, None] * p * (lp_c + ent[:, None])
    at_s = own.gather(1, pos[:, None]).squeeze(1)
    g.scatter_add_(1, pos[:, None], torch.where(at_s, a, torch.zeros_like(a))[:, None])
    return (g * inv_temp).contiguous()


def _grad_weight_buffer(weight, plan: _Plan):
    if plan.main_grad:
        mg = getattr(weight, "main_grad", None)
        if mg is None or mg.dtype != torch.float32 or mg.shape != weight.shape:
            raise PacktoolInputError("main_grad=True: the weight has no fp32 `main_grad` of its shape "
                             "(Megatron's DDP buffer); pass main_grad=False")
        return mg
    dt = torch.float64 if weight.dtype == torch.float64 else torch.float32
    return torch.zeros(weight.shape, dtype=dt, device=weight.device)


def _finish_grad_weight(weight, dw, plan: _Plan):
    if dw is None:
        return None
    if plan.main_grad:  # already added into main_grad, as Megatron's fused accumulation does
        if hasattr(weight, "grad_added_to_main_grad"):
            weight.grad_added_to_main_grad = True
        return None
    return dw if dw.dtype == weight.dtype else dw.to(weight.dtype)


def _triton_runs(hidden) -> bool:
    try:
        from packtool.kernels._triton import interpreting
    except ImportError:  # no Triton installed: only the torch paths run
        return False
    return hidden.is_cuda or interpreting()


def choose_path(impl: str, hidden: torch.Tensor, weight: torch.Tensor, rows: SupportRows) -> str:
    """The path a call runs, or "auto" where Triton runs and `auto_path` decides."""
    A.choice("impl", impl, IMPLS)
    triton_ok = _triton_runs(hidden)
    if impl == "gather" and not triton_ok:
        raise PacktoolConfigError("support_logprob impl='gather' needs Triton and a CUDA device (or "
                           "TRITON_INTERPRET=1); "
                           "use impl='torch' (or 'auto') on CPU")
    if impl != "auto":
        return impl
    if not triton_ok:
        return "torch"  # CPU without the Triton interpreter: the torch path, same results
    return "auto"


def auto_path(hidden, weight, rows: SupportRows):
    """(path, union or None) of `auto` where Triton runs: the measured rules above."""
    limit = gather_limit(hidden, weight, rows.ids.shape[0])
    if rows.owned < UNION_PROBE * limit:
        return "gather", None
    if rows.prefix_named is not None:  # counted by the checks' pass (support_logprob)
        most = rows.prefix_named >= UNION_MAX_SHARE * weight.shape[0]
    else:
        most = _prefix_names_most(rows.cands)
    if most:  # the union is no small share
        return ("gather", None) if rows.owned < limit else ("dense", None)
    named = _named(rows.cands, True)
    u = named[0].numel()
    if u < UNION_MAX_SHARE * weight.shape[0]:
        if rows.owned < limit * u / weight.shape[0]:
            return "gather", None
        return "union", _union(rows.cands, True, named)
    return ("gather", None) if rows.owned < limit else ("dense", None)


def _prefix_names_most(cands) -> bool:
    """Whether the first rows, UNION_PREFIX x V_local ids of them, already name UNION_MAX_SHARE of
    the local vocabulary: then the union is not worth finding (marking every id cost `auto` 1.4-
    2.4 ms forward at K 2048-4096 with spread candidates on the H200, against 32 ms in all)."""
    ids, start, v_local = cands
    n, k = ids.shape
    m = prefix_rows(k, v_local)
    if m >= n:  # no cheaper than marking them all
        return False
    from packtool.kernels.support_kernels import named_rows

    return int(named_rows((ids[:m], start, v_local)).sum()) >= UNION_MAX_SHARE * v_local


def prefix_rows(k: int, v_local: int) -> int:
    """The rows whose UNION_PREFIX x V_local ids the union probe looks at."""
    return -(-int(UNION_PREFIX * v_local) // max(1, k))


def _probe_rows(impl: str, triton_ok: bool, hidden, weight, n: int, k: int) -> int:
    """Rows for the checks' pass to probe (0: none): only where `auto` may need the probe."""
    if impl != "auto" or not triton_ok:
        return 0
    m = prefix_rows(k, weight.shape[0])
    return m if m < n and n * k >= UNION_PROBE * gather_limit(hidden, weight, n) else 0


def _named(cands, triton_ok: bool):
    """(ids [U] of the weight rows some row names, marks or None): the count U is what `auto`
    decides by; with Triton a mark per named row and nonzero's one sync, no sort of the ids."""
    if triton_ok:
        from packtool.kernels.support_kernels import named_rows

        named = named_rows(cands)
        return torch.nonzero(named).squeeze(1), named
    return None, None


def _union(cands, triton_ok: bool, named=None):
    ids, marks = named if named is not None else _named(cands, triton_ok)
    if marks is None:
        return support_torch.union_rows(cands)
    return support_torch.union_from_named(ids, marks)


def gather_limit(hidden, weight, n_rows: int) -> float:
    """Owned candidates over which the gather path costs more than the dense one over V_local."""
    train = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return GATHER_MAX_SHARE["train" if train else "forward"] * max(1, n_rows) * weight.shape[0]


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
    A.choice("impl", impl, IMPLS)
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
    triton_ok = _triton_runs(h)
    need_z = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    fused = triton_ok and weight.dtype != torch.float64
    pending, union, first = None, None, None
    if speculate_dense(impl, fused, need_z, h, weight, sup.shape[1], shard.total):
        from packtool.kernels.support_kernels import dense_first_chunk

        first = dense_first_chunk(h, weight)  # the GPU starts on it while the checks are launched
        pending = launch_checks(sampled.reshape(-1), sup, shard.total, start, weight.shape[0], mask)
        rows, path = pending.rows, "dense"
    else:
        rows = check_support(sampled.reshape(-1), sup, shard.total, start, weight.shape[0], mask,
                             use_triton=triton_ok,
                             probe_rows=_probe_rows(impl, triton_ok, h, weight, *sup.shape))
        path = choose_path(impl, h, weight, rows)
        if path == "auto":
            path, union = auto_path(h, weight, rows)
        elif path == "union":
            union = _union(rows.cands, triton_ok)
    plan = _Plan(path, shard, 1.0 / float(temperature), bool(deterministic), bool(main_grad),
                 bool(reduce_grad_hidden), union, first, fused_stats=fused, need_z=need_z)
    lp, ent = SupportLogprob.apply(h, weight, rows, plan)
    if pending is not None:
        read_checks(pending)  # the verdict: a bad row raises here, before anything is returned
    return lp.reshape(lead), (ent.reshape(lead) if entropy else None), rows.valid.reshape(lead)


def speculate_dense(impl: str, fused: bool, need_z: bool, hidden, weight, k: int, v_total: int) -> bool:
    """Whether a call runs the dense path speculated (see SPECULATE_MIN_WIDTH): forward-only
    `auto` with the fused Triton statistics, wide rows, a small local GEMM."""
    n, v_local = hidden.shape[0], weight.shape[0]
    return (impl == "auto" and fused and not need_z and n > 0 and k >= SPECULATE_MIN_WIDTH * v_total
            and 2.0 * n * hidden.shape[1] * v_local <= SPECULATE_MAX_FLOP)
