"""The sampler-support rule (FORMAT.md "Side columns"), one owner for `pack`, which refuses an
input row that breaks it, and `verify`, which reports a slab that does. A support row lists
the candidates the sampler kept for the token at its position: -1 pads its end only, the
token is among them exactly once, and a token the loss counts has candidates (the scorer
has nothing to normalise over otherwise). A row of all -1 on a token the loss skips (a
prompt token) is a token without support.

Its own module so that a reader of `packtool.side` does not start numba.
"""
from __future__ import annotations

import numba as nb
import numpy as np

SUPPORT_RULES = ("a -1 before a candidate id (or an id below -1): -1 pads the end of the row only",
                 "the token at this position is not among its candidates",
                 "the token at this position is among its candidates more than once",
                 "the loss counts this token but its row is empty (all -1): record the sampler's "
                 "candidates for it or set its loss_mask to 0")


@nb.njit(nogil=True, cache=True)
def support_pass(vals, ids, real, loss, first):
    """vals [P, K]; ids, real (bool), loss (uint8) per position. first[k]: the first position
    breaking rule k (SUPPORT_RULES), or -1; returns how many positions break any rule."""
    bad = 0
    K = vals.shape[1]
    for p in range(vals.shape[0]):
        if not real[p]:
            continue
        ended, seen, order, empty = False, 0, False, True
        for j in range(K):
            v = vals[p, j]
            if v == -1:
                ended = True
            else:
                empty = False
                if ended or v < -1:
                    order = True
                if v == ids[p]:
                    seen += 1
        if empty:
            k = 3 if loss[p] else -1
        else:
            k = 0 if order else (1 if seen == 0 else (2 if seen > 1 else -1))
        if k >= 0:
            bad += 1
            if first[k] < 0:
                first[k] = p
    return bad


def first_breaks(vals: np.ndarray, ids: np.ndarray, real: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Per rule, the first position breaking it or -1 (all -1: the rows hold)."""
    first = np.full(len(SUPPORT_RULES), -1, np.int64)
    support_pass(vals, ids, real, loss, first)
    return first


__all__ = ["SUPPORT_RULES", "first_breaks", "support_pass"]
