"""The support checks of packtool/kernels/support_check.py in one Triton pass over the [N, K] ids.

One program per row reads its ids once and writes the sampled id's column and its counts (owned ids, the verdicts, the probe's first marks), summed on the device; the torch version makes some twenty
passes over [N, K] (5.2 ms at N 16k, K 4096 on the H200, more than the whole margin the GEMM paths
have over the full-vocab head).

Distinct ids: a second launch of a few persistent programs, each with a bitmap of the vocabulary
(V / 8 bytes, so all of them sit in L2: 16 MiB at V 248,320 and 528 programs) walks its rows: an
atomic OR sets each id's bit and returns the word it found, a bit already set is a repeated id
(two of them: the atomics order them, exactly one finds it set); the row's words are cleared
behind a barrier before the next row. No sort (sorting [16k, 4096] rows took 2.0 ms on the H200),
no pass over the GEMM paths' logits buffer (its marks cost 1.1 ms at K 2048 over V_local 75,968),
and the verdict comes back in the checks' one sync: nothing is read after the compute. Every id
in the vocabulary is checked on every TP rank, so the ranks agree on the verdict.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from packtool.kernels._triton import LazyJit, interpreting

# the counts each row adds (constexpr: the kernel reads them as globals): the candidates this rank
# owns, the weight rows the probe names first, and one per verdict (rows failing that check)
OWN, NAMED, N_COUNTS = 0, 1, 6  # the indices callers read (plain ints)
_OWN, _NAMED, _OUTSIDE, _GAP, _MISSING, _UNSUPPORTED = (tl.constexpr(i) for i in range(N_COUNTS))
BLOCK_K = 1024
DISTINCT_PROGRAMS_PER_SM = 4


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


def _distinct_kernel(s_ptr, bm_ptr, dup_ptr, N, K, vocab_total, words, rows_per,
                     STATIC: tl.constexpr, K_PAD: tl.constexpr, BLOCK_K: tl.constexpr):
    """Rows pid, pid + G, ... (G programs; STATIC, the interpreter: row pid alone): dup[pid] =
    the ids found twice in them, by this program's bitmap of `words` int32 (see the module doc)."""
    pid = tl.program_id(0)
    bm = bm_ptr + pid.to(tl.int64) * words
    n_dup = tl.zeros([], tl.int32)
    if STATIC:
        i_hi = 1
    else:
        i_hi = rows_per
    for i in range(0, i_hi):
        row = (pid + i * tl.num_programs(0)).to(tl.int64)
        k_row = tl.where(row < N, K, 0)  # (ks < K) & live: the interpreter mistypes a scalar bool's &
        for k0 in range(0, K_PAD, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            s = tl.load(s_ptr + row * K + ks, mask=ks < k_row, other=-1)
            real = (s >= 0) & (s < vocab_total)  # ids outside are the checks' own verdict
            sw = tl.where(real, s, 0)
            bit = tl.full([BLOCK_K], 1, tl.int32) << (sw & 31).to(tl.int32)
            old = tl.atomic_or(bm + (sw >> 5), bit, mask=real)
            n_dup += tl.sum((real & ((old & bit) != 0)).to(tl.int32), axis=0)
        tl.debug_barrier()  # every bit of the row is set before any word is cleared
        for k0 in range(0, K_PAD, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            s = tl.load(s_ptr + row * K + ks, mask=ks < k_row, other=-1)
            real = (s >= 0) & (s < vocab_total)
            tl.store(bm + (tl.where(real, s, 0) >> 5), 0, mask=real)
        tl.debug_barrier()  # cleared before the next row sets bits
    tl.store(dup_ptr + pid, n_dup)


_DISTINCT = LazyJit(_distinct_kernel)
_SMS: dict = {}


def repeated_count(s, vocab_total: int) -> torch.Tensor:
    """int64 [] on the device: ids found twice in a row of s [N, K] (0: every row distinct)."""
    n, k = s.shape
    if not (n and k):
        return torch.zeros((), dtype=torch.int64, device=s.device)
    if interpreting():
        g, static = n, True
    else:
        if s.device not in _SMS:
            _SMS[s.device] = torch.cuda.get_device_properties(s.device).multi_processor_count
        g, static = min(n, DISTINCT_PROGRAMS_PER_SM * _SMS[s.device]), False
    words = triton.cdiv(vocab_total, 32)
    bm = torch.zeros(g, words, dtype=torch.int32, device=s.device)
    dup = torch.empty(g, dtype=torch.int32, device=s.device)
    k_pad = max(32, triton.next_power_of_2(k))
    block = min(BLOCK_K, k_pad)
    # no thread holds a copy of another's id (block >= the program's threads): one atomic per id
    _DISTINCT[(g,)](s, bm, dup, n, k, vocab_total, words, triton.cdiv(n, g), STATIC=static,
                    K_PAD=k_pad, BLOCK_K=block, num_warps=max(1, min(8, block // 32)))
    return dup.sum(dtype=torch.int64)


_ROWS = LazyJit(_rows_kernel)


def check_rows(s, t, loss_mask, vocab_total: int, vocab_start: int, vocab_local: int, probe_rows: int = 0):
    """(s contiguous, pos int64 [N], counts int64 [N_COUNTS + 1]) of s [N, K] (K >= 1, int32 or
    int64), t [N]; loss_mask [N] or None; counts (by the indices above, then the repeated ids)
    summed over the rows, on the device: one host sync reads them all. probe_rows > 0: NAMED
    counts the distinct weight rows the first probe_rows rows name. No local ids are written: every kernel takes the rows as
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
        return s, pos, torch.cat([cnt.sum(1, dtype=torch.int64), repeated_count(s, vocab_total)[None]])
    return s, pos, torch.zeros(N_COUNTS + 1, dtype=torch.int64, device=dev)
