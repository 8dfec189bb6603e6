"""Stranger trial S29-9: a column null on every row (an exporter's empty `text` beside
question/answer) counted as a second input shape: auto detection refused the file and an explicit
shape noted the empty column as content "not read". A shape whose columns are null on every row
is no evidence; one value anywhere in the file still is."""
from __future__ import annotations

import itertools

import pytest
from conftest import GPT2
from rows_support import write_rows
from shape_rows import SHAPES

from packtool.errors import PacktoolInputError
from packtool.notes import NOTES
from packtool.tokenize import TokenizeConfig
from packtool.tokenize.request import _setup
from packtool.tokenize.shapes import known_shapes

PAIRS = [p for a, b in itertools.combinations(SHAPES, 2) for p in ((a, b), (b, a))]


def _rows(real: str, null: str, n: int = 3, late: bool = False) -> list[dict]:
    cols = [c for c in SHAPES[null] if c not in SHAPES[real]]
    rows = [{**SHAPES[real], **{c: None for c in cols}} for _ in range(n)]
    if late:  # a value in the last row only, past the first batch read
        rows[-1] = {**SHAPES[real], **SHAPES[null]}
    return rows


def _shape(path: str, **kw):
    files, shapes, *_ = _setup([path], TokenizeConfig(tokenizer=GPT2, chat_template="chatml", **kw))
    return shapes[0]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("real,null", PAIRS)
def test_a_shape_null_on_every_row_is_no_second_shape(tmp_path, real, null, fmt):
    if set(SHAPES[null]) <= set(SHAPES[real]):
        pytest.skip("no column of its own")
    assert _shape(write_rows(tmp_path, _rows(real, null), fmt)).kind == real


@pytest.mark.parametrize("real,null", [("text", "fields"), ("fields", "text"), ("chat", "text")])
def test_one_value_anywhere_is_still_a_second_shape(tmp_path, real, null):
    path = write_rows(tmp_path, _rows(real, null, n=20_000, late=True), "jsonl")
    with pytest.raises(PacktoolInputError, match="input shapes"):
        _shape(path)


def test_an_explicit_shape_notes_no_null_column_as_not_read(tmp_path):
    path = write_rows(tmp_path, _rows("fields", "text"), "parquet")
    before = len(NOTES)
    assert _shape(path, shape="fields", prompt_field="question", response_field="answer").kind == "fields"
    assert not [n for n in NOTES[before:] if "not read" in n], NOTES[before:]


def test_the_rule_lives_in_known_shapes():
    cols = {"text", "question", "answer"}
    assert [k for k, _ in known_shapes(cols)] == ["text", "fields"]
    assert [k for k, _ in known_shapes(cols, empty=frozenset({"text"}))] == ["fields"]
