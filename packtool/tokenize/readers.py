"""Readers: every supported input format streamed as Arrow record batches.

Parquet and Arrow IPC are read natively (column projection, one row group or IPC batch at a
time). JSON Lines (optionally gzip, zstd or bzip2 compressed) is read in byte blocks of whole lines,
each parsed by Arrow's C++ JSON reader after a UTF-8 check (Arrow accepts invalid UTF-8 silently). A JSON
array (`[{...}, ...]`) cannot be split without parsing, so its text is held once and decoded
one element at a time. CSV/TSV (a header row, every column read as text) streams through Arrow's
CSV reader. A `datasets.save_to_disk` folder is a list of Arrow IPC stream files.
Memory stays bounded by one block / batch, except for JSON arrays (bounded by the file).
"""
from __future__ import annotations

import glob
import gzip
import io
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.ipc as ipc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from packtool.errors import PacktoolInputError
from packtool.output.files import refuse_special_input
from packtool.storage import READ_BLOCK, arrow_file, expand, is_file, is_uri, locate, open_bytes

_JSONL_BLOCK = 8 << 20  # bytes of whole lines handed to Arrow's JSON parser at once
_PARQUET_EXT = (".parquet", ".pq")
# Compressed JSON Lines: suffix -> Arrow codec (gzip goes through Python's gzip module).
_JSONL_CODECS = {".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
_JSONL_EXT = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz") + tuple(
    base + c for base in (".jsonl", ".ndjson", ".json") for c in _JSONL_CODECS)
_ARROW_EXT = (".arrow", ".feather", ".ipc")
_CSV_EXT = tuple(base + c for base in (".csv", ".tsv") for c in ("", ".gz", *_JSONL_CODECS))
# Data files packtool cannot read: in a folder input they are an error, not silently left out
# (README.md, LICENSE, hidden files and the like are not data and are passed over).
_UNREADABLE_EXT = (".zst", ".zstd", ".bz2", ".xz", ".lz4", ".lzma", ".br", ".zip", ".tar", ".tgz",
                   ".7z", ".gz", ".orc", ".avro", ".xlsx", ".xls")


@dataclass(frozen=True)
class InputFile:
    """One concrete file to read. `kind`: parquet | jsonl | json | arrow | csv."""
    path: str
    kind: str


def _kind_of(path: str) -> str | None:
    low = path.lower()
    if low.endswith(_PARQUET_EXT):
        return "parquet"
    if low.endswith(_JSONL_EXT):
        return "jsonl"
    if low.endswith(".json"):
        return "json"
    if low.endswith(_ARROW_EXT):
        return "arrow"
    if low.endswith(_CSV_EXT):
        return "csv"
    return None


def _hf_dataset_files(folder: str) -> list[str]:
    """Data files of a `datasets.save_to_disk` folder, in the order state.json lists them."""
    if os.path.exists(os.path.join(folder, "dataset_dict.json")):
        splits = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
        raise PacktoolInputError(
            f"a DatasetDict folder; pass one split folder instead: {', '.join(splits)}", path=folder)
    state = os.path.join(folder, "state.json")
    if os.path.exists(state):
        with open(state) as f:
            names = [d["filename"] for d in json.load(f).get("_data_files", [])]
        if names:
            return [os.path.join(folder, n) for n in names]
    return sorted(glob.glob(os.path.join(glob.escape(folder), "*.arrow")))


def resolve_inputs(inputs: list[str]) -> list[InputFile]:
    """Expand files, folders and globs into files in a deterministic read order."""
    if not inputs:
        raise PacktoolInputError("no input files given")
    out: list[InputFile] = []
    for spec in inputs:
        if is_uri(spec):
            out += _store_files(spec)
            continue
        # an existing path is itself even when its name holds glob characters (`run[1].jsonl`)
        if any(c in spec for c in "*?[") and not os.path.exists(spec):
            paths = sorted(glob.glob(spec, recursive=True))
            if not paths:
                raise PacktoolInputError("glob matched no files", path=spec)
        else:
            paths = [spec]
        for p in paths:
            if os.path.isdir(p):
                if os.path.exists(os.path.join(p, "dataset_info.json")) or \
                        os.path.exists(os.path.join(p, "dataset_dict.json")):
                    out += [InputFile(f, "arrow") for f in _hf_dataset_files(p)]
                    continue
                found = [f for f in glob.glob(os.path.join(glob.escape(p), "**", "*"), recursive=True)
                         if os.path.isfile(f)]
                unreadable = sorted(os.path.relpath(f, p) for f in found
                                    if not _kind_of(f) and f.lower().endswith(_UNREADABLE_EXT))
                if unreadable:
                    more = f" and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
                    raise PacktoolInputError(
                        f"folder holds data files packtool cannot read: {', '.join(unreadable[:3])}"
                        f"{more}; decompress or convert them (.parquet, .jsonl[.gz|.zst|.bz2], .json, .arrow, .csv/.tsv), "
                        f"or pass the readable files themselves", path=p)
                inner = sorted(f for f in found if _kind_of(f))
                if not inner:
                    raise PacktoolInputError(
                        "folder holds no .parquet/.jsonl/.json/.arrow/.csv/.tsv files", path=p)
                out += [InputFile(f, _kind_of(f)) for f in inner]
            elif not os.path.exists(p):
                raise PacktoolInputError("input file not found", path=p)
            else:
                refuse_special_input(p)
                kind = _kind_of(p)
                if kind is None:
                    raise PacktoolInputError(
                        "unknown file type; expected .parquet, .jsonl[.gz|.zst|.bz2], .json, "
                        ".arrow/.feather, .csv/.tsv or a datasets.save_to_disk folder", path=p)
                out.append(InputFile(os.path.abspath(p), kind))
    files = [f if is_uri(f.path) else InputFile(os.path.abspath(f.path), f.kind) for f in out]
    _refuse_repeats(files)
    return files


