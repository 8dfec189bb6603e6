"""Blank lines inside a CSV/TSV data file: Arrow's CSV reader skips an empty line as no record,
as JSON Lines skips a blank line, and now says it the same way (tokenize/blank_lines.py): one
note per file, "N blank lines skipped (first at line L)", kept in cache.json's per-input record
and said again on reuse, under both engines. The count is the CSV parse's: empty lines inside a
quoted value are part of the value, a line of spaces is a record, blank lines after the last
record say nothing; LF, CRLF and CR line ends; every CSV reader (plain and compressed). Under
--engine ray: tests/engines/test_ray_blank_lines.py."""
from __future__ import annotations

import pytest
from conftest import GPT2
from test_blank_lines import _write  # the one writer of plain and compressed test inputs

from packtool import notes
from packtool.tokenize import csv_reader
from packtool.tokenize.blank_lines import BlankLines
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache
from packtool.tokenize.readers import iter_batches, resolve_inputs

NAMES = ("d.csv", "d.tsv", "d.csv.gz", "d.tsv.gz", "d.csv.zst", "d.csv.bz2")
ROW = "a row{d}1"  # a record; `{d}` is the file's delimiter
# lines of a file (joined by the line end), its records, and [count, first line]
LAYOUTS = {
    "one inside": (["text{d}n", ROW, "", ROW], 2, [1, 3]),
    "runs": (["text{d}n", ROW, "", "", ROW, ROW, "", ROW], 4, [3, 3]),
    "before the header": (["", "", "text{d}n", ROW], 1, [2, 1]),
    "inside and at the end": (["text{d}n", ROW, "", ROW, "", "", ""], 2, [1, 3]),
    "only at the end": (["text{d}n", ROW, ROW, "", ""], 2, None),
    "inside a quoted value": (["text{d}n", '"a{d}""b', "", "", 'c"{d}1', ROW], 2, None),
    "quoted, then one outside": (["text{d}n", '"a', "", 'b"{d}1', "", ROW], 2, [1, 5]),
    "none": (["text{d}n", ROW, ROW], 2, None),
}
ENDS = {"LF": "\n", "CRLF": "\r\n", "CR": "\r"}


def _text(lines, name: str, end: str = "\n") -> str:
    d = "\t" if ".tsv" in name else ","
    return end.join(line.replace("{d}", d) for line in lines) + end


@pytest.mark.parametrize("block", [None, 16], ids=["one block", "16-byte blocks"])
@pytest.mark.parametrize("end", ENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", NAMES)
def test_every_csv_reader_counts_the_blank_lines_inside(tmp_path, monkeypatch, name, layout, end, block):
    if block:  # Arrow reads the file in blocks this size: blank lines and quotes across a block's edge
        monkeypatch.setattr(csv_reader, "_CSV_BLOCK", block)
    lines, records, want = LAYOUTS[layout]
    path = tmp_path / name
    _write(path, _text(lines, name, ENDS[end]))
    (f,) = resolve_inputs([str(path)])
    blank = BlankLines()
    rows = sum(b.num_rows for b in iter_batches(f, 1000, None, blank=blank))
    assert rows == records and blank.record() == want


def test_a_byte_order_mark_is_no_byte_of_the_first_line(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"\xef\xbb\xbf\ntext,n\nx,1\n\ny,2\n")
    blank = BlankLines()
    assert sum(b.num_rows for b in iter_batches(resolve_inputs([str(path)])[0], 10, blank=blank)) == 2
    assert blank.record() == [2, 1]


def _said(start: int) -> list[str]:
    return [n for n in notes.since(start) if "blank line" in n]


@pytest.mark.parametrize("name", ["inside.csv", "inside.tsv.gz"])
def test_the_note_is_said_once_per_file_when_built_and_on_reuse(tmp_path, name):
    inside, at_end = tmp_path / name, tmp_path / "at_end.csv"
    _write(inside, _text(["text{d}n", "row 0{d}1", "", "row 1{d}2", "", "", "row 2{d}3"], name))
    _write(at_end, _text(["text{d}n", "row 3{d}1", "", ""], "x.csv"))
    for run in ("built", "reused"):
        start = notes.mark()
        cache = tokenize_to_cache([str(inside), str(at_end)], TokenizeConfig(tokenizer=GPT2),
                                  cache_dir=str(tmp_path / "cache"), progress=False)
        assert cache.reused == (run == "reused")
        (note,) = _said(start)
        assert note.startswith(f"{inside}: 3 blank lines skipped (first at line 3; lines count from 1)"), note
    assert [rec.get("blank_lines") for rec in cache.meta["inputs"]] == [[3, 3], None]

