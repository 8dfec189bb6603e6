"""Flat, memory-mapped token store for the writer's random access.

The tokenized cache is Parquet (columnar, compressed, user-facing). Slabs are shuffled, so
every row group of output touches rows from everywhere in the input; re-reading Parquet row
groups for that is quadratic. One streaming pass turns the cache into three flat files that
numpy memory-maps: gathering a row group of slabs is then a copy, and resident memory stays
bounded by the page cache rather than the dataset.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_FILES = ("ids.i32", "mask.u8", "offsets.npy")


@dataclass(frozen=True)
class FlatTokens:
    ids: np.ndarray  # int32 memmap, all rows concatenated in source_index order
    mask: np.ndarray  # uint8 memmap
    offsets: np.ndarray  # int64[n_rows+1]
    directory: str | None = None  # set when the arrays map files there (the writer preads)

    @property
    def num_rows(self) -> int:
        return self.offsets.size - 1

    @classmethod
    def open(cls, directory: str) -> "FlatTokens":
        offsets = np.load(os.path.join(directory, "offsets.npy"))
        n = int(offsets[-1])
        ids = np.memmap(os.path.join(directory, "ids.i32"), np.int32, "r", shape=(n,)) if n else np.zeros(0, np.int32)
        mask = np.memmap(os.path.join(directory, "mask.u8"), np.uint8, "r", shape=(n,)) if n else np.zeros(0, np.uint8)
        for a in (ids, mask):
            # shuffled slabs read short runs from everywhere: no read-ahead or fault-around,
            # which would map (and count in RSS) far more than the tokens copied
            mm = getattr(a, "_mmap", None)
            if mm is not None and hasattr(mmap, "MADV_RANDOM"):
                mm.madvise(mmap.MADV_RANDOM)
        return cls(ids, mask, offsets, directory)


def build_flat_tokens(parquet_files: list[str], directory: str) -> FlatTokens:
    """Stream the cache's `input_ids`/`loss_mask` (rows sorted by source_index) into flat files.
    Written under a temporary name and renamed, so a half-built store is never opened."""
    if all(os.path.exists(os.path.join(directory, f)) for f in _FILES):
        return FlatTokens.open(directory)
    tmp = directory + f".tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    lengths = []
    with open(os.path.join(tmp, "ids.i32"), "wb") as fi, open(os.path.join(tmp, "mask.u8"), "wb") as fm:
        pool = pa.default_memory_pool()
        for path in parquet_files:
            pf = pq.ParquetFile(path)
            for g in range(pf.num_row_groups):  # one row group decoded at a time
                batch = pf.read_row_group(g, columns=["input_ids", "loss_mask"]).combine_chunks()
                if batch.num_rows == 0:
                    continue
                ids, mask = batch.column(0).chunk(0), batch.column(1).chunk(0)
                offs = ids.offsets.to_numpy()
                lengths.append(np.diff(offs))
                ids.values.to_numpy(zero_copy_only=False)[offs[0]:offs[-1]].astype(np.int32, copy=False).tofile(fi)
                mo = mask.offsets.to_numpy()
                mask.values.to_numpy(zero_copy_only=False)[mo[0]:mo[-1]].astype(np.uint8, copy=False).tofile(fm)
                del batch, ids, mask
    # once, not per row group: handing pages back for the next group to fault in again
    # costs ~40% of the build; the pool reuses them group after group instead
    pool.release_unused()
    lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    np.save(os.path.join(tmp, "offsets.npy"), np.concatenate(([0], np.cumsum(lens))).astype(np.int64))
    if os.path.exists(directory):
        import shutil
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return FlatTokens.open(directory)


def flat_store_dir(cache) -> str:
    return os.path.join(cache.root, "flat")


def flat_store_for(cache) -> FlatTokens:
    """The flat store beside a tokenized cache (built once, then reused)."""
    return build_flat_tokens(list(cache.parquet_files), flat_store_dir(cache))


class FlatTokensBuilder:
    """Writes a flat store while its rows are produced: `tokenize_to_cache` feeds it the same
    arrays it writes to the cache parts, so the first pack opens the store instead of
    re-reading the Parquet cache. Rows must be added in cache row order. The store is meant
    to live inside a directory that is published by one rename (the cache's temporary
    directory), so files are written in place; offsets.npy is written last, by close()."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self._ids = open(os.path.join(directory, "ids.i32"), "wb", buffering=0)
        self._mask = open(os.path.join(directory, "mask.u8"), "wb", buffering=0)
        self._lengths: list[np.ndarray] = []

    def add(self, ids: np.ndarray, mask: np.ndarray, lengths: np.ndarray) -> None:
        """Append rows: `ids` (int32) and `mask` (uint8) are the rows concatenated, `lengths`
        their token counts."""
        ids = np.ascontiguousarray(ids, np.int32)
        mask = np.ascontiguousarray(mask, np.uint8)
        lengths = np.asarray(lengths, np.int64)
        if ids.size != mask.size or ids.size != int(lengths.sum()):
            raise ValueError(f"flat store rows disagree: {ids.size} ids, {mask.size} mask values, "
                             f"lengths sum to {int(lengths.sum())}")
        for f, a in ((self._ids, ids), (self._mask, mask)):
            view = memoryview(a).cast("B")
            while view:  # unbuffered writes may be short
                view = view[f.write(view):]
        self._lengths.append(lengths)

    def close(self) -> None:
        self._ids.close()
        self._mask.close()
        lens = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        offsets = np.zeros(lens.size + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        np.save(os.path.join(self.directory, "offsets.npy"), offsets)

    def abort(self) -> None:
        """Close the files; the caller removes the enclosing temporary directory."""
        self._ids.close()
        self._mask.close()
