"""What a text reader checks so that no row or column of an input is passed over without a word:
the end of a .json array (nothing after its `]`), a .json holding one object, a column named
twice, a CSV quote never closed. Each runs where `text_readers` reads; none re-reads a file
unless the read already found a sign of trouble. And what an input that could not be read is
(`read_failed`): out of memory where memory refused it, never an unreadable file."""
from __future__ import annotations

import json
import os
import re

from packtool.errors import PacktoolInputError, arg
from packtool.storage import is_uri, open_bytes


def nothing_after(text: str, pos: int, path: str, rows: int) -> None:
    """Past the array's closing `]` only whitespace: a second array (two exports joined), JSON
    Lines rows or garbage there were passed over without a word, their rows lost, as no JSON
    reader would (json.loads: "Extra data"; a JSON Lines line with more after it is refused)."""
    rest = len(text) - len(text[pos:].lstrip())
    if rest < len(text):
        line = text.count("\n", 0, rest) + 1
        column = rest - text.rfind("\n", 0, rest)
        raise PacktoolInputError(
            f"invalid JSON at line {line}, column {column}: extra data after the array's closing ] (the array "
            f"held {rows:,} row(s); what follows is not read): a .json file holds one array of rows; join the "
            f"arrays into one, or save every row as JSON Lines (one object per line)", path=path)


# the fix for a .json record of another tool met among the inputs (a downloader's cache.json beside
# its data/, a manifest): read as rows, it was sent to rewrite the file or to --shape (F4)
_RECORD = ("if it is another tool's record (a downloader's cache.json, a manifest), it is no input: leave it out "
           "(name the data files themselves, or move it out of the folder given)")


def _single_object(path: str, bound: int) -> dict | None:
    """The file's one JSON object, when the whole file (up to `bound` bytes) is one; else None."""
    try:
        with open_bytes(path) as f:
            raw = f.read(bound + 1)
        if len(raw) > bound:
            return None
        obj = json.loads(raw)
    except (OSError, ValueError, RecursionError):  # not one JSON value (or too deep): the caller's error stands
        return None
    return obj if isinstance(obj, dict) else None


def _keys(obj: dict) -> str:
    return ", ".join(repr(k) for k in list(obj)[:5]) + (", ..." if len(obj) > 5 else "")


def one_object(path: str, bound: int) -> PacktoolInputError | None:
    """A .json file that failed as JSON Lines may be one pretty-printed object (the common
    `{"version": 1, "data": [...]}` export, or another tool's record): valid JSON a JSON writer
    wrote, which "invalid JSON ... rewrite the file with a JSON writer" misnamed. Parsed whole
    only on this error path and only up to the line bound (a larger file keeps the JSON Lines error)."""
    return _one_object_refused(path, bound, lambda keys: (
        f"holds one JSON object (keys {keys}), not rows: {_RECORD}; if it holds the rows, save them as an "
        f"array of row objects ([{{...}}, ...]) or JSON Lines (one object per line)"))


def one_record(path: str, row_fix: str, bound: int = 64 << 20) -> PacktoolInputError | None:
    """A .json file of one line whose object holds no input shape's columns (`{"etag": "x"}`): read as
    JSON Lines it is one row, refused with the shape's fix alone (`row_fix`), which does not fit
    a tool's record found among the data. Asked on the shape refusal only; a file over `bound`
    bytes is no record."""
    if not path.lower().endswith(".json"):
        return None
    return _one_object_refused(path, bound, lambda keys: (
        f"holds one JSON object (keys {keys}), whose keys are no input shape's columns: {_RECORD}; "
        f"if it is one row, {row_fix}"))


def _one_object_refused(path: str, bound: int, says) -> PacktoolInputError | None:
    """The refusal of a file holding one JSON object: packtool's own record named as such, any
    other in `says(its keys)`; None when the file is not one object within `bound`."""
    obj = _single_object(path, bound)
    if obj is None:
        return None
    return _packtool_record(obj, path) or PacktoolInputError(says(_keys(obj)), path=path)


def cache_entry_not_data(entry: str, path: str) -> PacktoolInputError:
    """An input that is a tokenized cache entry, its cache.json or a path inside it (flat/, data/,
    a part file): one line at every door, naming the entry and the fix that reuses it."""
    where = f"{entry} is" if os.path.basename(path) == "cache.json" or path.rstrip("/") == entry else \
        f"lies inside {entry},"
    return PacktoolInputError(
        f"{where} a packtool tokenized cache entry, not data: pack the inputs it was made from (its "
        f"cache.json lists them); the same flags and {arg('cache_dir')} reuse it", path=path)


