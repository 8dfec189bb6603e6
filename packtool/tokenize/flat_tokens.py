"""Flat token store for the writer's random access.

The tokenized cache is Parquet (columnar, compressed, user-facing). Slabs are shuffled, so
every row group of output touches rows from everywhere in the input; re-reading Parquet row
groups for that is quadratic. Tokenization writes a flat file beside the cache (or one pass
over the cache rebuilds it): gathering a row group of slabs is then one pread per span
(slabs/gather.py), and resident memory stays bounded by the output buffers rather than
the dataset.

One int32 per token holds both the id and the loss flag: `id | loss << 31`. Ids are
non-negative int32 (the cache refuses others), so bit 31 is free, and a span is one read
instead of two: with ~300-token sequences the per-call cost of pread dominates its copy.
"""
from __future__ import annotations

import mmap
import os
import shutil
from dataclasses import dataclass

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.free_memory import mapped
from packtool.output.files import NEW_FILE_MODE, make_temp_dir
from packtool.output.leftovers import mark, remove_tree, unmark
from packtool.tokenize.cache import (
    CHECKSUM_ALG,
    FLAT_DIR,
    CacheDamagedError,
    TokenizedCache,
    file_record,
    mask_values,
    read_cache_json,
    side_files,
    write_cache_json,
)
from packtool.tokenize.side_store import sparse_problem
from packtool.workers import cores, thread_pool

TOKENS_FILE = "tokens.i32"
_FILES = (TOKENS_FILE, "offsets.npy")
_BUILD_ROWS = 2048  # rows decoded at a time per thread while rebuilding the store
ID_BITS = 0x7FFFFFFF


@nb.njit(nogil=True, cache=True, inline="always")
def token_id(v):
    return v & ID_BITS


@nb.njit(nogil=True, cache=True, inline="always")
def token_loss(v):
    return (v >> 31) & 1


@nb.njit(nogil=True, cache=True)
def _pack(ids, mask, out):
    """out = ids | (mask != 0) << 31; the index of the first negative id, or -1."""
    for i in range(ids.size):
        v = ids[i]
        if v < 0:
            return i
        out[i] = v | ((-1 << 31) if mask[i] != 0 else 0)
    return -1


@nb.njit(nogil=True, cache=True)
def _pack_targets(ids, out):
    """out = ids | 1 << 31 (every token a target); the index of the first negative id, or -1."""
    for i in range(ids.size):
        v = ids[i]
        if v < 0:
            return i
        out[i] = v | (-1 << 31)
    return -1


