"""Issue 23 (turns): a null chat turn is named in one line on every reader route and for both
chat shapes, never an AttributeError; a batch where Arrow united the keys of differently shaped
turns / calls / parts (an absent key comes back as a null) renders as each row alone does."""
from __future__ import annotations

import pytest
from rows_support import write_rows

from packtool.errors import PacktoolInputError
from packtool.tokenize.columnar_readers import parquet_batches
from packtool.tokenize.shapes import Shape, render_batch
from packtool.tokenize.templates import Renderer, load_template
from packtool.tokenize.text_readers import json_array_batches, jsonl_batches

CHAT = {"col": "messages", "q": {"role": "user", "content": "Q"}, "a": {"role": "assistant", "content": "A"}}
SHAREGPT = {"col": "conversations", "q": {"from": "human", "value": "Q"}, "a": {"from": "gpt", "value": "A"}}


def _batches(path: str, reader: str, col: str | list[str]):
    cols = [col] if isinstance(col, str) else col
    if reader == "jsonl":
        return jsonl_batches(path, 1000, cols)
    if reader == "json":
        return json_array_batches(path, 1000, cols)
    return parquet_batches(path, 1000, cols)


def render(tmp_path, rows, reader: str, kind: str = "chat") -> list[str]:
    col = "messages" if kind == "chat" else "conversations"
    path = write_rows(tmp_path, rows, reader)
    renderer = Renderer(load_template("chatml", None), {})
    texts, first = [], 0
    for b in _batches(path, reader, col):
        texts += render_batch(b, Shape(kind, (col,), templated=True), renderer, None, path, first).texts
        first += b.num_rows
    return texts


# A null first turn of JSON Lines is refused by Arrow's own reader (a one-line read error).
@pytest.mark.parametrize("reader,at", [("jsonl", 1), ("json", 0), ("json", 1), ("parquet", 0), ("parquet", 1)])
@pytest.mark.parametrize("shape", [CHAT, SHAREGPT], ids=["chat", "sharegpt"])
def test_null_turn_is_named(tmp_path, reader, at, shape):
    turns = [shape["q"], shape["a"]]
    turns.insert(at, None)
    kind = "chat" if shape is CHAT else "sharegpt"
    with pytest.raises(PacktoolInputError, match=rf"{shape['col']}\[{at}\] is null, not a turn object"):
        render(tmp_path, [{shape["col"]: turns}], reader, kind)


ARGS = '{"x": 1}'
CALLS = {
    "bare": {"name": "f", "arguments": ARGS},
    "wrapped": {"type": "function", "function": {"name": "f", "arguments": ARGS}},
    "wrapped+id": {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ARGS}},
}
PARTS = {
    "string": "Q1T2",
    "typed": [{"type": "text", "text": "Q1"}, {"type": "text", "text": "T2"}],
    "untyped+typed": [{"text": "Q1"}, {"type": "text", "text": "T2"}],
    "untyped": [{"text": "Q1"}, {"text": "T2"}],
}


def _call_row(call: dict, key: str) -> dict:
    value = [call] if key == "tool_calls" else call
    return {"messages": [{"role": "user", "content": "Q"},
                         {"role": "assistant", "content": None, key: value},
                         {"role": "tool", "content": "r"}, {"role": "assistant", "content": "A"}]}


def _part_row(content) -> dict:
    reply = "A" if isinstance(content, str) else [{"type": "text", "text": "A"}]  # Parquet: one type
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": reply}]}


def _united_vs_alone(tmp_path, rows, reader):
    together = render(tmp_path, rows, reader)
    alone = [render(tmp_path, [r], reader)[0] for r in rows]
    return together, alone


@pytest.mark.parametrize("reader", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("key", ["tool_calls", "tool_call"])
@pytest.mark.parametrize("pair", [("bare", "wrapped"), ("wrapped+id", "bare"), ("bare", "wrapped+id")])
def test_mixed_call_shapes_in_one_batch(tmp_path, reader, key, pair):
    rows = [_call_row(CALLS[p], key) for p in pair]
    together, alone = _united_vs_alone(tmp_path, rows, reader)
    assert together == alone
    assert together[0] == together[1]  # a call renders the same bare or wrapped


@pytest.mark.parametrize("reader", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("pair", [("untyped+typed",), ("untyped", "typed"), ("typed", "untyped"),
                                  ("string", "untyped+typed")])
def test_untyped_text_part_beside_typed(tmp_path, reader, pair):
    if reader == "parquet" and "string" in pair:
        pytest.skip("a Parquet column has one type: no string beside parts")
    rows = [_part_row(PARTS[p]) for p in pair]
    together, alone = _united_vs_alone(tmp_path, rows, reader)
    want = render(tmp_path, [_part_row(PARTS["string"])], "jsonl")[0]
    assert together == alone == [want] * len(rows)


@pytest.mark.parametrize("reader", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("value,kind", [({"a": 1}, "an object"), ("x", "a string that is not JSON"),
                                        (3, "a number"), (True, "a boolean")])
def test_tools_not_a_list_is_named_by_kind(tmp_path, reader, value, kind):
    row = {"messages": [CHAT["q"], CHAT["a"]], "tools": value}
    path = write_rows(tmp_path, [row], reader)
    renderer = Renderer(load_template("chatml", None), {})
    shape = Shape("chat", ("messages", "tools"), templated=True)
    with pytest.raises(PacktoolInputError, match=f"tools is {kind}, not a list"):
        for b in _batches(path, reader, ["messages", "tools"]):
            render_batch(b, shape, renderer, None, path, 0)


EMPTY_CALL_TURNS = {  # an assistant turn with no text and no call: never rendered with a trained end marker
    "sharegpt []": ("sharegpt", {"from": "function_call", "value": "[]"}, "function_call with no calls"),
    "chat []": ("chat", {"role": "assistant", "content": None, "tool_calls": []}, "null, missing or empty"),
}


@pytest.mark.parametrize("reader", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("case", list(EMPTY_CALL_TURNS))
def test_turn_without_calls_is_refused(tmp_path, reader, case):
    kind, turn, says = EMPTY_CALL_TURNS[case]
    shape = CHAT if kind == "chat" else SHAREGPT
    tool = {"role": "tool", "content": "R"} if kind == "chat" else {"from": "observation", "value": "R"}
    rows = [{shape["col"]: [shape["q"], turn, tool, shape["a"]]}]
    with pytest.raises(PacktoolInputError, match=rf"{shape['col']}\[1\].*{says}"):
        render(tmp_path, rows, reader, kind)


PLAIN = {  # a plain string among content parts, beside: a string reply / parts / only plain strings
    "beside string": ["plain", "A"],
    "beside parts": [["plain", {"type": "text", "text": "T"}], "A"],
    "only plain": [["plain"], ["A"]],
}


@pytest.mark.parametrize("reader", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("case", list(PLAIN))
def test_plain_string_part_is_named(tmp_path, reader, case):
    user, reply = PLAIN[case]
    user = user if isinstance(user, list) else [user]
    if reader == "parquet" and case != "only plain":
        pytest.skip("a Parquet column has one type: no string beside a part object")
    rows = [{"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]}]
    with pytest.raises(PacktoolInputError, match=r"messages\[0\]\.content\[0\] is a plain string, not a content part"):
        render(tmp_path, rows, reader)