def _packtool_record(obj: dict, path: str) -> PacktoolInputError | None:
    """A JSON object that is packtool's own record given as the input (a tokenized cache entry's
    cache.json, a packed output's manifest), told by the record's `format`, so that every door
    (a local folder or file, a store prefix or object) says it alike: its fix is not to rewrite
    packtool's record (S47A-8, S48A-3)."""
    from packtool.manifest_name import FORMAT_NAME
    from packtool.tokenize.cache_entry import CACHE_FORMAT
    home = path.rsplit("/", 1)[0] if is_uri(path) else os.path.dirname(os.path.abspath(path))
    if obj.get("format") == CACHE_FORMAT:
        return cache_entry_not_data(home, path)
    if obj.get("format") == FORMAT_NAME:
        return PacktoolInputError(
            f"is a packed output's manifest, not data: pack the inputs it was made from (its `input` lists "
            f"them) with the new flags, or read the output {home} itself (packtool.hf, packtool train)", path=path)
    return None


def opens_array(f) -> bool:
    """Whether the first byte after leading whitespace is `[`, read 64 KiB at a time (a file of
    whitespace is read through, never held). A UTF-8 BOM opening the file is no byte of its text."""
    first = True
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return False
        if first and chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]
        first = False
        rest = chunk.lstrip()  # ASCII whitespace: what the array's text.lstrip() passes over too
        if rest:
            return rest[:1] == b"["


def compressed_array(path: str, open_text) -> PacktoolInputError | None:
    """A compressed .json (`gzip data.json`: .json.gz, .json.zst, .json.bz2) is read as JSON Lines;
    one that failed so and holds an array was told to write each line as an object, or "invalid
    JSON at line 1" for a pretty-printed one, not what its kind is read as nor how to read the
    array. Asked only on that error path (`open_text`: text_readers' decompressing opener)."""
    m = re.search(r"\.json\.[a-z0-9]+$", path.lower())
    if m is None:
        return None
    try:
        with open_text(path) as (f, _):
            if not opens_array(f):
                return None
    except (OSError, EOFError, ValueError):  # unreadable: the JSON Lines error stands
        return None
    return PacktoolInputError(f"a {m.group(0)} file is read as JSON Lines (one {{...}} object per line), and this one "
                              f"holds a JSON array: decompress it to a .json file (read as one array), or write one "
                              f"{{...}} object per line", path=path)


def refuse_repeated_names(names: list[str], path: str, where: str = "") -> None:
    """A column named twice (a CSV header, a Parquet or Arrow schema) is ambiguous as a key given
    twice in a JSON row: Arrow read the first and passed over the other (its content lost
    without a word), or failed as an internal error. Refused, naming both places."""
    first: dict = {}
    for i, n in enumerate(names):
        if n in first and n != "":  # an empty name is a header that is data: shape_detect says that
            raise PacktoolInputError(f"{where}column {json.dumps(n, ensure_ascii=False)} is named twice (columns "
                                     f"{first[n] + 1} and {i + 1}); rename one", path=path)
        first[n] = i


def refuse_open_quote(path: str, open_text, delimiter: str) -> None:
    """Arrow's CSV reader ends a quoted field that is never closed at the end of the file: every
    line after the quote was one row's text (4 rows read as 2, no word). An odd count of quote
    characters is the cheap sign (a quote inside a quoted field is doubled); a bare quote in an
    unquoted field (`5" tall`) is one too, so Python's strict reading decides and names the line."""
    from packtool.tokenize.text_where import csv_bad_record
    with open_text(path) as (f, _):
        where = csv_bad_record(f, delimiter)
    if where is not None:
        row, line, what = where
        if what == "unexpected end of data":
            what = "a quoted field opened here is never closed (the file ends inside it, every later line read into it)"
        raise PacktoolInputError(f"cannot read CSV at line {line}: {what}; close the quote (a quote inside a "
                                 f"quoted field is written twice: \"\")", path=path, row=row)


# how an input of each kind is read in less memory, where the memory ran out reading it
_LESS = {"arrow": "convert it to Parquet or JSON Lines (an Arrow IPC file is mapped whole; those are read a batch "
                  "at a time)",
         "parquet": "write it with smaller row groups (packtool decodes one at a time)"}


def read_failed(e: BaseException, path: str, kind: str, message: str) -> Exception:
    """The error for an input a reader could not read: out of memory where the allocation or the
    mapping was refused for memory (free_memory's one rule: the file is not at fault, kind
    resources on the command line), else the input's `message`."""
    from packtool.free_memory import decode_out_of_memory
    return decode_out_of_memory(e, path, less=_LESS.get(kind)) or PacktoolInputError(message, path=path)
