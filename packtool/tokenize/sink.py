"""The writing side of tokenize_to_cache: finished rows, in row order, into the cache's
Parquet parts and its flat token store, each by a thread of its own.

Parquet encoding, zstd and the flat store's packing, hashing and writes all release the GIL,
so the two writers run beside the thread that reads (and renders) the inputs: on two cores
a pre-tokenized input is read, encoded into parts and written flat at the same time. Each
writer holds at most `DEPTH` batches; both see the same read-only arrays.
"""
from __future__ import annotations

import os
from collections import deque

import numpy as np

from packtool.tokenize.cache import FLAT_DIR, CacheWriter
from packtool.tokenize.flat_builder import FlatTokensBuilder
from packtool.workers import thread_pool

DEPTH = 4  # batches queued per writer


class CacheSink:
    """Rows in, cache parts + flat store out, under the temporary build directory `tmp`."""

    def __init__(self, tmp: str, token_lists: bool = True) -> None:
        self.writer = CacheWriter(tmp, checksums=True, token_lists=token_lists)
        self.flat = FlatTokensBuilder(os.path.join(tmp, FLAT_DIR))
        self.pools = (thread_pool(1, "packtool-parts"), thread_pool(1, "packtool-flat"))
        self.pending: deque = deque()

    def add(self, ids: np.ndarray, mask: np.ndarray | None, lens: np.ndarray, src: np.ndarray,
            fi: int, sides: list | None = None, side_cols=()) -> None:
        """Rows (mask None: every token is a target; `sides`: each side column's values of the
        same tokens, flat, in flat/ only); a write error is raised here, on a later call, or by
        close()."""
        self.pending.append((self.pools[0].submit(self.writer.add, ids, mask, lens, src, fi),
                             self.pools[1].submit(self.flat.add, ids, mask, lens, sides, side_cols)))
        while self.pending and (len(self.pending) > DEPTH
                                or all(f.done() for f in self.pending[0])):
            for f in self.pending.popleft():
                f.result()

    def close(self, side=()) -> tuple[list[dict], dict]:
        """The cache parts, and cache.json's records of the files written (parts and flat store,
        side columns `side` included)."""
        while self.pending:
            for f in self.pending.popleft():
                f.result()
        parts = self.pools[0].submit(self.writer.close).result()
        flat = self.pools[1].submit(self.flat.close, side).result()
        for p in self.pools:
            p.shutdown()
        return parts, {**self.writer.records, **flat}

    def abort(self) -> None:
        for p in self.pools:
            p.shutdown(wait=True, cancel_futures=True)
        self.flat.abort()
