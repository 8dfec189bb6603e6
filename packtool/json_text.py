"""JSON a user wrote or may edit, decoded with one rule Python's json lacks: a key given twice
in one object is an error, never "the last one wins" in silence (and an integer longer than
Python converts is a JSON error at the number, not a bare ValueError; so is a number beyond the
float64 range, which Python's json made inf: a value the text never held). JSON Lines rows are parsed by
Arrow, which refuses such a row at any depth (tokenize.text_readers names its line); every
other JSON of user data or settings is decoded here: the rows of a `.json` array, a
tokenizer_config.json or tokenizer.json, a dataset's state.json, a plan file's settings, a
manifest. Base (standard library only): a reader's manifest read loads nothing more.

The error is a `json.JSONDecodeError` whose position is the key's second occurrence (not the
object's brace: a manifest's or a config's keys all sit in the object that opens on line 1), so
each caller's existing JSON error path names the file and the line (from 1) where the repeat is,
as it does for any other broken JSON.
"""
from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import re
import sys


def twice(key: str) -> str:
    """The one wording of the problem (Arrow's JSON Lines refusal is said the same way)."""
    return f"key {key!r} appears twice in one object; keep one of them"


def invalid_json(e: json.JSONDecodeError, line: int) -> str:
    """The one wording of a JSON syntax error in a row file (tokenize.text_readers, json_types):
    its line and column (characters from 1: a multi-MB line is found only by its column), and
    Python's text with its position kept as "here" ("Unterminated string starting at" meant "at
    <the position>")."""
    what = e.msg[0].lower() + e.msg[1:] if e.msg else "not JSON"
    what = re.sub(r" at$", " here", what)
    return (f"invalid JSON at line {line}, column {e.colno}: {what}; correct it there, or rewrite the "
            f"file with a JSON writer")


class DuplicateKeyError(json.JSONDecodeError):
    """A key given twice in one object; `pos`/`lineno` point at the key's second occurrence."""

    def __init__(self, key: str, doc: str, pos: int):
        super().__init__(twice(key), doc, pos)
        self.key = key


class LongIntegerError(json.JSONDecodeError):
    """An integer longer than Python converts; `pos` at the number."""


class BeyondFloat64Error(json.JSONDecodeError):
    """A number float64 cannot hold (1e400, a 309-digit integer); `pos` at the number."""


def beyond_float64(field: str | None, token: str) -> str:
    """The one wording of a number no float64 holds, at every JSON door (a JSON Lines line, a
    .json array's row, a block Python reads, a JSON text inside a row, a settings file): what,
    where and the fix."""
    digits = token.lstrip("-")
    size = f"{len(digits)} digits" if digits.isdigit() else f"{len(token)} characters"
    said = token if len(token) <= 24 else f"{token[:12]}…{token[-6:]} ({size})"
    where = f"field {field} is {said}" if field else f"the number {said}"
    return (f"{where}, a number beyond the float64 range (±1.8e308), which no column holds (read, it would "
            f"become ±inf, a value the file does not hold); write it in range or as a string")


def past_syntax(e: json.JSONDecodeError) -> bool:
    """Whether the text is JSON but breaks one of this module's rules (a key twice, an integer
    too long, a number beyond float64): a caller that says "not JSON" for a syntax error says
    this one's own words."""
    return isinstance(e, (DuplicateKeyError, LongIntegerError, BeyondFloat64Error))


