"""Blank lines inside a JSON Lines data file: read (they are common in the wild: an editor's
trailing newline, files joined with `cat` and a separator), but never skipped without a word.

A blank line (JSON whitespace only) is no row to Arrow's JSON reader, so every later row's
number is one less than its line's: a user who counts lines looks at the wrong row. The reader
(text_readers.jsonl_batches) hands each block's blank-line offsets, found by the scan that
counts its rows, to a `BlankLines` the caller gave; the caller says one note per file and keeps
the count in the cache's per-input record (`record`), so a run reusing the cache says it again
(`say_record`). Blank lines after the last row (a file ending in one or more newlines) shift
no row and are not counted.
"""
from __future__ import annotations

from bisect import bisect_left

from packtool.notes import note

_SPACE = b" \t\r\n"  # JSON's whitespace: what a blank line holds (text_readers._BLANK_LINE)


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

    def record(self) -> list[int] | None:
        """[count, first line] for the cache's per-input record; None when there were none."""
        return [self.count, self.first] if self.count else None


def _line(block: bytes, first_line: int, at: int) -> int:
    return first_line + block.count(b"\n", 0, at) + 1


def say_record(path: str, rec) -> None:
    """One note for a file (`rec`: `BlankLines.record()`, or what cache.json kept of it)."""
    if not rec:
        return
    n, first = rec
    note(f"{path}: {n:,} blank line{'s' if n != 1 else ''} skipped (first at line {first}; lines count from 1): "
         f"a blank line holds no row, so row numbers (from 0) leave them out; check that no row was meant "
         f"to be there, or remove them")


__all__ = ["BlankLines", "say_record"]
