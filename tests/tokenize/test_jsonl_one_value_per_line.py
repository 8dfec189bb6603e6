"""A JSON Lines line is one JSON value: a line holding two objects (`{...} {...}`, with or
without space between) is refused naming its line and column, in every reader of JSON Lines
(plain, compressed, a .json holding JSON Lines, a lengths file), never read as two rows that
shift every later row off its line (S36-2). Blank lines in a data file are no row and still
read (in a lengths file they are refused: tests/planning/test_lengths_blank_lines.py)."""
from __future__ import annotations

import bz2
import gzip

import pyarrow as pa
import pytest

from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import iter_batches, resolve_inputs


def _write(path, text: str) -> None:
    data = text.encode()
    if path.suffix == ".gz":
        data = gzip.compress(data)
    elif path.suffix == ".bz2":
        data = bz2.compress(data)
    elif path.suffix == ".zst":
        with pa.CompressedOutputStream(str(path), "zstd") as f:
            f.write(data)
        return
    path.write_bytes(data)


def _rows(path) -> list:
    return [r for f in resolve_inputs([str(path)]) for b in iter_batches(f, 1000) for r in b.to_pylist()]


READERS = {
    "jsonl": ("d.jsonl", _rows),
    "jsonl.gz": ("d.jsonl.gz", _rows),
    "jsonl.zst": ("d.jsonl.zst", _rows),
    "jsonl.bz2": ("d.jsonl.bz2", _rows),
    ".json of json lines": ("d.json", _rows),
    "lengths .jsonl": ("l.jsonl", lambda p: load_lengths(str(p)).tolist()),
}
JOINS = {"space": " ", "none": "", "tab": "\t"}


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("reader", READERS)
def test_two_values_on_one_line_are_refused_at_that_line(tmp_path, reader, join):
    name, read = READERS[reader]
    first = '{"length": 1, "text": "a"}'
    _write(tmp_path / name, f'{first}\n{{"length": 2, "text": "b"}}{JOINS[join]}{{"length": 3, "text": "c"}}\n'
                            f'{{"length": 4, "text": "d"}}\n')
    with pytest.raises(PacktoolError) as e:
        read(tmp_path / name)
    col = len('{"length": 2, "text": "b"}') + len(JOINS[join]) + 1
    assert f"invalid JSON at line 2, column {col}: extra data" in str(e.value), str(e.value)


@pytest.mark.parametrize("reader", [r for r in READERS if not r.startswith("lengths")])
def test_blank_lines_are_no_row(tmp_path, reader):
    name, read = READERS[reader]
    _write(tmp_path / name, '{"length": 1, "text": "a"}\n\n  \r\n{"length": 2, "text": "b"}\r\n')
    assert read(tmp_path / name) == [{"length": 1, "text": "a"}, {"length": 2, "text": "b"}]
