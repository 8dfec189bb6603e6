"""Stranger trial S29-12: a CSV that Arrow cannot parse said `cannot read CSV (Expected 2
columns, got 3: ...)`, naming no line. Every reader's parse error, inputs and --lengths files
alike, names the file and where: the line (counted from 1) of a text file, the data row
(counted from 0) where there is one, and says which it counts from (README, error contract)."""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import iter_batches, resolve_inputs


def _corrupt_parquet(p):
    pq.write_table(pa.table({"text": [f"row {i} " * 20 for i in range(200)]}), p, row_group_size=100)
    col = pq.ParquetFile(p).metadata.row_group(1).column(0)
    off = col.dictionary_page_offset or col.data_page_offset
    b = bytearray(p.read_bytes())
    b[off:off + 16] = b"\xff" * 16  # the second row group's first page header
    p.write_bytes(bytes(b))


def _truncated_arrow(p):
    t = pa.table({"text": [f"row {i} " * 20 for i in range(200)]})
    with ipc.new_stream(str(p), t.schema) as w:
        for b in t.to_batches(max_chunksize=100):
            w.write_batch(b)
    p.write_bytes(p.read_bytes()[:-3000])  # the second batch cut short


def _text(body: bytes):
    return lambda p: p.write_bytes(body)


# name -> (file name, how to write it, what the line must say: line, row, counted-from)
INPUTS = {
    "csv extra field": ("d.csv", _text(b"a,b\n1,2\n3,4,5\n"), "line 3", "row 1"),
    "csv after a quoted newline": ("d.csv", _text(b'a,b\n"x\ny",2\n3,4,5\n'), "line 4", "row 1"),
    "csv bad utf-8": ("d.csv", _text(b"a,b\n1,2\n3,\xff\n"), "line 3", "row 1"),
    "csv unclosed quote": ("d.csv", _text(b'a,b\n1,2\n"3,4\n5,6\n'), "line 3", "row 1"),
    "tsv extra field": ("d.tsv", _text(b"a\tb\n1\t2\n\n3\t4\t5\n"), "line 4", "row 1"),
    "jsonl bad json": ("d.jsonl", _text(b'{"a": 1}\n{"a": 2\n'), "line 2", None),
    "jsonl bad utf-8": ("d.jsonl", _text(b'{"a": 1}\n{"a": "\xff"}\n'), "line 2", None),
    "jsonl mixed types": ("d.jsonl", _text(b'{"a": 1}\n{"a": "x"}\n'), "line 2", None),
    "json bad element": ("d.json", _text(b'[{"a": 1},\n {"a": }]\n'), "line 2", "row 1"),
    "json not an object": ("d.json", _text(b'[{"a": 1}, 5]'), None, "row 1"),
    "json not closed": ("d.json", _text(b'[{"a": 1},\n{"a": 2}\n'), "line 3", "row 2"),
    "json mixed types": ("d.json", _text(b'[{"a": 1}, {"a": "x"}]'), None, "row 1"),
    "parquet bad row group": ("d.parquet", _corrupt_parquet, None, "rows 100..199"),
    "arrow cut short": ("d.arrow", _truncated_arrow, None, "after row 99"),
}
LENGTHS = {
    "txt not an integer": ("l.txt", _text(b"5\n7\n9\nx\n"), "line 4", "row 3"),
    "csv extra field": ("l.csv", _text(b"length\n5\n7\n3,4\n"), "line 4", "row 2"),
    "headerless csv": ("l.csv", _text(b"5\n7\n3,4\n"), "line 3", "row 2"),
    "jsonl bad json": ("l.jsonl", _text(b'{"length": 5}\n{"length": 6\n'), "line 2", None),
}


def _check(msg: str, path, line: str | None, row: str | None) -> None:
    assert msg.startswith(str(path)), msg
    for said in (line, row):
        if said is not None:
            assert re.search(rf"\b{re.escape(said)}\b", msg), (said, msg)
    base = {(True, True): "(rows count from 0, lines from 1)", (True, False): "(lines count from 1)",
            (False, True): "(rows count from 0)"}[line is not None, row is not None]
    assert msg.endswith(base), msg


@pytest.mark.parametrize("case", sorted(INPUTS))
def test_an_input_parse_error_names_file_line_and_row(tmp_path, case):
    name, write, line, row = INPUTS[case]
    p = tmp_path / name
    write(p)
    with pytest.raises(PacktoolError) as e:
        for f in resolve_inputs([str(p)]):
            for _ in iter_batches(f, 1000):
                pass
    _check(str(e.value), p, line, row)


@pytest.mark.parametrize("case", sorted(LENGTHS))
def test_a_lengths_parse_error_names_file_line_and_row(tmp_path, case):
    name, write, line, row = LENGTHS[case]
    p = tmp_path / name
    write(p)
    with pytest.raises(PacktoolError) as e:
        load_lengths(str(p))
    _check(str(e.value), p, line, row)
