"""The autograd function of sample-support scoring (packtool/kernels/support_logprob.py): forward
over the chosen path (packtool/kernels/support_path.py), the ranks' statistics merged, and backward's
gradient over the candidates, into grad_hidden and an fp32 grad_weight (or Megatron's main_grad).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from packtool.errors import PacktoolInputError
from packtool.kernels import support_torch
from packtool.kernels.support_check import SupportRows, local_ids
from packtool.kernels.vocab_parallel import VocabShard


@dataclass(frozen=True)
class Plan:
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
    def forward(ctx, hidden, weight, rows: SupportRows, plan: Plan):
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


def _grad_weight_buffer(weight, plan: Plan):
    if plan.main_grad:
        mg = getattr(weight, "main_grad", None)
        if mg is None or mg.dtype != torch.float32 or mg.shape != weight.shape:
            raise PacktoolInputError("main_grad=True: the weight has no fp32 `main_grad` of its shape "
                             "(Megatron's DDP buffer); pass main_grad=False")
        return mg
    dt = torch.float64 if weight.dtype == torch.float64 else torch.float32
    return torch.zeros(weight.shape, dtype=dt, device=weight.device)


def _finish_grad_weight(weight, dw, plan: Plan):
    if dw is None:
        return None
    if plan.main_grad:  # already added into main_grad, as Megatron's fused accumulation does
        if hasattr(weight, "grad_added_to_main_grad"):
            weight.grad_added_to_main_grad = True
        return None
    return dw if dw.dtype == weight.dtype else dw.to(weight.dtype)