def _store_files(spec: str) -> list[InputFile]:
    """An object-store URI: one object, every data object below a prefix, or a glob's
    matches (packtool.storage.expand), each named by its URI without secrets."""
    try:
        found = expand(spec)
    except FileNotFoundError:
        found = []
    one = len(found) == 1 and found[0].path == locate(spec).path
    if not found:
        raise PacktoolInputError("glob matched no objects" if any(c in spec for c in "*?[")
                                 else "input not found (no such object or prefix)", path=locate(spec).shown)
    bad = [x.shown for x in found if not _kind_of(x.path) and (one or x.path.lower().endswith(_UNREADABLE_EXT))]
    if bad:
        raise PacktoolInputError("unknown or unreadable file type; expected .parquet, .jsonl[.gz|.zst|.bz2], "
                                 ".json, .arrow/.feather or .csv/.tsv", path=bad[0])
    files = [InputFile(x.shown, _kind_of(x.path)) for x in found if _kind_of(x.path)]
    if not files:
        raise PacktoolInputError("prefix holds no .parquet/.jsonl/.json/.arrow/.csv/.tsv objects",
                                 path=locate(spec).shown)
    return files


def _refuse_repeats(files: list[InputFile]) -> None:
    """One file reached twice (named twice, by a glob and by name, through a link) would be
    packed twice: an error, naming both spellings."""
    seen: dict = {}
    for f in files:
        if is_uri(f.path):
            key = f.path
            if key in seen:
                raise PacktoolInputError("input given more than once; pass each file once", path=f.path)
            seen[key] = f.path
            continue
        try:
            st = os.stat(f.path)
        except OSError:  # missing: the reader names it
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            first = seen[key]
            also = "" if first == f.path else f" (also given as {first})"
            raise PacktoolInputError(f"input given more than once{also}; pass each file once",
                                     path=f.path)
        seen[key] = f.path


# ---------------------------------------------------------------- per-format streams

