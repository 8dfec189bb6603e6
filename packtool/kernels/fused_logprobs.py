"""Per-token (RL) mode: log p(target) and entropy of softmax(h W^T / T) per row.

The upstream gradients for both outputs are only known in backward, so the forward keeps just the
per-row lse and entropy ([N] fp32 each) and backward recomputes each chunk's logits (4 matmuls in
all). Rows with zero loss weight return 0 for both and receive no gradient.
"""

from __future__ import annotations

import torch

from packtool.kernels.chunking import find_active_rows, put_rows, take_rows
from packtool.kernels.head_loop import HeadLoop, HeadOptions, new_grad_hidden
from packtool.kernels.vocab_parallel import VocabShard
from packtool.errors import PacktoolInputError


class FusedLinearLogprobsEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, loss_weights, temperature: float, opts: HeadOptions):
        if not temperature > 0:
            raise PacktoolInputError(f"temperature = {temperature}: must be > 0")
        shard = VocabShard.of(weight, opts.tp_group)
        active = find_active_rows(targets, loss_weights, shard.total)
        inv_temp = 1.0 / float(temperature)
        loop = HeadLoop(hidden, weight, active, shard, opts)
        t_local = shard.local_targets(targets)
        n = hidden.shape[0]
        logprobs = hidden.new_zeros(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        lse_act = hidden.new_empty(active.count, dtype=torch.float32)
        ent_act = hidden.new_empty(active.count, dtype=torch.float32)
        for chunk in loop.chunks():
            _, _, _, rows = loop.forward_chunk(chunk, t_local, inv_temp)
            lse_act[chunk.start : chunk.stop] = rows.lse
            ent_act[chunk.start : chunk.stop] = rows.entropy
            put_rows(logprobs, chunk, rows.z_target - rows.lse)
            put_rows(entropy, chunk, rows.entropy)
        ctx.save_for_backward(hidden, weight, t_local, lse_act, ent_act)
        ctx.active, ctx.shard, ctx.opts, ctx.inv_temp = active, shard, opts, inv_temp
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):
        hidden, weight, t_local, lse_act, ent_act = ctx.saved_tensors
        active, shard, inv_temp = ctx.active, ctx.shard, ctx.inv_temp
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = new_grad_hidden(hidden, active) if need_h else None
        grad_w = torch.empty_like(weight) if need_w else None
        first = True
        if (need_h or need_w) and (grad_lp is not None or grad_ent is not None):
            loop = HeadLoop(hidden, weight, active, shard, ctx.opts)
            zeros = hidden.new_zeros(hidden.shape[0], dtype=torch.float32)
            g_lp = (grad_lp if grad_lp is not None else zeros).to(torch.float32)
            g_ent = grad_ent.to(torch.float32) if grad_ent is not None else None
            for chunk in loop.chunks():
                h = take_rows(hidden, chunk, loop.h_buf)
                x = loop.logits[: chunk.stop - chunk.start]
                torch.mm(h, weight.t(), out=x)
                t = take_rows(t_local, chunk, None)
                sl = slice(chunk.start, chunk.stop)
                b = take_rows(g_ent, chunk, None) if g_ent is not None else None
                loop.backward_chunk(
                    chunk, h, x, t, lse_act[sl], ent_act[sl] if b is not None else None,
                    take_rows(g_lp, chunk, None), b, inv_temp, grad_h, grad_w, first,
                )
                first = False
        if first:  # no chunk ran: nothing wrote the gradients
            for g in (grad_h, grad_w):
                if g is not None:
                    g.zero_()
        if grad_h is not None and ctx.opts.reduce_grad_hidden:
            shard.all_reduce_sum_(grad_h)
        return grad_h, grad_w, None, None, None, None
