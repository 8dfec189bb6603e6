"""Parquet and Arrow IPC inputs, read natively as record batches: column projection, one row
group or IPC batch at a time, so memory stays bounded by one of them. A cut file is refused, never
read short: an Arrow file without its footer, an Arrow stream without its end-of-stream marker.
`readers` resolves the files and hands each to its format's stream (`text_readers`: JSON Lines and
JSON arrays; `csv_reader`: CSV/TSV; here the binary two).
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from packtool.errors import PacktoolInputError
from packtool.storage import READ_BLOCK, arrow_file, arrow_input, is_uri, utf8_path
from packtool.tokenize.read_checks import read_failed

__all__ = ["arrow_batches", "open_arrow", "parquet_batches", "stream_ended"]


def parquet_batches(path: str, batch_size: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    g = rows = None  # the row group being read, its first row: a failure names them
    try:
        # on a store, column chunks are read in READ_BLOCK ranges, not whole: a shape check
        # reading 64 rows does not fetch a row group's every byte
        pf = pq.ParquetFile(arrow_file(path), buffer_size=READ_BLOCK if is_uri(path) else 0, pre_buffer=not is_uri(path))
        # one reader per row group: a reader over the whole file keeps every decoded row
        # group's buffers until it ends (RSS grew ~620 MiB over a 637 MB file of 1M rows)
        rows = 0
        for g in range(pf.num_row_groups):
            yield from pf.iter_batches(batch_size=batch_size, columns=columns, row_groups=[g])
            rows += pf.metadata.row_group(g).num_rows
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        n = pf.metadata.row_group(g).num_rows if g is not None else 0
        where = f" row group {g} (rows {rows}..{rows + n - 1})" if g is not None else ""
        raise read_failed(e, path, "parquet", f"cannot read Parquet{where} ({e})") from None


def open_arrow(path: str):
    source = pa.memory_map(path) if not is_uri(path) and utf8_path(path) else arrow_input(path)
    try:
        return ipc.open_file(source)
    except pa.ArrowInvalid:
        source.seek(0)
        if source.read(6) == b"ARROW1":  # the file format's magic, its footer missing: read as a stream it
            # was "Expected to read 1330795073 metadata bytes" (the magic taken for a length)
            raise PacktoolInputError("an Arrow IPC file (it opens with ARROW1) without its footer (a cut copy or a "
                                     "writer that did not finish); write the file again (a writer's close() "
                                     "writes the footer)", path=path) from None
        source.seek(0)
        return ipc.open_stream(source)


_STREAM_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # Arrow IPC's end-of-stream marker (a 0-length message)


def stream_ended(path: str) -> bool:
    """Whether an Arrow IPC stream closes with its end-of-stream marker. Arrow's stream reader
    ends at the end of the bytes as at the marker: a stream cut at a batch boundary read as
    whole, its later batches lost without a word (a cut .gz is refused). Only the last 8 bytes
    are read. (The pre-0.15 4-byte marker is not taken: a batch's zero padding looks like it.)"""
    with arrow_input(path) as f:
        size = f.size()
        if size < len(_STREAM_END):
            return False
        f.seek(size - len(_STREAM_END))
        return f.read(len(_STREAM_END)) == _STREAM_END


def arrow_batches(path: str, batch_size: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    rows = None  # rows read before the batch that failed: a failure names the first it lacks
    try:
        reader = open_arrow(path)
        if isinstance(reader, ipc.RecordBatchFileReader):
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            batches = iter(reader)
        rows = 0
        for b in batches:
            if columns is not None:
                b = b.select(columns)
            for start in range(0, b.num_rows, batch_size):
                yield b.slice(start, batch_size)
            rows += b.num_rows
        if not isinstance(reader, ipc.RecordBatchFileReader) and not stream_ended(path):
            raise PacktoolInputError(
                f"the Arrow stream ends without its end-of-stream marker after {rows:,} row(s) (a cut copy or a "
                f"writer that did not finish: its later batches, if any, are missing); write the file again "
                f"(a writer's close() writes the marker)", path=path)
    except (pa.ArrowInvalid, OSError) as e:
        where = f" after row {rows - 1}" if rows else " before its first row" if rows == 0 else ""
        raise read_failed(e, path, "arrow", f"cannot read Arrow IPC{where} ({e})") from None
