"""Scalar-loss (SFT) mode: sum_i w_i * CE(h_i W^T, t_i) with both gradients formed in the forward.

The loss is a scalar, so its gradient with respect to the logits is known as soon as a chunk's
log-sum-exp is: the forward computes the logits once, turns them into the gradient in place and
runs the two gradient matmuls right away (3 matmuls, no recompute). Backward only rescales when
the upstream gradient is not 1.
"""

from __future__ import annotations

import torch

from packtool.kernels.chunking import find_active_rows, take_rows
from packtool.kernels.head_loop import HeadLoop, HeadOptions, new_grad_hidden
from packtool.kernels.vocab_parallel import VocabShard


class FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, loss_weights, opts: HeadOptions):
        shard = VocabShard.of(weight, opts.tp_group)
        active = find_active_rows(targets, loss_weights, shard.total)
        need_h, need_w = hidden.requires_grad, weight.requires_grad
        loop = HeadLoop(hidden, weight, active, shard, opts)
        t_local = shard.local_targets(targets)
        w = loss_weights.to(torch.float32) if loss_weights is not None else None
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_h = new_grad_hidden(hidden, active) if need_h else None
        grad_w = torch.empty_like(weight) if need_w else None
        first = True
        for chunk in loop.chunks():
            h, x, t, rows = loop.forward_chunk(chunk, t_local, 1.0)
            n = chunk.stop - chunk.start
            w_c = take_rows(w, chunk, None) if w is not None else hidden.new_ones(n, dtype=torch.float32)
            loss += (w_c * (rows.lse - rows.z_target)).sum()
            if need_h or need_w:
                loop.backward_chunk(
                    chunk, h, x, t, rows.lse, None, -w_c, None, 1.0, grad_h, grad_w, first
                )
                first = False
        if grad_w is not None and first:
            grad_w.zero_()  # no active row: no chunk wrote it
        if grad_h is not None and opts.reduce_grad_hidden:
            shard.all_reduce_sum_(grad_h)  # each rank saw only its vocab shard's share
        ctx.save_for_backward(grad_h, grad_w)
        ctx.has_grads = (need_h, need_w)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        need_h, need_w = ctx.has_grads
        # Scaling in place avoids a second V x H buffer; the check costs one sync per step.
        if bool(grad_loss.ne(1).item()):
            scale = grad_loss.to(torch.float32)
            if need_h:
                grad_h.mul_(scale.to(grad_h.dtype))
            if need_w:
                grad_w.mul_(scale.to(grad_w.dtype))
        return (grad_h if need_h else None), (grad_w if need_w else None), None, None, None

