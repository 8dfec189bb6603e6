"""A long line in a text input that failed to parse is gathered and searched once when
text_where reads the file again to name the line at fault (as the JSON Lines reader since
e335d1c): `(tail + chunk).split` copied and rescanned the whole tail on every read, quadratic in
the line. Counted, not timed: every bytes find/rfind/count/index/split call is heard through
sys.setprofile with the object it scans, and every concatenation of a read chunk with what
came before through the chunk's own `__radd__`/`__add__` (the reader hands out a counting
bytes type)."""
from __future__ import annotations

import gzip
import io

import pyarrow as pa
import pytest
from scan_counts import bytes_searched

import packtool.tokenize.text_where as text_where
from packtool.tokenize.csv_reader import csv_error
from packtool.tokenize.text_where import csv_bad_record, csv_record_line, first_bad_int_line

_LINE = 4 << 20
_CHUNK = 1 << 16


class _Counted(bytes):
    """A chunk as read: concatenating it with other bytes counts the bytes copied."""
    copied = 0

    def __add__(self, other):
        _Counted.copied += len(self) + len(other)
        return bytes(self) + bytes(other)

    def __radd__(self, other):
        _Counted.copied += len(self) + len(other)
        return bytes(other) + bytes(self)


class _Reader(io.BytesIO):
    def read(self, n=-1):
        return _Counted(super().read(n))


_LONG = b"a" * _LINE
# (what reads the text again, the file, what it must find): each past one long line
_CASES = {
    "csv_bad_record": (lambda f: csv_bad_record(f, ","),
                       b"k,v\n" + _LONG + b",x\n1,2,3\n", (1, 3, "3 fields where the header has 2")),
    "csv_record_line": (lambda f: csv_record_line(f, ",", 1),
                        b"k,v\n" + _LONG + b",x\n1,2\n", 3),
    "first_bad_int_line": (first_bad_int_line, b"1\n" + b" " * _LINE + b"2\nx\n", (2, 3, "'x'")),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_a_long_line_is_searched_and_joined_once(monkeypatch, name):
    monkeypatch.setattr(text_where, "_CHUNK", _CHUNK)
    fn, body, want = _CASES[name]
    _Counted.copied = 0
    searched, out = bytes_searched(lambda: fn(_Reader(body)))
    assert out == want
    assert searched < 4 * len(body), f"{searched} bytes searched for a {len(body)}-byte file"
    assert _Counted.copied < 4 * len(body), f"{_Counted.copied} bytes copied for a {len(body)}-byte file"


@pytest.mark.parametrize("name", ["d.csv", "d.csv.gz"])
def test_a_csv_error_names_the_record_after_a_long_line(tmp_path, monkeypatch, name):
    """The reading path's own use: Arrow's CSV error, then the line found, plain and gzip."""
    monkeypatch.setattr(text_where, "_CHUNK", _CHUNK)
    p = tmp_path / name
    body = b"k,v\n" + _LONG + b",x\n1,2,3\n"
    p.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    searched, err = bytes_searched(lambda: csv_error(str(p), pa.ArrowInvalid("Expected 2 columns, got 3")))
    assert "at line 3: 3 fields where the header has 2" in str(err), err
    assert searched < 4 * len(body), f"{searched} bytes searched for a {len(body)}-byte file"
