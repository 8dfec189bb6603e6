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
piece of at most PIECE_PAIRS pairs and H block, pieces then summed in order: bitwise
reproducible run to run). No autotuning: a fixed launch keeps `sorted` reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import check_device, interpreting

BLOCK_K = 16  # candidates per tile (tl.sum needs no 16-minimum, but 16 fills a warp's rows)
BLOCK_H = 128
# sorted dW: pairs summed per loop step, and the H block of one program. Most ids have a few
# pairs: a narrow, wide tile keeps the programs few (32 x 128 tiles were 2.6x the atomic dW's
# time at K = 64 on the H200, mostly masked lanes of one-iteration programs)
BLOCK_J = 8
SEG_BLOCK_H = 512
PIECE_PAIRS = 256  # sorted dW: most pairs one program sums serially (a hot id's are split)
PARTIAL_BYTES = 256 * 2**20  # sorted dW: the partial rows of split ids stay under this


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


def _segment_sum_kernel(g_ptr, src_ptr, pair_ptr, start_ptr, stop_ptr, dst_row_ptr, dst_ptr,
                        stride_src, K, H: tl.constexpr, DIRECT: tl.constexpr, MAX_SEG: tl.constexpr,
                        BLOCK_J: tl.constexpr, BLOCK_H: tl.constexpr):
    """dst[dst_row[i]] += sum over j in [start[i], stop[i]) of coef_j * src[row_j], in order of j.

    DIRECT: row_j = j, coef 1 (summing partial rows); else pair_j = pair[j], coef = g[pair_j] and
    row_j = pair_j // K (the token of that (token, candidate) pair). Each item's sum runs in a
    fixed order with a fixed launch: the result is the same bits every run.
    """
    item = tl.program_id(0)
    ho = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = ho < H
    start = tl.load(start_ptr + item)
    stop = tl.load(stop_ptr + item)
    acc = tl.zeros([BLOCK_J, BLOCK_H], dtype=tl.float32)
    # MAX_SEG > 0 (interpreter): a static trip count, since the interpreter's range() cannot take
    # loaded scalars; on a GPU the loop runs over this item's own length
    if MAX_SEG > 0:
        for j0 in range(0, MAX_SEG, BLOCK_J):
            js = start + j0 + tl.arange(0, BLOCK_J)
            jm = js < stop
            if DIRECT:
                coef = tl.where(jm, 1.0, 0.0)
                row = js.to(tl.int64)
            else:
                pair = tl.load(pair_ptr + js, mask=jm, other=0)
                coef = tl.load(g_ptr + pair, mask=jm, other=0.0)
                row = (pair // K).to(tl.int64)
            x = tl.load(src_ptr + row[:, None] * stride_src + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += coef[:, None] * x.to(tl.float32)
    else:
        for j0 in range(start, stop, BLOCK_J):
            js = j0 + tl.arange(0, BLOCK_J)
            jm = js < stop
            if DIRECT:
                coef = tl.where(jm, 1.0, 0.0)
                row = js.to(tl.int64)
            else:
                pair = tl.load(pair_ptr + js, mask=jm, other=0)
                coef = tl.load(g_ptr + pair, mask=jm, other=0.0)
                row = (pair // K).to(tl.int64)
            x = tl.load(src_ptr + row[:, None] * stride_src + ho[None, :],
                        mask=jm[:, None] & hm[None, :], other=0.0)
            acc += coef[:, None] * x.to(tl.float32)
    dst = dst_ptr + tl.load(dst_row_ptr + item).to(tl.int64) * H + ho
    tl.store(dst, tl.sum(acc, axis=0) + tl.load(dst, mask=hm, other=0.0), mask=hm)


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


def sorted_pairs(local: torch.Tensor):
    """(pair index sorted by weight row, segment offsets, the row of each segment, counts), or None."""
    flat = local.reshape(-1)
    pairs = torch.nonzero(flat >= 0).squeeze(1)
    if pairs.numel() == 0:
        return None
    ids, order = torch.sort(flat[pairs], stable=True)
    uid, counts = torch.unique_consecutive(ids, return_counts=True)
    seg = torch.zeros(uid.numel() + 1, dtype=torch.int64, device=local.device)
    torch.cumsum(counts, 0, out=seg[1:])
    return pairs[order], seg, uid, counts


def _piece_len(n_pairs: int, h: int) -> int:
    # partial rows <= 2 * pairs / piece: keep them under PARTIAL_BYTES
    need = -(-8 * n_pairs * h // PARTIAL_BYTES)
    return max(PIECE_PAIRS, triton.next_power_of_2(max(1, need)))


def _segment_sum(g, src, pairs, start, stop, dst_rows, dst, k, direct, max_seg):
    h = dst.shape[1]
    if start.numel():
        _SEGMENT_SUM[(start.numel(), triton.cdiv(h, SEG_BLOCK_H))](
            g, src, pairs, start, stop, dst_rows, dst, src.stride(0), k, H=h, DIRECT=direct,
            MAX_SEG=max(BLOCK_J, triton.next_power_of_2(max_seg)) if interpreting() else 0,
            BLOCK_J=BLOCK_J, BLOCK_H=SEG_BLOCK_H, num_warps=4)


def grad_weight_sorted_(dw32, g, hidden, local) -> None:
    """The deterministic dW: pairs sorted by weight row; an id's pairs are summed in pieces of at
    most `_piece_len` pairs (a hot id would otherwise be one long serial loop), the pieces of an
    id that has several are written to partial rows and summed in order by a second launch."""
    sp = sorted_pairs(local)
    if sp is None:
        return
    pairs, seg, uid, counts = sp
    k = local.shape[1]
    piece = _piece_len(int(pairs.numel()), hidden.shape[1])
    n_pieces = (counts + piece - 1) // piece
    first = torch.cumsum(n_pieces, 0) - n_pieces
    multi_id = n_pieces > 1
    slot_first = torch.cumsum(torch.where(multi_id, n_pieces, 0), 0) - torch.where(multi_id, n_pieces, 0)
    total, n_slots, most, longest = torch.stack([
        n_pieces.sum(), torch.where(multi_id, n_pieces, 0).sum(), n_pieces.max(), counts.max()]).tolist()
    owner = torch.repeat_interleave(torch.arange(uid.numel(), device=local.device), n_pieces,
                                    output_size=total)
    start = seg[owner] + (torch.arange(total, device=local.device) - first[owner]) * piece
    stop = torch.minimum(start + piece, seg[owner + 1])
    multi = multi_id[owner]
    one = ~multi
    piece_max = min(piece, longest)  # the interpreter's static trip count
    _segment_sum(g, hidden, pairs, start[one], stop[one], uid[owner[one]], dw32, k, False, piece_max)
    if n_slots:
        partial = torch.zeros(n_slots, hidden.shape[1], dtype=torch.float32, device=local.device)
        slots = torch.arange(n_slots, device=local.device)
        _segment_sum(g, hidden, pairs, start[multi], stop[multi], slots, partial, k, False, piece_max)
        mid = torch.nonzero(multi_id).squeeze(1)
        s0 = slot_first[mid]
        _segment_sum(g, partial, pairs, s0, s0 + n_pieces[mid], uid[mid], dw32, k, True, most)


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
