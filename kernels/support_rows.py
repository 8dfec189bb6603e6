"""The support checks of kernels/support_check.py in one Triton pass over the [N, K] ids.

One program per row reads its ids once and writes the sampled id's column and its counts (owned ids, the verdicts, the probe's first marks), summed on the device; the torch version makes some twenty
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

# the counts each row adds (constexpr: the kernel reads them as globals): the candidates this rank
# owns, the weight rows the probe names first, and one per verdict (rows failing that check)
OWN, NAMED, N_COUNTS = 0, 1, 6  # the indices callers read (plain ints)
_OWN, _NAMED, _OUTSIDE, _GAP, _MISSING, _UNSUPPORTED = (tl.constexpr(i) for i in range(N_COUNTS))
BLOCK_K = 1024


def _rows_kernel(s_ptr, t_ptr, mask_ptr, pos_ptr, cnt_ptr, named_ptr, N, K, vocab_total,
                 vocab_start, vocab_local, probe_rows, HAS_MASK: tl.constexpr, K_PAD: tl.constexpr,
                 BLOCK_K: tl.constexpr, PROBE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(t_ptr + row)
    valid = tl.load(s_ptr + row * K) >= 0
    n_out = tl.zeros([], tl.int32)
    n_gap = tl.zeros([], tl.int32)
    n_own = tl.zeros([], tl.int32)
    n_new = tl.zeros([], tl.int32)
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
        if PROBE:  # the first probe_rows rows mark the rows they name; first marks counted
            pm = own & (ks < tl.where(row < probe_rows, K, 0))
            old = tl.atomic_xchg(named_ptr + tl.where(pm, loc, 0), 1, mask=pm)
            n_new += tl.sum((pm & (old == 0)).to(tl.int32), axis=0)
    tl.store(cnt_ptr + _OWN * N + row, n_own)
    tl.store(cnt_ptr + _NAMED * N + row, n_new)
    tl.store(cnt_ptr + _OUTSIDE * N + row, (n_out > 0).to(tl.int32))
    tl.store(cnt_ptr + _GAP * N + row, (n_gap > 0).to(tl.int32))
    tl.store(cnt_ptr + _MISSING * N + row, (valid & (pos == K)).to(tl.int32))
    if HAS_MASK:
        tl.store(cnt_ptr + _UNSUPPORTED * N + row, ((tl.load(mask_ptr + row) != 0) & (valid == 0)).to(tl.int32))
    else:
        tl.store(cnt_ptr + _UNSUPPORTED * N + row, 0)
    tl.store(pos_ptr + row, tl.where(pos < K, pos, 0).to(tl.int64))


_ROWS = LazyJit(_rows_kernel)


def check_rows(s, t, loss_mask, vocab_total: int, vocab_start: int, vocab_local: int, probe_rows: int = 0):
    """(s contiguous, pos int64 [N], counts int64 [N_COUNTS]) of s [N, K] (K >= 1, int32 or
    int64), t [N]; loss_mask [N] or None; counts (by the indices above) summed over the rows, on
    the device: one host sync reads them all. probe_rows > 0: NAMED counts the distinct weight
    rows the first probe_rows rows name. No local ids are written: every kernel takes the rows as
    they are with (vocab_start, vocab_local), so no [N, K] copy exists at any TP rank."""
    n, k = s.shape
    dev = s.device
    s = s.contiguous()
    pos = torch.empty(n, dtype=torch.int64, device=dev)
    cnt = torch.empty(N_COUNTS, n, dtype=torch.int32, device=dev)
    if n:
        m = (loss_mask != 0).to(torch.int8) if loss_mask is not None else pos
        named = torch.zeros(vocab_local if probe_rows else 1, dtype=torch.int32, device=dev)
        k_pad = max(16, triton.next_power_of_2(k))
        _ROWS[(n,)](s, t.contiguous(), m, pos, cnt, named, n, k, vocab_total,
                    vocab_start, vocab_local, probe_rows, HAS_MASK=loss_mask is not None, K_PAD=k_pad,
                    BLOCK_K=min(BLOCK_K, k_pad), PROBE=probe_rows > 0, num_warps=4)
    return s, pos, cnt.sum(1, dtype=torch.int64)
