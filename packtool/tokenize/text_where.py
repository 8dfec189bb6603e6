"""Where in a text input a parse failed. Arrow's CSV and text readers say what is wrong but not
where (`Expected 2 columns, got 3: ...`, `invalid UTF8 data`): after such a failure the file
is read once more here, by Python, only to name the line (counted from 1, as editors do) and
the data row (counted from 0, as `source_index` does) of the first bad record (README, error
contract). Nothing here runs unless a read already failed."""
from __future__ import annotations

import csv
import re
import sys
from contextlib import contextmanager
from typing import BinaryIO, Iterator

_CHUNK = 1 << 20


def _lines(f: BinaryIO) -> Iterator[bytes]:
    # a line gathered over many reads is kept as chunks and joined once, and only each new
    # chunk is split: `(tail + chunk).split` copied and rescanned the whole tail on every
    # read, quadratic in a long line (as the JSON Lines reader was before e335d1c)
    tail: list[bytes] = []
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        *full, rest = chunk.split(b"\n")
        if full:
            tail += (full[0], b"\n")
            yield b"".join(tail)
            for raw in full[1:]:
                yield raw + b"\n"
            tail = []
        if rest:
            tail.append(rest)
    if tail:
        yield b"".join(tail)


@contextmanager
def _any_field_size():
    """Python's csv refuses a field over 128 KiB (`field larger than field limit`), which Arrow
    reads: a long text field before the bad record was named as the record at fault. The limit
    is the csv module's one global, so it is put back after."""
    was = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(was)


class _Decoded:
    """The stream's lines as text, counting them (the line that fails to decode counted too), so
    a UTF-8 error names its line."""

    def __init__(self, f: BinaryIO) -> None:
        self.line = 0
        self._lines = _lines(f)

    def __iter__(self):
        return self

    def __next__(self) -> str:
        raw = next(self._lines)
        self.line += 1
        return raw.decode("utf-8")


def csv_bad_record(f: BinaryIO, delimiter: str, header: bool = True) -> tuple[int, int, str] | None:
    """(data row, first line, what is wrong) of the first CSV record Arrow cannot read: a field
    count other than the first record's, an unclosed quote, invalid UTF-8. None if none is found
    (the failure was of another kind)."""
    with _any_field_size():
        return _bad_record(_Decoded(f), delimiter, header)


def _bad_record(text: _Decoded, delimiter: str, header: bool) -> tuple[int, int, str] | None:
    reader = csv.reader(text, delimiter=delimiter, strict=True)
    width, row, start = None, 0, 1
    try:
        for rec in reader:
            if rec:  # Arrow skips empty lines: they are no row
                if width is None:
                    width = len(rec)
                    if header:
                        start = text.line + 1
                        continue
                if len(rec) != width:
                    first = "the header" if header else "the first line"
                    return row, start, f"{len(rec)} fields where {first} has {width}"
                row += 1
            start = text.line + 1
    except UnicodeDecodeError:  # text.line is the line that failed to decode
        return row, text.line, "invalid UTF-8 (re-encode the file as UTF-8)"
    except csv.Error as e:
        return row, start, f"{e}"
    return None


def csv_record_line(f: BinaryIO, delimiter: str, row: int, header: bool = True) -> int | None:
    """The first line (from 1) of data row `row` (from 0) of a CSV that Arrow read: a value
    there was refused, and quoted fields may span lines. None past the end or on bad text."""
    text = _Decoded(f)
    start, seen = 1, -1 if header else 0
    try:
        with _any_field_size():
            for rec in csv.reader(text, delimiter=delimiter):
                if rec:  # Arrow skips empty lines: they are no row
                    if seen == row:
                        return start
                    seen += 1
                start = text.line + 1
    except (UnicodeDecodeError, csv.Error):
        pass
    return None


_NUMPY_INT = re.compile(r"[+-]?[0-9]+")


def first_bad_int_line(f: BinaryIO) -> tuple[int, int, str] | None:
    """(data row, line, text) of the first line of a one-length-per-line file that is not an
    integer; blank lines and `#` comments are no row (as numpy.loadtxt reads them)."""
    row = 0
    for line, raw in enumerate(_lines(f), 1):
        try:
            text = raw.decode("utf-8").lstrip("\ufeff" if line == 1 else "").split("#", 1)[0].strip()  # a BOM
        except UnicodeDecodeError:
            return row, line, "invalid UTF-8"
        if not text:
            continue
        # what loadtxt's int64 reads (past 19 digits none: int() of 4,301 raised its own ValueError)
        if not _NUMPY_INT.fullmatch(text) or len(text.lstrip("+-").lstrip("0")) > 19 or not -2**63 <= int(text) < 2**63:
            # (int() also took '1_000' and other scripts' digits); an integer whole: its range is said
            return row, line, repr(text if _NUMPY_INT.fullmatch(text) else text[:40])
        row += 1
    return None
