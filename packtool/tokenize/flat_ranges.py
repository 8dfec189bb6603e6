"""Scattered rows of a store entry's flat/ (tokenize/flat_tokens.py's format) in few ranged reads.

The rows a pass asks (cut targets: the rows longer than U, scattered through the entry) were one
request per run of consecutive rows, ~one per row, each a store round trip, and all of
offsets.npy again on every call (RA-7). Here rows close together are read through in one
request: a gap under COALESCE bytes costs less to read than a request's latency, so the requests
are bounded by the bytes spanned (one per COALESCE of gap, one per READ_BLOCK read), not by the
rows; each request's bytes are held only while its rows are copied out.
"""
from __future__ import annotations

from typing import Callable

import numba
import numpy as np

from packtool.storage import READ_BLOCK

COALESCE = 1 << 20  # bytes: about what a store request's latency reads at ~100 MB/s


@numba.njit(cache=True)
def _span_ids(starts, ends, gap, cap):
    """Span number of every [start, end) interval (sorted by start): a new span where the gap to
    the span so far is `gap` or more, or the span would pass `cap` (a longer interval: its own)."""
    out = np.empty(starts.shape[0], np.int64)
    k, s0, e0 = 0, 0, 0
    for i in range(starts.shape[0]):
        if i == 0 or starts[i] - e0 >= gap or max(e0, ends[i]) - s0 > cap:
            if i:
                k += 1
            s0, e0 = starts[i], ends[i]
        e0 = max(e0, ends[i])
        out[i] = k
    return out


@numba.njit(cache=True)
def _copy(buf, starts, ends, out_offsets, out):
    for k in range(starts.shape[0]):
        d = out_offsets[k]
        for j in range(ends[k] - starts[k]):
            out[d + j] = buf[starts[k] + j]


def _spans(starts: np.ndarray, ends: np.ndarray, itemsize: int):
    """(first item, last item + 1, span start, span end) of each request over the intervals."""
    ids = _span_ids(starts, ends, max(1, COALESCE // itemsize), max(1, READ_BLOCK // itemsize))
    first = np.r_[0, np.flatnonzero(np.diff(ids)) + 1]
    last = np.r_[first[1:], ids.size]
    return first, last, starts[first], np.maximum.reduceat(ends, first)


def flat_rows(rows: np.ndarray, offsets_at: Callable[[int, int], np.ndarray],
              values_at: Callable[[int, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(words, offsets) of `rows` (sorted, distinct) of a flat store: `offsets_at(first, n)` reads
    offsets.npy[first:first + n], `values_at(first, n)` tokens.i32's values [first, first + n)."""
    if not rows.size:
        return np.zeros(0, np.int32), np.zeros(1, np.int64)
    rows = np.asarray(rows, np.int64)
    start, end = np.empty(rows.size, np.int64), np.empty(rows.size, np.int64)
    for f, e, a, b in zip(*_spans(rows, rows + 2, 8)):  # a row's offsets are entries r and r+1
        vals = offsets_at(int(a), int(b - a))
        at = rows[f:e] - a
        start[f:e], end[f:e] = vals[at], vals[at + 1]
    sub = np.zeros(rows.size + 1, np.int64)
    np.cumsum(end - start, out=sub[1:])
    words = np.empty(int(sub[-1]), np.int32)
    for f, e, a, b in zip(*_spans(start, end, 4)):
        buf = values_at(int(a), int(b - a))
        _copy(buf, start[f:e] - a, end[f:e] - a, sub[f:e], words)
    return words, sub
