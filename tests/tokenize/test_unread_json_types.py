"""S40-11 (issue 23 class 7): a JSON field packtool does not read, holding two JSON types across
rows (a metadata `"id": 1` in one row, `"id": "abc"` in the next), refused the whole pack while
the columns read were clean (an out-of-int64 number there was passed over). The column names
are peeked from whole rows, which met the clash: now a field of two types stops nothing unless
the run reads it. Every JSON reader (JSON Lines, compressed, a .json array, a .json of JSON
Lines) and every clash of types; a clash in a column that is read is still refused, by line."""
from __future__ import annotations

import gzip
import json

import pytest
from cli_main import run_main
from conftest import GPT2

from packtool.errors import PacktoolInputError
from packtool.tokenize.readers import iter_batches, peek_columns, resolve_inputs

_CLASHES = {"number_string": (1, "x"), "object_array": ({"a": 1}, [1]), "bool_string": (True, "yes"),
            "string_object": ("x", {"b": 2}), "nested": ({"k": 1}, {"k": "one"})}


def _write(tmp_path, kind: str, rows: list[dict]) -> str:
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    name, body = {"jsonl": ("a.jsonl", lines), "jsonl_gz": ("a.jsonl.gz", gzip.compress(lines)),
                  "json_array": ("a.json", json.dumps(rows).encode()), "json_lines_in_json": ("b.json", lines)}[kind]
    p = tmp_path / name
    p.write_bytes(body)
    return str(p)


_KINDS = ["jsonl", "jsonl_gz", "json_array", "json_lines_in_json"]


@pytest.mark.parametrize("clash", sorted(_CLASHES))
@pytest.mark.parametrize("kind", _KINDS)
def test_unread_field_of_two_types_stops_nothing(tmp_path, kind, clash):
    a, b = _CLASHES[clash]
    path = _write(tmp_path, kind, [{"text": "a", "meta": a}, {"text": "b", "meta": b}])
    f = resolve_inputs([path])[0]
    assert peek_columns(f) == ["text", "meta"]
    assert [r for x in iter_batches(f, 1, ["text"]) for r in x.to_pylist()] == [{"text": "a"}, {"text": "b"}]


@pytest.mark.parametrize("kind", _KINDS)
def test_read_field_of_two_types_is_still_refused(tmp_path, kind):
    path = _write(tmp_path, kind, [{"text": "a", "meta": 1}, {"text": 3, "meta": "x"}])
    f = resolve_inputs([path])[0]
    with pytest.raises(PacktoolInputError, match="field text is a JSON number here but a string"):
        peek_columns(f), list(iter_batches(f, 4, ["text"]))


@pytest.mark.parametrize("kind", ["jsonl", "json_array"])
def test_pack_reads_past_an_unread_field_of_two_types(tmp_path, monkeypatch, capsys, kind):
    """The finding's example, through the CLI: packed, exit 0."""
    path = _write(tmp_path, kind, [{"text": "a", "meta": 1}, {"text": "b", "meta": "x"}])
    out = tmp_path / "o"
    codes = run_main(monkeypatch, ["pack", path, "--tokenizer", GPT2, "-C", "64", "-o", str(out),
                                   "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    assert codes == [0], capsys.readouterr().err
    assert (out / ".manifest.json").exists()


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("row,words", [
    ({"text": "", "meta": "x"}, "empty example: text is null, empty or only whitespace"),
    ({"text": None, "meta": "x", "prompt": "p", "completion": "c"}, "row has no text but holds prompt, completion"),
])
def test_an_empty_row_is_named_past_an_unread_field_of_two_types(tmp_path, monkeypatch, capsys, kind, row, words):
    """An empty row is read again whole to tell an empty example from another shape's row: that
    re-read met the unread clash and named it instead of the row."""
    path = _write(tmp_path, kind, [{"text": "a", "meta": 1}, row])
    codes = run_main(monkeypatch, ["pack", path, "--tokenizer", GPT2, "-C", "64", "-o", str(tmp_path / "o"),
                                   "--shape", "text", "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert codes == [2] and words in err and "row 1" in err, err
    assert not (tmp_path / "o").exists()