def pack_tokens(ids: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The store's int32 words for these ids (non-negative int32) and loss flags (None:
    every token is a target)."""
    ids = np.ascontiguousarray(ids, np.int32)
    out = np.empty(ids.size, np.int32)
    if mask is None:
        bad = _pack_targets(ids, out)
    else:
        mask = np.ascontiguousarray(mask, np.uint8)
        if ids.size != mask.size:
            raise ValueError(f"{ids.size} ids but {mask.size} loss flags")
        bad = _pack(ids, mask, out)
    if bad >= 0:
        raise ValueError(f"token id {int(ids[bad])} at flat position {bad} is negative; token "
                         f"ids must be in 0..2**31-1")
    return out


@dataclass(frozen=True)
class FlatTokens:
    tokens: np.ndarray  # int32 `id | loss << 31`, all rows concatenated in source_index order
    offsets: np.ndarray  # int64[n_rows+1]
    directory: str | None = None  # set when `tokens` maps the file there (the writer preads)
    side: tuple = ()  # SideColumns (cache.json order): their files are side_files(k) in `directory`
    side_values: tuple = ()  # or in memory (no directory): per column, width values per token

    def side_rows(self, k: int) -> np.ndarray:
        """In-memory side column k as a (tokens, width * itemsize) byte matrix."""
        c = self.side[k]
        return np.ascontiguousarray(self.side_values[k]).view(np.uint8).reshape(-1, c.width * c.np_dtype.itemsize)

    def side_paths(self, k: int) -> list[str]:
        """The flat store's files of side column k (cache.side_files order)."""
        return [os.path.join(self.directory, n) for n in side_files(k, self.side[k].width)]

    @property
    def num_rows(self) -> int:
        return self.offsets.size - 1

    @classmethod
    def from_arrays(cls, ids: np.ndarray, mask: np.ndarray, offsets: np.ndarray, side=(),
                    side_values=()) -> "FlatTokens":
        """An in-memory store (the Ray engine's shard-local rows, tests)."""
        return cls(pack_tokens(ids, mask), np.asarray(offsets, np.int64), None, tuple(side), tuple(side_values))

    def check_side(self) -> "FlatTokens":
        """Every side column's files are as long as the tokens say: one value per token (width
        1), or counts, index and kept values that agree (width K, tokenize/side_store.py)."""
        n = int(self.offsets[-1])
        for k, c in enumerate(self.side):
            paths = self.side_paths(k)
            if c.width == 1:
                have = os.path.getsize(paths[0]) if os.path.exists(paths[0]) else -1
                problem = None if have == n * c.np_dtype.itemsize else \
                    f"{os.path.basename(paths[0])} has {have} bytes, {n * c.np_dtype.itemsize} expected"
            else:
                problem = sparse_problem(paths, c, n)
            if problem:
                raise CacheDamagedError(f"the flat store's side column {c.name}: {problem}; delete the cache "
                                        f"folder and re-run", path=self.directory)
        return self

    def decoded(self, a: int = 0, b: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids int32, loss uint8) of flat positions [a, b): a copy, so keep ranges small."""
        t = np.asarray(self.tokens[a:b])
        return t & ID_BITS, ((t >> 31) & 1).astype(np.uint8)

    @classmethod
    def open(cls, directory: str) -> "FlatTokens":
        try:
            offsets = np.load(os.path.join(directory, "offsets.npy"), allow_pickle=False)
            if offsets.dtype != np.int64 or offsets.ndim != 1 or not offsets.size:
                raise ValueError(f"offsets of dtype {offsets.dtype}, shape {offsets.shape}")
        except (OSError, ValueError, EOFError) as e:
            raise CacheDamagedError(f"the flat token store's offsets.npy cannot be read ({e}); "
                                    f"delete the folder (it is rebuilt from the cache) and re-run",
                                    path=directory) from None
        n = int(offsets[-1])
        if not n:
            return cls(np.zeros(0, np.int32), offsets, directory)
        path = os.path.join(directory, TOKENS_FILE)
        if os.path.getsize(path) != 4 * n:
            raise CacheDamagedError(f"the flat token store is inconsistent ({TOKENS_FILE} has "
                                    f"{os.path.getsize(path)} bytes, offsets.npy says {4 * n}); "
                                    f"delete it (it is rebuilt from the cache) and re-run",
                                    path=directory)
        with mapped(path, "the flat token store"):
            tokens = np.memmap(path, np.int32, "r", shape=(n,))
        # shuffled slabs read short runs from everywhere: no read-ahead or fault-around,
        # which would map (and count in RSS) far more than the tokens copied
        mm = getattr(tokens, "_mmap", None)
        if mm is not None and hasattr(mmap, "MADV_RANDOM"):
            mm.madvise(mmap.MADV_RANDOM)
        return cls(tokens, offsets, directory)


def write_flat_store(directory: str, ids: np.ndarray, mask: np.ndarray,
                     offsets: np.ndarray) -> FlatTokens:
    """A store from whole arrays in one go (tests and benchmarks)."""
    os.makedirs(directory, exist_ok=True)
    pack_tokens(ids, mask).tofile(os.path.join(directory, TOKENS_FILE))
    np.save(os.path.join(directory, "offsets.npy"), np.asarray(offsets, np.int64))
    return FlatTokens.open(directory)


def build_flat_tokens(parquet_files: list[str], directory: str,
                      threads: int | None = None) -> FlatTokens:
    """Turn the cache's `input_ids`/`loss_mask` (rows sorted by source_index) into flat files.
    Row groups are decoded by up to `threads` threads (default: one per core), each writing
    its rows at their place (the `length` column says where, before anything is decoded).
    Written under a temporary name and renamed, so a half-built store is never opened."""
    if all(os.path.exists(os.path.join(directory, f)) for f in _FILES):
        return FlatTokens.open(directory)
    _refuse_foreign(directory)
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
    tmp = make_temp_dir(os.path.dirname(directory), f"{os.path.basename(directory)}.tmp-{os.getpid()}-")
    mark(tmp, made=True)  # the next run's sweep removes it only on this proof (output.leftovers)
    fi = os.open(os.path.join(tmp, TOKENS_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, NEW_FILE_MODE)
    try:
        os.ftruncate(fi, int(offsets[-1]) * 4)

        def one(job) -> None:  # one row group, a few thousand rows at a time (bounded memory)
            path, g, row0, expect = job
            at, done = int(offsets[row0]), 0
            for t in pq.ParquetFile(path).iter_batches(_BUILD_ROWS, row_groups=[g], use_threads=False,
                                                       columns=["input_ids", "loss_mask"]):
                ids, mask = t.column(0), t.column(1)
                io_, mo = ids.offsets.to_numpy(), mask.offsets.to_numpy()
                want = expect[done:done + t.num_rows]
                held = mask.is_valid().to_numpy(zero_copy_only=False)  # null: all targets
                if not (np.array_equal(np.diff(io_), want)
                        and np.array_equal(np.diff(mo)[held], want[held])):
                    raise CacheDamagedError(f"{path}: row group {g}: token lists disagree with the "
                                     f"`length` column; the cache is damaged: delete it and re-run")
                try:
                    words = pack_tokens(ids.values.to_numpy(zero_copy_only=False)[io_[0]:io_[-1]],
                                        mask_values(ids, mask))
                except ValueError as e:
                    raise CacheDamagedError(f"{path}: row group {g}: {e}; the cache is damaged: "
                                            f"delete it and re-run") from None
                _pwrite_all(fi, words, at * 4)
                at += int(io_[-1] - io_[0])
                done += t.num_rows
            if done != expect.size:
                raise CacheDamagedError(f"{path}: row group {g} has {done} rows, its metadata says "
                                 f"{expect.size}; the cache is damaged: delete it and re-run")

        n_threads = max(1, min(len(groups), threads or cores()))
        with thread_pool(n_threads, "packtool-flat") as ex:
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
        remove_tree(tmp)
        raise
    os.close(fi)
    # the pool reuses decoded groups' pages while building; hand them back once, at the end
    pa.default_memory_pool().release_unused()
    np.save(os.path.join(tmp, "offsets.npy"), offsets)
    if os.path.exists(directory):
        shutil.rmtree(directory)  # packtool's files only (_refuse_foreign, before the build)
    os.replace(tmp, directory)  # with its marker: a kill before the unmark leaves it provable
    unmark(directory)
    return FlatTokens.open(directory)


def _refuse_foreign(directory: str) -> None:
    """The store replaced whole takes along only what packtool wrote in it (output.entry_files):
    a user's file there is named and left, never deleted."""
    from packtool.output.entry_files import foreign_in_flat
    foreign = foreign_in_flat(directory)
    if foreign:
        raise CacheDamagedError(f"is rebuilt whole but holds files packtool did not write there "
                                f"({', '.join(foreign[:3])}{' and more' if len(foreign) > 3 else ''}); "
                                f"move them out of it and re-run", path=directory)


