"""The gather-GEMV kernels of sample-support scoring (Triton); packtool/kernels/support_torch.py holds the
same three operations in torch.

Per token n with candidate weight rows c = ids[n, k] - start (the support rows as the caller gave
them, int32 or int64; c outside [0, V_local), or a -1 id: padding or another rank's id, and no
[N, K] local copy is made):
    logits       z[n, k]  = <h_n, W_c> * inv_temp                  (fp32, -inf where c = -1)
    grad hidden  dh[n]    = sum_k g[n, k] W_c                         one program per token block
    grad weight  dW[c]   += sum_{(n, k): local = c} g[n, k] h_n       scatter-add into fp32
GRAD_DOC: g[n, k] = (a_n 1[k = pos_n] - p (a_n + b_n (log p + H_n))) / T, p = exp(z - lse_n), is
recomputed inside each gradient kernel from the saved z and the per-row (lse, H, a, b): no [N, K]
gradient tensor is ever written (a = d loss / d logp, b = d loss / d entropy).
Nothing of size [N, V] or [N, K, H] is formed: each program streams W's rows through registers.
The hidden row is cast to the weight's dtype first, as the output layer's matmul would, and every
product is accumulated in fp32. dW has two modes: `atomic` (fp32 atomics, order not fixed) and
`sorted` (packtool/kernels/support_det.py: pairs sorted by id, each id's pairs summed in a fixed order
by one program, no host sync: bitwise reproducible run to run). No autotuning: a fixed launch
keeps `sorted` reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from packtool.kernels._triton import LazyJit, check_device
from packtool.kernels.support_det import grad_weight_sorted_
from packtool.kernels.support_torch import _dense_rows

BLOCK_K = 16  # candidates per tile (tl.sum needs no 16-minimum, but 16 fills a warp's rows)
BLOCK_H = 128


def _logits_kernel(h_ptr, w_ptr, ids_ptr, z_ptr, inv_temp, stride_h, stride_w, K, start, v_local,
                   H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = ks < K
    ids = tl.load(ids_ptr + row * K + ks, mask=kmask, other=-1)
    loc = ids - start  # this rank's weight row (inlined in every kernel: see packtool/kernels/_triton.py)
    own = (ids >= 0) & (loc >= 0) & (loc < v_local)
    w_rows = w_ptr + tl.where(own, loc, 0).to(tl.int64)[:, None] * stride_w
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


def _grad_hidden_kernel(z_ptr, rs_ptr, pos_ptr, w_ptr, ids_ptr, dh_ptr, inv_temp, stride_w, stride_dh, K,
                        start, v_local, K_PAD: tl.constexpr, H: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    lse, ent = tl.load(rs_ptr + row * 4), tl.load(rs_ptr + row * 4 + 1)
    a, b = tl.load(rs_ptr + row * 4 + 2), tl.load(rs_ptr + row * 4 + 3)
    pos = tl.load(pos_ptr + row)
    acc = tl.zeros([BLOCK_K, BLOCK_H], dtype=tl.float32)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < K
        ids = tl.load(ids_ptr + row * K + ks, mask=kmask, other=-1)
        loc = ids - start
        own = (ids >= 0) & (loc >= 0) & (loc < v_local)
        # g recomputed from the saved logits (GRAD_DOC): no [N, K] gradient is kept
        lp = tl.where(own, tl.load(z_ptr + row * K + ks, mask=own, other=0.0) - lse, 0.0)
        p = tl.where(own, tl.exp(lp), 0.0)
        g = (tl.where(own & (ks == pos), a, 0.0) - p * (a + b * (lp + ent))) * inv_temp
        w_rows = w_ptr + tl.where(own, loc, 0).to(tl.int64)[:, None] * stride_w
        w = tl.load(w_rows + ho[None, :], mask=own[:, None] & hm[None, :], other=0.0)
        acc += g[:, None] * w.to(tl.float32)
    dh = tl.sum(acc, axis=0)
    tl.store(dh_ptr + row * stride_dh + ho, dh.to(dh_ptr.dtype.element_ty), mask=hm)


def _grad_weight_atomic_kernel(z_ptr, rs_ptr, pos_ptr, h_ptr, ids_ptr, dw_ptr, inv_temp, stride_h, K,
                               start, v_local, K_PAD: tl.constexpr, H: tl.constexpr, BLOCK_K: tl.constexpr,
                               BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    h = tl.load(h_ptr + row * stride_h + ho, mask=hm, other=0.0)
    h = h.to(dw_ptr.dtype.element_ty)
    lse, ent = tl.load(rs_ptr + row * 4), tl.load(rs_ptr + row * 4 + 1)
    a, b = tl.load(rs_ptr + row * 4 + 2), tl.load(rs_ptr + row * 4 + 3)
    pos = tl.load(pos_ptr + row)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        ids = tl.load(ids_ptr + row * K + ks, mask=ks < K, other=-1)
        loc = ids - start
        own = (ids >= 0) & (loc >= 0) & (loc < v_local)
        lp = tl.where(own, tl.load(z_ptr + row * K + ks, mask=own, other=0.0) - lse, 0.0)
        p = tl.where(own, tl.exp(lp), 0.0)
        g = (tl.where(own & (ks == pos), a, 0.0) - p * (a + b * (lp + ent))) * inv_temp
        dst = dw_ptr + tl.where(own, loc, 0).to(tl.int64)[:, None] * H + ho[None, :]
        tl.atomic_add(dst, g[:, None] * h[None, :], mask=own[:, None] & hm[None, :])


_LOGITS = LazyJit(_logits_kernel)
_GRAD_H = LazyJit(_grad_hidden_kernel)
_GRAD_W_ATOMIC = LazyJit(_grad_weight_atomic_kernel)


def _k_pad(k: int) -> int:
    # the candidate loop's trip count is a constexpr (the interpreter's range() wants Python ints);
    # a power of two keeps the compiled variants few across K, masked steps load nothing
    return max(BLOCK_K, triton.next_power_of_2(k))


def _contig_rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def logits_triton(hidden, weight, cands, inv_temp: float) -> torch.Tensor:
    """z [N, K] fp32 of cands = (ids [N, K], start, v_local): the support rows and this rank's
    first id and row count (-inf where a candidate is not this rank's)."""
    ids, start, v_local = cands
    check_device(hidden, weight, ids)
    hidden, weight = _contig_rows(hidden), _contig_rows(weight)
    n, k = ids.shape
    h = hidden.shape[1]
    z = torch.empty(n, k, dtype=torch.float32, device=hidden.device)
    if n and k:
        _LOGITS[(n, triton.cdiv(k, BLOCK_K))](
            hidden, weight, ids, z, float(inv_temp), hidden.stride(0), weight.stride(0),
            k, start, v_local, H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
    return z


def grad_hidden_triton(gs, weight, cands, out_dtype) -> torch.Tensor:
    """dh [N, H] from gs = (z, rs, pos, inv_temp) (see `grad_stats`): g is recomputed per tile."""
    ids, start, v_local = cands
    weight = _contig_rows(weight)
    n, k = ids.shape
    h = weight.shape[1]
    z, rs, pos, inv_temp = gs
    dh = torch.empty(n, h, dtype=out_dtype, device=z.device)
    if n:
        _GRAD_H[(n, triton.cdiv(h, BLOCK_H))](
            z, rs, pos, weight, ids, dh, float(inv_temp), weight.stride(0), dh.stride(0), k,
            start, v_local, K_PAD=_k_pad(k), H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
    return dh


def grad_weight_triton_(dw32, gs, hidden, cands, deterministic: bool, accumulate: bool) -> None:
    """dW (fp32 [V_local, H]) = (accumulate ? dW : 0) + the scatter-add of g[n, k] h_n, g
    recomputed from gs = (z, rs, pos, inv_temp) (see `grad_stats`)."""
    ids, start, v_local = cands
    hidden = _contig_rows(hidden)
    n, k = ids.shape
    h = hidden.shape[1]
    if not accumulate:
        dw32.zero_()
    if not (n and k):
        return
    z, rs, pos, inv_temp = gs
    if not deterministic:
        _GRAD_W_ATOMIC[(n, triton.cdiv(h, BLOCK_H))](
            z, rs, pos, hidden, ids, dw32, float(inv_temp), hidden.stride(0), k, start, v_local,
            K_PAD=_k_pad(k), H=h, BLOCK_K=BLOCK_K, BLOCK_H=BLOCK_H, num_warps=4)
        return
    grad_weight_sorted_(dw32, gs, hidden, cands)


def grad_stats(z, lse, ent, a, b, pos, inv_temp: float):
    """What the gradient kernels recompute g from, per row: (z [N, K] fp32, rs [N, 4] fp32 =
    (lse, entropy, a, b), pos [N], inv_temp); a, b zero on rows without support."""
    rs = torch.stack([lse, ent, a, b if b is not None else torch.zeros_like(a)], 1)
    return z, rs.to(torch.float32).contiguous(), pos.contiguous(), float(inv_temp)


# --- the GEMM paths' row statistics, read from the chunk's logits buffer -------------------------

def _buffer_stats_kernel(x_ptr, ids_ptr, slot_ptr, pos_ptr, z_ptr, st_ptr, inv_temp,
                         stride_x, K, start, v_local, row0, N, K_PAD: tl.constexpr, BLOCK_K: tl.constexpr,
                         WRITE_Z: tl.constexpr, SLOT: tl.constexpr):
    """One row of a chunk: its candidates' logits gathered from the [C, V] buffer, their max,
    sum-exp and entropy numerator (online, rescaled as the max grows) and the sampled logit, in
    one pass; the [N, K] logits are written only when backward will need them. A candidate's
    column is its local row id - start, or, SLOT (the union path), slot[id - start]. Repeated
    ids are refused by the checks (packtool/kernels/support_rows.py) before the call returns (a speculated
    forward runs this before their verdict is read: a bad row's values are never returned)."""
    r = tl.program_id(0).to(tl.int64)
    row = row0 + r
    pos = tl.load(pos_ptr + row)
    m = tl.full([], -float("inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    u = tl.zeros([], tl.float32)
    zt = tl.zeros([], tl.float32)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        km = ks < K
        ids = tl.load(ids_ptr + row * K + ks, mask=km, other=-1)
        loc = ids - start
        own = (ids >= 0) & (loc >= 0) & (loc < v_local)
        col = tl.where(own, loc, 0)
        if SLOT:
            col = tl.load(slot_ptr + col, mask=own, other=0)
        x = tl.load(x_ptr + r * stride_x + col, mask=own, other=0.0)
        x = tl.where(own, x.to(tl.float32) * inv_temp, -float("inf"))
        zt += tl.sum(tl.where(own & (ks == pos), x, 0.0), axis=0)
        if WRITE_Z:
            tl.store(z_ptr + row * K + ks, x, mask=km)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        base = tl.where(m_new > -float("inf"), m_new, 0.0)
        had = m > -float("inf")  # s = u = 0 until a candidate is seen: no 0 * inf
        mc = tl.where(had, m, base)
        alpha = tl.where(had, tl.exp(mc - base), 0.0)
        u = alpha * (u + (mc - base) * s)
        s = alpha * s
        d = tl.where(own, x - base, 0.0)
        e = tl.where(own, tl.exp(d), 0.0)
        s += tl.sum(e, axis=0)
        u += tl.sum(e * d, axis=0)
        m = m_new
    tl.store(st_ptr + row, m)
    tl.store(st_ptr + N + row, s)
    tl.store(st_ptr + 2 * N + row, u)
    tl.store(st_ptr + 3 * N + row, zt)


def _mark_kernel(ids_ptr, named_ptr, P, start, v_local, BLOCK: tl.constexpr):
    """named[id - start] = 1 for every owned candidate id (the same value from every writer: no race)."""
    js = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + js, mask=js < P, other=-1)
    loc = ids - start
    own = (ids >= 0) & (loc >= 0) & (loc < v_local)
    tl.store(named_ptr + tl.where(own, loc, 0), 1, mask=own)


_BUFFER_STATS = LazyJit(_buffer_stats_kernel)
_MARK = LazyJit(_mark_kernel)
STATS_BLOCK_K = 256
ONE_BLOCK_K = 8192


def buffer_stats(x, cands, pos, inv_temp: float, row0: int, z, st, slot=None) -> None:
    """Rows [row0, row0 + C) of st [4, N] (max, sum-exp, entropy numerator, sampled logit) from
    the chunk's logits x [C, V] (and of z [N, K] when z is given). cands = (ids [N, K], start,
    v_local); slot [v_local] int32: the union path's column of each weight row."""
    ids, start, v_local = cands
    c, k = x.shape[0], ids.shape[1]
    if c == 0:
        return
    k_pad = max(16, triton.next_power_of_2(k))
    # wide rows in one block (to ONE_BLOCK_K): the ids stay in registers. H200, forward of auto
    # (BENCHMARKS.md, raw d1_main.json "ab", with the repeated-id marks this kernel then wrote):
    # K 4096 (H 2048, V 151,936) 18.20 vs 18.78 ms with 256-wide blocks; K 2048 and 256 within
    # the spread; K 512 2.59 vs 2.51 ms: narrow rows keep 256-wide blocks
    block = k_pad if 1024 < k_pad <= ONE_BLOCK_K else min(STATS_BLOCK_K, k_pad)
    _BUFFER_STATS[(c,)](
        x, ids, slot if slot is not None else pos, pos, z if z is not None else st, st,
        float(inv_temp), x.stride(0), k, start, v_local, row0, st.shape[1], K_PAD=k_pad,
        BLOCK_K=block, WRITE_Z=z is not None, SLOT=slot is not None,
        num_warps=min(16, max(4, block // 256)))


def named_rows(cands) -> torch.Tensor:
    """int8 [v_local]: 1 where some row of cands = (ids, start, v_local) names that weight row
    (no sort, no host sync)."""
    ids, start, v_local = cands
    named = torch.zeros(v_local, dtype=torch.int8, device=ids.device)
    p = ids.numel()
    if p:
        _MARK[(triton.cdiv(p, 1024),)](ids, named, p, start, v_local, BLOCK=1024, num_warps=4)
    return named


def dense_first_chunk(hidden, weight) -> torch.Tensor:
    """The [C, V] buffer of the GEMM paths with the first chunk's GEMM launched (it reads no
    support row: a speculated forward queues it before the checks, whose launches then overlap it)."""
    n = hidden.shape[0]
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = torch.empty(rows, weight.shape[0], dtype=weight.dtype, device=hidden.device)
    torch.mm(hidden[: min(n, rows)].to(weight.dtype), weight.t(), out=buf[: min(n, rows)])
    return buf


def dense_logits_stats(hidden, weight, cands, pos, inv_temp: float, need_z: bool, slot=None, first=None):
    """The GEMM paths' forward: per chunk of rows, one GEMM into the [C, V] buffer (the full-vocab
    head's, sized alike), then `buffer_stats` reads each row's candidates from it. Returns (z
    [N, K] fp32 or None, (max, sum-exp, entropy numerator, sampled logit)); without need_z
    (forward only) nothing of size [N, K] is written. slot: the union path (weight holds the union's rows; see buffer_stats).
    first: `dense_first_chunk`'s buffer, the first chunk's GEMM already in it."""
    n, k = cands[0].shape
    st = torch.empty(4, n, dtype=torch.float32, device=hidden.device)
    z = torch.empty(n, k, dtype=torch.float32, device=hidden.device) if need_z else None
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = first if first is not None else torch.empty(rows, weight.shape[0], dtype=weight.dtype,
                                                      device=hidden.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        x = buf[: e - s]
        if not (s == 0 and first is not None):
            torch.mm(hidden[s:e].to(weight.dtype), weight.t(), out=x)
        buffer_stats(x, cands, pos, inv_temp, s, z, st, slot)
    return z, tuple(st)


# --- the gradient over the candidates ----------------------------------------------------------

def _grad_logits_kernel(z_ptr, ids_ptr, lse_ptr, ent_ptr, a_ptr, b_ptr, pos_ptr, g_ptr, inv_temp, K,
                        start, v_local, K_PAD: tl.constexpr, BLOCK_K: tl.constexpr, HAS_B: tl.constexpr):
    """g = (a (1[k = pos] - p) - b p (log p + H)) / T over one row's own candidates, in one pass
    (the torch expression makes five [N, K] temporaries)."""
    row = tl.program_id(0).to(tl.int64)
    lse = tl.load(lse_ptr + row)
    a = tl.load(a_ptr + row)
    pos = tl.load(pos_ptr + row)
    for k0 in range(0, K_PAD, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        km = ks < K
        ids = tl.load(ids_ptr + row * K + ks, mask=km, other=-1)
        loc = ids - start
        own = (ids >= 0) & (loc >= 0) & (loc < v_local)
        lp = tl.where(own, tl.load(z_ptr + row * K + ks, mask=own, other=0.0) - lse, 0.0)
        p = tl.where(own, tl.exp(lp), 0.0)
        g = tl.where(own & (ks == pos), a, 0.0) - a * p
        if HAS_B:
            g -= tl.load(b_ptr + row) * p * (lp + tl.load(ent_ptr + row))
        tl.store(g_ptr + row * K + ks, g * inv_temp, mask=km)


_GRAD_LOGITS = LazyJit(_grad_logits_kernel)


def grad_logits_triton(z, cands, lse, ent, a, b, pos, inv_temp: float) -> torch.Tensor:
    """g [N, K] fp32 over cands = (ids [N, K], start, v_local); a, b [N] zero on rows without
    support (b None: no entropy gradient)."""
    ids, start, v_local = cands
    n, k = z.shape
    g = torch.empty_like(z)
    if n and k:
        k_pad = max(16, triton.next_power_of_2(k))
        _GRAD_LOGITS[(n,)](z, ids, lse, ent, a, b if b is not None else a, pos, g, float(inv_temp),
                           k, start, v_local, K_PAD=k_pad, BLOCK_K=min(1024, k_pad), HAS_B=b is not None, num_warps=4)
    return g
