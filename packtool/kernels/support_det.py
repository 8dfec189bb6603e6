"""The deterministic grad weight of the support gather path: dW[c] += sum of g[n, k] h_n over the
(token, candidate) pairs naming row c, summed in a fixed order, with no host sync.

The pairs are sorted by row id once (a radix sort: padding, key V, sorts last); the segment of
each id is found with a cumsum and a search over an upper bound of the segment count, min(V + 1,
P), so no launch waits for a count to come back to the host. Two launches then sum them:
  light  one program per BLOCK_S consecutive segments and H block: each segment is a row of the
         tile, the loop steps through the segments' pairs together (most ids have a few pairs,
         so the tile's rows are all real work), and the old dW rows are loaded up front, so a
         program's loads form two dependent rounds (the ids, then hidden rows and dW);
  heavy  the ids with more than LIGHT_MAX pairs, which the light launch lists (slots taken with
         an atomic: the list's order varies, what each id sums does not): a program strides over
         the list, summing one id's pairs BLOCK_J at a time in a narrower H block.
Programs past the device-side counts sum nothing. One program owns each (id, H block) and adds
its pairs in sorted order: the same bits every run, for a fixed launch (no autotuning).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from packtool.kernels._triton import LazyJit, interpreting

# light launch: segments per program, H block, warps. H200, N 16k, H 4096, K 2 / 20 / 64 (raw
# bench/results/support_logprob/c3_profile.*): 4 x 512 0.69 / 1.67 / 2.60 ms, 8 x 256 0.72 / 1.72 /
# 2.66, 16 x 256 0.77 / 1.88 / 3.20, 16 x 512 0.81 / 2.36 / 4.44; the atomic dW 0.49 / 1.87 / 5.21
BLOCK_S = 4
LIGHT_BLOCK_H = 512
LIGHT_WARPS = 4
# ids with more pairs than this go to the heavy launch: a tall, narrow tile takes a hot id's
# pairs BLOCK_J at a time; HEAVY_PROGRAMS bounds its grid (programs stride over the listed ids)
LIGHT_MAX = 32
HEAVY_BLOCK_J = 32
HEAVY_BLOCK_H = 128
HEAVY_PROGRAMS = 256


def _light_kernel(z_ptr, rs_ptr, pos_ptr, inv_temp, h_ptr, key_ptr, perm_ptr, starts_ptr, heavy_ptr,
                  n_heavy_ptr, dw_ptr,
                  stride_h, K, V, n_pairs, n_seg, H: tl.constexpr, LIGHT_MAX: tl.constexpr,
                  STATIC: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr):
    """Segments [pid * BLOCK_S, +BLOCK_S) of at most LIGHT_MAX pairs; longer ones are listed.

    STATIC > 0 (interpreter, whose range() cannot take a loaded scalar in triton 3.6): a static
    trip count of STATIC pairs, the same body masked.
    """
    segs = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    live = segs < n_seg
    start = tl.load(starts_ptr + segs, mask=live, other=n_pairs)
    stop = tl.load(starts_ptr + segs + 1, mask=live, other=n_pairs)
    vid = tl.load(key_ptr + start, mask=start < n_pairs, other=V)
    n_own = tl.where(vid < V, stop - start, 0)  # the padding key's pairs: none summed
    listed = n_own > tl.where(tl.program_id(1) == 0, LIGHT_MAX, n_pairs)
    slot = tl.atomic_add(n_heavy_ptr + 0 * segs, 1, mask=listed)
    tl.store(heavy_ptr + slot, segs, mask=listed)
    cnt = tl.where(n_own <= LIGHT_MAX, n_own, 0)
    dst = dw_ptr + vid.to(tl.int64)[:, None] * H + ho[None, :]
    out = (cnt > 0)[:, None] & hm[None, :]
    acc = tl.load(dst, mask=out, other=0.0)
    if STATIC > 0:
        j_hi = STATIC
    else:
        j_hi = tl.max(cnt, axis=0)
    for j in range(0, j_hi):
        jm = j < cnt
        pair = tl.load(perm_ptr + start + j, mask=jm, other=0)
        row = pair // K
        # g recomputed per pair (support_kernels GRAD_DOC); the padding key's pairs are not summed, so
        # every pair here names an own candidate and its z is finite (inlined in both launches: a jit
        # helper would be frozen to one mode at import, see packtool/kernels/_triton.py)
        lse = tl.load(rs_ptr + row * 4, mask=jm, other=0.0)
        ent = tl.load(rs_ptr + row * 4 + 1, mask=jm, other=0.0)
        a = tl.load(rs_ptr + row * 4 + 2, mask=jm, other=0.0)
        b = tl.load(rs_ptr + row * 4 + 3, mask=jm, other=0.0)
        lp = tl.load(z_ptr + pair, mask=jm, other=0.0) - lse
        p = tl.where(jm, tl.exp(lp), 0.0)
        at = tl.load(pos_ptr + row, mask=jm, other=-1) == pair - row * K
        coef = (tl.where(at, a, 0.0) - p * (a + b * (lp + ent))) * inv_temp
        x = tl.load(h_ptr + row.to(tl.int64)[:, None] * stride_h + ho[None, :],
                    mask=jm[:, None] & hm[None, :], other=0.0)
        acc += coef[:, None] * x.to(tl.float32)
    tl.store(dst, acc, mask=out)


def _heavy_kernel(z_ptr, rs_ptr, pos_ptr, inv_temp, h_ptr, key_ptr, perm_ptr, starts_ptr, heavy_ptr,
                  n_heavy_ptr, dw_ptr,
                  stride_h, K, H: tl.constexpr, STATIC: tl.constexpr, BLOCK_J: tl.constexpr,
                  BLOCK_H: tl.constexpr):
    """The listed ids: a program strides over the list (STATIC > 0, interpreter: one item each,
    a static trip count of STATIC pairs)."""
    pid = tl.program_id(0)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    n_items = tl.load(n_heavy_ptr)
    if STATIC > 0:
        i_lo = 0
        i_hi = 1
        i_step = 1
        i_base = pid
    else:
        i_lo = pid
        i_hi = n_items
        i_step = tl.num_programs(0)
        i_base = 0
    for it in range(i_lo, i_hi, i_step):
        item = i_base + it
        live = item < n_items
        seg = tl.load(heavy_ptr + item, mask=live, other=0)
        start = tl.load(starts_ptr + seg, mask=live, other=0)
        stop = tl.load(starts_ptr + seg + 1, mask=live, other=0)
        vid = tl.load(key_ptr + start, mask=live, other=0)
        if STATIC > 0:
            j_lo = 0
            j_hi = STATIC
            j_base = start
        else:
            j_lo = start
            j_hi = stop
            j_base = 0
        acc = tl.zeros([BLOCK_J, BLOCK_H], dtype=tl.float32)
        for j0 in range(j_lo, j_hi, BLOCK_J):
            js = j_base + j0 + tl.arange(0, BLOCK_J)
            jm = js < stop
            pair = tl.load(perm_ptr + js, mask=jm, other=0)
            row = pair // K
            # g recomputed per pair (support_kernels GRAD_DOC); the padding key's pairs are not summed, so
            # every pair here names an own candidate and its z is finite (inlined in both launches: a jit
            # helper would be frozen to one mode at import, see packtool/kernels/_triton.py)
            lse = tl.load(rs_ptr + row * 4, mask=jm, other=0.0)
            ent = tl.load(rs_ptr + row * 4 + 1, mask=jm, other=0.0)
            a = tl.load(rs_ptr + row * 4 + 2, mask=jm, other=0.0)
            b = tl.load(rs_ptr + row * 4 + 3, mask=jm, other=0.0)
            lp = tl.load(z_ptr + pair, mask=jm, other=0.0) - lse
            p = tl.where(jm, tl.exp(lp), 0.0)
            at = tl.load(pos_ptr + row, mask=jm, other=-1) == pair - row * K
            coef = (tl.where(at, a, 0.0) - p * (a + b * (lp + ent))) * inv_temp
            x = tl.load(h_ptr + row.to(tl.int64)[:, None] * stride_h + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += coef[:, None] * x.to(tl.float32)
        dst = dw_ptr + vid.to(tl.int64) * H + ho
        out = ho < tl.where(live, H, 0)  # hm & live (the interpreter mistypes a scalar bool's &)
        tl.store(dst, tl.sum(acc, axis=0) + tl.load(dst, mask=out, other=0.0), mask=out)


_LIGHT = LazyJit(_light_kernel)
_HEAVY = LazyJit(_heavy_kernel)


def sorted_pairs(cands, v: int):
    """(local ids sorted, padding and other ranks' ids last as key v; the pair index of each;
    segment starts [S + 2]; S) of cands = (ids [N, K], start, v_local = v).

    All on the device: segment i is [starts[i], starts[i + 1]); S = min(v + 1, P) bounds the
    segment count (the padding key is one of them), and starts[i] = P past the last segment.
    """
    ids, start, _ = cands
    flat = ids.reshape(-1)
    p, dev = flat.numel(), ids.device
    loc = flat - start
    key = torch.where((flat >= 0) & (loc >= 0) & (loc < v), loc, v).to(torch.int32)
    del loc
    key, perm = torch.sort(key, stable=True)  # stable: one pair order, every run
    new = torch.ones(p, dtype=torch.bool, device=dev)
    torch.ne(key[1:], key[:-1], out=new[1:])
    seg = torch.cumsum(new, 0, dtype=torch.int32)  # segment number (from 1) of each sorted pair
    del new
    n_seg = min(v + 1, p)
    starts = torch.searchsorted(seg, torch.arange(1, n_seg + 2, dtype=torch.int32, device=dev),
                                out_int32=True)
    return key, perm, starts, n_seg


def grad_weight_sorted_(dw32, gs, hidden, cands) -> None:
    """dw32 [V_local, H] += the scatter-add of g[n, k] h_n over the local ids of cands = (ids,
    start, v_local), in a fixed order; g recomputed per pair from gs = (z, rs, pos, inv_temp)
    (support_kernels.grad_stats)."""
    z, rs, pos, inv_temp = gs
    n, k = cands[0].shape
    p, v, h = n * k, dw32.shape[0], hidden.shape[1]
    if p == 0:
        return
    key, perm, starts, n_seg = sorted_pairs(cands, v)
    n_heavy = torch.zeros(1, dtype=torch.int32, device=hidden.device)
    heavy = torch.empty(p // (LIGHT_MAX + 1) + 1, dtype=torch.int32, device=hidden.device)
    # the interpreter's static trip count: the longest segment (a host sync, there only)
    longest = int((starts[1:] - starts[:-1]).max()) if interpreting() else 0
    _LIGHT[(triton.cdiv(n_seg, BLOCK_S), triton.cdiv(h, LIGHT_BLOCK_H))](
        z, rs, pos, float(inv_temp), hidden, key, perm, starts, heavy, n_heavy, dw32, hidden.stride(0),
        k, v, p, n_seg,
        H=h, LIGHT_MAX=LIGHT_MAX, STATIC=min(LIGHT_MAX, longest), BLOCK_S=BLOCK_S,
        BLOCK_H=LIGHT_BLOCK_H, num_warps=LIGHT_WARPS)
    slots = heavy.numel() if longest else min(heavy.numel(), HEAVY_PROGRAMS)
    _HEAVY[(slots, triton.cdiv(h, HEAVY_BLOCK_H))](
        z, rs, pos, float(inv_temp), hidden, key, perm, starts, heavy, n_heavy, dw32,
        hidden.stride(0), k, H=h, STATIC=triton.next_power_of_2(longest) if longest else 0, BLOCK_J=HEAVY_BLOCK_J,
        BLOCK_H=HEAVY_BLOCK_H, num_warps=4)
