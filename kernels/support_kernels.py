"""The gather-GEMV kernels of sample-support scoring (Triton); kernels/support_torch.py holds the
same three operations in torch.

Per token n with candidate weight rows c = local[n, k] (-1: padding or another rank's id):
    logits       z[n, k]  = <h_n, W_c> * inv_temp                  (fp32, -inf where c = -1)
    grad hidden  dh[n]    = sum_k g[n, k] W_c                         one program per token block
    grad weight  dW[c]   += sum_{(n, k): local = c} g[n, k] h_n       scatter-add into fp32
Nothing of size [N, V] or [N, K, H] is formed: each program streams W's rows through registers.
The hidden row is cast to the weight's dtype first, as the output layer's matmul would, and every
product is accumulated in fp32. dW has two modes: `atomic` (fp32 atomics, order not fixed) and
`sorted` (pairs sorted by id, one program per id and H block sums its pairs in a fixed order:
bitwise reproducible run to run). No autotuning: a fixed launch keeps `sorted` reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import check_device, interpreting

BLOCK_K = 16  # candidates per tile (tl.sum needs no 16-minimum, but 16 fills a warp's rows)
BLOCK_H = 128
BLOCK_J = 32  # sorted dW: pairs summed per loop step


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


def _grad_weight_sorted_kernel(g_ptr, h_ptr, pair_ptr, seg_ptr, uid_ptr, dw_ptr, stride_h, K,
                               H: tl.constexpr, ACC: tl.constexpr,
                               MAX_SEG: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_H: tl.constexpr):
    seg = tl.program_id(0)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    start = tl.load(seg_ptr + seg)
    stop = tl.load(seg_ptr + seg + 1)
    acc = tl.zeros([BLOCK_J, BLOCK_H], dtype=tl.float32)
    # MAX_SEG > 0 (interpreter): a static trip count, since the interpreter's range() cannot take
    # loaded scalars; on a GPU the loop runs over this segment's own length
    if MAX_SEG > 0:
        for j0 in range(0, MAX_SEG, BLOCK_J):
            js = start + j0 + tl.arange(0, BLOCK_J)
            jm = js < stop
            pair = tl.load(pair_ptr + js, mask=jm, other=0)
            g = tl.load(g_ptr + pair, mask=jm, other=0.0)
            row = (pair // K).to(tl.int64)
            h = tl.load(h_ptr + row[:, None] * stride_h + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += g[:, None] * h.to(tl.float32)
    else:
        for j0 in range(start, stop, BLOCK_J):
            js = j0 + tl.arange(0, BLOCK_J)
            jm = js < stop
            pair = tl.load(pair_ptr + js, mask=jm, other=0)
            g = tl.load(g_ptr + pair, mask=jm, other=0.0)
            row = (pair // K).to(tl.int64)
            h = tl.load(h_ptr + row[:, None] * stride_h + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += g[:, None] * h.to(tl.float32)
    dw = tl.sum(acc, axis=0)
    dst = dw_ptr + tl.load(uid_ptr + seg).to(tl.int64) * H + ho
    if ACC:
        dw += tl.load(dst, mask=hm, other=0.0)
    tl.store(dst, dw, mask=hm)


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
_GRAD_W_SORTED = _Lazy(_grad_weight_sorted_kernel)


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


def sorted_pairs(local: torch.Tensor):
    """(pair index sorted by weight row, segment offsets, the row of each segment), or None."""
    flat = local.reshape(-1)
    pairs = torch.nonzero(flat >= 0).squeeze(1)
    if pairs.numel() == 0:
        return None
    ids, order = torch.sort(flat[pairs], stable=True)
    uid, counts = torch.unique_consecutive(ids, return_counts=True)
    seg = torch.zeros(uid.numel() + 1, dtype=torch.int64, device=local.device)
    torch.cumsum(counts, 0, out=seg[1:])
    return pairs[order], seg, uid, counts


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
    sp = sorted_pairs(local)
    if sp is None:
        return
    pairs, seg, uid, counts = sp
    max_seg = max(BLOCK_J, triton.next_power_of_2(int(counts.max()))) if interpreting() else 0
    _GRAD_W_SORTED[(uid.numel(), triton.cdiv(h, BLOCK_H))](
        g, hidden, pairs, seg, uid, dw32, hidden.stride(0), k,
        H=h, ACC=True, MAX_SEG=max_seg, BLOCK_J=BLOCK_J, BLOCK_H=BLOCK_H, num_warps=4)
