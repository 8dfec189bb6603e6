"""S46A-5: a JSON file's columns are the union over its rows, and its shape was told from its
first rows only (a 64 KiB peek): a column that first held a value later (files joined with
`cat`, exports appended) was projected away without a word, where the same row first was
refused: a chat beside text rows, an alpaca row's `history`, a `context` beside question/answer
(and a late alpaca `input` or a pre-tokenized row's `labels`, which the shape would have read).
Every row is now held to the shape as it is read (tokenize/late_columns.py): the same refusal,
naming the row the column first holds a value in; under an explicit choice, the same note. Over
every JSON door (JSON Lines plain and compressed, a JSON array, a .json holding JSON Lines) and
wherever the row lies (past the peek in the first parse block, or in a later block)."""
from __future__ import annotations

import bz2
import gzip
import json

import pytest
from conftest import GPT2

from packtool import notes
from packtool.errors import PacktoolInputError
from packtool.tokenize import text_readers
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

N = 1500  # rows before the late one: past the 64 KiB peek (and the 64 rows a JSON array's peek reads)
WORDS = " lorem ipsum" * 6

# kind: (the file's rows, the late row, what the refusal says)
LATE = {
    "a chat beside text rows": (lambda i: {"text": f"doc {i}{WORDS}"},
                                {"text": "tail", "messages": [{"role": "user", "content": "x"},
                                                              {"role": "assistant", "content": "y"}]},
                                "has the columns of 2 input shapes, chat (messages) and text (text)"),
    "an alpaca row's history": (lambda i: {"instruction": f"say {i}{WORDS}", "input": "", "output": f"ok {i}"},
                                {"instruction": "and now?", "input": "", "output": "done",
                                 "history": [["earlier question", "earlier answer"]]},
                                "column history holds earlier [instruction, response] turns"),
    "a context beside question/answer": (lambda i: {"question": f"q {i}{WORDS}", "answer": f"a {i}"},
                                         {"question": "what?", "answer": "blue", "context": "the sky is blue"},
                                         "has question and answer columns beside context"),
    "an alpaca input the shape reads": (lambda i: {"instruction": f"say {i}{WORDS}", "output": f"ok {i}"},
                                        {"instruction": "and now?", "input": "with this", "output": "done"},
                                        "shape alpaca reads input"),
    "labels beside pre-tokenized rows": (lambda i: {"input_ids": list(range(1, 40))},
                                         {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]},
                                         "shape tokens reads labels"),
}
# the refusals a first row gets alike (the other two: read by the shape, had the row come first)
SAME_FIRST = ("a chat beside text rows", "an alpaca row's history", "a context beside question/answer")


