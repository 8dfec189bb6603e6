"""Flat, memory-mapped token store for the writer's random access.

The tokenized cache is Parquet (columnar, compressed, user-facing). Slabs are shuffled, so
every row group of output touches rows from everywhere in the input; re-reading Parquet row
groups for that is quadratic. Tokenization writes three flat files beside the cache (or one
pass over the cache rebuilds them): gathering a row group of slabs is then a pread of each
span (io/pread_gather.py), and resident memory stays bounded by the output buffers rather
than the dataset.
"""
from __future__ import annotations

import mmap
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_FILES = ("ids.i32", "mask.u8", "offsets.npy")
_BUILD_ROWS = 2048  # rows decoded at a time per thread while rebuilding the store


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


def build_flat_tokens(parquet_files: list[str], directory: str,
                      threads: int | None = None) -> FlatTokens:
    """Turn the cache's `input_ids`/`loss_mask` (rows sorted by source_index) into flat files.
    Row groups are decoded by up to `threads` threads (default: one per core), each writing
    its rows at their place (the `length` column says where, before anything is decoded).
    Written under a temporary name and renamed, so a half-built store is never opened."""
    if all(os.path.exists(os.path.join(directory, f)) for f in _FILES):
        return FlatTokens.open(directory)
    groups, lens, row_base = [], [], 0  # (file, row group, first row, its lengths)
    for path in parquet_files:
        pf = pq.ParquetFile(path)
        n = pf.read(columns=["length"]).column(0).to_numpy().astype(np.int64)
        starts = np.cumsum([0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
        groups += [(path, g, row_base + int(starts[g]), n[starts[g]:starts[g + 1]])
                   for g in range(pf.num_row_groups)]
        lens.append(n)
        row_base += n.size
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tmp = directory + f".tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    fi = os.open(os.path.join(tmp, "ids.i32"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fm = os.open(os.path.join(tmp, "mask.u8"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fi, int(offsets[-1]) * 4)
        os.ftruncate(fm, int(offsets[-1]))

        def one(job) -> None:  # one row group, a few thousand rows at a time (bounded memory)
            path, g, row0, expect = job
            at, done = int(offsets[row0]), 0
            for t in pq.ParquetFile(path).iter_batches(_BUILD_ROWS, row_groups=[g], use_threads=False,
                                                       columns=["input_ids", "loss_mask"]):
                ids, mask = t.column(0), t.column(1)
                io_, mo = ids.offsets.to_numpy(), mask.offsets.to_numpy()
                want = expect[done:done + t.num_rows]
                if not (np.array_equal(np.diff(io_), want) and np.array_equal(np.diff(mo), want)):
                    raise ValueError(f"{path}: row group {g}: token lists disagree with the "
                                     f"`length` column; the cache is damaged: delete it and re-run")
                _pwrite_all(fi, ids.values.to_numpy(zero_copy_only=False)[io_[0]:io_[-1]].astype(np.int32, copy=False), at * 4)
                _pwrite_all(fm, mask.values.to_numpy(zero_copy_only=False)[mo[0]:mo[-1]].astype(np.uint8, copy=False), at)
                at += int(io_[-1] - io_[0])
                done += t.num_rows
            if done != expect.size:
                raise ValueError(f"{path}: row group {g} has {done} rows, its metadata says "
                                 f"{expect.size}; the cache is damaged: delete it and re-run")

        n_threads = max(1, min(len(groups), threads or os.cpu_count() or 1))
        with ThreadPoolExecutor(n_threads, thread_name_prefix="packtool-flat") as ex:
            futs = [ex.submit(one, job) for job in groups]
            try:
                for f in futs:
                    f.result()
            except BaseException:
                for f in futs:  # nothing more starts; the running groups finish
                    f.cancel()
                raise
    except BaseException:
        os.close(fi)
        os.close(fm)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.close(fi)
    os.close(fm)
    # the pool reuses decoded groups' pages while building; hand them back once, at the end
    pa.default_memory_pool().release_unused()
    np.save(os.path.join(tmp, "offsets.npy"), offsets)
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return FlatTokens.open(directory)


def _pwrite_all(fd: int, a: np.ndarray, at: int) -> None:
    view = memoryview(np.ascontiguousarray(a)).cast("B")
    while view:  # pwrite may write less than asked
        k = os.pwrite(fd, view, at)
        view, at = view[k:], at + k


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