def _pwrite_all(fd: int, a: np.ndarray, at: int) -> None:
    view = memoryview(np.ascontiguousarray(a)).cast("B")
    while view:  # pwrite may write less than asked
        k = os.pwrite(fd, view, at)
        view, at = view[k:], at + k


def flat_store_dir(cache) -> str:
    return os.path.join(cache.root, FLAT_DIR)


def cache_of_store(directory: str):
    """The tokenized cache whose flat store `directory` is (`flat_store_dir`'s inverse), or None
    for a store of its own (nothing beside it says what it was made from)."""
    directory = os.path.normpath(directory)
    root = os.path.dirname(directory)
    if os.path.basename(directory) != FLAT_DIR or not os.path.isfile(os.path.join(root, "cache.json")):
        return None
    return TokenizedCache(root)


def flat_store_for(cache) -> FlatTokens:
    """The flat store beside a tokenized cache (built once, then reused). A store built here
    (a Ray-built cache, or one whose flat/ was removed) is held to the checksums cache.json
    recorded for it, or, when there are none, has them recorded: the next reuse checks it."""
    d = flat_store_dir(cache)
    built = not all(os.path.exists(os.path.join(d, f)) for f in _FILES)
    if built and getattr(cache, "flat_only", False):  # nothing to rebuild it from
        raise CacheDamagedError("the flat token store, the only copy of this cache's tokens, is "
                                "missing; delete the folder and re-run (it is rebuilt)", path=cache.root)
    if built:
        from packtool.tokenize.cache_root import refuse_unwritable_entry
        refuse_unwritable_entry(cache.root, "holds no flat token store (built by --engine ray, or flat/ "
                                            "removed), which the local engine builds there before packing")
    store = build_flat_tokens(list(cache.parquet_files), d)
    if built:
        _hold_to_record(cache, d)
    side = getattr(cache, "side_columns", ())
    return FlatTokens(store.tokens, store.offsets, store.directory, side).check_side() if side else store


def _hold_to_record(cache, d: str) -> None:
    meta = read_cache_json(cache.root)
    sums = meta.setdefault("checksums", {})
    new = {f"{FLAT_DIR}/{n}": file_record(os.path.join(d, n)) for n in _FILES}
    for name, rec in new.items():
        old = sums.get(name)
        if old is not None and old.get(CHECKSUM_ALG) != rec[CHECKSUM_ALG]:
            raise CacheDamagedError(f"the flat token store rebuilt from the cache's Parquet does "
                                    f"not match cache.json's checksum of {name}; delete the "
                                    f"folder and re-run (it is rebuilt)", path=cache.root)
    if any(name not in sums for name in new):
        sums.update(new)
        write_cache_json(cache.root, meta)
        cache.meta["checksums"] = sums
