"""The JSON formats' streams: JSON Lines (optionally gzip, zstd or bzip2 compressed) and JSON
arrays, each as Arrow record batches with errors that name the line at fault, and the
decompressing opener every text format reads through (`open_text`; CSV/TSV is `csv_reader`'s).
`readers` picks the stream for a file and owns the binary formats (Parquet, Arrow IPC).

JSON Lines is read in byte blocks of whole lines, each parsed by Arrow's C++ JSON reader after
a UTF-8 check (Arrow accepts invalid UTF-8 silently). A JSON array (`[{...}, ...]`) cannot be
split without parsing, so its text is held once and decoded one element at a time; a .json
file that is no array is JSON Lines, told from its first bytes and read as those.
"""
from __future__ import annotations

import gzip
import json
import re
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from packtool.errors import PacktoolInputError
from packtool.json_text import BeyondFloat64Error, DuplicateKeyError, invalid_json, past_syntax, raw_decode, twice
from packtool.tokenize.json_depth import (beyond_float64, check_array_fits, check_json_depth, check_json_numbers,
                                          field_holding, number_beyond_float64)
from packtool.tokenize.json_types import _kind, block_table, free_form, has_timestamp, rows_batch
from packtool.tokenize.nothing import is_nothing
from packtool.tokenize.read_checks import compressed_array, nothing_after, one_object, opens_array
from packtool.storage import file_size, is_uri, open_bytes, utf8_path

_JSONL_BLOCK = 8 << 20  # bytes of whole lines handed to Arrow's JSON parser at once
# One JSON line (one row) is held whole to be parsed: 256 MiB of text is ~60M tokens, far past
# any context; past it a line (a decompression bomb, a file with no newlines) is refused by
# name before it is gathered into memory.
MAX_JSON_LINE = 256 << 20
# Compressed JSON Lines: suffix -> Arrow codec (gzip goes through Python's gzip module).
JSONL_CODECS = {".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}


def _check_utf8(block: bytes, path: str, first_line: int) -> None:
    # Arrow checks the bytes in place: a str decoded to check them was one more copy of the
    # block (up to 4x its size for non-ASCII text) alive beside the block and its parse
    text = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(block)], np.int64)),
                                                        pa.py_buffer(block)])
    try:
        text.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    try:  # only to find where: the block is invalid
        block.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + block.count(b"\n", 0, e.start) + 1
        raise PacktoolInputError(
            f"invalid UTF-8 at line {line} (byte {e.start} of its block); re-encode the file as UTF-8",
            path=path) from None


def _parse_json_block(block: bytes, path: str, first_line: int, columns: list[str] | None,
                      rows: int) -> pa.Table:
    """`rows`: the block's lines with text (`_lines_with_text`, computed once per block)."""
    try:
        table = pajson.read_json(pa.BufferReader(block),  # read in place, not copied into Arrow
                                 read_options=pajson.ReadOptions(block_size=max(len(block) + 1, 1 << 20)))
        check_json_numbers(block, path, first_line, table)  # an integer past 1.8e308 read as +-inf
        if not _well_built(table, columns) or table.num_rows != rows:
            # a line Arrow read as two rows (`{...} {...}`) is no JSON Lines line: Python's
            # reading of the block names it ("extra data"), so row N stays line N+1's
            return block_table(block, path, first_line, columns)
        # JSON has no dates (a timestamp is Arrow's guess from strings), and a tool call's
        # arguments must not get other rows' keys: json_types reads such a block (only for the
        # columns read: a C4 row's unread "timestamp" keeps Arrow's speed)
        t = pa.struct([f for f in table.schema if columns is None or f.name in columns])
        return block_table(block, path, first_line, columns) if has_timestamp(t) or free_form(t) else table
    except pa.ArrowInvalid as e:
        # Find the offending line with the exact Python parser so the message can name it.
        lines = block.split(b"\n")
        for i, raw in enumerate(lines):
            if raw.strip():
                try:
                    json.loads(raw)
                except json.JSONDecodeError as je:
                    raise PacktoolInputError(invalid_json(je, first_line + i + 1), path=path) from None
                except ValueError:  # past Python's digit limit: a number beyond float64, named next
                    pass
        check_json_numbers(block, path, first_line)  # 1e400, Arrow's refusal, said as every JSON door says it
        if "changed from" in str(e):  # valid JSON, a field of two types: json_types reads or names it
            return block_table(block, path, first_line, columns)
        m = re.search(r"in row (\d+)", str(e))
        msg = " ".join(str(e).split()).replace("JSON parse error: ", "")
        if m:
            rows = [i for i, raw in enumerate(lines) if raw.strip()]
            k = int(m.group(1))
            if k < len(rows):
                line = first_line + rows[k] + 1
                fix = _arrow_json_fix(re.sub(r" in row \d+", "", msg))
                raise PacktoolInputError(f"at line {line}: {fix}", path=path) from None
        raise PacktoolInputError(f"cannot parse JSON Lines ({msg})", path=path) from None


