"""A K-wide side column in the flat store, kept sparse (issue 21; FORMAT.md "Side columns").

A support row is K candidate ids padded at the end with the fill (-1), and most rows are
mostly fill: prompt tokens have none, a top-p cut keeps a few of K. Stored dense, a 20-wide
int32 column is 80 bytes per token, 20 times the token's own word, and the pack moves every
byte of it to disk and back. So the store keeps, per token, its values up to the last one that
is not the fill (trailing fill dropped, compared bit for bit, so -0.0 stays -0.0), and the
writer expands each row to K with the fill (slabs/gather.py). Three files per column:

  values   the kept values, token after token, of the column's dtype
  counts   values kept per token (`count_dtype(K)`), one per token of tokens.i32
  index    int64: the first value of token j * BLOCK, for every block, then the total

A span of tokens [a, a + n) is read without touching the rest: index[a // BLOCK], the counts
from that block's start to a + n (their sum gives the span's first value), then the values.
Width-1 columns stay dense (a count would weigh as much as the value it saves).
"""
from __future__ import annotations

import os

import numba as nb
import numpy as np

from packtool.errors import PacktoolCacheError
from packtool.storage import read_range

__all__ = ["BLOCK", "SparseRowsWriter", "count_dtype", "read_dense", "sparse_problem", "sparsify"]

BLOCK = 1024  # tokens per index entry: a span reads at most this many extra counts


def count_dtype(width: int) -> np.dtype:
    return np.dtype(np.uint8 if width < 1 << 8 else np.uint16 if width < 1 << 16 else np.uint32)


def _bits(values: np.ndarray, width: int) -> np.ndarray:
    """(tokens, width) integers of the values' own bits (fill compared bit for bit)."""
    v = np.ascontiguousarray(values)
    return v.view(np.dtype(f"i{v.dtype.itemsize}")).reshape(-1, width)


def _fill_bits(c) -> int:
    return int(np.asarray(c.fill, c.np_dtype).view(np.dtype(f"i{c.np_dtype.itemsize}")))


@nb.njit(nogil=True, cache=True)
def _count(bits, fill, counts):
    """counts[t] = 1 + the last place of row t that is not the fill (0: all fill); their sum."""
    total = 0
    K = bits.shape[1]
    for t in range(bits.shape[0]):
        c = K
        while c > 0 and bits[t, c - 1] == fill:
            c -= 1
        counts[t] = c
        total += c
    return total


@nb.njit(nogil=True, cache=True)
def _compact(bits, counts, out):
    v = 0
    for t in range(bits.shape[0]):
        for j in range(counts[t]):
            out[v] = bits[t, j]
            v += 1


def sparsify(values: np.ndarray, c) -> tuple[np.ndarray, np.ndarray]:
    """Dense values of column `c` (tokens * width, flat) -> (counts, kept values)."""
    bits = _bits(np.asarray(values, c.np_dtype), c.width)
    counts = np.empty(bits.shape[0], count_dtype(c.width))
    kept = np.empty(_count(bits, _fill_bits(c), counts), bits.dtype)
    _compact(bits, counts, kept)
    return counts, kept.view(c.np_dtype)


@nb.njit(nogil=True, cache=True)
def _marks(counts, t0, v0, block, out):
    """Value index of every token of this batch (first token t0, first value v0) whose
    position is a multiple of `block`, into out; how many."""
    k, v = 0, v0
    for j in range(counts.size):
        if (t0 + j) % block == 0:
            out[k] = v
            k += 1
        v += counts[j]
    return k


