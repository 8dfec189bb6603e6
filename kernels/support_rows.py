"""The support checks of kernels/support_check.py in one Triton pass over the [N, K] ids.

One program per row reads its ids once and writes this rank's local weight rows, the sampled id's
column, the count of ids it owns and a word of verdict bits; the torch version makes some twenty
passes over [N, K] (5.2 ms at N 16k, K 4096 on the H200, more than the whole margin the GEMM paths
have over the full-vocab head). Distinct ids are not checked here: support_check sorts the rows
for that, or leaves it to the GEMM paths' buffer kernel (kernels/support_kernels.py), which finds
a repeated id in the logits buffer it already holds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import LazyJit

# verdict bits (constexpr: the kernel reads them as globals)
OUTSIDE, GAP, MISSING, UNSUPPORTED = (tl.constexpr(b) for b in (1, 2, 4, 8))
BLOCK_K = 1024


def _rows_kernel(s_ptr, t_ptr, mask_ptr, local_ptr, pos_ptr, bits_ptr, own_ptr, K, vocab_total,
                 vocab_start, vocab_local, HAS_MASK: tl.constexpr, K_PAD: tl.constexpr,
                 BLOCK_K: tl.constexpr, WRITE_LOCAL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(t_ptr + row)
    valid = tl.load(s_ptr + row * K) >= 0
    n_out = tl.zeros([], tl.int32)
    n_gap = tl.zeros([], tl.int32)
    n_own = tl.zeros([], tl.int32)
    pos = tl.full([], K, tl.int32)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        km = ks < K
        s = tl.load(s_ptr + row * K + ks, mask=km, other=-1)
        prev = tl.load(s_ptr + row * K + ks - 1, mask=km & (ks > 0), other=0)
        real = s >= 0
        n_out += tl.sum((km & ((s < -1) | (s >= vocab_total))).to(tl.int32), axis=0)
        n_gap += tl.sum((real & (prev < 0)).to(tl.int32), axis=0)  # a candidate after padding
        pos = tl.minimum(pos, tl.min(tl.where(real & (s == t), ks, K), axis=0))
        loc = s - vocab_start
        own = real & (loc >= 0) & (loc < vocab_local)
        n_own += tl.sum(own.to(tl.int32), axis=0)
        if WRITE_LOCAL:
            tl.store(local_ptr + row * K + ks, tl.where(own, loc, -1).to(tl.int32), mask=km)
    bits = tl.where(n_out > 0, OUTSIDE, 0) + tl.where(n_gap > 0, GAP, 0)
    bits += tl.where(valid & (pos == K), MISSING, 0)
    if HAS_MASK:
        bits += tl.where((tl.load(mask_ptr + row) != 0) & (valid == 0), UNSUPPORTED, 0)
    tl.store(bits_ptr + row, bits)
    tl.store(pos_ptr + row, tl.where(pos < K, pos, 0).to(tl.int64))
    tl.store(own_ptr + row, n_own)


_ROWS = LazyJit(_rows_kernel)


def check_rows(s, t, loss_mask, vocab_total: int, vocab_start: int, vocab_local: int):
    """(local int32 [N, K], pos int64 [N], verdict bits int32 [N], owned per row int32 [N]) of
    s [N, K] (K >= 1), t [N]; loss_mask [N] or None. An unsharded vocabulary and int32 rows: the
    local rows are s itself (once the verdicts are clean), so no [N, K] copy is written."""
    n, k = s.shape
    dev = s.device
    s = s.contiguous()
    same = vocab_start == 0 and vocab_local == vocab_total and s.dtype == torch.int32
    local = s if same else torch.empty(n, k, dtype=torch.int32, device=dev)
    pos = torch.empty(n, dtype=torch.int64, device=dev)
    bits = torch.empty(n, dtype=torch.int32, device=dev)
    own = torch.empty(n, dtype=torch.int32, device=dev)
    if n:
        m = (loss_mask != 0).to(torch.int8) if loss_mask is not None else bits
        k_pad = max(16, triton.next_power_of_2(k))
        _ROWS[(n,)](s, t.contiguous(), m, local, pos, bits, own, k, vocab_total,
                    vocab_start, vocab_local, HAS_MASK=loss_mask is not None, K_PAD=k_pad,
                    BLOCK_K=min(BLOCK_K, k_pad), WRITE_LOCAL=not same, num_warps=4)
    return local, pos, bits, own