def _lines(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


DOORS = {  # name: (suffix, bytes of the rows)
    "jsonl": (".jsonl", _lines),
    "jsonl.gz": (".jsonl.gz", lambda rows: gzip.compress(_lines(rows))),
    "jsonl.bz2": (".jsonl.bz2", lambda rows: bz2.compress(_lines(rows))),
    "a JSON array": (".json", lambda rows: json.dumps(rows).encode()),
    "a .json holding JSON Lines": (".json", _lines),
}
WHERE = {"in the first parse block": None, "in a later parse block": 4096}


def _write(tmp_path, kind, door, late_first=False):
    make, late, _ = LATE[kind]
    rows = [make(i) for i in range(N)]
    rows = [late, *rows] if late_first else [*rows, late]
    suffix, encode = DOORS[door]
    p = tmp_path / f"rows{suffix}"
    p.write_bytes(encode(rows))
    return str(p)


def _cfg(kind, **more):
    return TokenizeConfig(**({} if kind.startswith("labels") else {"tokenizer": GPT2}), **more)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("kind", LATE)
def test_a_column_first_holding_a_value_late_is_refused_naming_its_row(tmp_path, monkeypatch, kind, door, where):
    if WHERE[where]:
        monkeypatch.setattr(text_readers, "_JSONL_BLOCK", WHERE[where])
    path = _write(tmp_path, kind, door)
    peeked = door == "a .json holding JSON Lines" and WHERE[where] is None
    if peeked and kind not in SAME_FIRST:
        pytest.skip("a .json holding JSON Lines is peeked through its whole first parse block (8 MiB): the "
                    "column is read by its shape from the first row")
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([path], _cfg(kind), str(tmp_path / "cache"), progress=False)
    msg = str(e.value)
    assert "\n" not in msg and LATE[kind][2] in msg, msg
    # a .json holding JSON Lines is peeked through its first whole parse block (8 MiB): there the
    # row is among the columns its shape is told from, and refused as a first row is
    if not peeked:
        assert e.value.row == N and f"row {N}:" in msg and "past the first rows" in msg, msg
    if kind in SAME_FIRST:  # the refusal the row gets where it comes first, word for word
        (tmp_path / "f").mkdir()
        with pytest.raises(PacktoolInputError) as first:
            tokenize_to_cache([_write(tmp_path / "f", kind, door, late_first=True)], _cfg(kind),
                              str(tmp_path / "cache2"), progress=False)
        tail = str(first.value).split(": ", 1)[1].split(" (rows count from 0)")[0]
        assert tail in msg, (tail, msg)


@pytest.mark.parametrize("door", DOORS)
def test_under_an_explicit_shape_a_late_column_of_another_is_the_same_note(tmp_path, door):
    path = _write(tmp_path, "a chat beside text rows", door)
    start = notes.mark()
    cache = tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, text_field="text"), str(tmp_path / "c"),
                              progress=False)
    assert cache.num_rows == N + 1
    said = [n for n in notes.since(start) if "are not read" in n]
    assert said == [f"{path}: columns messages (shape chat) are not read: this file is packed as shape text "
                    f"(text), as asked"], said


LATE_NOTHING = {  # a late column that holds nothing, or means nothing to the shape: packed as before
    "history null": {"instruction": "x", "input": "", "output": "y", "history": None},
    "history []": {"instruction": "x", "input": "", "output": "y", "history": []},
    "an id column": {"instruction": "x", "input": "", "output": "y", "id": 7},
}


@pytest.mark.parametrize("late", LATE_NOTHING)
@pytest.mark.parametrize("door", ["jsonl", "a JSON array"])
def test_a_late_column_that_holds_nothing_the_shape_reads_packs(tmp_path, door, late):
    make = LATE["an alpaca row's history"][0]
    suffix, encode = DOORS[door]
    p = tmp_path / f"rows{suffix}"
    p.write_bytes(encode([make(i) for i in range(N)] + [LATE_NOTHING[late]]))
    cache = tokenize_to_cache([str(p)], TokenizeConfig(tokenizer=GPT2), str(tmp_path / "c"), progress=False)
    assert cache.num_rows == N + 1


def test_a_json_arrays_late_key_of_nothing_is_judged_once_until_it_holds_something(tmp_path, monkeypatch):
    """R-4 (s47): a .json array's key of no earlier row that then held only null/""/[] was judged again in
    every row (a one-row Arrow table and the shape's judge per row); it is judged once, and again only
    where it first holds something (still refused there, naming that row)."""
    from packtool.tokenize.late_columns import LateColumns
    calls = []
    block = LateColumns.block
    monkeypatch.setattr(LateColumns, "block", lambda self, t, r: (calls.append(r), block(self, t, r))[1])
    make, late, said = LATE["an alpaca row's history"]
    nothing = [None, "", []] * 100
    rows = [make(i) for i in range(N)] + [{**make(N + i), "history": v} for i, v in enumerate(nothing)] + [late]
    p = tmp_path / "rows.json"
    p.write_bytes(json.dumps(rows).encode())
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([str(p)], TokenizeConfig(tokenizer=GPT2), str(tmp_path / "c"), progress=False)
    assert said in str(e.value) and f"row {len(rows) - 1}" in str(e.value), e.value
    assert calls == [N, len(rows) - 1], calls[:10]
