"""The tokenized cache: a documented Parquet dataset that later plans and packs reuse.

Layout (see packtool/docs/TOKENIZATION.md):
    <cache_dir>/<fingerprint[:32]>/cache.json                    what it is and how it was made
    <cache_dir>/<fingerprint[:32]>/data/part-00000.parquet ...   rows in source_index order
    <cache_dir>/<fingerprint[:32]>/flat/                          the same rows as flat files
`data/` holds only Parquet, so any Parquet reader can open it as a dataset. `flat/` is the
pack's flat token store (tokenize/flat_tokens.py), written by tokenize_to_cache alongside the parts.
Columns: input_ids list<int32>, loss_mask list<uint8> (null on a row whose every token is a
target: tokenize/cache_parts.py), length int32, source_index int64 (global row across the
inputs in read order), source_file int32 (index into cache.json inputs).
Built under a temporary name and renamed (flat/ included), so a cache directory is complete or absent.

Trust: cache.json records the size and xxh3-128 of every file the cache holds (`checksums`:
the Parquet parts and, once built, flat/tokens.i32 and flat/offsets.npy), and the key
(`fingerprint`) covers the inputs' content, not their size and mtime. A cache is reused only
after every recorded file is re-hashed and matches (`cache_problem`); anything else -- a
flipped byte, a truncated or missing file, a garbled cache.json -- is reported in one line
and the cache is rebuilt (tokenize/pipeline.py).

The entry's names, cache.json, each file's record and the check of a whole entry are
tokenize/cache_entry.py's; the parts as runs of row groups (plan shards, Ray tasks)
tokenize/cache_pieces.py's; this module opens and reads an entry and publishes a built one. It
re-exports both.
"""
from __future__ import annotations

import functools
import os
from collections import OrderedDict
from dataclasses import asdict
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.arrays import np_of
from packtool.errors import PacktoolError, PacktoolFormatError, PacktoolIndexError, PacktoolInputError
from packtool.free_memory import mapped
from packtool.output.files import share_as_mkdir
from packtool.output.leftovers import remove_tree, unmark
from packtool.side import side_columns_from_manifest
from packtool.storage import STORE_ERRORS, arrow_file, is_file, is_uri, join_uri, read_range
from packtool.tokenize.cache_entry import (  # the entry's format and trust, re-exported: its readers import them from here
    CACHE_FORMAT,
    CACHE_JSON_BYTES,  # noqa: F401
    CACHE_VERSION,
    FLAT_DIR,
    FLAT_FILES,
    SIDE_STORE,
    CacheDamagedError,
    cache_checksums,
    entry_problem,
    entry_reads,
    file_problem,  # noqa: F401
    read_cache_json,
    side_file,  # noqa: F401
    side_files,
    write_cache_json,
)
from packtool.tokenize.cache_parts import (
    CHECKSUM_ALG,  # noqa: F401
    DATA_DIR,
    SCHEMA,  # noqa: F401  (re-exported: the Ray engine and tests import it from here)
    CacheWriter,  # noqa: F401
    file_record,  # noqa: F401
    mask_values,
)
from packtool.tokenize.cache_pieces import CacheLengths, cache_pieces, cache_shards  # noqa: F401  (re-exported)
from packtool.tokenize.encode import TokenizerInfo
from packtool.tokenize.flat_ranges import flat_rows
from packtool.tokenize.side_store import read_dense


class InputFileInfo(NamedTuple):
    path: str
    bytes: int
    sha256: str


class Rows(NamedTuple):
    """Rows gathered by `TokenizedCache.read_rows`, in the order requested: row k is
    input_ids[offsets[k]:offsets[k+1]] (int32) with loss_mask over the same range (uint8)."""
    input_ids: np.ndarray
    loss_mask: np.ndarray
    offsets: np.ndarray   # int64, len(indices) + 1


