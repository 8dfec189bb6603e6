"""Gather token spans from the flat store file with pread(2), straight into slab buffers.

Shuffled slabs read short spans from everywhere in the store. Through a memory map, the
kernel maps whole page-cache folios around every span (hundreds of KB each), and RSS grows
with the store; releasing them costs a madvise per few segments. pread copies just the span
from the page cache, so the process only ever holds its output buffers.

Every kernel here runs without the GIL: the shard writers are threads, and one thread's
gather overlaps the other's Parquet encoding.
"""
from __future__ import annotations

import os

import numba as nb
import numpy as np
from numba import types

from packtool.errors import PacktoolCacheError
from packtool.tokenize.flat_tokens import TOKENS_FILE, token_id, token_loss
from packtool.tokenize.side_store import BLOCK, count_dtype

# libc's pread, bound by symbol name when the code is linked (not by this process's address),
# so the compiled gather can be cached on disk; the buffer pointer passes as an integer
_pread = types.ExternalFunction("pread", types.intp(types.intc, types.intp, types.uintp, types.int64))


@nb.njit(nogil=True, cache=True)
def _gather_pread(fd, tok_off, src, src_off, length, dest, out_ids, out_mask):
    """Read each segment's words into its place in `out_ids`, then split them into id and
    loss flag in place (the span is hot in cache); the first token of every segment
    predicts nothing inside it, so its flag is cleared. Returns the index of the first
    segment that could not be read whole (or -1) and the largest id read (-1: none): the
    manifest's max_token_id, taken here while the span is in cache rather than by a second
    pass over the row group."""
    bi = out_ids.ctypes.data
    top = -1
    for i in range(src.size):
        a = tok_off[src[i]] + src_off[i]
        n = length[i]
        d = dest[i]
        if _pread(fd, bi + d * 4, n * 4, a * 4) != n * 4:
            return i, top
        for j in range(d, d + n):
            v = out_ids[j]
            t = token_id(v)
            out_ids[j] = t
            out_mask[j] = token_loss(v)
            if t > top:
                top = t
        if n > 0:
            out_mask[d] = 0
    return -1, top


@nb.njit(nogil=True, cache=True)
def fill_pads(out_ids, out_mask, pad_id, start, real, padded):
    """Every position past a segment's real tokens, up to its padded end, is a pad (pad_id, no
    loss). Segments tile their slabs, so with the gather every position is written once."""
    for k in range(start.size):
        for j in range(start[k] + real[k], start[k] + padded[k]):
            out_ids[j] = pad_id
            out_mask[j] = 0


@nb.njit(nogil=True, cache=True)
def row_sums(mask, row_off):
    """Loss tokens of each row (row r is mask[row_off[r]:row_off[r+1]])."""
    out = np.zeros(row_off.size - 1, np.int32)
    for r in range(row_off.size - 1):
        s = np.int32(0)  # a 32-bit sum of a contiguous slice vectorizes (12x the int64 loop)
        m = mask[row_off[r]:row_off[r + 1]]
        for j in range(m.size):
            s += np.int32(m[j])
        out[r] = s
    return out


@nb.njit(nogil=True, cache=True)
def _gather_rows_pread(fd, tok_off, src, src_off, length, dest, out_ptr, row_bytes):
    """A side column's rows (`row_bytes` each, one per token) of each segment into place;
    the index of the first segment that could not be read whole, or -1."""
    for i in range(src.size):
        a = tok_off[src[i]] + src_off[i]
        n = length[i] * row_bytes
        if n and _pread(fd, out_ptr + dest[i] * row_bytes, n, a * row_bytes) != n:
            return i
    return -1


@nb.njit(nogil=True, cache=True)
def _gather_rows(rows, tok_off, src, src_off, length, dest, out):
    for i in range(src.size):
        a = tok_off[src[i]] + src_off[i]
        d = dest[i]
        for j in range(length[i]):
            out[d + j, :] = rows[a + j, :]


@nb.njit(nogil=True, cache=True)
def fill_side_pads(out, fill, start, real, padded):
    """Every pad position's row (out: (tokens, width) of the values' bits) is the fill; the
    gathers write every real token's row whole, so each position is written once."""
    for k in range(start.size):
        for j in range(start[k] + real[k], start[k] + padded[k]):
            out[j, :] = fill


