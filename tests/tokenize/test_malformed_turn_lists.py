"""Issue 23 classes 4/6, S35: a malformed chat turn list is one packtool line naming the file, the
place (a JSON Lines line counting from 1, or a row counting from 0, said in the line) and the key,
in every position and input format. Arrow's JSON reader built a list whose first values (before
the block's first typed value) were null wrong: `{"messages": [null, {...}]}` as a block's first
row failed with "Length spanned by list offsets (5) larger than values array", and a turn of
another JSON type beside objects was called a field of two types ("messages[] is a JSON object
here but a number in the same row"), or, for a turn list that is no list, named the good row."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from rows_support import write_rows
from typer.testing import CliRunner

import packtool.tokenize.text_readers as text_readers
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

TURNS = {"messages": ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}),
         "conversations": ({"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"})}
U, A = 0, 1
# shape -> (the turn list, from the two good turns; the key named; what it is called there)
SHAPES = {
    "null first turn": (lambda u, a: [None, u, a], "[0] is null", "row"),
    "null later turn": (lambda u, a: [u, None, a], "[1] is null", "row"),
    "only turn null": (lambda u, a: [None], "[0] is null", "row"),
    "every turn null": (lambda u, a: [None, None], "[0] is null", "row"),
    "number turn": (lambda u, a: [1, u, a], "[0] is a JSON number, not a turn object", "line"),
    "string turn": (lambda u, a: ["hi", u, a], "[0] is a JSON string, not a turn object", "line"),
    "boolean turn": (lambda u, a: [u, True, a], "[1] is a JSON boolean, not a turn object", "line"),
    "list turn": (lambda u, a: [[u, a]], "[0] is a JSON array, not a turn object", "line"),
    # below a turn: a leading null in its content parts or its tool calls (every content a list
    # of parts: the block's first typed value comes after the null, Arrow's fault again)
    "null first content part": (lambda u, a: [{**u, "content": [None, {"type": "text", "text": "hi"}]},
                                              {**a, "content": [{"type": "text", "text": "yo"}]}],
                                "[0].content has 1 non-text part", "row"),
    "null first tool call": (lambda u, a: [u, {**a, "tool_calls": [None, {"type": "function", "function": {
        "name": "f", "arguments": "{}"}}]}], "[1].tool_calls[0] has no object", "row"),
    "list null": (lambda u, a: None, "empty example", "row"),
    "list a number": (lambda u, a: 3, " is a JSON number, not a list of turn objects", "line"),
    "list a string": (lambda u, a: "hi", " is a JSON string, not a list of turn objects", "line"),
    "list an object": (lambda u, a: u, " is a JSON object, not a list of turn objects", "line"),
}
# Parquet holds one type per column: only the null shapes can be written beside good rows
PARQUET = {"null first turn", "null later turn", "only turn null", "every turn null", "list null"}
# where the bad row is: the first of the file, after good rows in the same JSON Lines block /
# JSON array batch, or alone in a block of its own (every line one block: its types its own)
POSITIONS = ("first row", "later row", "own block")
CASES = [(s, fmt, pos) for s in SHAPES for fmt in ("jsonl", "json", "parquet") for pos in POSITIONS
         if (fmt != "parquet" or s in PARQUET) and (fmt == "jsonl" or pos != "own block")]


def _case(tmp_path, shape: str, fmt: str, pos: str, key: str = "messages"):
    make, said, unit = SHAPES[shape]
    u, a = TURNS[key]
    good, bad = {key: [u, a]}, {key: make(u, a)}
    rows = [bad, good] if pos == "first row" else [good, good, good, bad, good]
    at = 0 if pos == "first row" else 3
    # a JSON array counts rows (from 0) everywhere; JSON Lines names a line (from 1) where the
    # reader finds the fault, a row (from 0) where the row checks do
    where = f"line {at + 1}" if unit == "line" and fmt == "jsonl" else f"row {at}"
    count = "(lines count from 1)" if where.startswith("line") else "(rows count from 0)"
    return write_rows(tmp_path, rows, fmt), f"{key}{said}" if not said.startswith("empty") else said, where, count


def _tokenize(path: str):
    return tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"),
                             str(path) + ".cache", progress=False)


@pytest.mark.parametrize("shape,fmt,pos", CASES)
def test_a_malformed_turn_list_is_one_line_naming_file_place_and_key(tmp_path, monkeypatch, shape, fmt, pos):
    if pos == "own block":
        monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 16)
    path, said, where, count = _case(tmp_path, shape, fmt, pos)
    with pytest.raises(PacktoolInputError) as e:
        _tokenize(path)
    line = str(e.value)
    assert line.startswith(path) and said in line and where in line and line.endswith(count), line
    assert "\n" not in line and "offsets" not in line, line


@pytest.mark.parametrize("shape", ["null first turn", "string turn", "list a number"])
def test_sharegpt_turn_lists_too(tmp_path, shape):
    path, said, where, count = _case(tmp_path, shape, "jsonl", "first row", key="conversations")
    with pytest.raises(PacktoolInputError) as e:
        _tokenize(path)
    assert said in str(e.value) and where in str(e.value) and "{from, value}" in str(e.value), str(e.value)


@pytest.mark.parametrize("body", [b'{"input_ids": [null, 5, 6]}\n', b'{"m": {"a": [null, {"b": 1}]}}\n',
                                  b'{"m": null}\n{"m": [null, 2]}\n'])
@pytest.mark.parametrize("columns", [None, "all"])
def test_a_leading_null_in_any_list_keeps_its_place(tmp_path, body, columns):
    """The same Arrow fault read a list whole (columns None: the column peek, lengths files) as
    shifted values with no error: [null, 5, 6] as [5, 6, 0]."""
    p = tmp_path / "d.jsonl"
    p.write_bytes(body)
    want = [json.loads(x) for x in body.splitlines()]
    cols = None if columns is None else list(want[0])
    got = [r for b in text_readers.jsonl_batches(str(p), 64, cols) for r in b.to_pylist()]
    assert got == want


@pytest.mark.parametrize("shape", ["null first turn", "list a number"])
def test_the_command_line_says_it_in_one_line(tmp_path, shape):
    path, said, where, count = _case(tmp_path, shape, "jsonl", "first row")
    r = CliRunner().invoke(app, ["--json", "pack", path, "--tokenizer", GPT2, "--chat-template", "chatml",
                                 "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.stdout + r.stderr, r.stderr
    assert said in errors[0] and where in errors[0], errors[0]
    obj = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert obj["kind"] == "input" and obj["path"] == path, obj
