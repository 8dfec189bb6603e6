"""Which path a sample-support call runs (packtool/kernels/support_logprob.py): the Triton gather,
the chunked torch gather, or the GEMM paths over the local vocabulary ("dense") or over the union
of the micro-batch's candidate ids ("union"). `impl="auto"` picks by the rules below, measured on
an H200 (BENCHMARKS.md, "Sample-support scoring"); the one owner of those rules and their
constants, which the benches and tests read and set here.
"""

from __future__ import annotations

import torch

from packtool.errors import PacktoolConfigError
from packtool.kernels import args as A
from packtool.kernels import support_torch
from packtool.kernels.support_check import SupportRows

IMPLS = ("auto", "gather", "dense", "union", "torch")
# impl="auto" on a GPU: the gather path while the candidates this rank projects, per row, are
# under this share of its vocabulary rows, the dense GEMM path above it; one share for calls that
# will run backward, one for forward-only calls (old log-probs, no grad). Measured on an H200
# (BENCHMARKS.md, "Sample-support scoring", hidden 4096, V 151,936, 16k tokens): the gather path's
# time grows with the share, the dense path's hardly, and they cross near these shares.
GATHER_MAX_SHARE = {"train": 0.0025, "forward": 0.0039}
# The GEMM paths run over the union of the micro-batch's candidate ids (support_torch.union_rows)
# while that union is under UNION_MAX_SHARE of the local vocabulary, else over the whole of it; and
# the gather rule above then compares the candidates with the rows the GEMMs would cover (U or V).
# H200, H 4096, V 151,936, 16k tokens (BENCHMARKS.md): the union path takes about a fixed 4-5 ms
# plus the dense path's time x U / V (K 512: 9.5 ms at U = 0.054 V, 23 ms at 0.22 V, against 59 ms
# gather and 93 ms dense), and 7 % more than the dense path at U = V. Finding U costs a mark per
# named row and a host sync, so `auto` only looks once the candidates reach UNION_PROBE of the
# gather limit over V: below it (K <= 64 in that bench) the gather path's few ms stand.
UNION_MAX_SHARE = 0.85
UNION_PROBE = 0.25
# ...and looks at the first rows' UNION_PREFIX x V_local ids first (spread candidates, half of
# them padding, cover 1 - e^-4 = 98 % of V from 8 V ids): enough of them named, it is done
UNION_PREFIX = 8
# A forward-only `auto` call (old log-probs, no grad) runs the dense path without waiting for the
# checks' sync ("speculated": its first GEMM queued before the checks, whose launches then overlap
# it, their verdict read once the compute is queued, any error still raised before the call returns) where the shapes alone make dense the likely pick
# and the pick cheap: rows at least SPECULATE_MIN_WIDTH of the vocabulary wide (candidates spread
# over the vocabulary then put twice the gather limit on every rank) and a local GEMM of at most
# SPECULATE_MAX_FLOP. H200 (BENCHMARKS.md, forward sweep at K 2048/4096): below that size the
# sync and the pick (0.3-0.6 ms of host time with the GPU idle) were the whole margin over the
# full-vocab head (0.93-1.00x at 16k tokens, H 2048-8192, V_local 18,992); a wrong guess (rows
# mostly padding, candidates on few ranks) costs at most the dense path, which is not slower than
# the full-vocab head, and the pick stays a function of the shapes (same inputs, same path).
SPECULATE_MIN_WIDTH = 2 * GATHER_MAX_SHARE["forward"]
SPECULATE_MAX_FLOP = 6e12


def triton_runs(hidden) -> bool:
    try:
        from packtool.kernels._triton import interpreting
    except ImportError:  # no Triton installed: only the torch paths run
        return False
    return hidden.is_cuda or interpreting()


def choose_path(impl: str, hidden: torch.Tensor, weight: torch.Tensor, rows: SupportRows) -> str:
    """The path a call runs, or "auto" where Triton runs and `auto_path` decides."""
    A.choice("impl", impl, IMPLS)
    triton_ok = triton_runs(hidden)
    if impl == "gather" and not triton_ok:
        raise PacktoolConfigError("support_logprob impl='gather' needs Triton and a CUDA device (or "
                           "TRITON_INTERPRET=1); "
                           "use impl='torch' (or 'auto') on CPU")
    if impl != "auto":
        return impl
    if not triton_ok:
        return "torch"  # CPU without the Triton interpreter: the torch path, same results
    return "auto"


