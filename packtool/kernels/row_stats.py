"""Per-row softmax statistics of a logits block: the online log-sum-exp pass over vocab blocks.

For z = x * inv_temp on one row (the local vocab shard), returns the running max m,
s = sum exp(z - m), u = sum exp(z - m) * (z - m) and z at the target. u is kept relative to the
max so entropy = log s - u / s never subtracts two large numbers (logits in the thousands would
otherwise lose every digit in fp32). Shards merge exactly in `vocab_parallel.merge_row_stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl

from packtool.kernels._triton import RowKernel, check_device


@dataclass(frozen=True)
class RowStats:
    m: torch.Tensor  # fp32 [R]: max of z over the row
    s: torch.Tensor  # fp32 [R]: sum exp(z - m)
    u: torch.Tensor  # fp32 [R]: sum exp(z - m) * (z - m)
    zt: torch.Tensor  # fp32 [R]: z at the target; 0 where the target is not in this shard (-1)


def _row_stats_kernel(
    x_ptr, stride_x, tgt_ptr, m_ptr, s_ptr, u_ptr, zt_ptr, inv_temp,
    V: tl.constexpr, BLOCK_V: tl.constexpr, PREFETCH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    # One block-max reduction per step; the sums stay per lane (rescaled by the scalar max) and are
    # reduced once at the end, which keeps the loop off the cross-warp barriers.
    m = float("-inf")
    s = tl.zeros([BLOCK_V], dtype=tl.float32)
    u = tl.zeros([BLOCK_V], dtype=tl.float32)
    lanes = tl.arange(0, BLOCK_V)
    if PREFETCH:
        # the max -> exp chain stalls each step on its own load; issue the next block's load first
        z_next = tl.load(x_row + lanes, mask=lanes < V, other=float("-inf"))
    for start in range(0, V, BLOCK_V):
        offs = start + lanes
        mask = offs < V
        if PREFETCH:
            z_raw = z_next
            nxt = offs + BLOCK_V
            z_next = tl.load(x_row + nxt, mask=nxt < V, other=float("-inf"))
        else:
            z_raw = tl.load(x_row + offs, mask=mask, other=float("-inf"))
        z = z_raw.to(tl.float32) * inv_temp
        m_new = tl.maximum(m, tl.max(z, axis=0))
        alpha = tl.exp(m - m_new)
        # first step: m = -inf and s = 0 would make (m - m_new) * s NaN; the old sums are empty
        shift = (tl.where(s > 0.0, m, m_new) - m_new) * s
        e = tl.exp(z - m_new)
        d = tl.where(mask, z - m_new, 0.0)
        u = alpha * (u + shift) + e * d
        s = alpha * s + e
        m = m_new
    s = tl.sum(s, axis=0)
    u = tl.sum(u, axis=0)
    t = tl.load(tgt_ptr + row)
    has_t = t >= 0
    zt = tl.load(x_row + tl.where(has_t, t, 0)).to(tl.float32) * inv_temp
    zt = tl.where(has_t, zt, 0.0)
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, s)
    tl.store(u_ptr + row, u)
    tl.store(zt_ptr + row, zt)


_KERNEL = RowKernel(
    _row_stats_kernel, key=["V"], variants={"PREFETCH": (False, True)},
    interpret_defaults={"PREFETCH": True},
)


def _empty_stats(rows: int, device) -> tuple[torch.Tensor, ...]:
    return tuple(torch.empty(rows, dtype=torch.float32, device=device) for _ in range(4))


def row_stats_triton(
    logits: torch.Tensor, targets: torch.Tensor, inv_temp: float, **launch
) -> RowStats:
    """logits [R, V] (row-contiguous), targets [R] int64 local indices or -1.

    `launch` pins kernel meta-parameters (tests pin PREFETCH); on a GPU the autotuner picks them.
    """
    check_device(logits, targets)
    rows, vocab = logits.shape
    m, s, u, zt = _empty_stats(rows, logits.device)
    if rows:
        assert logits.stride(1) == 1, "row_stats: logits rows must be contiguous"
        _KERNEL((rows,), logits, logits.stride(0), targets, m, s, u, zt, float(inv_temp), V=vocab, **launch)
    return RowStats(m=m, s=s, u=u, zt=zt)


def row_stats_torch(logits: torch.Tensor, targets: torch.Tensor, inv_temp: float) -> RowStats:
    """Reference: same statistics, computed densely (float64 in stays float64)."""
    dt = torch.float64 if logits.dtype == torch.float64 else torch.float32
    z = logits.to(dt) * inv_temp
    m = z.max(dim=1).values
    d = z - m[:, None]
    e = torch.exp(d)
    has_t = targets >= 0
    zt = z.gather(1, targets.clamp_min(0)[:, None]).squeeze(1)
    zt = torch.where(has_t, zt, torch.zeros_like(zt))
    return RowStats(m=m, s=e.sum(1), u=(e * d).sum(1), zt=zt)
