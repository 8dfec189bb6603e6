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

import json
import math
import os
import re
import shlex

import numba as nb
import numpy as np
import pyarrow as pa

from packtool import free_memory
from packtool.errors import PacktoolInputError
from packtool.json_text import beyond_float64  # noqa: F401  (the one wording; text_readers imports it here)
from packtool.storage import SETTINGS_BYTES, mib, read_small  # noqa: F401  (callers import them from here too)
from packtool.tokenize.json_types import first_field

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


# float64's largest value is 1.797e308: a number token whose first significant digit stands at 10^308
# or higher is checked exactly (float() of its text); one at 10^309 or higher always overflows.
_EXP10_CHECKED = 308


@nb.njit(nogil=True, cache=True)
def _first_large_number(buf, start, per_line):
    """Offset of the first number token at or after `start` (strings skipped, as above) whose
    first significant digit stands at 10^308 or higher (1e400; an integer of 309 digits or more),
    or -1. A JSON number's digits and its exponent are read here; its value only where it is
    this large (float() decides; the few at exactly 10^308 may be in range)."""
    in_str = False
    esc = False
    tok = -1  # where the number being read starts; -1 outside one
    lead = frac0 = exp = part = 0  # digits before the point, zeros after it, exponent, part 0/1/2
    sig = False
    neg = False
    for i in range(start, buf.size + 1):
        c = buf[i] if i < buf.size else 32
        if in_str:
            if esc:
                esc = False
            elif c == 92:
                esc = True
            elif c == 34 or (c == 10 and per_line):
                in_str = False
            continue
        if tok >= 0:
            if 48 <= c <= 57:
                if part == 2:
                    exp = min(exp * 10 + c - 48, 1 << 30)
                elif part == 0 and (sig or c != 48):
                    sig = True
                    lead += 1
                elif part == 1 and not sig:
                    if c == 48:
                        frac0 += 1
                    else:
                        sig = True
                continue
            if c == 46:
                part = 1
                continue
            if c == 101 or c == 69:
                part = 2
                continue
            if part == 2 and (c == 45 or c == 43):
                neg = c == 45
                continue
            if sig and (lead - 1 if lead else -frac0 - 1) + (-exp if neg else exp) >= _EXP10_CHECKED:
                return tok
            tok = -1
        if c == 34:
            in_str = True
        elif c == 45 or 48 <= c <= 57:
            tok, lead, frac0, exp, part, sig, neg = i, 0, 0, 0, 0, False, False
            if c != 45:
                sig = c != 48
                lead = 1 if sig else 0
    return -1


_NUMBER = re.compile(rb"-?[0-9.eE+-]*")


def number_beyond_float64(data: bytes, per_line: bool = True) -> tuple[int, str] | None:
    """(byte offset, its text) of the first number in JSON text `data` that float64 cannot hold,
    or None. Python's json makes such a number +-inf (1e400) or an int no float column holds (a
    400-digit integer); Arrow's JSON reader makes an integer past 1.8e308 +-inf: each
    would be a value the input never held (an `Infinity` literal is the input's own, kept)."""
    buf, at = np.frombuffer(data, np.uint8), 0
    while (at := _first_large_number(buf, at, per_line)) >= 0:
        token = _NUMBER.match(data, at).group()
        try:
            if math.isinf(float(token)):
                return at, token.decode()
        except ValueError:  # no number (`1e400e5`): the parser names it
            pass
        at += len(token)
    return None


def field_holding(text: str, pos: int, token: str) -> str | None:
    """The field (`lp[0]`, `meta.score`) of the JSON value opening at `pos` that holds the number
    written `token`, its numbers left unconverted (so neither an `Infinity` literal nor Python's
    digit limit is taken for it); None if the value is no JSON."""
    hit = object()
    dec = json.JSONDecoder(parse_float=lambda t: hit if t == token else 0, parse_int=lambda t: hit if t == token else 0)
    try:
        obj = dec.raw_decode(text, pos)[0]
    except ValueError:
        return None
    found = first_field(obj, lambda v: v is hit)
    return (found[0] or "(the row)") if found else None


def _float_in(t) -> bool:
    if pa.types.is_floating(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _float_in(t.value_type)
    return pa.types.is_struct(t) and any(_float_in(t.field(i).type) for i in range(t.num_fields))


def _inf_in(a) -> bool:
    """Whether a float anywhere in `a` (a column, at any depth) is +-inf; only floats are read.
    pyarrow.compute is loaded here, not with the module: a pre-tokenized pack never loads it
    (tests/packing/test_lean_imports.py: 50 ms and its pandas-free promise)."""
    import pyarrow.compute as pc
    t = a.type
    if pa.types.is_floating(t):
        return pc.any(pc.is_inf(a)).as_py() is True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _float_in(t.value_type) and _inf_in(pc.list_flatten(a))
    return pa.types.is_struct(t) and any(_float_in(t.field(i).type) and _inf_in(pc.struct_field(a, [i]))
                                         for i in range(t.num_fields))


def check_json_numbers(block: bytes, path: str, first_line: int = 0, table: pa.Table | None = None) -> None:
    """Refuse a block of JSON Lines holding a number float64 cannot hold, naming its line and
    field: before Python reads a block, where Arrow refused one, and where Arrow read it into
    `table` (every column, read or not), only when a float there is +-inf (the number's only
    trace there; an int column holds none, so a block of ids costs no scan)."""
    if table is not None and not any(_inf_in(c) for c in table.columns):
        return
    found = number_beyond_float64(block)
    if found is not None:
        at, token = found
        start = block.rfind(b"\n", 0, at) + 1
        end = block.find(b"\n", at)
        text = block[start:end if end >= 0 else len(block)].decode("utf-8", "replace")
        line = first_line + block.count(b"\n", 0, at) + 1
        raise PacktoolInputError(f"at line {line}: {beyond_float64(field_holding(text, 0, token), token)}",
                                 path=path)


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