class SparseRowsWriter:
    """Appends a K-wide column's rows to its three files (`paths`: values, counts, index),
    hashing each as it goes (`hasher()` makes a hash: cache.json's checksum, no re-read)."""

    def __init__(self, paths, c, hasher) -> None:
        self.paths, self.c = tuple(paths), c
        self.files = [open(p, "wb", buffering=0) for p in self.paths]
        self.hashes = [hasher() for _ in self.paths]
        self.tokens = self.values = 0

    def add(self, values: np.ndarray) -> None:
        counts, kept = sparsify(values, self.c)
        marks = np.empty(-(-counts.size // BLOCK) + 1, np.int64)
        m = _marks(counts, self.tokens, self.values, BLOCK, marks)
        for f, h, a in zip(self.files, self.hashes, (kept, counts, marks[:m])):
            write_hashed(f, h, a)
        self.tokens += counts.size
        self.values += kept.size

    def close(self) -> list[str]:
        """Finish the files; their hex digests, in `paths` order."""
        write_hashed(self.files[2], self.hashes[2], np.asarray([self.values], np.int64))
        self.abort()
        return [h.hexdigest() for h in self.hashes]

    def abort(self) -> None:
        for f in self.files:
            f.close()


def write_hashed(f, h, values: np.ndarray) -> None:
    view = memoryview(np.ascontiguousarray(values)).cast("B")
    h.update(view)
    while view:  # unbuffered writes may be short
        view = view[f.write(view):]


def sparse_problem(paths, c, tokens: int) -> str | None:
    """What is wrong with the sizes of a column's three files for `tokens` tokens, or None."""
    have = [os.path.getsize(p) if os.path.exists(p) else -1 for p in paths]
    marks = -(-tokens // BLOCK) + 1
    csz = count_dtype(c.width).itemsize
    if have[1] != tokens * csz or have[2] != marks * 8:
        return (f"{os.path.basename(paths[1])} / {os.path.basename(paths[2])} have {have[1]} / {have[2]} bytes, "
                f"{tokens * csz} / {marks * 8} expected")
    total = int(np.fromfile(paths[2], np.int64, 1, offset=(marks - 1) * 8)[0])
    if have[0] != total * c.np_dtype.itemsize:
        return f"{os.path.basename(paths[0])} has {have[0]} bytes, {total * c.np_dtype.itemsize} expected"
    return None


@nb.njit(nogil=True, cache=True)
def _expand(kept, counts, out):
    """Row t of out (already the fill) gets its counts[t] kept values; False if a count
    exceeds the width or the values run out (a damaged store)."""
    v = 0
    K = out.shape[1]
    for t in range(counts.size):
        c = counts[t]
        if c > K or v + c > kept.size:
            return False
        for j in range(c):
            out[t, j] = kept[v + j]
        v += c
    return True


def _fromfile(path: str, dtype, count: int, offset: int) -> np.ndarray:
    """np.fromfile's values, from a local file or (the Ray engine's tasks) a store object."""
    dtype = np.dtype(dtype)
    data = read_range(path, offset, count * dtype.itemsize)
    return np.frombuffer(bytearray(data[:len(data) // dtype.itemsize * dtype.itemsize]), dtype)  # writable, as fromfile's


def read_dense(paths, c, a: int, e: int) -> np.ndarray:
    """Tokens [a, e) of the column as dense values (tokens * width, flat, the fill where a
    row had none): for readers that want whole rows (the Ray engine's cache reads)."""
    csz = count_dtype(c.width)
    b0 = a // BLOCK * BLOCK
    start = int(_fromfile(paths[2], np.int64, 1, offset=(a // BLOCK) * 8)[0]) if e > a else 0
    counts = _fromfile(paths[1], csz, e - b0, offset=b0 * csz.itemsize)
    if counts.size != e - b0:
        raise PacktoolCacheError("short read; the flat store is damaged: delete the cache folder and re-run",
                                 path=paths[1])
    start += int(counts[:a - b0].sum(dtype=np.int64))
    counts = counts[a - b0:]
    kept = _fromfile(paths[0], c.np_dtype, int(counts.sum(dtype=np.int64)), offset=start * c.np_dtype.itemsize)
    out = c.filled(e - a).reshape(e - a, c.width)
    if not _expand(_bits(kept, 1)[:, 0], counts, _bits(out, c.width)):
        raise PacktoolCacheError("rows do not match their counts; the flat store is damaged: delete the cache "
                                 "folder and re-run", path=paths[0])
    return out.reshape(-1)
