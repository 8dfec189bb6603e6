"""The gather-GEMV kernels of sample-support scoring (Triton); kernels/support_torch.py holds the
same three operations in torch.

Per token n with candidate weight rows c = local[n, k] (-1: padding or another rank's id):
    logits       z[n, k]  = <h_n, W_c> * inv_temp                  (fp32, -inf where c = -1)
    grad hidden  dh[n]    = sum_k g[n, k] W_c                         one program per token block
    grad weight  dW[c]   += sum_{(n, k): local = c} g[n, k] h_n       scatter-add into fp32
Nothing of size [N, V] or [N, K, H] is formed: each program streams W's rows through registers.
The hidden row is cast to the weight's dtype first, as the output layer's matmul would, and every
product is accumulated in fp32. dW has two modes: `atomic` (fp32 atomics, order not fixed) and
`sorted` (pairs sorted by id, each id's pairs summed in a fixed order by one program per
id and H block, with no host sync: bitwise reproducible run to run). No autotuning: a fixed launch keeps `sorted` reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import check_device, interpreting

BLOCK_K = 16  # candidates per tile (tl.sum needs no 16-minimum, but 16 fills a warp's rows)
BLOCK_H = 128
# sorted dW, light launch: pairs summed per loop step and the H block of one program. Most ids have
# a few pairs: a narrow, wide tile keeps the programs few (32 x 128 tiles were 2.6x the atomic dW's
# time at K = 64 on the H200, mostly masked lanes of one-iteration programs)
BLOCK_J = 8
SEG_BLOCK_H = 512
# ids with more pairs than LIGHT_MAX (hot ids) go to the heavy launch: a taller, narrower tile, so
# one id's serial loop takes fewer, fuller steps and its H blocks spread over more programs;
# HEAVY_PROGRAMS bounds that grid (its programs stride over the listed ids)
LIGHT_MAX = 512
HEAVY_BLOCK_J = 32
HEAVY_BLOCK_H = 128
HEAVY_PROGRAMS = 256


def _logits_kernel(h_ptr, w_ptr, ids_ptr, z_ptr, inv_temp, stride_h, stride_w, K,
                   H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = ks < K
    ids = tl.load(ids_ptr + row * K + ks, mask=kmask, other=-1)
    own = ids >= 0
    w_rows = w_ptr + tl.where(own, ids, 0).to(tl.int64)[:, None] * stride_w
    acc = tl.zeros([BLOCK_K, BLOCK_H], dtype=tl.float32)
    for hs in range(0, H, BLOCK_H):
        ho = hs + tl.arange(0, BLOCK_H)
        hm = ho < H
        h = tl.load(h_ptr + row * stride_h + ho, mask=hm, other=0.0)
        h = h.to(w_ptr.dtype.element_ty).to(tl.float32)  # the output layer's cast
        w = tl.load(w_rows + ho[None, :], mask=own[:, None] & hm[None, :], other=0.0)
        acc += w.to(tl.float32) * h[None, :]
    z = tl.where(own, tl.sum(acc, axis=1) * inv_temp, float("-inf"))
    tl.store(z_ptr + row * K + ks, z, mask=kmask)


def _grad_hidden_kernel(g_ptr, w_ptr, ids_ptr, dh_ptr, stride_w, stride_dh, K,
                        K_PAD: tl.constexpr, H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    acc = tl.zeros([BLOCK_K, BLOCK_H], dtype=tl.float32)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < K
        ids = tl.load(ids_ptr + row * K + ks, mask=kmask, other=-1)
        own = ids >= 0
        g = tl.load(g_ptr + row * K + ks, mask=own, other=0.0)
        w_rows = w_ptr + tl.where(own, ids, 0).to(tl.int64)[:, None] * stride_w
        w = tl.load(w_rows + ho[None, :], mask=own[:, None] & hm[None, :], other=0.0)
        acc += g[:, None] * w.to(tl.float32)
    dh = tl.sum(acc, axis=0)
    tl.store(dh_ptr + row * stride_dh + ho, dh.to(dh_ptr.dtype.element_ty), mask=hm)


def _grad_weight_atomic_kernel(g_ptr, h_ptr, ids_ptr, dw_ptr, stride_h, K,
                               K_PAD: tl.constexpr, H: tl.constexpr, BLOCK_K: tl.constexpr,
                               BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    h = tl.load(h_ptr + row * stride_h + ho, mask=hm, other=0.0)
    h = h.to(dw_ptr.dtype.element_ty)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        ids = tl.load(ids_ptr + row * K + ks, mask=ks < K, other=-1)
        own = ids >= 0
        g = tl.load(g_ptr + row * K + ks, mask=own, other=0.0)
        dst = dw_ptr + tl.where(own, ids, 0).to(tl.int64)[:, None] * H + ho[None, :]
        tl.atomic_add(dst, g[:, None] * h[None, :], mask=own[:, None] & hm[None, :])


def _segment_sum_kernel(g_ptr, h_ptr, key_ptr, perm_ptr, starts_ptr, heavy_ptr, n_heavy_ptr, dw_ptr,
                        stride_h, K, V, n_pairs, n_items, H: tl.constexpr, HEAVY: tl.constexpr,
                        LIGHT_MAX: tl.constexpr, STATIC: tl.constexpr, BLOCK_J: tl.constexpr,
                        BLOCK_H: tl.constexpr):
    """dW[id] += sum of g[pair] * h[pair // K] over the pairs of one id's segment, in sorted order.

    Segment i is [starts[i], starts[i + 1]) of the pairs sorted by id (key V: padding). Light
    launch (HEAVY False): program i sums segment i if it holds at most LIGHT_MAX pairs, and lists
    a longer one in heavy_ptr (slots taken with an atomic: the list's order varies, what each
    segment sums does not). Heavy launch: programs stride over that list with narrower H blocks.
    Programs past the device-side counts sum nothing: no host sync sizes either grid. One
    program owns each (id, H block) and sums its pairs in a fixed order: the same bits every run.
    STATIC > 0 (interpreter, whose range() cannot take a loaded scalar in triton 3.6): a static
    trip count of STATIC pairs, the same body masked.
    """
    pid = tl.program_id(0)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    if HEAVY:
        n_items = tl.load(n_heavy_ptr)
    if STATIC > 0:  # one item per program: the grid covers them all
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
        if HEAVY:
            seg = tl.load(heavy_ptr + item, mask=live, other=0)
        else:
            seg = item
        start = tl.load(starts_ptr + seg, mask=live, other=n_pairs)
        stop = tl.load(starts_ptr + seg + 1, mask=live, other=n_pairs)
        vid = tl.load(key_ptr + start, mask=start < n_pairs, other=V)
        n_own = tl.where(vid < V, stop - start, 0)  # the padding key's pairs: none summed
        if HEAVY:
            run = n_own > 0
        else:
            run = (n_own > 0) & (n_own <= LIGHT_MAX)
            listed = n_own > tl.where(tl.program_id(1) == 0, LIGHT_MAX, n_pairs)
            slot = tl.atomic_add(n_heavy_ptr, 1, mask=listed)
            tl.store(heavy_ptr + slot, seg, mask=listed)
        stop = tl.where(run, stop, start)
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
            coef = tl.load(g_ptr + pair, mask=jm, other=0.0)
            x = tl.load(h_ptr + (pair // K).to(tl.int64)[:, None] * stride_h + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += coef[:, None] * x.to(tl.float32)
        dst = dw_ptr + vid.to(tl.int64) * H + ho
        out = ho < tl.where(run, H, 0)  # hm & run (the interpreter mistypes a scalar bool's &)
        tl.store(dst, tl.sum(acc, axis=0) + tl.load(dst, mask=out, other=0.0), mask=out)


class _Lazy:
    """Jit on first launch for the current mode (see kernels/_triton.py for why not at import)."""

    def __init__(self, fn):
        self._fn, self._built = fn, {}

    def __getitem__(self, grid):
        interp = interpreting()
        if interp not in self._built:
            self._built[interp] = triton.jit(self._fn)
        return self._built[interp][grid]


_LOGITS = _Lazy(_logits_kernel)
_GRAD_H = _Lazy(_grad_hidden_kernel)
_GRAD_W_ATOMIC = _Lazy(_grad_weight_atomic_kernel)
_SEGMENT_SUM = _Lazy(_segment_sum_kernel)


def _k_pad(k: int) -> int:
    # the candidate loop's trip count is a constexpr (the interpreter's range() wants Python ints);
    # a power of two keeps the compiled variants few across K, masked steps load nothing
    return max(BLOCK_K, triton.next_power_of_2(k))


def _contig_rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def logits_triton(hidden, weight, local, inv_temp: float) -> torch.Tensor:
    check_device(hidden, weight, local)
    hidden, weight = _contig_rows(hidden), _contig_rows(weight)
    n, k = local.shape
    h = hidden.shape[1]
    z = torch.empty(n, k, dtype=torch.float32, device=hidden.device)
    if n and k:
        _LOGITS[(n, triton.cdiv(k, BLOCK_K))](
            hidden, weight, local, z, float(inv_temp), hidden.stride(0), weight.stride(0),
            k, H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
    return z


def grad_hidden_triton(g, weight, local, out_dtype) -> torch.Tensor:
    weight = _contig_rows(weight)
    n, k = local.shape
    h = weight.shape[1]
    dh = torch.empty(n, h, dtype=out_dtype, device=g.device)
    if n:
        _GRAD_H[(n, triton.cdiv(h, BLOCK_H))](
            g, weight, local, dh, weight.stride(0), dh.stride(0), k,
            K_PAD=_k_pad(k), H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
    return dh


def sorted_pairs(local: torch.Tensor, v: int):
    """(ids sorted, padding last as key v; the pair index of each; segment starts [S + 2]; S).

    All on the device, no host sync: segment i is [starts[i], starts[i + 1]); S = min(v + 1, P)
    bounds the segment count (the padding key v is one of them), and starts[i] = P past the last.
    """
    flat = local.reshape(-1)
    p, dev = flat.numel(), local.device
    key = torch.where(flat >= 0, flat, torch.full_like(flat, v))
    key, perm = torch.sort(key, stable=True)  # stable: one pair order, every run
    new = torch.ones(p, dtype=torch.bool, device=dev)
    torch.ne(key[1:], key[:-1], out=new[1:])
    seg = torch.cumsum(new, 0, dtype=torch.int32)  # segment number (from 1) of each sorted pair
    del new
    n_seg = min(v + 1, p)
    starts = torch.searchsorted(seg, torch.arange(1, n_seg + 2, dtype=torch.int32, device=dev),
                                out_int32=True)
    return key, perm, starts, n_seg


def grad_weight_sorted_(dw32, g, hidden, local) -> None:
    """The deterministic dW: (token, candidate) pairs sorted by weight row (one radix sort), each
    id's segment found with a cumsum and a search, then one light segment-sum launch over an upper
    bound of the segment count and one heavy launch over the ids it listed as longer than
    LIGHT_MAX pairs. No host sync; each (id, H block) is summed by one program in sorted order."""
    n, k = local.shape
    p, v, h = n * k, dw32.shape[0], hidden.shape[1]
    key, perm, starts, n_seg = sorted_pairs(local, v)
    n_heavy = torch.zeros(1, dtype=torch.int32, device=local.device)
    heavy = torch.empty(p // (LIGHT_MAX + 1) + 1, dtype=torch.int32, device=local.device)
    # the interpreter's static trip count: the longest segment (a host sync, there only)
    longest = int((starts[1:] - starts[:-1]).max()) if interpreting() else 0
    common = (g, hidden, key, perm, starts, heavy, n_heavy, dw32, hidden.stride(0), k, v, p)
    _SEGMENT_SUM[(n_seg, triton.cdiv(h, SEG_BLOCK_H))](
        *common, n_seg, H=h, HEAVY=False, LIGHT_MAX=LIGHT_MAX,
        STATIC=triton.next_power_of_2(min(LIGHT_MAX, longest)) if longest else 0,
        BLOCK_J=BLOCK_J, BLOCK_H=SEG_BLOCK_H, num_warps=4)
    slots = heavy.numel() if longest else min(heavy.numel(), HEAVY_PROGRAMS)
    _SEGMENT_SUM[(slots, triton.cdiv(h, HEAVY_BLOCK_H))](
        *common, 0, H=h, HEAVY=True, LIGHT_MAX=LIGHT_MAX,
        STATIC=triton.next_power_of_2(longest) if longest else 0,
        BLOCK_J=HEAVY_BLOCK_J, BLOCK_H=HEAVY_BLOCK_H, num_warps=4)


def grad_weight_triton_(dw32, g, hidden, local, deterministic: bool, accumulate: bool) -> None:
    """dW (fp32 [V_local, H]) = (accumulate ? dW : 0) + the scatter-add of g[n, k] h_n."""
    hidden = _contig_rows(hidden)
    n, k = local.shape
    h = hidden.shape[1]
    if not accumulate:
        dw32.zero_()
    if not (n and k):
        return
    if not deterministic:
        _GRAD_W_ATOMIC[(n, triton.cdiv(h, BLOCK_H))](
            g, hidden, local, dw32, hidden.stride(0), k,
            K_PAD=_k_pad(k), H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
        return
    grad_weight_sorted_(dw32, g, hidden, local)