class _Twice(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique(pairs: list) -> dict:
    d = dict(pairs)  # at C speed; only a short dict is a repeat
    if len(d) < len(pairs):
        seen: set = set()
        raise _Twice(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return d


_FAST = json.JSONDecoder(object_pairs_hook=_unique)


BOM = "a UTF-8 byte order mark (BOM) opens the text, which JSON does not allow (save it without one)"


def loads(text: str | bytes):
    """json.loads, refusing a key given twice (DuplicateKeyError) and a byte order mark, said as
    one (the decoder alone said "Expecting value: line 1 column 1"; json.loads of bytes skips it,
    so a file read as bytes or as text would differ)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError(BOM, text, 0)
    return raw_decode(text, 0, whole=True)[0]


def raw_decode(text: str, pos: int = 0, whole: bool = False):
    """JSONDecoder.raw_decode from `pos`, refusing a key given twice; `whole`: nothing but
    whitespace may follow (json.loads)."""
    try:
        out = (_FAST.decode(text), len(text)) if whole else _FAST.raw_decode(text, pos)
        if _MAYBE_BEYOND.search(text, pos, out[1]):  # (a C-speed scan: only such a text is decoded again)
            _CHECKED.decode(text) if whole else _CHECKED.raw_decode(text, pos)
        return out
    except _Beyond as b:
        raise _beyond(text, pos, b.token) from None
    except _Twice as t:
        raise DuplicateKeyError(t.key, text, _where(text, pos)) from None
    except ValueError as e:  # JSONDecodeError is one: a syntax error is the caller's, said as such
        if isinstance(e, json.JSONDecodeError) or "integer string conversion" not in str(e):
            raise
        raise _long_integer(text, pos) from None


class _Beyond(Exception):
    def __init__(self, token: str):
        self.token = token


def _finite_float(token: str) -> float:
    if math.isinf(v := float(token)):
        raise _Beyond(token)
    return v


def _finite_int(token: str) -> int:
    v = int(token)  # past Python's digit limit: its ValueError, the long-integer rule
    if len(token) > 308 and math.isinf(float(token)):
        raise _Beyond(token)
    return v


# a number float64 may not hold: an exponent of 3 digits or more, or 210 digits in a row (under a
# 2-digit exponent, at most 10^99, fewer cannot reach 10^309; R2B-4: 1 + 300 zeros + e10 passed the
# 309-digit run this was). A string holding such text matches too; the checked decode passes it.
_MAYBE_BEYOND = re.compile(r"\d[eE][+-]?\d{3}|\d{210}")
_CHECKED = json.JSONDecoder(parse_float=_finite_float, parse_int=_finite_int)


def _beyond(text: str, pos: int, token: str) -> BeyondFloat64Error:
    """The error at the number written `token` (its first place outside a string)."""
    pattern = r"(?<![\w.+-])" + re.escape(token) + r"(?![\w.+-])"
    at = next((pos + m.start() for m in re.finditer(pattern, text[pos:]) if not _in_string(text, pos + m.start())), pos)
    return BeyondFloat64Error(beyond_float64(None, token), text, at)


def _long_integer(text: str, pos: int) -> LongIntegerError:
    """An integer longer than Python converts (sys.get_int_max_str_digits(), 4300 by default) was
    Python's bare ValueError, no file or line named, and no JSON error to any caller: said as
    one at the number (the first such run of digits outside a string, found only on this path),
    so every caller names the file and the line as for any JSON it cannot read (S47B-1)."""
    limit = sys.get_int_max_str_digits()
    found = [m for m in re.finditer(r"-?\d{%d,}" % (limit + 1), text[pos:]) if not _in_string(text, pos + m.start())]
    at = pos + found[0].start() if found else pos
    n = len(found[0].group().lstrip("-")) if found else limit + 1
    return LongIntegerError(f"an integer of {n} digits, more than Python reads ({limit}): the file is damaged or "
                            f"was edited; write a shorter number", text, at)


def _in_string(text: str, at: int) -> bool:
    """Whether position `at` lies inside a JSON string (quotes before it on its line, escapes
    counted: a rough test, enough to pass over digits a string holds)."""
    line = text[text.rfind("\n", 0, at) + 1:at]
    return len(re.findall(r'(?<!\\)"', line.replace("\\\\", ""))) % 2 == 1


def _where(text: str, pos: int) -> int:
    """Where the key is given the second time: the object that holds it is found by decoding once
    more with the Python scanner, which passes each object's start (only on this error path: it
    is slower); then its members are walked for the repeated key's position."""
    starts: list[int] = []

    def parse_object(s_and_end, *args):
        starts.append(s_and_end[1] - 1)
        out = json.decoder.JSONObject(s_and_end, *args)
        starts.pop()
        return out
    dec = json.JSONDecoder(object_pairs_hook=_unique)
    dec.parse_object = parse_object
    dec.scan_once = json.scanner.py_make_scanner(dec)
    while pos < len(text) and text[pos] in " \t\r\n":  # raw_decode takes none before the value
        pos += 1
    try:
        dec.raw_decode(text, pos)
    except _Twice as t:
        return _second_key(text, starts[-1], t.key, dec)
    return pos


def _second_key(text: str, brace: int, key: str, dec: json.JSONDecoder) -> int:
    """The position of `key`'s second member in the object opening at `brace`. The object was
    read whole once (the repeat is seen at its end), and every object inside it holds no repeat
    (inner objects end first), so its members decode here."""
    ws = json.decoder.WHITESPACE.match
    i, seen = brace + 1, False
    while True:
        i = ws(text, i).end()
        if text[i] == "}":
            return brace
        k, end = json.decoder.scanstring(text, i + 1)
        if k == key:
            if seen:
                return i
            seen = True
        end = ws(text, end).end() + 1  # past the ':'
        _, end = dec.scan_once(text, ws(text, end).end())
        i = ws(text, end).end()
        if text[i] == ",":
            i += 1


__all__ = ["BeyondFloat64Error", "DuplicateKeyError", "LongIntegerError", "beyond_float64", "invalid_json", "loads",
           "past_syntax", "raw_decode", "twice"]