@numba.njit(cache=True)
def _gather(values, offsets, rows, out_offsets, out):
    for k in range(rows.shape[0]):
        s = offsets[rows[k]]
        e = offsets[rows[k] + 1]
        d = out_offsets[k]
        for j in range(e - s):
            out[d + j] = values[s + j]


def _flat(col: pa.ChunkedArray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (flat values, int64 offsets), zero-copy where Arrow allows."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offs = np_of(arr.offsets).astype(np.int64)
    vals = np_of(arr.values)[offs[0]:offs[-1]]
    return np.ascontiguousarray(vals, dtype=dtype), offs - offs[0]


def _entry_requests(method):
    """A TokenizedCache method whose requests of a store entry name --cache-dir (entry_reads),
    wherever it runs (the driver, a plan or write task)."""
    @functools.wraps(method)
    def read(self, *args, **kw):
        with entry_reads(self.root):
            return method(self, *args, **kw)
    return read


class TokenizedCache:
    """A finished cache directory. Cheap to open: only cache.json and Parquet footers are read."""

    def __init__(self, path: str, reused: bool = False) -> None:
        path = path if is_uri(path) else os.path.normpath(path)
        if _base(path) == DATA_DIR and not is_uri(path):
            path = os.path.dirname(path)
        with entry_reads(path):
            self._open(path, reused)

    def _open(self, path: str, reused: bool) -> None:
        meta_path = _join(path, "cache.json")
        if not is_file(meta_path):
            raise PacktoolInputError("not a tokenized cache (no cache.json)", path=path)
        self.meta: dict = read_cache_json(path)
        if self.meta.get("format") != CACHE_FORMAT or self.meta.get("version") != CACHE_VERSION:
            raise PacktoolInputError("tokenized cache of another format/version; delete it", path=path)
        self.root = path                           # holds cache.json and data/
        self.path = _join(path, DATA_DIR)   # the Parquet dataset
        self.reused = reused
        try:
            self.fingerprint: str = self.meta["fingerprint"]
            self.num_rows: int = int(self.meta["num_rows"])
            self.num_tokens: int = int(self.meta["num_tokens"])
            self.num_loss_tokens: int = int(self.meta["num_loss_tokens"])
            self.skipped: dict = dict(self.meta["skipped"])
            self.tokenizer_info = TokenizerInfo(**self.meta["tokenizer"]) if self.meta["tokenizer"] else None
            self.input_files = [InputFileInfo(d["path"], d["bytes"], d["sha256"]) for d in self.meta["inputs"]]
            self.parquet_files = [_join(self.path, p["file"]) for p in self.meta["parts"]]
            # "flat": token lists in flat/ only (pre-tokenized inputs, tokenize/cache_parts.py)
            self.flat_only: bool = self.meta.get("token_lists", "parts") == "flat"
            self.side_columns = side_columns_from_manifest(self.meta.get("side_columns"), meta_path)
            # NaN / +-inf per float side column (tokenize/side_values.py): reported by pack
            self.side_nonfinite: dict = dict(self.meta.get("side_nonfinite") or {})
        except (KeyError, TypeError, ValueError, AttributeError, PacktoolFormatError) as e:
            raise CacheDamagedError(f"cache.json is damaged ({type(e).__name__}: {e}); delete "
                                    f"the folder and re-run (it is rebuilt)", path=path) from None
        if self.side_columns and self.meta.get("side_store") != SIDE_STORE:
            raise PacktoolInputError(f"tokenized cache of another side column layout ({self.meta.get('side_store', 1)}, "
                                     f"not {SIDE_STORE}); delete it", path=path)
        self._rg_start: np.ndarray | None = None
        self._rg_loc: list[tuple[int, int]] = []
        self._rg_cache: OrderedDict = OrderedDict()

    def __repr__(self) -> str:
        return f"TokenizedCache({self.path!r}, rows={self.num_rows}, tokens={self.num_tokens})"

    @_entry_requests
    def _column(self, name: str) -> np.ndarray:
        # ParquetFile.read, not pq.read_table: the dataset layer imports pyarrow.compute and pandas
        # (tests/packing/test_lean_imports.py), and under truncate or split pack asks lengths() again
        parts = [np_of(pq.ParquetFile(arrow_file(p)).read(columns=[name]).column(0)) for p in self.parquet_files]
        return np.concatenate(parts) if parts else np.zeros(0)

    def lengths(self) -> np.ndarray:
        """Token count of every row (int64), in row order (= source_index order)."""
        return self._column("length").astype(np.int64)

    def length_batches(self, rows: int = 1 << 20):
        """`lengths()` a batch of up to `rows` at a time, in row order: memory bounded whatever the rows."""
        with entry_reads(self.root):  # it names only requests below the entry: the caller's between yields are theirs
            for p in self.parquet_files:
                for b in pq.ParquetFile(arrow_file(p)).iter_batches(batch_size=rows, columns=["length"]):
                    yield np_of(b.column(0)).astype(np.int64)

    def source_indices(self) -> np.ndarray:
        """Global input row of every cache row; equals arange(num_rows) unless rows were skipped."""
        return self._column("source_index").astype(np.int64)

    @_entry_requests
    def _row_groups(self) -> np.ndarray:
        if self._rg_start is None:
            starts = [0]
            for fi, p in enumerate(self.parquet_files):
                md = pq.ParquetFile(arrow_file(p)).metadata
                for g in range(md.num_row_groups):
                    self._rg_loc.append((fi, g))
                    starts.append(starts[-1] + md.row_group(g).num_rows)
            self._rg_start = np.asarray(starts, np.int64)
        return self._rg_start

    @_entry_requests
    def _load_group(self, g: int):
        hit = self._rg_cache.get(g)
        if hit is not None:
            self._rg_cache.move_to_end(g)
            return hit
        fi, rg = self._rg_loc[g]
        t = pq.ParquetFile(arrow_file(self.parquet_files[fi])).read_row_group(rg, columns=["input_ids", "loss_mask"])
        ids, offs = _flat(t.column("input_ids"), np.int32)
        mask = mask_values(t.column("input_ids"), t.column("loss_mask"))
        self._rg_cache[g] = (ids, mask, offs)
        while len(self._rg_cache) > 8:  # bounded: a few row groups of a few M tokens each
            self._rg_cache.popitem(last=False)
        return ids, mask, offs

    def read_rows(self, indices) -> Rows:
        """Random access by cache row position (0..num_rows-1). Reads each needed row group once
        (columns input_ids/loss_mask only) and gathers with a compiled loop. For whole-dataset
        shuffled access prefer streaming `parquet_files` once (rows are in order)."""
        idx = np.asarray(indices, np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_rows):
            bad = int(idx[(idx < 0) | (idx >= self.num_rows)][0])
            raise PacktoolIndexError(f"indices: row {bad} out of range; the cache holds rows 0..{self.num_rows - 1}",
                                     path=self.root)
        if self.flat_only:
            return self._read_flat(idx)
        starts = self._row_groups()
        group = np.searchsorted(starts, idx, side="right") - 1
        out_len = np.zeros(idx.size, np.int64)
        pools = {}
        for g in np.unique(group):
            ids, mask, offs = self._load_group(int(g))
            sel = np.nonzero(group == g)[0]
            local = idx[sel] - starts[g]
            out_len[sel] = offs[local + 1] - offs[local]
            pools[int(g)] = (ids, mask, offs, sel, local)
        out_offs = np.zeros(idx.size + 1, np.int64)
        np.cumsum(out_len, out=out_offs[1:])
        out_ids = np.empty(int(out_offs[-1]), np.int32)
        out_mask = np.empty(int(out_offs[-1]), np.uint8)
        for ids, mask, offs, sel, local in pools.values():
            sub_offs = np.ascontiguousarray(out_offs[sel])
            _gather(ids, offs, local, sub_offs, out_ids)
            _gather(mask, offs, local, sub_offs, out_mask)
        return Rows(out_ids, out_mask, out_offs)

    def _flat_store(self) -> tuple[np.ndarray, np.ndarray]:
        """(words, offsets) of flat/ (format: tokenize/flat_tokens.py, which imports this
        module), checked against cache.json's row and token counts."""
        d = os.path.join(self.root, FLAT_DIR)
        try:
            offsets = np.load(os.path.join(d, FLAT_FILES[1]), allow_pickle=False)
            n = int(offsets[-1]) if offsets.size else -1
            ok = offsets.size == self.num_rows + 1 and n == self.num_tokens and \
                os.path.getsize(os.path.join(d, FLAT_FILES[0])) == 4 * n
        except (OSError, ValueError, EOFError):
            ok = False
        if not ok:
            raise CacheDamagedError("the flat token store is missing or disagrees with cache.json; "
                                    "delete the folder and re-run (it is rebuilt)", path=self.root)
        if not n:
            return np.zeros(0, np.int32), offsets
        with mapped(os.path.join(d, FLAT_FILES[0]), "the flat token store"):
            words = np.memmap(os.path.join(d, FLAT_FILES[0]), np.int32, "r", shape=(n,))
        return np.asarray(words), offsets

    def _read_flat(self, idx: np.ndarray) -> Rows:
        tokens, offsets = self._flat_rows_of_store(idx) if is_uri(self.root) else self._flat_store()
        idx = np.searchsorted(np.unique(idx), idx) if is_uri(self.root) else idx
        lens = offsets[idx + 1] - offsets[idx]
        out_offs = np.zeros(idx.size + 1, np.int64)
        np.cumsum(lens, out=out_offs[1:])
        words = np.empty(int(out_offs[-1]), np.int32)
        _gather(tokens, offsets, idx, out_offs, words)
        return Rows(words & 0x7FFFFFFF, ((words >> 31) & 1).astype(np.uint8), out_offs)

    @_entry_requests
    def _flat_rows_of_store(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(words, offsets) of the distinct rows of `idx`, in order, from a store entry's flat/, in
        requests bounded by the bytes spanned, not the rows (flat_ranges; the local store is mapped)."""
        return flat_rows(np.unique(idx), self._flat_offsets,
                         lambda a, n: self._flat_values(FLAT_FILES[0], np.dtype(np.int32), a, n))

    @_entry_requests
    def token_lists(self, path: str, groups, first: int) -> pa.Table:
        """`input_ids` and `loss_mask` (null rows: all targets) of the rows in row groups
        `groups` of part `path`, the first of which is cache row `first`; then, per side
        column k, `side{k}`: each row's values flat (width per token) from flat/."""
        if not self.flat_only:
            return pq.ParquetFile(arrow_file(path)).read_row_groups(list(groups), columns=["input_ids", "loss_mask"])
        md = pq.ParquetFile(arrow_file(path)).metadata
        n = sum(md.row_group(g).num_rows for g in groups)
        offs = self._flat_offsets(first, n + 1)
        a, e = int(offs[0]), int(offs[-1])
        offs = offs - a
        words = self._flat_values(FLAT_FILES[0], np.dtype(np.int32), a, e - a)
        po = pa.array(offs.astype(np.int32))
        cols = {"input_ids": pa.ListArray.from_arrays(po, pa.array(words & 0x7FFFFFFF)),
                "loss_mask": pa.ListArray.from_arrays(po, pa.array(((words >> 31) & 1).astype(np.uint8)))}
        for k, c in enumerate(self.side_columns):
            names = side_files(k, c.width)
            vals = (self._flat_values(names[0], np.dtype(c.np_dtype), a, e - a) if c.width == 1
                    else read_dense([_join(self.root, FLAT_DIR, n) for n in names], c, a, e))
            cols[f"side{k}"] = pa.ListArray.from_arrays(pa.array((offs * c.width).astype(np.int32)), pa.array(vals))
        return pa.table(cols)

    @_entry_requests
    def _flat_offsets(self, first: int, n: int) -> np.ndarray:
        """offsets.npy[first:first + n], read alone (a ranged read on a store): the header's
        shape must be the row count's."""
        path = _join(self.root, FLAT_DIR, FLAT_FILES[1])
        if getattr(self, "_offsets_at", None) is not None:  # the header, read once per entry opened
            return np.frombuffer(read_range(path, self._offsets_at + 8 * first, 8 * n), np.int64)
        try:
            head = read_range(path, 0, 4096)
            import io
            f = io.BytesIO(head)
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            start = f.tell()
            ok = shape == (self.num_rows + 1,) and not fortran and dtype == np.dtype(np.int64)
        except PacktoolError:  # a store that did not answer (entry_reads): no damage of the entry
            raise
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise CacheDamagedError("the flat token store's offsets are missing or disagree with cache.json; "
                                    "delete the folder and re-run (it is rebuilt)", path=self.root)
        self._offsets_at = start
        return np.frombuffer(read_range(path, start + 8 * first, 8 * n), np.int64)

    @_entry_requests
    def _flat_values(self, name: str, dtype: np.dtype, first: int, n: int) -> np.ndarray:
        """Values [first, first + n) of a raw flat/ file (a ranged read on a store)."""
        data = read_range(_join(self.root, FLAT_DIR, name), first * dtype.itemsize, n * dtype.itemsize)
        if len(data) != n * dtype.itemsize:
            raise CacheDamagedError(f"{FLAT_DIR}/{name} is shorter than cache.json says; delete the folder "
                                    f"and re-run (it is rebuilt)", path=self.root)
        return np.frombuffer(data, dtype)


def _join(root: str, *names: str) -> str:
    """A path below a cache root: a local folder or a store prefix (URIs join with '/')."""
    return join_uri(root, *names)


def _base(path: str) -> str:
    return path.partition("?")[0].rstrip("/").rsplit("/", 1)[-1] if is_uri(path) else os.path.basename(path)


def cache_problem(root: str, fingerprint: str | None = None, check=None) -> str | None:
    """Why the cache at `root` (a folder or a store entry) must not be reused (None: every
    recorded file re-hashed and matched, and it opens). Reads each file once; the flat store may
    be absent (it is rebuilt from the verified Parquet and must then hash to its record).
    `check(root, [(name, record)])`: the first problem of those files (the Ray engine spreads
    it). A store that does not answer is no problem of the entry (whose fix would delete a good
    shared one): raised, naming --cache-dir."""
    with entry_reads(root):
        if problem := entry_problem(root, fingerprint, check):
            return problem
        try:
            TokenizedCache(root)
        except STORE_ERRORS:  # the store's refusal, not the entry's
            raise
        except (PacktoolInputError, CacheDamagedError) as e:
            return str(e)
    return None


def tokenizer_meta(info: TokenizerInfo | None) -> dict | None:
    return asdict(info) if info is not None else None


def publish_cache(tmp: str, final: str, meta: dict, known: dict | None = None) -> TokenizedCache:
    """Finish a cache built in `tmp`: checksums of every file, cache.json, then one rename to
    `final`. If another run finished the same cache (same fingerprint) first, theirs is kept
    and ours dropped."""
    meta["checksums"] = cache_checksums(tmp, meta["parts"], known)
    write_cache_json(tmp, meta)
    share_as_mkdir(tmp)  # built private (mkdtemp), published readable as the umask says
    try:
        os.rename(tmp, final)  # with its marker: a kill before the unmark leaves it provable
    except OSError:
        if not os.path.exists(os.path.join(final, "cache.json")):
            raise
        remove_tree(tmp)
    else:
        unmark(final)  # a published entry is no leftover
    return TokenizedCache(final)
