"""Blank lines inside a JSON Lines data file are read as no row, as before, but never without a
word: one note per file, "N blank lines skipped (first at line L)", said when the file is
tokenized and again by every run that reuses the cache (the count is in cache.json's per-input
record), in every reader of JSON Lines data (plain, compressed, a .json holding JSON Lines) and
on `verify --source` (its fresh cache). Blank lines after the last row (a file ending in one or
more newlines) shift no row and say nothing. A lengths file refuses them instead
(tests/planning/test_lengths_blank_lines.py)."""
from __future__ import annotations

import bz2
import gzip
import json

import pyarrow as pa
import pytest
from conftest import GPT2

from packtool import notes
from packtool.tokenize import text_readers
from packtool.tokenize.blank_lines import BlankLines
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache
from packtool.tokenize.readers import iter_batches, resolve_inputs

NAMES = ("d.jsonl", "d.ndjson", "d.jsonl.gz", "d.jsonl.zst", "d.jsonl.bz2", "d.json")
ROW = '{"text": "one row"}'
# lines of a file ("", spaces, tabs, a CR: the blank lines JSON allows), and [count, first line]
LAYOUTS = {
    "one inside": ([ROW, "", ROW], [1, 2]),
    "kinds and runs": ([ROW, "", "  \t", ROW, "\r", ROW, ROW], [3, 2]),
    "before the first row": (["", "", ROW, ROW], [2, 1]),
    "inside and at the end": ([ROW, ROW, "", ROW, "", "", ""], [1, 3]),
    "only at the end": ([ROW, ROW, "", " "], None),
    "none": ([ROW, ROW], None),
}


def _write(path, text: str) -> None:
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".bz2"):
        data = bz2.compress(data)
    elif path.name.endswith(".zst"):
        with pa.CompressedOutputStream(str(path), "zstd") as f:
            f.write(data)
        return
    path.write_bytes(data)


@pytest.mark.parametrize("block", [None, 16], ids=["one block", "16-byte blocks"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", NAMES)
def test_every_json_lines_reader_counts_the_blank_lines_inside(tmp_path, monkeypatch, name, layout, block):
    if block:  # blank lines on both sides of a block's edge, and blocks of blank lines only
        monkeypatch.setattr(text_readers, "_JSONL_BLOCK", block)
    lines, want = LAYOUTS[layout]
    path = tmp_path / name
    _write(path, "\n".join(lines) + "\n")
    (f,) = resolve_inputs([str(path)])
    blank = BlankLines()
    rows = sum(b.num_rows for b in iter_batches(f, 1000, ["text"], blank=blank))
    assert rows == lines.count(ROW) and blank.record() == want


def test_a_last_blank_line_without_its_newline_is_no_line_inside(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(f"{ROW}\n\n{ROW}\n  ")
    blank = BlankLines()
    assert sum(b.num_rows for b in iter_batches(resolve_inputs([str(path)])[0], 10, blank=blank)) == 2
    assert blank.record() == [1, 2]


def _said(start: int) -> list[str]:
    return [n for n in notes.since(start) if "blank line" in n]


SHAPES = {  # a text file (encoded on the pool) and a pre-tokenized one (read ahead on a thread)
    "text": (TokenizeConfig(tokenizer=GPT2), lambda i: {"text": f"row {i}"}),
    "tokens": (TokenizeConfig(shape="tokens"), lambda i: {"input_ids": [i + 1, i + 2]}),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_note_is_said_once_per_file_when_built_and_on_reuse(tmp_path, shape):
    cfg, row = SHAPES[shape]
    inside, at_end = tmp_path / "inside.jsonl", tmp_path / "at_end.jsonl"
    inside.write_text(f"{json.dumps(row(0))}\n\n{json.dumps(row(1))}\n \n\n{json.dumps(row(2))}\n")
    at_end.write_text(f"{json.dumps(row(3))}\n\n\n")
    for run in ("built", "reused"):
        start = notes.mark()
        cache = tokenize_to_cache([str(inside), str(at_end)], cfg, cache_dir=str(tmp_path / "cache"), progress=False)
        assert cache.reused == (run == "reused")
        (note,) = _said(start)
        assert note.startswith(f"{inside}: 3 blank lines skipped (first at line 2; lines count from 1)"), note
    assert [rec.get("blank_lines") for rec in cache.meta["inputs"]] == [[3, 2], None]


def test_verify_source_says_the_note_of_the_source_it_reads(tmp_path):
    from packtool.verification.run import source_store
    data = tmp_path / "d.jsonl"
    data.write_text(f"{ROW}\n\n{ROW}\n")
    start = notes.mark()
    source_store([str(data)], TokenizeConfig(tokenizer=GPT2), cache_dir=str(tmp_path / "c"))
    (note,) = _said(start)
    assert note.startswith(f"{data}: 1 blank line skipped (first at line 2;"), note


@pytest.mark.parametrize("seed", range(4))
def test_block_count_matches_the_line_rule(seed):
    """A block's rows and blank-line starts, found by a search from each newline (fast), equal the
    rule read line by line: a line of only spaces, tabs and CRs is blank; the empty text after a
    final newline is no line. Random blocks over the bytes that matter, ends and starts included."""
    import random
    rng = random.Random(seed)
    for _ in range(3000):
        block = b"".join(rng.choice((b"\n", b" ", b"\t", b"\r", b"{", b"x")) for _ in range(rng.randrange(12)))
        lines = block.split(b"\n")
        offsets = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
        blank = [o for o, x in zip(offsets, lines) if not x.strip(b" \t\r")]
        if block.endswith(b"\n") or not block:
            blank_all = blank
            blank = [o for o in blank if o != len(block)]
        else:
            blank_all = blank
        assert text_readers._lines_with_text(block) == (len(lines) - len(blank_all), blank), block
