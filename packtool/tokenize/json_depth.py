"""The bounds on what packtool parses from a user's files, checked before the parser.

Nesting: Arrow's JSON reader recurses without a bound (a row nested ~30,000 deep ends the
process with SIGSEGV, no message) and Python's json raises RecursionError. A bracket scan
(strings skipped) is a few passes cheaper than the parse it guards.

Size: a file small by nature (a manifest, a tokenizer_config.json, a chat template, a
dataset's state.json) is read whole, so one over its bound (a damaged or copied-over file, 8 GB
of NULs) is refused by its size before the read, naming the file and the bound, instead of
an out-of-memory that names neither. A JSON array data file is read whole too (it cannot be
split unparsed): one that cannot fit in the memory available is refused by its size before the
read, with the conversion to JSON Lines (read in blocks) that fixes it.
"""
from __future__ import annotations

import os
import shlex

import numba as nb
import numpy as np

from packtool import free_memory
from packtool.errors import PacktoolInputError
from packtool.storage import SETTINGS_BYTES, mib, read_small  # noqa: F401  (callers import them from here too)

MAX_JSON_DEPTH = 256  # far above any training row; far below what the parsers survive


@nb.njit(nogil=True, cache=True)
def _first_too_deep(buf, limit, per_line):
    """Offset of the first bracket nesting past `limit`, or -1. Brackets inside strings do not
    nest; `per_line` (JSON Lines) restarts at each newline, so an invalid row is the parser's
    to name and does not shift the next row's depth."""
    depth = 0
    in_str = False
    esc = False
    for i in range(buf.size):
        c = buf[i]
        if in_str:
            if esc:
                esc = False
            elif c == 92:
                esc = True
            elif c == 34:
                in_str = False
            elif c == 10 and per_line:
                in_str = False
                depth = 0
        elif c == 34:
            in_str = True
        elif c == 91 or c == 123:
            depth += 1
            if depth > limit:
                return i
        elif c == 93 or c == 125:
            depth -= 1
        elif c == 10 and per_line:
            depth = 0
    return -1


def check_json_depth(data: bytes, path: str, first_line: int = 0, per_line: bool = True,
                     limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse `data` (JSON Lines, or `per_line=False` one JSON document) nested deeper than
    `limit`, naming the line (`first_line`: lines before `data` in the file)."""
    at = _first_too_deep(np.frombuffer(data, np.uint8), limit, per_line)
    if at >= 0:
        line = first_line + data.count(b"\n", 0, at) + 1
        raise PacktoolInputError(f"line {line}: nested deeper than {limit} levels; packtool reads "
                                 f"JSON nested at most {limit} deep: flatten or drop that value", path=path)


def load_json_file(path: str, what: str, limit: int = SETTINGS_BYTES, flag: str | None = None):
    """`json.load` of a user's `what` file (tokenizer config, dataset state) behind the size
    and nesting bounds (json's own errors, UnicodeDecodeError included, reach the caller)."""
    from packtool.json_text import loads  # a key given twice: a JSONDecodeError at its object
    data = read_small(path, limit, what, "restore or remove it", flag=flag)
    check_json_depth(data, path, per_line=False)
    return loads(data)


# A JSON array is held whole while it is parsed: its bytes, then their text, at least one byte a
# character (2 or 4 where it holds a character past Latin-1 / outside the Basic Multilingual
# Plane: an emoji). Measured, on a loaded box (text_readers.json_array_batches alone, peak RSS
# over its baseline): 2.3x the file's size for a 200 MB ASCII array, 6x for one with an emoji.
ARRAY_BYTES_PER_BYTE = 2


def check_array_fits(path: str, size: int) -> None:
    """Refuse a JSON array file whose read would need more memory than the machine has
    available, before it is read (the least it needs: an emoji in it needs ~3x more)."""
    need, have = ARRAY_BYTES_PER_BYTE * size, free_memory.available_bytes()
    if have is None or need <= have:
        return
    out = shlex.quote(os.path.splitext(path)[0] + ".jsonl")
    raise PacktoolInputError(
        f"a JSON array is read whole: this {mib(size)} file needs at least {mib(need)} of memory (its bytes "
        f"and their text), over the {mib(have)} this machine has available; convert it to JSON Lines (one "
        f"object per line, read in blocks), e.g. `jq -cn --stream 'fromstream(1|truncate_stream(inputs))' "
        f"{shlex.quote(path)} > {out}`, and pass that file", path=path)
