"""What a data file's first bytes say it is, asked only where its read failed: a file whose bytes
are another kind than its name (a gzip'ed file not renamed, a download saved without its .gz, a
Parquet file named .jsonl or .arrow, plain text under a .gz or .parquet name) was refused in its
reader's words, "invalid UTF-8 ... re-encode the file as UTF-8" (iconv on a binary file), "Not
a gzipped file", "Parquet magic bytes not found": a damaged file, where only the name is wrong
(S48A-11). The magic bytes of the kinds packtool reads, and of the compressions around them, are
told here; the refusal names the kind the bytes are and the name to give the file.
`said_by_bytes` wraps a reader's batches; `misnamed` is the rule. A file whose bytes are of the
kind its name says keeps its reader's own words.
"""
from __future__ import annotations

import os
import zlib
from typing import Iterator

from packtool.errors import PacktoolInputError
from packtool.storage import is_uri, read_range

_HEAD = 512  # enough to tell text from binary; one ranged read on a store
# (magic, kind): the compressions first (a compressed Parquet is still compressed)
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
          (b"PK\x03\x04", "zip"), (b"PAR1", "parquet"), (b"ARROW1", "arrow"), (b"\xff\xff\xff\xff", "arrow"))
# a compression's name suffix packtool reads (around JSON Lines, JSON, CSV/TSV), and its tool
_SUFFIX = {"gzip": ".gz", "zstd": ".zst", "bzip2": ".bz2"}
_NAMED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bzip2"}
_TOOL = {"gzip": "gunzip", "zstd": "unzstd", "bzip2": "bunzip2", "xz": "unxz", "zip": "unzip"}
_AS_LINES = ": a compressed .json is read as JSON Lines, a JSON array only uncompressed"
_WORDS = {"parquet": "a Parquet file", "arrow": "an Arrow IPC file", "jsonl": "JSON Lines text", "json": "JSON text",
          "csv": "CSV text", None: "text"}


def _bytes_kind(head: bytes) -> str | None:
    """gzip | zstd | bzip2 | xz | zip | parquet | arrow | json (text opening with { or [) | text;
    None for bytes of no kind told here (UTF-16, a damaged file: the reader's words stand)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    body = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    if b"\0" in body:
        return None
    try:  # a character cut by the head's end is no sign of binary
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(body) - 3:
            return None
    first = body.lstrip()[:1]
    return "json" if first in (b"{", b"[") else "text" if body.strip() else None


def _name_kind(name: str) -> tuple[str | None, str, str]:
    """(compression its name says or None, kind its name says: parquet | arrow | jsonl | json |
    csv, the name less its compression suffix)."""
    from packtool.tokenize.file_kinds import kind_of
    low = name.lower()
    ext = next((e for e in _NAMED if low.endswith(e)), None)
    bare = name[:-len(ext)] if ext else name
    base = kind_of(name)
    return _NAMED[ext] if ext else None, kind_of(name), bare


def _stem(name: str) -> str:
    """The name less every suffix of a kind packtool reads (`f.jsonl.gz` -> `f`)."""
    from packtool.tokenize.file_kinds import ARROW_EXT, JSONL_EXT, PARQUET_EXT
    from packtool.tokenize.csv_reader import CSV_EXT
    low = name.lower()
    ext = max((e for e in (*PARQUET_EXT, *JSONL_EXT, ".json", *ARROW_EXT, *CSV_EXT) if low.endswith(e)),
              key=len, default="")
    return name[:len(name) - len(ext)]


def misnamed(path: str) -> PacktoolInputError | None:
    """The refusal of a data file whose bytes are another kind than its name says, naming both
    and the fix; None where they agree or the bytes are of no kind told here. One read of its
    first bytes (a ranged read on a store)."""
    try:
        head = read_range(path, 0, _HEAD)
    except Exception:  # noqa: BLE001 (unreadable now, a store not reached: the reader's words stand)
        return None
    real = _bytes_kind(head)
    named, kind, bare = _name_kind(path)
    text = kind not in ("parquet", "arrow")
    if real is None or real == named or (named is None and (real == kind or (real in ("json", "text") and text))):
        return None
    name = path.rsplit("/", 1)[-1] if is_uri(path) else os.path.basename(path)
    if real in _TOOL:  # compressed bytes: under another compression's name, or none
        said = f"{named}-compressed" if named else _WORDS[kind]
        # a compressed .json is read as JSON Lines: renamed, a JSON array in it was refused again (RA-5);
        # decompressed under its .json name, either shape reads
        readable = text and real in _SUFFIX and (kind != "json" or _opens_with(head, real) == b"{")
        fix = (f"rename it {os.path.basename(bare) if named else name}{_SUFFIX[real]}"
               f"{f' (or decompress it: {_TOOL[real]})' if not named else ''}" if readable else
               f"decompress it ({_TOOL[real]}){' and name it by its kind' if named else ''}"
               f"{_AS_LINES if kind == 'json' else ''}")
        return PacktoolInputError(f"holds {real}-compressed data, not {said}: {fix}", path=path)
    if named is not None:  # a compression's name on bytes that are none
        what = "it holds text" if real in ("json", "text") else f"it is {_WORDS[real]}"
        to = os.path.basename(bare) if real in ("json", "text") or kind == real else _stem(name) + "." + real
        return PacktoolInputError(f"is not {named}-compressed ({what}): rename it {to}", path=path)
    if real in ("parquet", "arrow"):
        return PacktoolInputError(f"is {_WORDS[real]}, not {_WORDS[kind]}: rename it {_stem(name)}.{real}", path=path)
    ext = ".jsonl" if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{" else ".json" if real == "json" else None
    fix = f"rename it {_stem(name)}{ext}" if ext else "name it by its kind (.jsonl, .json, .csv or .tsv)"
    return PacktoolInputError(f"holds {'JSON ' if ext else ''}text, not {_WORDS[kind]}: {fix}", path=path)


def _opens_with(head: bytes, real: str) -> bytes:
    """The first byte past blanks of a compressed head's text (b"": not told; gzip alone, whose
    stream the standard library reads in part: a bzip2 block or a zstd frame needs more)."""
    if real != "gzip":
        return b""
    try:
        body = zlib.decompressobj(31).decompress(head)
    except zlib.error:
        return b""
    return body.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]


def said_by_bytes(batches: Iterator, path: str) -> Iterator:
    """A reader's batches; a refusal on the way said by the file's bytes where they are another
    kind than its name (`misnamed`), else as the reader said it."""
    try:
        yield from batches
    except PacktoolInputError as e:
        raise misnamed(path) or e from None
