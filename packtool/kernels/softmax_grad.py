"""In-place gradient of the softmax losses with respect to one logits block.

With z = x * inv_temp, p = softmax(z) over the full vocab (lse given, so shards agree),
and per-row upstream coefficients a (on the target log-prob) and b (on the entropy H):
    d/dz_j [a * log p_t + b * H] = a * (1[j == t] - p_j) - b * p_j * (log p_j + H)
and d/dx = inv_temp * d/dz. The block is overwritten with the gradient so the two matmuls that
follow (grad_hidden = G @ W, grad_weight += G^T @ h) read it without a second buffer.
Cross-entropy is the case a = -loss_weight, b = 0 (HAS_ENT off skips the entropy term).
"""

from __future__ import annotations

import torch
import triton.language as tl

from packtool.kernels._triton import RowKernel, check_device


def _softmax_grad_kernel(
    x_ptr, stride_x, tgt_ptr, lse_ptr, ent_ptr, a_ptr, b_ptr, inv_temp,
    V: tl.constexpr, HAS_ENT: tl.constexpr, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    lse = tl.load(lse_ptr + row)
    a = tl.load(a_ptr + row)
    t = tl.load(tgt_ptr + row)
    if HAS_ENT:
        ent = tl.load(ent_ptr + row)
        b = tl.load(b_ptr + row)
    for start in range(0, V, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        mask = offs < V
        z = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32) * inv_temp
        logp = z - lse
        p = tl.exp(logp)
        g = -a * p
        if HAS_ENT:
            g = g - b * p * (logp + ent)
        g = tl.where(offs == t, g + a, g)
        tl.store(x_row + offs, (g * inv_temp).to(x_ptr.dtype.element_ty), mask=mask)


_KERNEL = RowKernel(_softmax_grad_kernel, key=["V", "HAS_ENT"], restore_value=["x_ptr"])


def softmax_grad_triton_(
    logits: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor | None,
    coef_lp: torch.Tensor,
    coef_ent: torch.Tensor | None,
    inv_temp: float,
) -> torch.Tensor:
    """Overwrite logits [R, V] with d(a*logp_t + b*H)/dx; entropy/coef_ent None drops the H term."""
    check_device(logits, targets)
    rows, vocab = logits.shape
    has_ent = coef_ent is not None
    if rows:
        assert logits.stride(1) == 1, "softmax_grad: logits rows must be contiguous"
        _KERNEL(
            (rows,), logits, logits.stride(0), targets, lse,
            entropy if has_ent else lse, coef_lp, coef_ent if has_ent else coef_lp,
            float(inv_temp), V=vocab, HAS_ENT=has_ent,
        )
    return logits


def softmax_grad_torch_(
    logits: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor | None,
    coef_lp: torch.Tensor,
    coef_ent: torch.Tensor | None,
    inv_temp: float,
) -> torch.Tensor:
    """Reference: the same in-place update, computed densely."""
    dt = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = logits.to(dt) * inv_temp - lse.to(dt)[:, None]
    p = torch.exp(logp)
    a = coef_lp.to(dt)[:, None]
    g = -a * p
    if coef_ent is not None:
        g = g - coef_ent.to(dt)[:, None] * p * (logp + entropy.to(dt)[:, None])
    has_t = targets >= 0
    rows = torch.nonzero(has_t).squeeze(1)
    g[rows, targets[rows]] += a[rows, 0]
    logits.copy_(g * inv_temp)
    return logits
