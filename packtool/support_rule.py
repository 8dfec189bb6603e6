"""The sampler-support rule (FORMAT.md "Side columns"), one owner for `pack`, which refuses an
input row that breaks it, and `verify`, which reports a slab that does; the scorer
(packtool/kernels/support_check.py) refuses the same rows at training time, so whatever it
refuses is refused here first (S42-1: an id past the vocabulary or a candidate twice passed
pack and verify and stopped an RL run at the batch holding it). A support row lists the
distinct candidates the sampler kept for the token at its position: token ids in
[0, vocab_size), -1 padding its end only, the token among them exactly once, and a token the
loss counts has candidates (the scorer has nothing to normalise over otherwise). A row of all
-1 on a token the loss skips (a prompt token) is a token without support. Without a
tokenizer the vocabulary bound is FORMAT.md's bound on token ids, 2^31.

Its own module so that a reader of `packtool.side` does not start numba.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from packtool.integers import TOKEN_ID_BOUND


SUPPORT_RULES = ("a -1 before a candidate id (or an id below -1): -1 pads the end of the row only",
                 "the token at this position is not among its candidates",
                 "the token at this position is among its candidates more than once",
                 "the loss counts this token but its row is empty (all -1): record the sampler's "
                 "candidates for it or set its loss_mask to 0",
                 "a candidate id is outside the vocabulary",
                 "a candidate id is in the row more than once: candidates are distinct")
ORDER, MISSING, TOKEN_TWICE, EMPTY, OUTSIDE, REPEATED = range(len(SUPPORT_RULES))
_SMALL = 32  # candidates compared pairwise up to this many; a longer row is sorted first


@nb.njit(nogil=True, cache=True)
def _repeats(row, n):
    """Whether the first n entries of `row` hold a value twice."""
    if n <= _SMALL:
        for j in range(1, n):
            for i in range(j):
                if row[i] == row[j]:
                    return True
        return False
    s = np.sort(row[:n])
    for j in range(1, n):
        if s[j] == s[j - 1]:
            return True
    return False


@nb.njit(nogil=True, cache=True)
def support_pass(vals, ids, real, loss, top, first):
    """vals [P, K]; ids, real (bool), loss (uint8) per position; top: candidate ids are below
    it. first[k]: the first position breaking rule k (SUPPORT_RULES), or -1; a position is
    counted under the first rule it breaks, in the order ORDER, OUTSIDE, MISSING,
    TOKEN_TWICE, REPEATED, EMPTY. Returns how many positions break any rule."""
    bad = 0
    K = vals.shape[1]
    for p in range(vals.shape[0]):
        if not real[p]:
            continue
        ended, seen, order, outside, n = False, 0, False, False, 0
        for j in range(K):
            v = vals[p, j]
            if v == -1:
                ended = True
            else:
                n += 1
                if ended or v < -1:
                    order = True
                elif v >= top:
                    outside = True
                if v == ids[p]:
                    seen += 1
        if n == 0:
            k = 3 if loss[p] else -1
        elif order:
            k = 0
        elif outside:
            k = 4
        elif seen == 0:
            k = 1
        elif seen > 1:
            k = 2
        elif _repeats(vals[p], n):
            k = 5
        else:
            k = -1
        if k >= 0:
            bad += 1
            if first[k] < 0:
                first[k] = p
    return bad


def first_breaks(vals: np.ndarray, ids: np.ndarray, real: np.ndarray, loss: np.ndarray,
                 vocab_size: int | None = None) -> np.ndarray:
    """Per rule, the first position breaking it or -1 (all -1: the rows hold). `vocab_size`:
    the tokenizer's (the manifest's), None without one."""
    first = np.full(len(SUPPORT_RULES), -1, np.int64)
    support_pass(vals, ids, real, loss, np.int64(vocab_size or TOKEN_ID_BOUND), first)
    return first


def broken(k: int, row: np.ndarray, vocab_size: int | None = None) -> str:
    """Rule k said of this row: the candidate at fault and the bound, where the rule has one."""
    row = np.asarray(row).ravel()
    if k == OUTSIDE:
        top = vocab_size or TOKEN_ID_BOUND
        v = int(row[row >= top][0])
        if vocab_size:
            return f"candidate id {v} is outside the vocabulary: ids are in [0, vocab_size {top})"
        return f"candidate id {v} is outside [0, 2^31), the token ids FORMAT.md allows without a tokenizer"
    if k == REPEATED:
        vals, counts = np.unique(row[row != -1], return_counts=True)
        return f"candidate id {int(vals[counts > 1][0])} is in the row more than once: candidates are distinct"
    return SUPPORT_RULES[k]


__all__ = ["SUPPORT_RULES", "TOKEN_ID_BOUND", "broken", "first_breaks", "support_pass"]
