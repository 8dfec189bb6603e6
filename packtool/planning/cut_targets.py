"""What an overflow cut costs besides tokens: the targets (loss tokens) it loses, and under
`--overflow truncate` the sequences left with no target at all (S44-3).

The planner sees lengths only, so `apply_overflow` counts the tokens a cut drops; the targets
among them are in the loss masks, which pack (the tokenized cache) and `verify --source` (the
flat store) hold. This module is the one count both ask, so the manifest's figures and
verify's recount cannot drift apart. A segment's first token is never a target in a slab
(FORMAT.md, loss_mask). A truncated row keeps tokens [0, U), so the kept targets are [1, U) and
the ones cut are [U, length). A split row's chunks start at U, 2U, ...: the targets lost are
those of the tokens there, one per cut at most (L6: every cut was counted as one, a cut inside a
prompt too).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

# loss flags read per batch of cut rows: bounded memory whatever the rows' lengths
_BATCH_TOKENS = 1 << 24


@dataclass(frozen=True)
class CutTargets:
    targets: int = 0  # loss tokens in the cut tails (split: at the chunks' starts)
    untrained: int = 0  # cut rows that keep no target (every one of theirs was in the tail)
    first_untrained: int = -1  # the first such row (cache row), -1 if none


@nb.njit(nogil=True, cache=True)
def _count(flags, offsets, rows, usable, shift, cut, kept):
    """Per row k of `rows` (each longer than `usable`): cut[k] = targets at [U, length),
    kept[k] = whether one is at [1, U). A flag is (flags[i] >> shift) & 1: shift 0 for a 0/1
    loss mask, 31 for the flat store's `id | loss << 31` words."""
    for k in range(rows.size):
        a = offsets[rows[k]]
        e = offsets[rows[k] + 1]
        n = 0
        for i in range(a + usable, e):
            n += (flags[i] >> shift) & 1
        cut[k] = n
        has = False
        for i in range(a + 1, a + usable):
            if (flags[i] >> shift) & 1:
                has = True
                break
        kept[k] = has


@nb.njit(nogil=True, cache=True)
def _count_split(flags, offsets, rows, usable, shift, cut):
    """Per row k of `rows`: cut[k] = targets at U, 2U, ... below its length (its chunks' first tokens)."""
    for k in range(rows.size):
        a = offsets[rows[k]]
        e = offsets[rows[k] + 1]
        n = 0
        for i in range(a + usable, e, usable):
            n += (flags[i] >> shift) & 1
        cut[k] = n


def count_rows(flags: np.ndarray, offsets: np.ndarray, rows: np.ndarray, usable: int, shift: int,
               row_ids: np.ndarray | None = None, split: bool = False) -> CutTargets:
    """`CutTargets` of `rows` (positions into `offsets`, each longer than `usable`) truncated, or
    with `split` cut into chunks of `usable` (`untrained` is truncate's figure alone); `row_ids` names them in `first_untrained` (default: `rows`)."""
    rows = np.ascontiguousarray(rows, np.int64)
    cut, kept = np.zeros(rows.size, np.int64), np.zeros(rows.size, np.bool_)
    if split:
        if rows.size:
            _count_split(flags, np.asarray(offsets, np.int64), rows, int(usable), int(shift), cut)
        return CutTargets(int(cut.sum()))
    if rows.size:
        _count(flags, np.asarray(offsets, np.int64), rows, int(usable), int(shift), cut, kept)
    untrained = np.flatnonzero(~kept & (cut > 0))
    ids = rows if row_ids is None else row_ids
    return CutTargets(int(cut.sum()), int(untrained.size), int(ids[untrained[0]]) if untrained.size else -1)


def merge(parts) -> CutTargets:
    parts = list(parts)
    firsts = [p.first_untrained for p in parts if p.first_untrained >= 0]
    return CutTargets(sum(p.targets for p in parts), sum(p.untrained for p in parts), min(firsts, default=-1))


def cut_targets_of_cache(cache, lengths: np.ndarray, usable: int, split: bool = False) -> CutTargets:
    """`CutTargets` of a tokenized cache's rows truncated to `usable` tokens (`split`: cut into
    chunks of it): only the rows longer than U are read (`TokenizedCache.read_rows`, any
    engine's cache), in batches. A cache whose every token is a target (no loss mask: plain
    pre-tokenized rows) is counted from the lengths alone, reading nothing: under split that
    read cost 8% of a pre-tokenized pack's wall (BENCHMARKS.md, stop 45)."""
    lengths = np.asarray(lengths, np.int64)
    over = np.flatnonzero(lengths > usable)
    if getattr(cache, "num_loss_tokens", -1) == getattr(cache, "num_tokens", -2):
        return _all_targets(lengths[over], over, usable, split)
    parts, i = [], 0
    while i < over.size:
        take = np.cumsum(lengths[over[i:]]) <= _BATCH_TOKENS
        j = i + max(1, int(take.sum()))
        batch = over[i:j]
        rows = cache.read_rows(batch)
        parts.append(count_rows(rows.loss_mask, rows.offsets, np.arange(batch.size), usable, 0, row_ids=batch,
                                split=split))
        i = j
    return merge(parts)


def _all_targets(lens: np.ndarray, rows: np.ndarray, usable: int, split: bool) -> CutTargets:
    """`count_rows` of rows (cache positions `rows`, lengths `lens`, each over U) whose every token
    is a target: split loses one at each chunk start U, 2U, ...; truncate the tail [U, length),
    and a row keeps a target in [1, U) unless U is 1."""
    if split:
        return CutTargets(int(((lens - 1) // usable).sum()))
    untrained = rows if usable < 2 else rows[:0]
    return CutTargets(int((lens - usable).sum()), int(untrained.size), int(untrained[0]) if untrained.size else -1)


def one_token_rows(lengths) -> tuple[int, int]:
    """(how many, the first's row or -1) of the rows of one token among `lengths` (an array, or
    batches of one in row order: `TokenizedCache.length_batches`). Such a row trains nothing in a
    slab, whose sequences' first tokens are never targets, and it is packed all the same: a
    tokenized row holds a target past its first token unless it is of one token (encode.no_target
    refuses or skips the labeled rows of none; a row without labels is every token a target), so
    its length alone says it (S45A-7). Pack counts them (summary.with_cache) and `verify --source`
    recounts them, by this one count."""
    parts = [lengths] if isinstance(lengths, np.ndarray) else lengths
    n, first, base = 0, -1, 0
    for part in parts:
        hit = np.flatnonzero(np.asarray(part) == 1)
        if hit.size and first < 0:
            first = base + int(hit[0])
        n += int(hit.size)
        base += len(part)
    return n, first


def cut_targets_of_store(tokens, usable: int, split: bool = False) -> CutTargets:
    """`CutTargets` of a flat token store's (`tokenize.flat_tokens.FlatTokens`) rows truncated
    to `usable` tokens, or `split` (verify --source)."""
    over = np.flatnonzero(np.diff(tokens.offsets) > usable)
    return count_rows(tokens.tokens, tokens.offsets, over, usable, 31, split=split)