# A blank line holds only JSON's whitespace (what Arrow skips as no row). Searched from the
# newline before it: a pattern opening with a literal is found by a fast scan for that byte, where
# `(?m)^[ \t\r]*$` tried every position of the block (0.15 s per 37 MB of chats; now 0.04).
_BLANK_AFTER_NEWLINE = re.compile(rb"\n[ \t\r]*(?=\n|\Z)")
_BLANK_FIRST = re.compile(rb"[ \t\r]*(?:\n|\Z)")


def _lines_with_text(block: bytes) -> tuple[int, list[int]]:
    """The rows a block of JSON Lines holds, one per line that is not blank (counted in C: a
    block of 8 MiB is ~50k lines), and where its blank lines start (for blank_lines' note;
    the empty match after a final newline is no line)."""
    starts = [m.start() + 1 for m in _BLANK_AFTER_NEWLINE.finditer(block)]
    if _BLANK_FIRST.match(block):
        starts.insert(0, 0)
    rows = block.count(b"\n") + 1 - len(starts)
    if starts and starts[-1] == len(block):
        starts.pop()
    return rows, starts


def _well_built(table: pa.Table, columns: list[str] | None) -> bool:
    """Whether Arrow built the read columns right. Its JSON reader (pyarrow 26) leaves out of a
    list's values the nulls that come before the block's first typed value there, while its
    offsets count them: `{"messages": [null, {...}]}` as a block's first row is an array that
    fails at first use ("Length spanned by list offsets (3) larger than values array"), and
    `{"input_ids": [null, 5, 6]}` reads as [5, 6, 0] where it is read whole. The cheap check
    (offsets against lengths, no data scanned) finds every such array: a block holding one is
    read in Python (json_types), whose rows keep the nulls for the row checks to name."""
    try:
        (table if columns is None else table.select([c for c in columns if c in table.column_names])).validate()
    except pa.ArrowInvalid:
        return False
    return True


# What Arrow's JSON reader refuses that Python's json reads (so no "invalid JSON" line came
# first): each its own problem and fix (a type change went to json_types before).
_ARROW_JSON = (
    (re.compile(r"^Column\((\S*)\) was specified twice"),
     lambda m: twice(m[1].lstrip('/').replace('/[]', '[]'))),  # the wording a .json array's rows get
    (re.compile(r"surrogate", re.I),
     lambda m: "a \\uD800-\\uDFFF escape without its pair (a lone UTF-16 surrogate, no character); "
               "remove it or replace it with the character meant (or \\uFFFD)"),
    (re.compile(r"too big to be stored in double", re.I),
     lambda m: "a number beyond the float64 range (e.g. 1e400); write it in range or as a string"),
)


def _arrow_json_fix(msg: str) -> str:
    for pat, say in _ARROW_JSON:
        m = pat.search(msg)
        if m:
            return say(m)
    return f"cannot parse this JSON line ({msg}); fix the line or rewrite the file with a standard JSON writer"


