"""The sampler-support rows: checked once, then turned into this rank's local weight rows.

A support row is the fixed-width int32 list of candidate ids that survived the sampler for one
token: the sampled id exactly once, distinct ids, `-1` padding only at the end. A row whose first
entry is -1 holds no support (prompt, masked or pad tokens): it is invalid and scores 0. Every
check runs on the device and the verdicts come back in one host sync; the first bad token is
named in a one-line ValueError, as `chunking.find_active_rows` does for the full-vocab head.

The rows are kept as the caller gave them (int32 or int64, every TP rank the same tensor): a
candidate's weight row on this rank is id - start, owned while it lies in [0, v_local). Every
Triton kernel computes that itself, so no [N, K] copy of the ids exists; the torch paths make the
local ids per chunk of rows (`local_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from packtool.kernels import args as A
from packtool.errors import PacktoolInputError, arg  # arg, A.caller: a wrapper's spelling (online/support.py)

PAD = -1


@dataclass(frozen=True)
class SupportRows:
    ids: torch.Tensor  # [N, K] int32 / int64: the support rows as given (or local ids, start 0)
    start: int  # ids - start: this rank's weight row; owned while in [0, v_local)
    v_local: int
    pos: torch.Tensor  # int64 [N]: column of the sampled id in its row (0 on invalid rows)
    valid: torch.Tensor  # bool [N]: the row holds a support
    owned: int  # candidates this rank projects, over all rows (sets gather vs dense; -1: not yet read)
    prefix_named: int | None = None  # weight rows the first probe_rows rows name (if probed)

    @property
    def cands(self) -> tuple:
        """(ids, start, v_local): what every kernel and torch op takes the candidates as."""
        return self.ids, self.start, self.v_local

    def local_ids(self, rows: slice = slice(None)) -> torch.Tensor:
        """int32 [R, K]: this rank's weight row of each candidate of these rows, -1 for padding
        and other ranks' ids (a copy: the torch paths take it per chunk of rows)."""
        return local_ids(self.ids[rows], self.start, self.v_local)


def local_ids(ids: torch.Tensor, start: int, v_local: int) -> torch.Tensor:
    loc = ids - start
    own = (ids >= 0) & (loc >= 0) & (loc < v_local)
    return torch.where(own, loc, torch.full_like(loc, PAD)).to(torch.int32)


