"""Sample-support scoring without Triton: the chunked torch gather ops, and the dense path.

`gather`: the same three operations as kernels/support_kernels.py (logits of the candidates,
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
"""

from __future__ import annotations

import torch

from kernels.chunking import default_chunk_rows

TORCH_CHUNK_BYTES = 256 * 2**20


def _chunks(n: int, k: int, h: int, itemsize: int):
    rows = max(1, TORCH_CHUNK_BYTES // max(1, k * h * itemsize))
    for s in range(0, n, rows):
        yield slice(s, min(n, s + rows))


def _gather_rows(weight, ids):
    return weight[ids.clamp_min(0).long()]  # [C, K, H]; masked by the caller


def logits_torch(hidden, weight, local, inv_temp: float) -> torch.Tensor:
    n, k = local.shape
    acc_dt = torch.float64 if weight.dtype == torch.float64 else torch.float32
    z = torch.empty(n, k, dtype=acc_dt, device=hidden.device)
    for sl in _chunks(n, k, hidden.shape[1], weight.element_size()):
        h = hidden[sl].to(weight.dtype).to(acc_dt)
        w = _gather_rows(weight, local[sl]).to(acc_dt)
        z[sl] = torch.einsum("ckh,ch->ck", w, h) * inv_temp
    return z.masked_fill_(local < 0, float("-inf"))


def grad_hidden_torch(g, weight, local, out_dtype) -> torch.Tensor:
    n, k = local.shape
    dh = torch.empty(n, weight.shape[1], dtype=out_dtype, device=g.device)
    g = g.masked_fill(local < 0, 0.0)
    for sl in _chunks(n, k, weight.shape[1], weight.element_size()):
        w = _gather_rows(weight, local[sl]).to(g.dtype)
        dh[sl] = torch.einsum("ck,ckh->ch", g[sl], w).to(out_dtype)
    return dh


def grad_weight_torch_(dw32, g, hidden, local, deterministic: bool, accumulate: bool) -> None:
    # index_add_ is ordered on CPU; on CUDA it uses atomics (the bench's reference only)
    if not accumulate:
        dw32.zero_()
    n, k = local.shape
    own = local >= 0
    g = g.masked_fill(~own, 0.0).to(dw32.dtype)
    for sl in _chunks(n, k, hidden.shape[1], 4):
        contrib = g[sl][:, :, None] * hidden[sl].to(dw32.dtype)[:, None, :]
        ids = local[sl].clamp_min(0).long().reshape(-1)
        dw32.index_add_(0, ids, contrib.reshape(-1, hidden.shape[1]))


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


def logits_dense(hidden, weight, local, inv_temp: float) -> torch.Tensor:
    # logits in the weight's dtype, as the full-vocab fused head keeps them: an fp32 [C, V] GEMM
    # output moved twice the bytes and made this forward 6 % slower than that head's (H200)
    n, k = local.shape
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = torch.empty(rows, weight.shape[0], dtype=weight.dtype, device=hidden.device)
    idx = local.clamp_min(0).long()
    z = torch.empty(n, k, dtype=_acc_dtype(weight), device=hidden.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        x = buf[: e - s]
        torch.mm(hidden[s:e].to(weight.dtype), weight.t(), out=x)
        z[s:e] = x.gather(1, idx[s:e]).to(z.dtype) * inv_temp
    return z.masked_fill_(local < 0, float("-inf"))


def grads_dense(g_of, hidden, weight, local, grad_hidden, dw_acc) -> None:
    """grad_hidden[N, H] = G W and dw_acc += G^T h, G the [C, V] scatter of g (zero elsewhere);
    g_of(s, e): the gradient over rows [s, e)'s candidates, made per chunk (no [N, K] gradient)."""
    n = local.shape[0]
    rows = min(max(1, n), _dense_rows(hidden, weight, weight.dtype))
    buf = torch.empty(rows, weight.shape[0], dtype=weight.dtype, device=hidden.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        loc = local[s:e]
        g = g_of(s, e).masked_fill(loc < 0, 0.0).to(weight.dtype)  # zeros added to column 0: no effect
        G = buf[: e - s].zero_()
        G.scatter_add_(1, loc.clamp_min(0).long(), g)
        del g
        if grad_hidden is not None:
            if grad_hidden.dtype == weight.dtype:
                torch.mm(G, weight, out=grad_hidden[s:e])
            else:
                grad_hidden[s:e] = (G @ weight).to(grad_hidden.dtype)
        if dw_acc is not None:
            _addmm_(dw_acc, G.t(), hidden[s:e].to(weight.dtype))


# --- the dense path over the union of candidates --------------------------------------------------

def union_rows(local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int64 [U], sorted local weight rows named by any row; `local` renumbered into ids,
    -1 kept). One host sync (U)."""
    own = local >= 0
    ids, inv = torch.unique(local[own].long(), return_inverse=True)
    remap = torch.full_like(local, -1)
    remap[own] = inv.to(local.dtype)
    return ids, remap


def union_from_named(ids: torch.Tensor, named: torch.Tensor, local: torch.Tensor):
    """As union_rows, from the named weight rows' ids (nonzero of the 0/1 marks `named`
    [V_local]): no sort; each row's ids renumbered by a cumsum of the marks."""
    slot = (torch.cumsum(named, 0, dtype=torch.int32) - 1).to(local.dtype)
    remap = torch.where(local >= 0, slot[local.clamp_min(0)], local)
    return ids, remap


def logits_union(hidden, weight, union, inv_temp: float) -> torch.Tensor:
    ids, remap = union
    if ids.numel() == 0:  # no row names a candidate of this rank
        acc = _acc_dtype(weight)
        return torch.full(remap.shape, float("-inf"), dtype=acc, device=hidden.device)
    return logits_dense(hidden, weight.index_select(0, ids), remap, inv_temp)


def grads_union(g_of, hidden, weight, union, grad_hidden, dw_acc) -> None:
    ids, remap = union
    if ids.numel() == 0:
        if grad_hidden is not None:
            grad_hidden.zero_()
        return
    dwu = None if dw_acc is None else torch.zeros(ids.numel(), weight.shape[1], dtype=dw_acc.dtype,
                                                  device=dw_acc.device)
    grads_dense(g_of, hidden, weight.index_select(0, ids), remap, grad_hidden, dwu)
    if dw_acc is not None:
        dw_acc.index_add_(0, ids, dwu)  # distinct ids: every row gets one addition, in any order
