"""CSV / TSV (a header row, every column read as text, optionally gzip, zstd or bzip2
compressed) as Arrow record batches, streamed through Arrow's CSV reader, with errors that name
the record at fault. The decompressing opener is text_readers' (`open_text`), shared with
JSON Lines.
"""
from __future__ import annotations

import gzip
from typing import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv

from packtool.errors import PacktoolInputError
from packtool.tokenize.read_checks import refuse_open_quote, refuse_repeated_names
from packtool.tokenize.text_readers import JSONL_CODECS, open_text

_CSV_BLOCK = 8 << 20  # bytes Arrow's CSV reader parses at once
CSV_EXT = tuple(base + c for base in (".csv", ".tsv") for c in ("", ".gz", *JSONL_CODECS))


def _csv_options(path: str, columns: list[str] | None, names: list[str] | None):
    # every column a string: a column that looks numeric in the first block must not fail (or
    # change type) on a later text row; an empty field is null, so a missing answer is named
    # like a missing JSON key instead of becoming an empty turn
    low = path.lower()
    delimiter = "\t" if low.endswith(tuple(x for x in CSV_EXT if x.startswith(".tsv"))) else ","
    parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    convert = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names or []}, strings_can_be_null=True, null_values=[""],
        include_columns=columns, include_missing_columns=columns is not None)
    return pacsv.ReadOptions(block_size=_CSV_BLOCK), parse, convert


def csv_names(path: str) -> list[str]:
    with open_text(path) as (f, _):
        read, parse, _ = _csv_options(path, None, None)
        names = list(pacsv.open_csv(f, read_options=read, parse_options=parse).schema.names)
    refuse_repeated_names(names, path, "line 1: ")
    return names


def csv_batches(path: str, batch_size: int, columns: list[str] | None,
                 read_bytes=None, blank=None) -> Iterator[pa.RecordBatch]:
    """CSV / TSV with a header row (quoted fields may hold newlines), streamed in 8 MB blocks.
    `blank` (a blank_lines.CsvBlankLines), when given, is shown every block Arrow reads."""
    try:
        names = csv_names(path)
        with open_text(path) as (f, raw):
            read, parse, convert = _csv_options(path, columns, names)
            f = shown = _Shown(f, blank.scan if blank is not None else None)
            for b in pacsv.open_csv(f, read_options=read, parse_options=parse, convert_options=convert):
                if read_bytes is not None:
                    read_bytes(raw.tell())
                yield from pa.Table.from_batches([b]).to_batches(max_chunksize=batch_size)
        if shown.quotes % 2:
            refuse_open_quote(path, open_text, csv_delimiter(path))
    except (pa.ArrowInvalid, OSError, EOFError, gzip.BadGzipFile) as e:
        raise csv_error(path, e) from None


class _Shown:
    """A read-only stream that counts its quote characters and shows each block it reads to
    `see` (when given) before handing it on: the bytes Arrow's CSV reader parses are the bytes
    counted, read once."""

    closed = False

    def __init__(self, f, see=None) -> None:
        self._f, self._see = f, see
        self.quotes = 0  # the quote characters read (bytes.count, in C): an odd total is an open quote

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self.quotes += b.count(b'"')
        if self._see is not None:
            self._see(b)
        return b

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        pass  # the stream is its opener's to close


def csv_delimiter(path: str) -> str:
    return _csv_options(path, None, None)[1].delimiter


def csv_error(path: str, e: Exception) -> PacktoolInputError:
    """Arrow's CSV error names no line: read the file once more to find the record at fault."""
    from packtool.tokenize.text_where import csv_bad_record
    fix = "check its quoting and header row, or convert it to JSON Lines"
    where = None
    if isinstance(e, pa.ArrowInvalid):
        try:
            with open_text(path) as (f, _):
                where = csv_bad_record(f, _csv_options(path, None, None)[1].delimiter)
        except (OSError, EOFError, gzip.BadGzipFile):
            pass
    if where is None:
        return PacktoolInputError(f"cannot read CSV ({' '.join(str(e).split())[:300]}); {fix}", path=path)
    row, line, what = where
    return PacktoolInputError(f"cannot read CSV at line {line}: {what}; {fix}", path=path, row=row)