def _wrapped(sampled: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Where `t` (sampled cast to the support's dtype) is not the id given: past int32, or a
    uint32 id past 2^31 read as a negative."""
    return t.to(torch.int64) != sampled.to(torch.int64)


def _first(flags: torch.Tensor) -> tuple[int, int]:
    """(row, column) of the first True in a [N] or [N, K] mask."""
    nz = torch.nonzero(flags)[0].tolist()
    return (nz[0], nz[1]) if len(nz) == 2 else (nz[0], 0)


def check_support(
    sampled: torch.Tensor, support: torch.Tensor, vocab_total: int, vocab_start: int,
    vocab_local: int, loss_mask: torch.Tensor | None = None, *, use_triton: bool = False,
    probe_rows: int = 0,
) -> SupportRows:
    """The rows checked; use_triton: the Triton passes of packtool/kernels/support_rows.py instead of the
    torch passes (the verdicts, repeated ids included, read in one host sync). probe_rows (Triton
    only): count the distinct weight rows the first probe_rows rows name (`prefix_named`, auto's
    union probe) in the same pass."""
    _check_shapes(sampled, support, loss_mask)
    if use_triton and support.shape[1]:
        return read_checks(launch_checks(sampled, support, vocab_total, vocab_start, vocab_local,
                                         loss_mask, probe_rows))
    return _check_torch(sampled, support, vocab_total, vocab_start, vocab_local, loss_mask)


@dataclass(frozen=True)
class PendingChecks:
    """The Triton checks launched, their verdict not yet read: `rows` (owned unknown, -1) may feed
    kernels queued behind the checks (every kernel masks ids outside [0, v_local), so bad rows read
    nothing out of bounds), and `read_checks` must run before any result is returned."""
    rows: SupportRows
    counts: torch.Tensor  # int64 [N_COUNTS + 1] on the device
    args: tuple  # what check_support was given: the torch checks name the bad token from it
    probed: bool


def launch_checks(sampled, support, vocab_total: int, vocab_start: int, vocab_local: int,
                  loss_mask=None, probe_rows: int = 0) -> PendingChecks:
    """The Triton checks of support [N, K >= 1], queued on the device; no host sync."""
    _check_shapes(sampled, support, loss_mask)
    from packtool.kernels.support_rows import check_rows

    t = sampled.to(support.dtype)
    ids, pos, counts = check_rows(support, t, loss_mask, vocab_total, vocab_start, vocab_local, probe_rows)
    if t.dtype.itemsize < sampled.dtype.itemsize or sampled.dtype.is_signed != t.dtype.is_signed:
        # a sampled id the narrowing wrapped: one more verdict, read in the checks' one host sync
        counts = torch.cat([counts, _wrapped(sampled, t).sum().reshape(1).to(counts.dtype)])
    valid = support[:, 0] >= 0  # launched before the sync: after it the GPU waits on the host
    rows = SupportRows(ids=ids, start=int(vocab_start), v_local=int(vocab_local), pos=pos, valid=valid, owned=-1)
    return PendingChecks(rows, counts, (sampled, support, vocab_total, vocab_start, vocab_local, loss_mask),
                         probe_rows > 0)


def read_checks(p: PendingChecks) -> SupportRows:
    """The checks' verdict, in their one host sync: the rows with their counts, or the torch
    checks' one-line ValueError naming the first bad token."""
    from packtool.kernels.support_rows import NAMED, OWN

    counts = p.counts.tolist()  # the one host sync
    if any(counts[NAMED + 1:]):  # a verdict (or a repeated id): the torch checks name the token
        return _check_torch(*p.args)
    return replace(p.rows, owned=counts[OWN], prefix_named=counts[NAMED] if p.probed else None)


def repeated_ids(s: torch.Tensor) -> torch.Tensor:
    srt = s.sort(dim=1).values
    return (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)


def _check_shapes(sampled, support, loss_mask=None) -> None:
    if support.dim() != 2 or sampled.shape != support.shape[:1]:
        raise PacktoolInputError(
            f"support {tuple(support.shape)} / sampled {tuple(sampled.shape)}: expected [N, K] and [N]"
        )
    A.same_shape("loss_mask", loss_mask, sampled.shape, "sampled's shape")  # read by pointer on the GPU
    A.integer_ids("sampled", sampled)
    if support.dtype not in (torch.int32, torch.int64):  # the kernels read the rows as given
        raise PacktoolInputError(f"support is {support.dtype}: expected int32 or int64 candidate ids")


def _check_torch(sampled, support, vocab_total, vocab_start, vocab_local, loss_mask) -> SupportRows:
    s = support  # int32 stays int32: every pass below moves half the bytes of int64
    t = sampled.to(s.dtype)
    wrapped = _wrapped(sampled, t)
    valid = s[:, 0] >= 0 if s.shape[1] else torch.zeros_like(t, dtype=torch.bool)
    real = s >= 0
    outside = (s < PAD) | (s >= vocab_total)
    gap = real[:, 1:] & ~real[:, :-1]  # a candidate after padding: padding must trail
    dup = repeated_ids(s)
    match = (s == t[:, None]) & real
    missing = valid & ~match.any(1)
    unsupported = (loss_mask != 0) & ~valid if loss_mask is not None else torch.zeros_like(valid)
    local = s - vocab_start
    own = real & (local >= 0) & (local < vocab_local)
    flags = torch.stack([outside.any(), gap.any(), dup.any(), missing.any(), unsupported.any(),
                         own.sum(), wrapped.any()]).tolist()  # the one host sync of the checks
    if flags[6]:  # before "not among its candidates": the id compared was not the one given
        n, _ = _first(wrapped)
        raise PacktoolInputError(
            f"{A.caller()}{arg('sampled')}[{n}] = {int(sampled[n])} does not fit the support's {s.dtype} (the sampled id is "
            f"compared as the support's dtype: it would wrap onto id {int(t[n])}); ids are in [0, vocab)")
    # every verdict names the row as an expression of what the caller passed (arg: a wrapper's
    # batch key, `batch['shift_support'].flatten(0, -2)`), never a bare "token n" of a view it never saw
    if flags[0]:
        n, k = _first(outside)
        raise PacktoolInputError(
            f"{A.caller()}{arg('support')}[{n}, {k}] = {int(s[n, k])} is outside the vocabulary [0, {vocab_total}); "
            f"-1 is the only padding value"
        )
    if flags[1]:
        n, k = _first(gap)
        raise PacktoolInputError(f"{A.caller()}{arg('support')}[{n}, {k + 1}] = {int(s[n, k + 1])} follows -1 padding in its "
                                 f"row: padding must trail the candidates")
    if flags[2]:
        raise_repeated(s, dup)
    if flags[3]:
        n, _ = _first(missing)
        raise PacktoolInputError(f"{A.caller()}{arg('sampled')}[{n}] = {int(t[n])} is not among its support row's "
                                 f"candidates ({arg('support')}[{n}]): the sampled id must be in its row exactly once")
    if flags[4]:
        n, _ = _first(unsupported)
        raise PacktoolInputError(f"{A.caller()}{arg('support')}[{n}] is empty (all -1), but {arg('loss_mask')}[{n}] makes that "
                                 f"token a loss target: record the sampler's candidates for it or mask it out; no "
                                 f"full-vocabulary fallback")
    pos = match.to(torch.int8).argmax(1)
    local = torch.where(own, local, torch.full_like(local, PAD)).to(torch.int32).contiguous()
    return SupportRows(ids=local, start=0, v_local=int(vocab_local), pos=pos, valid=valid, owned=int(flags[5]))


def raise_repeated(support: torch.Tensor, dup: torch.Tensor | None = None) -> None:
    """The error for the first row holding an id twice (dup: repeated_ids(support), if known)."""
    dup = repeated_ids(support) if dup is None else dup
    n, k = _first(dup)
    x = int(support[n].sort().values[k + 1])
    cols = (support[n] == x).nonzero().flatten().tolist()
    raise PacktoolInputError(f"{A.caller()}{arg('support')}[{n}] holds id {x} twice (columns {cols[0]} and {cols[1]}): "
                             "candidates must be distinct")