def auto_path(hidden, weight, rows: SupportRows):
    """(path, union or None) of `auto` where Triton runs: the measured rules above."""
    limit = gather_limit(hidden, weight, rows.ids.shape[0])
    if rows.owned < UNION_PROBE * limit:
        return "gather", None
    if rows.prefix_named is not None:  # counted by the checks' pass (support_logprob)
        most = rows.prefix_named >= UNION_MAX_SHARE * weight.shape[0]
    else:
        most = _prefix_names_most(rows.cands)
    if most:  # the union is no small share
        return ("gather", None) if rows.owned < limit else ("dense", None)
    named = named_ids(rows.cands, True)
    u = named[0].numel()
    if u < UNION_MAX_SHARE * weight.shape[0]:
        if rows.owned < limit * u / weight.shape[0]:
            return "gather", None
        return "union", union_of(rows.cands, True, named)
    return ("gather", None) if rows.owned < limit else ("dense", None)


def _prefix_names_most(cands) -> bool:
    """Whether the first rows, UNION_PREFIX x V_local ids of them, already name UNION_MAX_SHARE of
    the local vocabulary: then the union is not worth finding (marking every id cost `auto` 1.4-
    2.4 ms forward at K 2048-4096 with spread candidates on the H200, against 32 ms in all)."""
    ids, start, v_local = cands
    n, k = ids.shape
    m = prefix_rows(k, v_local)
    if m >= n:  # no cheaper than marking them all
        return False
    from packtool.kernels.support_kernels import named_rows

    return int(named_rows((ids[:m], start, v_local)).sum()) >= UNION_MAX_SHARE * v_local


def prefix_rows(k: int, v_local: int) -> int:
    """The rows whose UNION_PREFIX x V_local ids the union probe looks at."""
    return -(-int(UNION_PREFIX * v_local) // max(1, k))


def probe_rows(impl: str, triton_ok: bool, hidden, weight, n: int, k: int) -> int:
    """Rows for the checks' pass to probe (0: none): only where `auto` may need the probe."""
    if impl != "auto" or not triton_ok:
        return 0
    m = prefix_rows(k, weight.shape[0])
    return m if m < n and n * k >= UNION_PROBE * gather_limit(hidden, weight, n) else 0


def named_ids(cands, triton_ok: bool):
    """(ids [U] of the weight rows some row names, marks or None): the count U is what `auto`
    decides by; with Triton a mark per named row and nonzero's one sync, no sort of the ids."""
    if triton_ok:
        from packtool.kernels.support_kernels import named_rows

        named = named_rows(cands)
        return torch.nonzero(named).squeeze(1), named
    return None, None


def union_of(cands, triton_ok: bool, named=None):
    """(ids [U], slot [V_local]) of the union path: the weight rows some row names, each one's column."""
    ids, marks = named if named is not None else named_ids(cands, triton_ok)
    if marks is None:
        return support_torch.union_rows(cands)
    return support_torch.union_from_named(ids, marks)


def gather_limit(hidden, weight, n_rows: int) -> float:
    """Owned candidates over which the gather path costs more than the dense one over V_local."""
    train = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return GATHER_MAX_SHARE["train" if train else "forward"] * max(1, n_rows) * weight.shape[0]


def speculate_dense(impl: str, fused: bool, need_z: bool, hidden, weight, k: int, v_total: int) -> bool:
    """Whether a call runs the dense path speculated (see SPECULATE_MIN_WIDTH): forward-only
    `auto` with the fused Triton statistics, wide rows, a small local GEMM."""
    n, v_local = hidden.shape[0], weight.shape[0]
    return (impl == "auto" and fused and not need_z and n > 0 and k >= SPECULATE_MIN_WIDTH * v_total
            and 2.0 * n * hidden.shape[1] * v_local <= SPECULATE_MAX_FLOP)
