"""Issue 23 class 5 (nothing silent in content), readers: an input whose bytes hold rows the
reader does not hand on is refused in one line naming the file and where, never packed short.
S40-1: a .json array with anything after its closing `]` (a second array, JSON Lines rows,
garbage) packed the array only, exit 0, and `verify --source` said OK; S40-7: a pretty-printed
.json holding one object was called "invalid JSON ... rewrite it with a JSON writer".
S40-2: a column named twice (a CSV/TSV header: the second column's text dropped; a Parquet or
Arrow schema: "internal error"), as a JSON key given twice is. S40-13: a CSV quote never closed
read every later line into one row. S40-12: an Arrow IPC stream cut at a batch boundary (no
end-of-stream marker) packed its first batches, exit 0, and verify --source said OK.
Each case is read the ways packtool reads an input (its rows, its column peek) and through the
CLI (pack leaves no output; verify --source refuses the same input)."""
from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from cli_main import run_main
from conftest import GPT2

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, peek_columns, resolve_inputs

# name -> (file name, bytes, words the one line must hold)
_LOST = {
    "json_two_arrays": ("a.json", b'[{"text":"a"},{"text":"b"}] [{"text":"c"}]',
                        ["line 1, column 29", "extra data after the array"]),
    "json_array_then_jsonl": ("a.json", b'[{"text":"a"},{"text":"b"}]\n{"text":"c"}\n',
                              ["line 2, column 1", "extra data after the array"]),
    "json_array_then_garbage": ("a.json", b'[{"text":"a"},{"text":"b"}] garbage',
                                ["line 1, column 29", "extra data after the array"]),
    "json_array_then_comma": ("a.json", b'[{"text":"a"}],\n', ["line 1, column 15", "extra data"]),
    "json_one_object": ("a.json", json.dumps({"version": 1, "data": [{"text": "a"}]}, indent=2).encode(),
                        ["holds one JSON object", "'version', 'data'", "array of row objects"]),
    "csv_header_twice": ("a.csv", b"text,text\nalpha,beta\n", ['line 1: column "text" is named twice (columns 1 and 2)']),
    "tsv_header_twice": ("a.tsv", b"id\ttext\tx\ttext\n1\talpha\t2\tbeta\n",
                         ['line 1: column "text" is named twice (columns 2 and 4)']),
    "csv_gz_header_twice": ("a.csv.gz", gzip.compress(b"text,text\nalpha,beta\n"), ['column "text" is named twice']),
    "csv_open_quote": ("a.csv", b'text\nalpha\n"unterminated\nbeta\ngamma\n',
                       ["line 3", "quoted field opened here is never closed"]),
    "tsv_open_quote": ("a.tsv", b'id\ttext\n1\talpha\n2\t"open\n3\tbeta\n',
                       ["line 3", "quoted field opened here is never closed"]),
    "csv_gz_open_quote": ("a.csv.gz", gzip.compress(b'text\n"a ""b"" c"\n"open\nbeta\n'),
                          ["line 3", "never closed"]),
    "parquet_schema_twice": ("a.parquet", lambda p: pq.write_table(_twice(), p),
                             ['its schema: column "text" is named twice (columns 1 and 2)']),
    "arrow_stream_schema_twice": ("a.arrow", lambda p: _ipc(p, ipc.new_stream), ['column "text" is named twice']),
    "arrow_file_schema_twice": ("a.feather", lambda p: _ipc(p, ipc.new_file), ['column "text" is named twice']),
    "arrow_stream_cut_at_a_batch": ("a.arrow", lambda p: _cut_stream(p, lambda d, first, batch: d[:first]),
                                    ["ends without its end-of-stream marker after 3 row(s)"]),
    "arrow_stream_marker_cut": ("a.arrow", lambda p: _cut_stream(p, lambda d, first, batch: d[:-8]),
                                ["ends without its end-of-stream marker after 6 row(s)"]),
    "arrow_stream_schema_only": ("a.ipc", lambda p: _cut_stream(p, lambda d, first, batch: d[:first - batch]),
                                 ["ends without its end-of-stream marker after 0 row(s)"]),
    "arrow_file_cut_at_a_batch": ("a.arrow", lambda p: _cut_file(p), ["Arrow IPC file", "without its footer"]),
}


