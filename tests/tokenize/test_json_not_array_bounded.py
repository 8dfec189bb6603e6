"""S37-6: a `.json` input that is no JSON array is JSON Lines, and is bounded as JSON Lines are
(one line at most MAX_JSON_LINE, refused before it is gathered). It was read whole first, to
look at its first character: a 2 GiB file with no newline (or of NULs) was held in memory
(about twice) before the line bound refused it, and the refusal called the .json file JSON
Lines. Every way a .json file is read (its rows, its column peek) and every body that is no
array: the bytes read before the refusal stay near the bound, not the file, and the line says
the file is a .json read as JSON Lines. Counted (bytes handed out by the file object), not
measured."""
from __future__ import annotations

import pytest

import packtool.tokenize.text_readers as text_readers
from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, peek_columns, resolve_inputs

_BOUND = 1 << 20
_SIZE = 16 * _BOUND  # the file: 16x the line bound


class _Counted:
    """A binary file whose reads are counted (open_bytes' files, as text_readers opens them)."""

    def __init__(self, f, seen: list):
        self._f, self._seen = f, seen

    def read(self, n=-1):
        out = self._f.read(n)
        self._seen.append(len(out))
        return out

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


BODIES = {
    "no newline": lambda: b'{"text": "' + b"a" * _SIZE,
    "NULs": lambda: b"\0" * _SIZE,
    "blank lines first": lambda: b"\n \n\t\n" + b'{"text": "' + b"a" * _SIZE,
    "a row, then a long line": lambda: b'{"text": "x"}\n' + b'{"text": "' + b"a" * _SIZE,
}
LINE = {"no newline": 1, "NULs": 1, "blank lines first": 4, "a row, then a long line": 2}


@pytest.mark.parametrize("read", ["rows", "peek"])
@pytest.mark.parametrize("body", sorted(BODIES))
def test_a_json_file_that_is_no_array_is_bounded_per_line(tmp_path, monkeypatch, body, read):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", _BOUND)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 16)
    seen: list[int] = []
    real = text_readers.open_bytes
    monkeypatch.setattr(text_readers, "open_bytes", lambda p: _Counted(real(p), seen))
    p = tmp_path / "big.json"
    p.write_bytes(BODIES[body]())
    f = resolve_inputs([str(p)])[0]
    if read == "peek" and body.startswith("a row"):  # its first row's columns: the long line is not reached
        assert peek_columns(f) == ["text"]
    else:
        with pytest.raises(PacktoolInputError) as e:
            list(iter_batches(f, 64)) if read == "rows" else peek_columns(f)
        msg = str(e.value)
        assert f"line {LINE[body]} is longer than 1.0 MiB" in msg and "no JSON array" in msg, msg
        assert "\n" not in msg, msg
    assert sum(seen) < 2 * _BOUND, f"{sum(seen)} bytes read of a {_SIZE}-byte file before the refusal"


@pytest.mark.parametrize("lead", [b"", b"\n\n  ", b"\r\n\t"])
def test_an_array_and_json_lines_in_a_json_file_still_read(tmp_path, lead):
    arr = tmp_path / "a.json"
    arr.write_bytes(lead + b'[{"text": "a"},\n {"text": "b"}]')
    lines = tmp_path / "l.json"
    lines.write_bytes(lead + b'{"text": "a"}\n{"text": "b"}\n')
    for p in (arr, lines):
        f = resolve_inputs([str(p)])[0]
        rows = [r for b in iter_batches(f, 64) for r in b.to_pylist()]
        assert rows == [{"text": "a"}, {"text": "b"}], (p.name, rows)
    bad = tmp_path / "bad.json"
    bad.write_bytes(lead + b'[{"text": "a"},\n {"text": }]')
    with pytest.raises(PacktoolInputError) as e:  # its line counted from the file's start
        list(iter_batches(resolve_inputs([str(bad)])[0], 64))
    line = lead.count(b"\n") + 2
    assert f"line {line}" in str(e.value), str(e.value)
