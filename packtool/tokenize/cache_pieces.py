"""A tokenized cache entry's Parquet parts as runs of row groups, known from their footers alone:
the units of work over an entry that is read in pieces (the planner's shards of rows with
their lengths, `cache_shards`; the Ray engine's write tasks, `cache_pieces`). tokenize.cache
re-exports both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from packtool.arrays import np_of
from packtool.errors import PacktoolConfigError, arg
from packtool.storage import arrow_file
from packtool.tokenize.cache_entry import entry_reads


def cache_pieces(cache, groups_per_task: int = 8) -> list[tuple[str, list[int], int, int]]:
    """The cache as runs of row groups: (file, row groups, first cache row, rows), from footers."""
    pieces, row = [], 0
    for path in cache.parquet_files:
        with entry_reads(cache.root):
            md = pq.ParquetFile(arrow_file(path)).metadata
        for g0 in range(0, md.num_row_groups, groups_per_task):
            gs = list(range(g0, min(g0 + groups_per_task, md.num_row_groups)))
            n = sum(md.row_group(g).num_rows for g in gs)
            pieces.append((path, gs, row, n))
            row += n
    return pieces


@dataclass(frozen=True)
class CacheLengths:
    """The `length` column of some cache rows: read by the shard task, where it runs."""
    pieces: tuple  # ((parquet file, row groups, first, end), ...): rows [first, end) of the groups

    def __call__(self) -> np.ndarray:
        parts = []
        for path, gs, a, e in self.pieces:
            with entry_reads(path):  # a part of the entry: a store's requests name --cache-dir
                parts.append(np_of(pq.ParquetFile(arrow_file(path)).read_row_groups(list(gs), columns=["length"])
                                   .column(0))[a:e])
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def cache_shards(cache, shard_rows: int) -> list[tuple[int, CacheLengths]]:
    """Plan shards of `shard_rows` cache rows (the last may be smaller), as (first row, reader)."""
    if shard_rows < 1:
        raise PacktoolConfigError(f"{arg('plan_shard_rows')} must be >= 1 to plan in shards, got {shard_rows}; "
                                  f"0 plans every row at once (packtool.planning.core.plan)")
    pieces = cache_pieces(cache)
    total = sum(p[3] for p in pieces)
    shards = []
    for a in range(0, total, shard_rows):
        e = min(a + shard_rows, total)
        shards.append((a, CacheLengths(tuple((path, tuple(gs), max(a - r0, 0), min(e - r0, n))
                                             for path, gs, r0, n in pieces if r0 < e and r0 + n > a))))
    return shards