def _parquet_batches(path: str, batch_size: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
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
        raise PacktoolInputError(f"cannot read Parquet{where} ({e})", path=path) from None


def _open_arrow(path: str):
    source = locate(path).open_input() if is_uri(path) else pa.memory_map(path)
    try:
        return ipc.open_file(source)
    except pa.ArrowInvalid:
        source.seek(0)
        return ipc.open_stream(source)


def _arrow_batches(path: str, batch_size: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    rows = None  # rows read before the batch that failed: a failure names the first it lacks
    try:
        reader = _open_arrow(path)
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
    except (pa.ArrowInvalid, OSError) as e:
        where = f" after row {rows - 1}" if rows else " before its first row" if rows == 0 else ""
        raise PacktoolInputError(f"cannot read Arrow IPC{where} ({e})", path=path) from None


def _check_utf8(block: bytes, path: str, first_line: int) -> None:
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + block.count(b"\n", 0, e.start) + 1
        raise PacktoolInputError(
            f"invalid UTF-8 at line {line} (byte {e.start} of its block); re-encode the file as UTF-8",
            path=path) from None


def _parse_json_block(block: bytes, path: str, first_line: int) -> pa.Table:
    try:
        return pajson.read_json(io.BytesIO(block),
                                read_options=pajson.ReadOptions(block_size=max(len(block) + 1, 1 << 20)))
    except pa.ArrowInvalid as e:
        # Find the offending line with the exact Python parser so the message can name it.
        lines = block.split(b"\n")
        for i, raw in enumerate(lines):
            if raw.strip():
                try:
                    json.loads(raw)
                except json.JSONDecodeError as je:
                    raise PacktoolInputError(f"invalid JSON at line {first_line + i + 1}: {je.msg}",
                                             path=path) from None
        # valid JSON, mixed types: Arrow counts rows from the block; name the file's line
        m = re.search(r"in row (\d+)", str(e))
        msg = " ".join(str(e).split()).replace("JSON parse error: ", "")
        if m:
            rows = [i for i, raw in enumerate(lines) if raw.strip()]
            k = int(m.group(1))
            if k < len(rows):
                line = first_line + rows[k] + 1
                msg = re.sub(r" in row \d+", "", msg)
                raise PacktoolInputError(f"{msg} at line {line}: give the field one type in every "
                                         f"row", path=path) from None
        raise PacktoolInputError(f"cannot parse JSON Lines ({msg})", path=path) from None


def _jsonl_batches(path: str, batch_size: int, columns: list[str] | None,
                   block_bytes: int | None = None, read_bytes=None) -> Iterator[pa.RecordBatch]:
    """`read_bytes(n)`, when given, hears the on-disk bytes read so far (compressed bytes for
    .gz/.zst/.bz2) after each block: JSON Lines store no row count, so progress goes by bytes."""
    lines_before = 0
    try:
        with _open_text(path) as (f, raw):
            tail = b""
            while True:
                chunk = f.read(block_bytes or _JSONL_BLOCK)
                if read_bytes is not None:
                    read_bytes(raw.tell())
                data = tail + chunk
                if not chunk:
                    block, tail = data, b""
                else:
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        tail = data
                        continue
                    block, tail = data[:cut + 1], data[cut + 1:]
                if block.strip():
                    _check_utf8(block, path, lines_before)
                    table = _parse_json_block(block, path, lines_before)
                    if columns is not None:  # a key absent from a whole block reads as nulls
                        table = pa.table({c: table.column(c) if c in table.column_names
                                          else pa.nulls(table.num_rows) for c in columns})
                    yield from table.to_batches(max_chunksize=batch_size)
                lines_before += block.count(b"\n")
                if not chunk:
                    break
    except (OSError, EOFError, gzip.BadGzipFile, pa.ArrowInvalid) as e:
        raise PacktoolInputError(f"cannot read file ({' '.join(str(e).split())})", path=path) from None


@contextmanager
def _open_text(path: str):
    """(decompressed stream, on-disk stream): `raw.tell()` counts the compressed bytes read."""
    low = path.lower()
    codec = next((c for ext, c in _JSONL_CODECS.items() if low.endswith(ext)), None)
    if low.endswith(".gz"):
        with gzip.open(open_bytes(path), "rb") as f:
            yield f, f.fileobj
    elif codec is not None:
        with (pa.PythonFile(open_bytes(path), "r") if is_uri(path) else pa.OSFile(path, "rb")) as raw, \
                pa.CompressedInputStream(raw, codec) as f:
            yield f, raw
    else:
        with open_bytes(path) as f:
            yield f, f


def _json_array_batches(path: str, batch_size: int, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    with open_bytes(path) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise PacktoolInputError(f"invalid UTF-8 at line {line}; re-encode the file as UTF-8",
                                 path=path) from None
    del raw
    pos = len(text) - len(text.lstrip())
    if not text.startswith("[", pos):
        yield from _jsonl_batches(path, batch_size, columns)  # a .json file holding JSON Lines
        return
    dec = json.JSONDecoder()
    pos += 1
    rows: list[dict] = []
    n = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise PacktoolInputError(f"JSON array is not closed: its text ends at line {text.count(chr(10)) + 1} "
                                     f"without the closing ]", path=path, row=n)
        if text[pos] == "]":
            break
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise PacktoolInputError(f"invalid JSON at line {e.lineno}: {e.msg}", path=path, row=n) from None
        if not isinstance(obj, dict):
            raise PacktoolInputError("JSON array element is not an object", path=path, row=n)
        rows.append(obj if columns is None else {c: obj.get(c) for c in columns})
        n += 1
        if len(rows) == batch_size:
            yield _rows_to_batch(rows, path, n - len(rows))
            rows = []
    if rows:
        yield _rows_to_batch(rows, path, n - len(rows))


def _rows_to_batch(rows: list[dict], path: str, first_row: int) -> pa.RecordBatch:
    try:
        return pa.RecordBatch.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise PacktoolInputError(f"rows {first_row}..{first_row + len(rows) - 1} have mixed types ({e})",
                                 path=path) from None


def _csv_options(path: str, columns: list[str] | None, names: list[str] | None):
    # every column a string: a column that looks numeric in the first block must not fail (or
    # change type) on a later text row; an empty field is null, so a missing answer is named
    # like a missing JSON key instead of becoming an empty turn
    low = path.lower()
    delimiter = "\t" if low.endswith(tuple(x for x in _CSV_EXT if x.startswith(".tsv"))) else ","
    parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    convert = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names or []}, strings_can_be_null=True, null_values=[""],
        include_columns=columns, include_missing_columns=columns is not None)
    return pacsv.ReadOptions(block_size=_JSONL_BLOCK), parse, convert


def _csv_names(path: str) -> list[str]:
    with _open_text(path) as (f, _):
        read, parse, _ = _csv_options(path, None, None)
        return list(pacsv.open_csv(f, read_options=read, parse_options=parse).schema.names)


def _csv_batches(path: str, batch_size: int, columns: list[str] | None,
                 read_bytes=None) -> Iterator[pa.RecordBatch]:
    """CSV / TSV with a header row (quoted fields may hold newlines), streamed in 8 MB blocks."""
    try:
        names = _csv_names(path)
        with _open_text(path) as (f, raw):
            read, parse, convert = _csv_options(path, columns, names)
            for b in pacsv.open_csv(f, read_options=read, parse_options=parse, convert_options=convert):
                if read_bytes is not None:
                    read_bytes(raw.tell())
                yield from pa.Table.from_batches([b]).to_batches(max_chunksize=batch_size)
    except (pa.ArrowInvalid, OSError, EOFError, gzip.BadGzipFile) as e:
        raise _csv_error(path, e) from None


def _csv_error(path: str, e: Exception) -> PacktoolInputError:
    """Arrow's CSV error names no line: read the file once more to find the record at fault."""
    from packtool.tokenize.text_where import csv_bad_record
    fix = "check its quoting and header row, or convert it to JSON Lines"
    where = None
    if isinstance(e, pa.ArrowInvalid):
        try:
            with _open_text(path) as (f, _):
                where = csv_bad_record(f, _csv_options(path, None, None)[1].delimiter)
        except (OSError, EOFError, gzip.BadGzipFile):
            pass
    if where is None:
        return PacktoolInputError(f"cannot read CSV ({' '.join(str(e).split())[:300]}); {fix}", path=path)
    row, line, what = where
    return PacktoolInputError(f"cannot read CSV at line {line}: {what}; {fix}", path=path, row=row)


def read_json_lines(path: str) -> pa.Table:
    """A whole JSON Lines file as one table, with this module's errors (they name the line)."""
    batches = list(_jsonl_batches(path, 1 << 20, None))
    return pa.Table.from_batches(batches) if batches else pa.table({})


_READERS = {"parquet": _parquet_batches, "arrow": _arrow_batches,
            "jsonl": _jsonl_batches, "json": _json_array_batches, "csv": _csv_batches}


def iter_batches(f: InputFile, batch_size: int, columns: list[str] | None = None,
                 read_bytes=None) -> Iterator[pa.RecordBatch]:
    """Record batches of at most `batch_size` rows, in file order. `columns` projects when the
    format allows it (JSON rows are parsed whole, then projected). `read_bytes`: see
    `_jsonl_batches` (JSON Lines and CSV)."""
    if not is_file(f.path):
        raise PacktoolInputError("input file not found", path=f.path)
    if f.kind in ("jsonl", "csv") and read_bytes is not None:
        return _READERS[f.kind](f.path, batch_size, columns, read_bytes=read_bytes)
    return _READERS[f.kind](f.path, batch_size, columns)


def peek_columns(f: InputFile) -> list[str]:
    """Column names, from metadata where the format has it, else from the first batch."""
    try:
        if f.kind == "parquet":
            return list(pq.ParquetFile(arrow_file(f.path)).schema_arrow.names)
        if f.kind == "arrow":
            return list(_open_arrow(f.path).schema.names)
        if f.kind == "csv":
            return _csv_names(f.path)
    except (pa.ArrowInvalid, OSError, EOFError, gzip.BadGzipFile) as e:
        if f.kind == "csv":  # the reading paths' message, which names the line at fault
            raise _csv_error(f.path, e) from None
        raise PacktoolInputError(f"cannot read {f.kind} file ({e})", path=f.path) from None
    # JSON Lines: parse a small first block only (the whole first 8 MB block would be parsed twice)
    batches = _jsonl_batches(f.path, 64, None, 1 << 16) if f.kind == "jsonl" else iter_batches(f, 64)
    for batch in batches:
        return list(batch.schema.names)
    return []


def count_rows(f: InputFile) -> int | None:
    """Row count when the format stores it (for the progress bar), else None."""
    try:
        if f.kind == "parquet":
            return pq.ParquetFile(arrow_file(f.path)).metadata.num_rows
        if f.kind == "arrow":
            r = _open_arrow(f.path)
            if isinstance(r, ipc.RecordBatchFileReader):
                return sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))
    except (pa.ArrowInvalid, OSError):
        return None
    return None
