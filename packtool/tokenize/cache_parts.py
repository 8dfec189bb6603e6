"""The tokenized cache's Parquet parts: their schema, how rows are encoded into them
(`CacheWriter`) and how a part's `loss_mask` is read back (`mask_values`).

A cache of pre-tokenized inputs only is a flat-store cache (cache.json `"token_lists":
"flat"`): its parts hold `length`, `source_index` and `source_file`, and the token lists live
in flat/ alone (checksummed like every file). The ids are in the user's own files already;
encoding them into Parquet a second time cost more CPU than the rest of the ingest.

`loss_mask` is null on a row whose every token is a target (cache version 3). Pre-tokenized
inputs without a mask column, and plain-text rows, are all targets: writing a uint8 list
value per token for them cost about as much as writing `input_ids` itself (Parquet stores
uint8 as INT32 and emits repetition levels per value), so such rows cost one bit instead.
Readers go through `mask_values`, which gives back the ones.

Token lists are BYTE_STREAM_SPLIT + zstd level 1: the same encode CPU as no compression
here and half the bytes of plain zstd; readers need Parquet format 2.11 (pyarrow >= 17), as
for the slabs (slabs/format.py).
"""
from __future__ import annotations

import os

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.tokenize.checksum import fast_digest

DATA_DIR = "data"
CHECKSUM_ALG = "xxh3_128"

SCHEMA = pa.schema([
    pa.field("input_ids", pa.list_(pa.int32())),
    pa.field("loss_mask", pa.list_(pa.uint8())),  # null row: every token is a target
    pa.field("length", pa.int32()),
    pa.field("source_index", pa.int64()),
    pa.field("source_file", pa.int32()),
])
# a flat-store cache (pre-tokenized inputs: their ids are in the user's files already) keeps
# its token lists in flat/ only; its parts hold what planning reads, per row
ROW_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in ("input_ids", "loss_mask")])
_TOKEN_ENCODING = {"input_ids.list.element": "BYTE_STREAM_SPLIT",
                   "loss_mask.list.element": "BYTE_STREAM_SPLIT"}


def file_record(path: str, digest: str | None = None) -> dict:
    """What cache.json keeps of one file: its size and xxh3-128."""
    return {"bytes": os.path.getsize(path), CHECKSUM_ALG: digest or fast_digest(path)}


@numba.njit(nogil=True, cache=True)
def _full_rows(mask, offs, full):
    """full[r] = every mask value of row r is non-zero; the number of values in other rows."""
    kept = 0
    for r in range(full.size):
        ok = True
        for j in range(offs[r], offs[r + 1]):
            if mask[j] == 0:
                ok = False
                break
        full[r] = ok
        if not ok:
            kept += offs[r + 1] - offs[r]
    return kept


@numba.njit(nogil=True, cache=True)
def _compact(mask, offs, full, out, out_offs):
    d = 0
    for r in range(full.size):
        out_offs[r] = d
        if not full[r]:
            for j in range(offs[r], offs[r + 1]):
                out[d] = mask[j]
                d += 1
    out_offs[full.size] = d


@numba.njit(nogil=True, cache=True)
def _expand(mask, m_offs, valid, id_offs, out):
    """Mask values aligned with the ids: a null (invalid) row's tokens are all ones."""
    base = id_offs[0]
    for r in range(valid.size):
        a, e = id_offs[r] - base, id_offs[r + 1] - base
        if valid[r]:
            s = m_offs[r]
            for j in range(e - a):
                out[a + j] = mask[s + j]
        else:
            out[a:e] = 1


def mask_column(mask: np.ndarray | None, offs: np.ndarray) -> pa.Array:
    """The `loss_mask` list column of rows at `offs` (int32, from 0): null where every token is
    a target. `mask` None: every token of every row is."""
    n = offs.size - 1
    if mask is None:
        full = np.ones(n, np.bool_)
        values, m_offs = np.zeros(0, np.uint8), np.zeros(n + 1, np.int32)
    else:
        full = np.empty(n, np.bool_)
        values = np.empty(_full_rows(mask, offs, full), np.uint8)
        m_offs = np.empty(n + 1, np.int32)
        _compact(mask, offs, full, values, m_offs)
    valid = pa.array(~full).buffers()[1] if full.any() else None
    return pa.ListArray.from_buffers(pa.list_(pa.uint8()), n, [valid, pa.py_buffer(m_offs)],
                                     children=[_wrap(values, pa.uint8())],
                                     null_count=int(full.sum()))


