"""Blank lines inside a JSON Lines data file: read (they are common in the wild: an editor's
trailing newline, files joined with `cat` and a separator), but never skipped without a word.

A blank line (JSON whitespace only) is no row to Arrow's JSON reader, so every later row's
number is one less than its line's: a user who counts lines looks at the wrong row. The reader
(text_readers.jsonl_batches) hands each block's blank-line offsets, found by the scan that
counts its rows, to a `BlankLines` the caller gave; the caller says one note per file and keeps
the count in the cache's per-input record (`record`), so a run reusing the cache says it again
(`say_record`). Blank lines after the last row (a file ending in one or more newlines) shift
no row and are not counted.

CSV/TSV the same: Arrow's CSV reader skips an empty line (nothing before its line end) as no
record. A quoted value may hold empty lines, so the count follows the reader's own parse of the
bytes it reads (`csv_scan`, one pass in numba over each block Arrow reads, on Arrow's reading
thread without the GIL): a run of line ends outside quotes. A line of spaces is a record there
(Arrow reads it as a value), so it is no blank line.
"""
from __future__ import annotations

from bisect import bisect_left

import numba as nb
import numpy as np

from packtool.notes import note

_SPACE = b" \t\r\n"  # JSON's whitespace: what a blank line holds (text_readers._lines_with_text)


class BlankLines:
    """The blank lines of one file read in order, block by block: how many have a row after
    them, and the first one's line (from 1)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self._held = 0  # blank lines after the last row seen: inside only if a row follows
        self._held_first: int | None = None

    def add(self, block: bytes, first_line: int, starts: list[int], rows: int) -> None:
        """One block of whole lines: `first_line` lines come before it, `starts` are the offsets
        of its blank lines (sorted), `rows` the lines with text."""
        if rows:
            last = block.rfind(b"\n", 0, len(block.rstrip(_SPACE))) + 1  # where the block's last row starts
            inside = bisect_left(starts, last)
            if self._held or inside:
                if self.first is None:
                    self.first = self._held_first if self._held else _line(block, first_line, starts[0])
                self.count += self._held + inside
            self._held, self._held_first = 0, None
            starts = starts[inside:]
        if starts:
            if not self._held and self.first is None:  # a line number only while none is known yet
                self._held_first = _line(block, first_line, starts[0])
            self._held += len(starts)

    def for_csv(self, delimiter: str) -> "CsvBlankLines":
        """The counter a CSV/TSV file's reader is shown its bytes by (its lines are the CSV
        parse's to tell, not JSON's): what it finds is this one's count."""
        return CsvBlankLines(self, delimiter)

    def record(self) -> list[int] | None:
        """[count, first line] for the cache's per-input record; None when there were none."""
        return [self.count, self.first] if self.count else None


class CsvBlankLines:
    """The blank lines of one CSV/TSV file, counted into a BlankLines (`into`) from the bytes
    Arrow reads, shown in order (`scan`)."""

    def __init__(self, into: BlankLines, delimiter: str) -> None:
        self._into = into
        self._delim = ord(delimiter)
        # parse state, pending CR, lines ended, held, held's first line, count, first line (0: none)
        self._state = np.zeros(7, np.int64)
        self._start = True  # a UTF-8 BOM opening the file is no byte of its first line (Arrow skips it)

    def scan(self, chunk) -> None:
        buf = np.frombuffer(chunk, np.uint8)
        if self._start and buf.size:
            self._start = False
            if bytes(buf[:3]) == b"\xef\xbb\xbf":
                buf = buf[3:]
        _csv_scan(buf, self._delim, self._state)
        self._into.count, first = int(self._state[5]), int(self._state[6])
        self._into.first = first or None


# CSV parse states (Arrow's, quote char '"', doubled quotes, no escape char, newlines in values)
_LINE_START, _FIELD_START, _FIELD, _QUOTED, _AFTER_QUOTE = 0, 1, 2, 3, 4


@nb.njit(nogil=True, cache=True)
def _csv_scan(buf, delim, st):
    """Advance `st` (CsvBlankLines._state) over `buf`: an empty line at a record's start is a
    blank line, held until a record follows it (then counted)."""
    state, cr, line, held, held_first, count, first = st[0], st[1], st[2], st[3], st[4], st[5], st[6]
    for i in range(buf.size):
        c = buf[i]
        if c > 34 and c != delim:  # most bytes: no line end, quote or delimiter (one test, then on)
            cr = 0
            if state == _QUOTED or state == _FIELD:
                continue
            if state == _LINE_START and held:
                if first == 0:
                    first = held_first
                count += held
                held = 0
            state = _FIELD
            continue
        if c == 10 and cr:  # the LF of a CRLF: that line end was taken at its CR
            cr = 0
            continue
        cr = 0
        nl = c == 10 or c == 13
        if state == _LINE_START:
            if nl:
                if held == 0 and first == 0:
                    held_first = line + 1
                held += 1
            else:
                if held:
                    if first == 0:
                        first = held_first
                    count += held
                    held = 0
                state = _FIELD_START
        if state == _FIELD_START:
            if c == 34:
                state = _QUOTED
            elif nl:
                state = _LINE_START
            elif c != delim:
                state = _FIELD
        elif state == _FIELD:
            if c == delim:
                state = _FIELD_START
            elif nl:
                state = _LINE_START
        elif state == _QUOTED:
            if c == 34:
                state = _AFTER_QUOTE
        elif state == _AFTER_QUOTE:
            if c == 34:
                state = _QUOTED  # a doubled quote: one quote inside the value
            elif c == delim:
                state = _FIELD_START
            elif nl:
                state = _LINE_START
            else:
                state = _FIELD
        if nl:
            line += 1
            cr = c == 13
    st[0], st[1], st[2], st[3], st[4], st[5], st[6] = state, cr, line, held, held_first, count, first


def _line(block: bytes, first_line: int, at: int) -> int:
    return first_line + block.count(b"\n", 0, at) + 1


# cache.json's per-input record holds `blank_lines` for every CSV/TSV file a cache counted in:
# [count, first line], or null for none. A cache made before packtool counted a CSV file's blank
# lines (stop 38) has no such key: reused, it said nothing, which reads as "no blank lines" where
# nobody counted. Such a cache is stale (`uncounted`, in cache.cache_problem) and is rebuilt, once;
# the key in cache.json is no part of the content, so the cache version stays.
COUNTED = ("csv",)


def stored(kind: str, rec) -> dict:
    """What an input's cache.json record keeps of its blank lines (`rec`: BlankLines.record())."""
    return {"blank_lines": rec} if rec or kind in COUNTED else {}


def uncounted(inputs) -> str | None:
    """Why a cache whose per-input records are `inputs` does not know its blank lines (None: it
    does, for every file whose kind packtool counts them in)."""
    for rec in inputs if isinstance(inputs, list) else ():
        if isinstance(rec, dict) and rec.get("format") in COUNTED and "blank_lines" not in rec:
            return (f"cache.json has no blank-line count for {rec.get('path')} (made before packtool counted a "
                    f"CSV/TSV file's blank lines): rebuilt, so that they are counted and said")
    return None


def say_record(path: str, rec) -> None:
    """One note for a file (`rec`: `BlankLines.record()`, or what cache.json kept of it)."""
    if not rec:
        return
    n, first = rec
    note(f"{path}: {n:,} blank line{'s' if n != 1 else ''} skipped (first at line {first}; lines count from 1): "
         f"a blank line holds no row, so row numbers (from 0) leave them out; check that no row was meant "
         f"to be there, or remove them")


__all__ = ["BlankLines", "CsvBlankLines", "say_record", "stored", "uncounted"]