def jsonl_batches(path: str, batch_size: int, columns: list[str] | None,
                   block_bytes: int | None = None, read_bytes=None, blank=None, judge=None) -> Iterator[pa.RecordBatch]:
    """`read_bytes(n)`, when given, hears the on-disk bytes read so far (compressed bytes for
    .gz/.zst/.bz2) after each block: JSON Lines store no row count, so progress goes by bytes.
    `blank` (a blank_lines.BlankLines), when given, hears each block's blank lines. `judge`
    (a late_columns.LateColumns), when given, sees each block's every key before projection."""
    lines_before = rows_before = 0
    try:
        with open_text(path) as (f, raw):
            # the bytes after the last newline, as chunks: a long line gathered over many
            # reads is joined once, and only each new chunk is searched (tail + chunk, then
            # rfind, copied and rescanned the whole tail each read: quadratic in the line)
            tail, tail_len = [], 0
            while True:
                chunk = f.read(block_bytes or _JSONL_BLOCK)
                if read_bytes is not None:
                    read_bytes(raw.tell())
                if not chunk:
                    block, tail = b"".join(tail), []
                else:
                    cut = chunk.rfind(b"\n")
                    if cut < 0:
                        tail.append(chunk)
                        tail_len += len(chunk)
                        if tail_len > MAX_JSON_LINE:
                            _line_too_long(path, lines_before + 1)
                        continue
                    if tail_len + chunk.find(b"\n") > MAX_JSON_LINE:  # gathered past the bound, then ended
                        _line_too_long(path, lines_before + 1)
                    block = b"".join([*tail, memoryview(chunk)[:cut + 1]])
                    tail = [chunk[cut + 1:]]
                    tail_len = len(tail[0])
                # Only this block's bytes, then only its table, are held while its rows are
                # used: the read, the copy and the parse of the next block each met the last
                # block's bytes and table still alive, and a run's peak was the rarest such
                # overlap (issue 23 class 8)
                last, chunk = not chunk, None
                first, lines_before = lines_before, lines_before + block.count(b"\n")
                rows, starts = _lines_with_text(block)
                if blank is not None:
                    blank.add(block, first, starts, rows)
                if block and not block.isspace():  # strip() copied the block to ask
                    _check_utf8(block, path, first)
                    check_json_depth(block, path, first)
                    table = _parse_json_block(block, path, first, columns, rows)
                    block = None
                    if judge is not None:  # the keys the projection below leaves out
                        judge.block(table, rows_before)
                    rows_before += table.num_rows
                    if columns is not None:  # a key absent from a whole block reads as nulls
                        table = pa.table({c: table.column(c) if c in table.column_names
                                          else pa.nulls(table.num_rows) for c in columns})
                    yield from table.to_batches(max_chunksize=batch_size)
                    table = None
                block = None
                if last:
                    break
    except (OSError, EOFError, gzip.BadGzipFile, pa.ArrowInvalid) as e:
        raise PacktoolInputError(f"cannot read file ({' '.join(str(e).split())})", path=path) from None
    except PacktoolInputError:
        said = compressed_array(path, open_text)
        if said is None:
            raise
        raise said from None


def _line_too_long(path: str, line: int) -> None:
    from packtool.tokenize.json_depth import mib
    err = PacktoolInputError(f"line {line} is longer than {mib(MAX_JSON_LINE)} (one row of JSON Lines is read "
                             f"whole; no training row is that long): split that row into several, or check the "
                             f"file holds one JSON object per line", path=path)
    err.line_too_long = line  # a .json file read as JSON Lines says it in its own words (json_array_batches)
    raise err


@contextmanager
def open_text(path: str):
    """(decompressed stream, on-disk stream): `raw.tell()` counts the compressed bytes read."""
    low = path.lower()
    codec = next((c for ext, c in JSONL_CODECS.items() if low.endswith(ext)), None)
    if low.endswith(".gz"):
        with gzip.open(open_bytes(path), "rb") as f:
            yield f, f.fileobj
    elif codec is not None:
        with (pa.PythonFile(open_bytes(path), "r") if is_uri(path) or not utf8_path(path) else pa.OSFile(path, "rb")) as raw, \
                pa.CompressedInputStream(raw, codec) as f:
            yield f, raw
    else:
        with open_bytes(path) as f:
            yield f, f