def _wrap(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array without a copy or a scan."""
    a = np.ascontiguousarray(values, typ.to_pandas_dtype())
    return pa.Array.from_buffers(typ, a.size, [None, pa.py_buffer(a)])


def mask_values(ids: pa.ListArray | pa.ChunkedArray, mask: pa.ListArray | pa.ChunkedArray) -> np.ndarray:
    """The `loss_mask` of the same rows as the `input_ids` list `ids`, as flat uint8 values
    aligned with ids' values from ids' first row (null rows read as ones)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    id_offs = ids.offsets.to_numpy()
    m_offs = mask.offsets.to_numpy()
    if not mask.null_count:
        return np.ascontiguousarray(mask.values.to_numpy(zero_copy_only=False)[m_offs[0]:m_offs[-1]], np.uint8)
    out = np.empty(int(id_offs[-1] - id_offs[0]), np.uint8)
    valid = mask.is_valid().to_numpy(zero_copy_only=False)
    vals = np.ascontiguousarray(mask.values.to_numpy(zero_copy_only=False), np.uint8)
    _expand(vals, m_offs.astype(np.int64), valid, id_offs.astype(np.int64), out)
    return out


class CacheWriter:
    """Appends encoded batches as row groups of bounded size to part files in `directory`
    (without `token_lists`: the per-row columns only, for a flat-store cache).
    With `checksums`, each part is hashed as soon as it is closed (by the thread writing it,
    while its pages are still cached): `records` holds cache.json's record of every part."""

    ROWS_PER_GROUP = 8192
    TOKENS_PER_GROUP = 4 << 20
    # With token lists a group's ids and masks wait here (5 bytes a token) and Parquet encodes
    # them at once (as much again in Arrow's pool): at 4 Mi tokens that sawtooth reached ~40 MiB,
    # and where its top met a JSON block's parse and two encode chunks was a raw pack's peak,
    # met higher the longer the run (issue 23 class 8). A flat-store cache's groups hold the
    # per-row columns alone.
    LIST_TOKENS_PER_GROUP = 1 << 20
    TOKENS_PER_PART = 256 << 20

    def __init__(self, directory: str, checksums: bool = False, token_lists: bool = True) -> None:
        self.dir = os.path.join(directory, DATA_DIR)
        self.schema = SCHEMA if token_lists else ROW_SCHEMA
        os.makedirs(self.dir, exist_ok=True)
        self.parts: list[dict] = []
        self.records: dict[str, dict] = {}
        self._checksums = checksums
        self._writer: pq.ParquetWriter | None = None
        self._part_tokens = 0
        self._buf: list[pa.RecordBatch] = []
        self._buf_rows = 0
        self._buf_tokens = 0

    def add(self, ids: np.ndarray, mask: np.ndarray | None, lengths: np.ndarray,
            source_index: np.ndarray, source_file: int) -> None:
        """Rows: `ids` (int32) and `mask` (uint8; None: every token is a target) are the rows
        concatenated, `lengths` their token counts."""
        if lengths.size == 0:
            return
        offs = np.zeros(lengths.size + 1, np.int32)
        np.cumsum(lengths, out=offs[1:])
        cols = [_wrap(lengths, pa.int32()), _wrap(source_index, pa.int64()),
                _wrap(np.full(lengths.size, source_file, np.int32), pa.int32())]
        if self.schema is SCHEMA:
            cols[:0] = [pa.ListArray.from_arrays(_wrap(offs, pa.int32()), _wrap(ids, pa.int32())),
                        mask_column(None if mask is None else np.ascontiguousarray(mask, np.uint8), offs)]
        batch = pa.record_batch(cols, schema=self.schema)
        self._buf.append(batch)
        self._buf_rows += lengths.size
        self._buf_tokens += int(offs[-1])
        tokens = self.LIST_TOKENS_PER_GROUP if self.schema is SCHEMA else self.TOKENS_PER_GROUP
        if self._buf_rows >= self.ROWS_PER_GROUP or self._buf_tokens >= tokens:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        if self._writer is None:
            name = f"part-{len(self.parts):05d}.parquet"
            self.parts.append({"file": name, "rows": 0, "tokens": 0})
            lists = self.schema is SCHEMA
            self._writer = pq.ParquetWriter(
                os.path.join(self.dir, name), self.schema, compression="zstd", compression_level=1,
                use_dictionary=["source_file"], column_encoding=_TOKEN_ENCODING if lists else None,
                write_statistics=["length", "source_index", "source_file"])
        table = pa.Table.from_batches(self._buf, self.schema)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.parts[-1]["rows"] += self._buf_rows
        self.parts[-1]["tokens"] += self._buf_tokens
        self._part_tokens += self._buf_tokens
        self._buf, self._buf_rows, self._buf_tokens = [], 0, 0
        if self._part_tokens >= self.TOKENS_PER_PART:
            self._close_part()

    def _close_part(self) -> None:
        self._writer.close()
        self._writer, self._part_tokens = None, 0
        if self._checksums:
            name = self.parts[-1]["file"]
            self.records[f"{DATA_DIR}/{name}"] = file_record(os.path.join(self.dir, name))

    def close(self) -> list[dict]:
        self._flush()
        if self._writer is not None:
            self._close_part()
        return self.parts
