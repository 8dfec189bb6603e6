"""The chunk loop shared by both modes: logits of one chunk of active rows, then the row kernels.

Logits live only in one [C, V_local] buffer in the hidden dtype (cuBLAS writes it, the row kernels
read it in fp32 and overwrite it with the gradient in place). The gradient matmuls then run on
that buffer: grad_hidden = G @ W into the chunk's rows and grad_weight += G^T @ h, accumulated in
the weight's dtype so no V x H fp32 copy is ever held.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from packtool.kernels import row_stats, softmax_grad
from packtool.kernels.chunking import ActiveRows, Chunk, default_chunk_rows, iter_chunks, put_rows, take_rows
from packtool.kernels.vocab_parallel import SoftmaxRows, VocabShard, merge_row_stats
from packtool.errors import PacktoolInputError


@dataclass(frozen=True)
class HeadOptions:
    impl: str = "triton"  # row kernels: "triton" or "torch" (the references, for testing the loop)
    chunk_rows: int | None = None  # None: default_chunk_rows(H, V_local)
    tp_group: object | None = None
    # True: grad_hidden is all-reduced over tp_group (hidden replicated on the TP ranks, nothing
    # else sums it). False: each rank returns its vocab shard's partial grad_hidden, for callers
    # whose own collective sums it (sequence parallel: the all-gather's backward reduce-scatters).
    reduce_grad_hidden: bool = True


def _row_ops(impl: str):
    if impl == "triton":
        return row_stats.row_stats_triton, softmax_grad.softmax_grad_triton_
    if impl == "torch":
        return row_stats.row_stats_torch, softmax_grad.softmax_grad_torch_
    raise PacktoolInputError(f"row kernel impl {impl!r}: expected 'triton' or 'torch'")


class HeadLoop:
    """Buffers and per-chunk steps for one call over hidden [N, H] and weight [V_local, H]."""

    def __init__(self, hidden, weight, active: ActiveRows, shard: VocabShard, opts: HeadOptions):
        self.hidden, self.weight, self.active, self.shard = hidden, weight, active, shard
        self.stats_op, self.grad_op = _row_ops(opts.impl)
        n_chunk = opts.chunk_rows or default_chunk_rows(
            hidden.shape[1], weight.shape[0], hidden.element_size()
        )
        self.chunk_rows = max(1, min(n_chunk, max(1, active.count)))
        self.logits = hidden.new_empty(self.chunk_rows, weight.shape[0])
        gathers = active.index is not None
        self.h_buf = hidden.new_empty(self.chunk_rows, hidden.shape[1]) if gathers else None
        self.gh_buf = hidden.new_empty(self.chunk_rows, hidden.shape[1]) if gathers else None

    def chunks(self):
        return iter_chunks(self.active, self.chunk_rows)

    def forward_chunk(self, chunk: Chunk, targets_local: torch.Tensor, inv_temp: float):
        """Logits of the chunk into the buffer; returns (hidden rows, logits view, merged stats)."""
        h = take_rows(self.hidden, chunk, self.h_buf)
        x = self.logits[: chunk.stop - chunk.start]
        torch.mm(h, self.weight.t(), out=x)
        t = take_rows(targets_local, chunk, None)
        rows: SoftmaxRows = merge_row_stats(self.stats_op(x, t, inv_temp), self.shard)
        return h, x, t, rows

    def backward_chunk(
        self, chunk: Chunk, h, x, t, lse, entropy, coef_lp, coef_ent, inv_temp,
        grad_hidden: torch.Tensor | None, grad_weight: torch.Tensor | None, first: bool,
    ) -> None:
        """Turn the chunk's logits into its gradient and apply both gradient matmuls."""
        self.grad_op(x, t, lse, entropy, coef_lp, coef_ent, inv_temp)
        if grad_hidden is not None:
            if chunk.rows is None:
                torch.mm(x, self.weight, out=grad_hidden[chunk.start : chunk.stop])
            else:
                gh = self.gh_buf[: chunk.stop - chunk.start]
                torch.mm(x, self.weight, out=gh)
                put_rows(grad_hidden, chunk, gh)
        if grad_weight is not None:
            if first:
                torch.mm(x.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(x.t(), h)


def new_grad_hidden(hidden: torch.Tensor, active: ActiveRows) -> torch.Tensor:
    # inactive rows get no chunk, so their gradient must start at zero
    return torch.empty_like(hidden) if active.index is None and active.count else torch.zeros_like(hidden)