def json_array_batches(path: str, batch_size: int, columns: list[str] | None,
                       blank=None, judge=None) -> Iterator[pa.RecordBatch]:
    """A JSON array, read whole (it cannot be split unparsed); a .json file that opens with
    anything but `[` holds JSON Lines, read as those, bounded per line: it is told from its
    first bytes, since one read of the whole file first held a 2 GiB file with no newline (or
    of NULs) in memory before the line bound refused it."""
    with open_bytes(path) as f:
        array = opens_array(f)
        if array:
            check_array_fits(path, file_size(path))  # before the read that holds it whole
            f.seek(0)
            raw = f.read()
    if not array:
        try:
            yield from jsonl_batches(path, batch_size, columns, blank=blank, judge=judge)
        except PacktoolInputError as e:
            if getattr(e, "line_too_long", None) is None:
                raise one_object(path, MAX_JSON_LINE) or e from None
            from packtool.tokenize.json_depth import mib
            raise PacktoolInputError(
                f"line {e.line_too_long} is longer than {mib(MAX_JSON_LINE)}: a .json file that is no JSON array "
                f"(it does not open with '[') is read as JSON Lines, each line one row read whole, and no training "
                f"row is that long; check the file holds a JSON array or one JSON object per line",
                path=path) from None
        return
    try:
        text = raw.decode("utf-8-sig")  # a BOM opening the file is skipped, as every text kind skips it
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise PacktoolInputError(f"invalid UTF-8 at line {line}; re-encode the file as UTF-8",
                                 path=path) from None
    pos = len(text) - len(text.lstrip())
    check_json_depth(raw, path, per_line=False)
    huge = number_beyond_float64(raw, per_line=False)  # named at its row below (rows before it are read first)
    huge_at = len(raw[:huge[0]].decode("utf-8-sig")) if huge else None
    del raw
    pos += 1
    rows: list[dict] = []
    held_nothing: set[str] = set()  # late keys judged while holding only nothing (tokenize.nothing)
    n = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise PacktoolInputError(f"JSON array is not closed: its text ends at line {text.count(chr(10)) + 1} "
                                     f"without the closing ]", path=path, row=n)
        if text[pos] == "]":
            nothing_after(text, pos + 1, path, n)
            break
        try:
            obj, end = raw_decode(text, pos)  # a key twice in a row is refused, as in JSON Lines
        except DuplicateKeyError as e:
            raise PacktoolInputError(f"at line {e.lineno}: {e.msg}", path=path, row=n) from None
        except json.JSONDecodeError as e:
            # at the number found above (Python's digit limit, or beyond float64): said below, its field named
            if huge_at is None or (e.pos != huge_at and not isinstance(e, BeyondFloat64Error)):
                said = f"at line {e.lineno}: {e.msg}" if past_syntax(e) else invalid_json(e, e.lineno)
                raise PacktoolInputError(said, path=path, row=n) from None
            end = len(text)
        if huge_at is not None and huge_at < end:
            line = text.count("\n", 0, huge_at) + 1
            raise PacktoolInputError(f"at line {line}: {beyond_float64(field_holding(text, pos, huge[1]), huge[1])}",
                                     path=path, row=n) from None
        pos = end
        if not isinstance(obj, dict):
            raise PacktoolInputError(f"the array's element is a JSON {_kind(obj) or 'null'}, not an object; write each "
                                     f"element as one {{...}} row object", path=path, row=n)
        if judge is not None and not judge.known.issuperset(obj):  # a key of no earlier row's value
            # a key judged already while it held nothing (null, "", []) is judged again only when it holds
            # something: a late key of nothing in every row built a one-row table per row
            late = [k for k in obj if k not in judge.known and not (k in held_nothing and is_nothing(obj[k]))]
            if late:
                judge.block(rows_batch([obj], path, lambda k: f"row {n}"), n)
                held_nothing.update(k for k in late if k not in judge.known)
        rows.append(obj if columns is None else {c: obj.get(c) for c in columns})
        n += 1
        if len(rows) == batch_size:
            yield _rows_to_batch(rows, path, n - len(rows))
            rows = []
    if rows:
        yield _rows_to_batch(rows, path, n - len(rows))


def _rows_to_batch(rows: list[dict], path: str, first_row: int) -> pa.RecordBatch:
    return rows_batch(rows, path, lambda k: f"row {first_row + k}")  # json_types names a field of two types