def _cut_file(path) -> None:
    t = pa.table({"text": ["hello", "world", "third"]})
    s = pa.BufferOutputStream()
    with ipc.new_file(s, t.schema) as w:
        w.write_table(t)
        w.write_table(t)
    whole = s.getvalue().to_pybytes()
    with open(path, "wb") as f:
        f.write(whole[:len(whole) // 2])


def _stream(t: pa.Table, batches: int) -> bytes:
    s = pa.BufferOutputStream()
    with ipc.new_stream(s, t.schema) as w:
        for _ in range(batches):
            w.write_table(t)
    return s.getvalue().to_pybytes()


def _cut_stream(path, cut) -> None:
    t = pa.table({"text": ["hello", "world", "third"]})
    whole, one = _stream(t, 2), _stream(t, 1)
    first, batch = len(one) - 8, len(whole) - len(one)  # where the first batch ends; one batch's bytes
    assert whole[:first] == one[:first]
    with open(path, "wb") as f:
        f.write(cut(whole, first, batch))


def _twice() -> pa.Table:
    return pa.Table.from_arrays([pa.array(["alpha"]), pa.array(["beta"])], names=["text", "text"])


def _ipc(path, new) -> None:
    with new(path, _twice().schema) as w:
        w.write_table(_twice())


def _write(tmp_path, case):
    name, body, words = _LOST[case]
    p = tmp_path / name
    if callable(body):
        body(str(p))
    else:
        p.write_bytes(body)
    return str(p), words


def _refused(fn, words):
    with pytest.raises(PacktoolInputError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize("case", sorted(_LOST))
def test_reader_refuses_rows_it_would_not_hand_on(tmp_path, case):
    path, words = _write(tmp_path, case)
    f = resolve_inputs([path])[0]
    # as a run reads it: its columns, then its rows (all, and the shape's columns only)
    _refused(lambda: (peek_columns(f), list(iter_batches(f, 1))), words)
    _refused(lambda: (peek_columns(f), list(iter_batches(f, 4, ["text"]))), words)


@pytest.mark.parametrize("case", sorted(_LOST))
def test_pack_refuses_leaving_nothing(tmp_path, monkeypatch, capsys, case):
    path, words = _write(tmp_path, case)
    before = open(path, "rb").read()
    out = tmp_path / "o"
    codes = run_main(monkeypatch, ["pack", path, "--tokenizer", GPT2, "-C", "64", "-o", str(out),
                                   "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert codes == [2], err
    line = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(line) == 1 and path in line[0] and "Traceback" not in err, err
    for w in words:
        assert w in line[0]
    assert not out.exists()
    assert open(path, "rb").read() == before


def test_verify_source_refuses_rows_lost_after_the_array(tmp_path, monkeypatch, capsys):
    """The S40-1 regression: an output packed from the array alone is not "OK" against the file."""
    good = tmp_path / "good.json"
    good.write_bytes(b'[{"text":"a"},{"text":"b"}]')
    out = tmp_path / "o"
    assert run_main(monkeypatch, ["pack", str(good), "--tokenizer", GPT2, "-C", "64", "-o", str(out),
                                  "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == [0]
    lost = tmp_path / "lost.json"
    lost.write_bytes(b'[{"text":"a"},{"text":"b"}]\n{"text":"c"}\n')
    capsys.readouterr()
    codes = run_main(monkeypatch, ["verify", str(out), "--source", str(lost), "--tokenizer", GPT2])
    err = capsys.readouterr()
    assert codes and codes[0] != 0, err
    assert "extra data after the array" in err.err + err.out


def test_whitespace_after_the_array_is_fine(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b' \n[{"text":"a"},\n{"text":"b"}]\n\n \t\r\n')
    rows = [r for b in iter_batches(resolve_inputs([str(p)])[0], 1) for r in b.to_pylist()]
    assert rows == [{"text": "a"}, {"text": "b"}]
    assert os.path.getsize(p) > 0


@pytest.mark.parametrize("body,rows", [
    (b'text\n5" tall\nbeta\n', ['5" tall', "beta"]),  # a bare quote in an unquoted field: an odd count, no open quote
    (b'text\n"a ""q"" b"\n"two\nlines"\n', ['a "q" b', "two\nlines"]),
    (b"a,b\n1,2\n", None),
])
def test_csv_quotes_that_close_read_as_before(tmp_path, body, rows):
    p = tmp_path / "a.csv"
    p.write_bytes(body)
    f = resolve_inputs([str(p)])[0]
    got = [r for b in iter_batches(f, 1) for r in b.to_pylist()]
    if rows is not None:
        assert [r["text"] for r in got] == rows


@pytest.mark.parametrize("new", [ipc.new_stream, ipc.new_file])
@pytest.mark.parametrize("batches", [0, 1, 3])
def test_whole_arrow_files_read_as_before(tmp_path, new, batches):
    t = pa.table({"text": ["hello", "world", "third"]})
    p = tmp_path / "a.arrow"
    with new(str(p), t.schema) as w:
        for _ in range(batches):
            w.write_table(t)
    got = [r["text"] for b in iter_batches(resolve_inputs([str(p)])[0], 2) for r in b.to_pylist()]
    assert got == ["hello", "world", "third"] * batches


def test_an_entry_the_lenient_readers_made_is_not_reused(tmp_path, monkeypatch, capsys):
    """A cache entry of a file the readers now refuse (made when a cut Arrow stream read as whole)
    held fewer rows than the file: its cache version is not reused, so the file is read again
    and refused, not packed short from the old entry."""
    import packtool.engines.ray_cache as ray_cache
    import packtool.tokenize.cache as cache
    import packtool.tokenize.cache_entry as cache_entry
    import packtool.tokenize.pipeline as pipeline
    import packtool.tokenize.columnar_readers as columnar_readers
    import packtool.tokenize.request as request
    path, words = _write(tmp_path, "arrow_stream_cut_at_a_batch")
    argv = ["pack", path, "--tokenizer", GPT2, "-C", "64", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    with monkeypatch.context() as old:  # the readers and cache version before the marker was checked
        old.setattr(columnar_readers, "stream_ended", lambda p: True)
        for m in (cache_entry, cache, request, pipeline, ray_cache):
            old.setattr(m, "CACHE_VERSION", 4)
        assert run_main(monkeypatch, [*argv, "-o", str(tmp_path / "o1")]) == [0]
    capsys.readouterr()
    assert run_main(monkeypatch, [*argv, "-o", str(tmp_path / "o2")]) == [2]
    assert words[0] in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()
