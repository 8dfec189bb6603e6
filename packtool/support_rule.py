"""The sampler-support rule (FORMAT.md "Side columns"), one owner for `pack`, which refuses an
input row that breaks it, and `verify`, which reports a slab that does. A support row lists
the candidates the sampler kept for the token at its position: -1 pads its end only, the
token is among them exactly once. A row of all -1 is a token without support (a prompt
token).

Its own module so that a reader of `packtool.side` does not start numba.
"""
from __future__ import annotations

import numba as nb
import numpy as np

SUPPORT_RULES = ("a -1 before a candidate id (or an id below -1): -1 pads the end of the row only",
                 "the token at this position is not among its candidates",
                 "the token at this position is among its candidates more than once")


@nb.njit(nogil=True, cache=True)
def support_pass(vals, ids, real, first):
    """vals [P, K]; ids and real (bool) per position. first[k]: the first position
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
            continue
        k = 0 if order else (1 if seen == 0 else (2 if seen > 1 else -1))
        if k >= 0:
            bad += 1
            if first[k] < 0:
                first[k] = p
    return bad


def first_breaks(vals: np.ndarray, ids: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per rule, the first position breaking it or -1 (all -1: the rows hold)."""
    first = np.full(len(SUPPORT_RULES), -1, np.int64)
    support_pass(vals, ids, real, first)
    return first


__all__ = ["SUPPORT_RULES", "first_breaks", "support_pass"]
