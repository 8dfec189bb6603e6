"""Sample-support scoring without Triton: the chunked torch gather ops, and the dense path.

`gather`: the same three operations as packtool/kernels/support_kernels.py (logits of the candidates,
grad hidden, grad weight), chunked so the [C, K, H] gather of weight rows stays under
TORCH_CHUNK_BYTES. This is what CPU runs without Triton, and the bench's gather reference.

`dense`: when the candidates are a large share of the local vocabulary, one GEMM per chunk of
rows over the whole local vocabulary (the full-vocab fused head's [C, V] buffer, sized by
`chunking.default_chunk_rows`) then a gather of the candidates' columns beats fetching K weight
rows per token. Backward scatters g into a zeroed [C, V] block and runs the two gradient
GEMMs: 3 GEMMs in all, one fewer than the full-vocab fused log-prob, which recomputes the
logits. The logits are rounded to the weight's dtype, as in that head; the gather path is exact
to fp32 accumulation.

`union`: the dense path over the micro-batch's union of candidate ids instead of the whole
local vocabulary: the U distinct weight rows any row names are gathered into a [U, H] matrix
(`union_rows`), the same GEMMs run over it with each row's ids renumbered into the union,
and dW comes back as a [U, H] block added into the U rows (distinct ids: no collision, so
it is deterministic). Same arithmetic as `dense`, U / V of its GEMM work.

Every op takes the candidates as cands = (ids [N, K], start, v_local) (packtool/kernels/support_check.py)
and makes the local ids (or union columns, by the [v_local] slot table) per chunk of rows: no
[N, K] copy of the ids on these paths either, beyond a chunk's.
"""

from __future__ import annotations

import torch

from packtool.kernels.chunking import default_chunk_rows
from packtool.kernels.support_check import local_ids

TORCH_CHUNK_BYTES = 256 * 2**20