@nb.njit(nogil=True, cache=True)
def _gather_sparse_pread(fds, block, tok_off, src, src_off, length, dest, out, fill, counts, kept, mark):
    """A K-wide side column kept sparse (tokenize/side_store.py: fds = values, counts, index)
    into its place (out: (tokens, K) of the values' bits): per segment, the index entry of
    its first token's block, the counts from that block's start (their sum locates its first
    value), then its kept values; each token's row is its values, then the fill. The index
    of the first segment that could not be read whole (or whose counts exceed the width or
    the buffer), or -1."""
    K = out.shape[1]
    isz, csz = kept.itemsize, counts.itemsize
    cp, kp, mp = counts.ctypes.data, kept.ctypes.data, mark.ctypes.data
    for i in range(src.size):
        n = length[i]
        if n == 0:
            continue
        a = tok_off[src[i]] + src_off[i]
        b0 = a // block * block
        m = a + n - b0
        if m > counts.size or _pread(fds[2], mp, 8, (a // block) * 8) != 8:
            return i
        if _pread(fds[1], cp, m * csz, b0 * csz) != m * csz:
            return i
        first = mark[0]
        for j in range(a - b0):
            first += counts[j]
        total = 0
        for j in range(a - b0, m):
            total += counts[j]
        if total > kept.size or _pread(fds[0], kp, total * isz, first * isz) != total * isz:
            return i
        v = 0
        for j in range(n):
            c = np.int64(counts[a - b0 + j])
            if c > K:
                return i
            d = dest[i] + j
            for q in range(c):
                out[d, q] = kept[v + q]
            for q in range(c, K):
                out[d, q] = fill
            v += c
    return -1


def side_bits(values: np.ndarray) -> np.ndarray:
    """The same memory as signed integers of the values' size (a fill compares bit for bit)."""
    return values.view(np.dtype(f"i{values.dtype.itemsize}"))


def gather_side(store, k: int, tok_off: np.ndarray, src: np.ndarray, src_off: np.ndarray,
                length: np.ndarray, dest: np.ndarray, out: np.ndarray) -> None:
    """Side column k of `store` (tokenize.flat_tokens.FlatTokens) for the same segments as the
    token gather, into `out` ((tokens, width) of its dtype): position for position like
    input_ids, so a value never crosses a segment boundary. Every real token's row is written
    whole; pads are not touched (`fill_side_pads`)."""
    rows = out.view(np.uint8).reshape(out.shape[0], -1)
    if store.directory is None:
        _gather_rows(store.side_rows(k), tok_off, src, src_off, length, dest, rows)
        return
    paths = store.side_paths(k)
    c = store.side[k]
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    try:
        if c.width == 1:
            bad = _gather_rows_pread(fds[0], tok_off, src, src_off, length, dest, rows.ctypes.data, rows.shape[1])
        else:
            longest = int(length.max()) if length.size else 0
            bits = side_bits(out)
            bad = _gather_sparse_pread(np.asarray(fds, np.int32), BLOCK, tok_off, src, src_off, length, dest, bits,
                                       side_bits(np.asarray(c.fill, c.np_dtype)).item(),
                                       np.empty(longest + BLOCK, count_dtype(c.width)),
                                       np.empty(longest * c.width, bits.dtype), np.zeros(1, np.int64))
    finally:
        for fd in fds:
            os.close(fd)
    if bad >= 0:
        raise PacktoolCacheError(f"short read of source row {int(src[bad])}; the flat store's side column "
                                 f"{c.name} is truncated or damaged: delete the cache folder and re-run", path=paths[0])


def gather_from_files(directory: str, tok_off: np.ndarray, src: np.ndarray, src_off: np.ndarray,
                      length: np.ndarray, dest: np.ndarray, out_ids: np.ndarray,
                      out_mask: np.ndarray) -> int:
    """`_gather_pread` from the store's token file; returns the largest id gathered (-1: none)."""
    fd = os.open(os.path.join(directory, TOKENS_FILE), os.O_RDONLY)
    try:
        bad, top = _gather_pread(fd, tok_off, src, src_off, length, dest, out_ids, out_mask)
    finally:
        os.close(fd)
    if bad >= 0:
        raise PacktoolCacheError(f"short read of source row {int(src[bad])}; the flat token store is "
                                 f"truncated: delete it (it is rebuilt from the cache)", path=directory)
    return top
