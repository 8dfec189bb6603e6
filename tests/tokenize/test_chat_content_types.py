"""S33-6: a chat turn's `content` may be a string or OpenAI content parts in any turn (the usual
export: parts for the user, a string for the reply). Arrow gives a field one type per block of
JSON Lines / batch of a JSON array, so every mix (within a row, across rows, across blocks) must
render exactly as the all-string rows do; a date-like string must stay the string (Arrow's JSON
reader guessed a timestamp); any other field of two types is named with the field, both places
and the fix."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from rows_support import write_rows

from packtool.errors import PacktoolError
from packtool.tokenize.shapes import Shape, render_batch
from packtool.tokenize.templates import Renderer, load_template
from packtool.tokenize.text_readers import json_array_batches, jsonl_batches

SHAPE = Shape("chat", ("messages",), templated=True)
VARIANTS = {
    "string": lambda t: t,
    "parts": lambda t: [{"type": "text", "text": t}],
    "split parts": lambda t: [{"type": "text", "text": t[:1]}, {"type": "text", "text": t[1:]}],
}
PAIRS = [("parts", "string"), ("string", "parts"), ("string", "split parts"), ("split parts", "parts")]
TEXTS = {"words": ("Q{}", "A{}"), "dates": ("2024-01-0{}", "2025-02-0{}")}


def _rows(user, reply, mixing: str, texts: str, n: int = 4) -> list[dict]:
    q, a = TEXTS[texts]
    rows = []
    for i in range(1, n + 1):
        u, r = (user, reply) if mixing == "turns" else ((user, user) if i % 2 else (reply, reply))
        rows.append({"messages": [{"role": "user", "content": u(q.format(i))},
                                  {"role": "assistant", "content": r(a.format(i))}]})
    return rows


def _batches(path: str, reader: str, mixing: str):
    apart = mixing == "batches"  # each row its own block / batch: each gets a type of its own
    if reader == "jsonl":
        return jsonl_batches(path, 1000, ["messages"], block_bytes=8 if apart else None)
    return json_array_batches(path, 1 if apart else 1000, ["messages"])


def _render(path: str, reader: str, mixing: str) -> list[str]:
    renderer = Renderer(load_template("chatml", None), {})
    texts, first = [], 0
    for b in _batches(path, reader, mixing):
        texts += render_batch(b, SHAPE, renderer, None, path, first).texts
        first += b.num_rows
    return texts


@pytest.mark.parametrize("texts", sorted(TEXTS))
@pytest.mark.parametrize("reader", ["jsonl", "json"])
@pytest.mark.parametrize("mixing", ["turns", "rows", "batches"])
@pytest.mark.parametrize("pair", PAIRS, ids="-".join)
def test_mixed_content_renders_as_strings(tmp_path, pair, mixing, reader, texts):
    strings = _rows(VARIANTS["string"], VARIANTS["string"], mixing, texts)
    mixed = _rows(VARIANTS[pair[0]], VARIANTS[pair[1]], mixing, texts)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    want = _render(write_rows(tmp_path / "a", strings, reader), reader, mixing)
    assert _render(write_rows(tmp_path / "b", mixed, reader), reader, mixing) == want
    assert all(TEXTS[texts][1].format(i + 1) in t for i, t in enumerate(want))  # the reply's own text


@pytest.mark.parametrize("reader", ["jsonl", "json"])
def test_non_text_part_beside_string_replies_is_named(tmp_path, reader):
    """The mix is read, so an image part is refused as in an all-parts file (TOKENIZATION.md)."""
    rows = _rows(VARIANTS["parts"], VARIANTS["string"], "turns", "words", n=2)
    rows[1]["messages"][0]["content"].append({"type": "image_url", "image_url": {"url": "x"}})
    path = write_rows(tmp_path, rows, reader)
    with pytest.raises(PacktoolError, match=r"row 1: messages\[0\]\.content has 1 non-text part\(s\) "
                                            r"\(image_url\)"):
        _render(path, reader, "turns")


@pytest.mark.parametrize("reader, same_row, where", [
    ("jsonl", True, r"at line 2: field messages\[\]\.x is a JSON string here but a number in the same row"),
    ("jsonl", False, r"at line 2: field messages\[\]\.x is a JSON string here but a number at line 1"),
    ("json", True, r"at row 1: field messages\[\]\.x is a JSON string here but a number in the same row"),
    ("json", False, r"at row 1: field messages\[\]\.x is a JSON string here but a number at row 0"),
])
def test_other_field_of_two_types_is_named(tmp_path, reader, same_row, where):
    rows = _rows(VARIANTS["string"], VARIANTS["parts"], "turns", "words", n=2)
    rows[1 if same_row else 0]["messages"][0]["x"] = 1
    rows[1]["messages"][1]["x"] = "s"
    path = write_rows(tmp_path, rows, reader)
    with pytest.raises(PacktoolError, match=where + r"; give the field one type in every row") as e:
        _render(path, reader, "turns")
    assert ("lines count from 1" if reader == "jsonl" else "rows count from 0") in str(e.value)


@pytest.mark.parametrize("reader", ["jsonl", "json"])
def test_a_key_only_later_rows_have_is_read(tmp_path, reader):
    """A JSON array's batch (and a block read in Python) has every row's keys, not the first's:
    a `tools` column first given in row 1 is seen by shape detection and read."""
    rows = _rows(VARIANTS["parts"], VARIANTS["string"], "turns", "words", n=2)
    rows[1]["tools"] = [{"type": "function", "function": {"name": "T"}}]
    path = write_rows(tmp_path, rows, reader)
    (b,) = list(jsonl_batches(path, 1000, None) if reader == "jsonl" else json_array_batches(path, 1000, None))
    assert b.schema.names == ["messages", "tools"]
    assert json.loads(b.column("tools")[1].as_py()) == rows[1]["tools"]  # its JSON text (free-form, below)


# A tool call's arguments and a row's tools / documents are free-form objects: Arrow united
# their keys over the block (row 0's call rendered {"a": 1, "b": null}) and refused an object
# beside a string. Each value must reach the template exactly as written.
FREE_VALUES = {"other keys": ({"a": 1}, {"b": "x"}), "object and string": ({"a": 1}, '{"b": 2}'),
               "a null kept": ({"a": None, "c": [1]}, {"c": [2, 3]})}
CALL_FORMS = {
    "tool_calls": lambda args: {"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": args}}]},
    "bare call": lambda args: {"tool_calls": [{"name": "f", "arguments": args}]},
    "tool_call": lambda args: {"tool_call": {"name": "f", "arguments": args}},
}
FREE_TEMPLATE = (
    "{%- if tools %}TOOLS={{ tools | tojson }}\n{% endif %}"
    "{%- if documents %}DOCS={{ documents | tojson }}\n{% endif %}"
    "{%- for m in messages %}{% if m.tool_calls %}"
    "{% for c in m.tool_calls %}CALL={{ c.function.arguments | tojson }}\n{% endfor %}"
    "{% else %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{% else %}{{ m.content }}{% endif %}\n{% endif %}{% endfor %}")


def _free_rows(place: str, values) -> list[dict]:
    rows = []
    for v in values:
        turns = [{"role": "user", "content": "Q"}]
        if place in CALL_FORMS:
            turns += [{"role": "assistant", **CALL_FORMS[place](v)}, {"role": "tool", "content": "R"}]
        row = {"messages": turns + [{"role": "assistant", "content": "A"}]}
        if place in ("tools", "documents"):
            row[place] = [{"k": v}]
        rows.append(row)
    return rows


@pytest.mark.parametrize("reader", ["jsonl", "json"])
@pytest.mark.parametrize("values", sorted(FREE_VALUES))
@pytest.mark.parametrize("place", sorted(CALL_FORMS) + ["tools", "documents"])
def test_free_form_values_reach_the_template_as_written(tmp_path, place, values, reader):
    rows = _free_rows(place, FREE_VALUES[values])
    path = write_rows(tmp_path, rows, reader)
    (tmp_path / "t.jinja").write_text(FREE_TEMPLATE)
    renderer = Renderer(load_template(str(tmp_path / "t.jinja"), None), {})
    cols = ("messages",) + ((place,) if place in ("tools", "documents") else ())
    batches = (jsonl_batches(path, 1000, list(cols)) if reader == "jsonl"
               else json_array_batches(path, 1000, list(cols)))
    (b,) = list(batches)
    texts = render_batch(b, Shape("chat", cols, templated=True), renderer, None, path, 0).texts
    for v, text in zip(FREE_VALUES[values], texts):
        want = (f"CALL={json.dumps(v)}" if place in CALL_FORMS else
                f"{'TOOLS' if place == 'tools' else 'DOCS'}={json.dumps([{'k': v}])}")
        assert want in text, text


EMPTY = {"empty string": "", "null": None, "no parts": [], "empty text part": [{"type": "text", "text": ""}],
         "null text part": [{"type": "text", "text": None}],
         "only whitespace": " \n\t", "blank text part": [{"type": "text", "text": "  "}]}  # S44-13: as ""


@pytest.mark.parametrize("reader", ["jsonl", "json"])
@pytest.mark.parametrize("turn", [0, 1])
@pytest.mark.parametrize("empty", sorted(EMPTY))
def test_empty_content_of_any_form_is_named(tmp_path, empty, turn, reader):
    """An empty turn is refused (or skipped, counted) whatever form its content takes, also beside
    parts in other turns (a "" then becomes an empty text part): never packed as "answer nothing"."""
    rows = _rows(VARIANTS["parts"], VARIANTS["string"], "turns", "words", n=2)
    rows[1]["messages"][turn]["content"] = EMPTY[empty]
    path = write_rows(tmp_path, rows, reader)
    with pytest.raises(PacktoolError, match=rf"row 1: empty example: messages\[{turn}\]\.content is null, missing or empty"):
        _render(path, reader, "turns")


def test_an_unread_date_column_keeps_arrows_reader(tmp_path, monkeypatch):
    """A column not read (C4's "timestamp") does not send every block to Python; a read one does."""
    from packtool.tokenize import text_readers
    calls = []
    monkeypatch.setattr(text_readers, "block_table", lambda *a: calls.append(a) or pa.table({"text": ["x"]}))
    p = tmp_path / "c4.jsonl"
    p.write_text(json.dumps({"text": "a document", "timestamp": "2019-04-25T12:57:54Z"}) + "\n")
    assert list(jsonl_batches(str(p), 1000, ["text"]))[0].column("text").to_pylist() == ["a document"]
    assert not calls
    list(jsonl_batches(str(p), 1000, ["timestamp"]))
    assert len(calls) == 1


def test_an_unread_field_of_two_types_stops_nothing(tmp_path):
    p = tmp_path / "d.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], "meta": m}
            for m in (1, "one")]
    p.write_text("\n".join(map(json.dumps, rows)) + "\n")
    (b,) = list(jsonl_batches(str(p), 1000, ["messages"]))
    assert b.num_rows == 2 and b.schema.names == ["messages"]
    with pytest.raises(PacktoolError, match=r"at line 2: field meta is a JSON string here but a number at line 1"):
        list(jsonl_batches(str(p), 1000, None))