def _chunks(n: int, k: int, h: int, itemsize: int):
    rows = max(1, TORCH_CHUNK_BYTES // max(1, k * h * itemsize))
    for s in range(0, n, rows):
        yield slice(s, min(n, s + rows))


def _gather_rows(weight, ids):
    return weight[ids.clamp_min(0).long()]  # [C, K, H]; masked by the caller


def _cols(cands, sl: slice, slot=None) -> torch.Tensor:
    """int64 [C, K]: the weight row (slot None) or union column of rows sl's candidates, -1 where
    not this rank's."""
    ids, start, v_local = cands
    loc = local_ids(ids[sl], start, v_local).long()
    if slot is None:
        return loc
    return torch.where(loc >= 0, slot.long()[loc.clamp_min(0)], loc)


def logits_torch(hidden, weight, cands, inv_temp: float) -> torch.Tensor:
    n, k = cands[0].shape
    acc_dt = torch.float64 if weight.dtype == torch.float64 else torch.float32
    z = torch.empty(n, k, dtype=acc_dt, device=hidden.device)
    for sl in _chunks(n, k, hidden.shape[1], weight.element_size()):
        loc = _cols(cands, sl)
        h = hidden[sl].to(weight.dtype).to(acc_dt)
        w = _gather_rows(weight, loc).to(acc_dt)
        z[sl] = (torch.einsum("ckh,ch->ck", w, h) * inv_temp).masked_fill_(loc < 0, float("-inf"))
    return z


def grad_hidden_torch(g, weight, cands, out_dtype) -> torch.Tensor:
    n, k = cands[0].shape
    dh = torch.empty(n, weight.shape[1], dtype=out_dtype, device=g.device)
    for sl in _chunks(n, k, weight.shape[1], weight.element_size()):
        loc = _cols(cands, sl)
        w = _gather_rows(weight, loc).to(g.dtype)
        dh[sl] = torch.einsum("ck,ckh->ch", g[sl].masked_fill(loc < 0, 0.0), w).to(out_dtype)
    return dh


def grad_weight_torch_(dw32, g, hidden, cands, deterministic: bool, accumulate: bool) -> None:
    # index_add_ is ordered on CPU; on CUDA it uses atomics (the bench's reference only)
    if not accumulate:
        dw32.zero_()
    n, k = cands[0].shape
    for sl in _chunks(n, k, hidden.shape[1], 4):
        loc = _cols(cands, sl)
        gs = g[sl].masked_fill(loc < 0, 0.0).to(dw32.dtype)
        contrib = gs[:, :, None] * hidden[sl].to(dw32.dtype)[:, None, :]
        dw32.index_add_(0, loc.clamp_min(0).reshape(-1), contrib.reshape(-1, hidden.shape[1]))


# --- the dense path -----------------------------------------------------------------------------

def _acc_dtype(weight: torch.Tensor) -> torch.dtype:
    return torch.float64 if weight.dtype == torch.float64 else torch.float32


def _addmm_(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    if acc.dtype == a.dtype:
        acc.addmm_(a, b)
        return
    try:
        torch.addmm(acc, a, b, out_dtype=acc.dtype, out=acc)
    except (RuntimeError, TypeError, NotImplementedError):
        acc += (a @ b).to(acc.dtype)


def _dense_rows(hidden, weight, logits_dtype) -> int:
    itemsize = torch.finfo(logits_dtype).bits // 8
    return default_chunk_rows(hidden.shape[1], weight.shape[0], itemsize)


def logits_dense(hidden, weight, cands, inv_temp: float, slot=None) -> torch.Tensor:
    # logits in the weight's dtype, as the full-vocab fused head keeps them: an fp32 [C, V] GEMM
    # output moved twice the bytes and made this forward 6 % slower than that head's (H200)
    n, k = cands[0].shape
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = torch.empty(rows, weight.shape[0], dtype=weight.dtype, device=hidden.device)
    z = torch.empty(n, k, dtype=_acc_dtype(weight), device=hidden.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        x = buf[: e - s]
        torch.mm(hidden[s:e].to(weight.dtype), weight.t(), out=x)
        col = _cols(cands, slice(s, e), slot)
        z[s:e] = (x.gather(1, col.clamp_min(0)).to(z.dtype) * inv_temp).masked_fill_(col < 0, float("-inf"))
    return z


def grads_dense(g_of, hidden, weight, cands, grad_hidden, dw_acc, slot=None) -> None:
    """grad_hidden[N, H] = G W and dw_acc += G^T h, G the [C, V] scatter of g (zero elsewhere);
    g_of(s, e): the gradient over rows [s, e)'s candidates, made per chunk (no [N, K] gradient)."""
    n = cands[0].shape[0]
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = torch.empty(rows, weight.shape[0], dtype=weight.dtype, device=hidden.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        col = _cols(cands, slice(s, e), slot)
        g = g_of(s, e).masked_fill(col < 0, 0.0).to(weight.dtype)  # zeros added to column 0: no effect
        G = buf[: e - s].zero_()
        G.scatter_add_(1, col.clamp_min(0), g)
        del g, col
        if grad_hidden is not None:
            if grad_hidden.dtype == weight.dtype:
                torch.mm(G, weight, out=grad_hidden[s:e])
            else:
                grad_hidden[s:e] = (G @ weight).to(grad_hidden.dtype)
        if dw_acc is not None:
            _addmm_(dw_acc, G.t(), hidden[s:e].to(weight.dtype))


# --- the dense path over the union of candidates --------------------------------------------------

def union_rows(cands) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int64 [U], the sorted local weight rows named by any row; slot int32 [v_local], each
    named row's column in ids, -1 elsewhere). One host sync (U)."""
    v_local = cands[2]
    loc = _cols(cands, slice(None))
    ids = torch.unique(loc[loc >= 0])
    slot = torch.full((v_local,), -1, dtype=torch.int32, device=loc.device)
    slot[ids] = torch.arange(ids.numel(), dtype=torch.int32, device=loc.device)
    return ids, slot


def union_from_named(ids: torch.Tensor, named: torch.Tensor):
    """As union_rows, from the named weight rows' ids (nonzero of the 0/1 marks `named`
    [v_local]): no sort; the slots by a cumsum of the marks."""
    slot = torch.cumsum(named, 0, dtype=torch.int32) - 1
    return ids, torch.where(named > 0, slot, -1)


def logits_union(hidden, weight, union, cands, inv_temp: float) -> torch.Tensor:
    ids, slot = union
    if ids.numel() == 0:  # no row names a candidate of this rank
        acc = _acc_dtype(weight)
        return torch.full(cands[0].shape, float("-inf"), dtype=acc, device=hidden.device)
    return logits_dense(hidden, weight.index_select(0, ids), cands, inv_temp, slot)


def grads_union(g_of, hidden, weight, union, cands, grad_hidden, dw_acc) -> None:
    ids, slot = union
    if ids.numel() == 0:
        if grad_hidden is not None:
            grad_hidden.zero_()
        return
    dwu = None if dw_acc is None else torch.zeros(ids.numel(), weight.shape[1], dtype=dw_acc.dtype,
                                                  device=dw_acc.device)
    grads_dense(g_of, hidden, weight.index_select(0, ids), cands, grad_hidden, dwu, slot)
    if dw_acc is not None:
        dw_acc.index_add_(0, ids, dwu)  # distinct ids: every row gets one addition, in any order
