"""S33-7: no key of a chat row is dropped without a word. A turn's `weight: 0` (OpenAI's "do not
train this turn") takes that turn's text out of the loss under every template kind; a row's
`tools` / `documents` reach the template as transformers passes them; any key a template does
not render (reasoning_content, thinking, name, refusal, tool_call_id, tools, documents) is
counted per file and named in one note, also when the cache is reused."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from conftest import GPT2

from packtool import notes
from packtool.errors import PacktoolError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache
from packtool.tokenize.shapes import Shape, render_batch
from packtool.tokenize.templates import Renderer, load_template

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
# A user template that renders each key (by its name, as real templates do), with generation blocks
RENDERS = ("{%- if tools %}TOOLS:{{ tools | tojson }}{% endif %}{%- if documents %}DOCS:{{ documents | tojson }}"
           "{% endif %}{%- for m in messages %}<|{{ m.role }}|>"
           "{% for k in ['reasoning_content', 'thinking', 'name', 'refusal', 'tool_call_id'] %}"
           "{% if m[k] %}[{{ m[k] }}]{% endif %}{% endfor %}"
           "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|end|>{% endgeneration %}"
           "{% else %}{{ m.content }}<|end|>{% endif %}{% endfor %}")
PLAIN = ("{%- for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
         "<|end|>{% endgeneration %}{% else %}{{ m.content }}<|end|>{% endif %}{% endfor %}")
# no generation blocks: spans come by prefix rendering
PREFIX = ("{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
          "{%- if add_generation_prompt %}<|assistant|>{% endif %}")
TEMPLATES = ["chatml", "llama3", "mistral", "renders.jinja", "plain.jinja", "prefix.jinja"]
TURN_KEYS = {"reasoning_content": "R-TEXT", "thinking": "T-TEXT", "name": "N-TEXT", "refusal": "F-TEXT",
             "tool_call_id": "C-TEXT"}
ROW_KEYS = {"tools": [{"type": "function", "function": {"name": "TOOLDEF", "parameters": {}}}],
            "documents": [{"title": "DOCT", "text": "DOCTEXT"}]}


@pytest.fixture
def template(tmp_path, request):
    name = request.param
    if name.endswith(".jinja"):
        p = tmp_path / name
        p.write_text({"renders.jinja": RENDERS, "plain.jinja": PLAIN, "prefix.jinja": PREFIX}[name])
        name = str(p)
    return load_template(name, None)


def _conv(extra_turn=None, weight=None):
    reply = {"role": "assistant", "content": "FIRST-REPLY", **(extra_turn or {})}
    if weight is not None:
        reply["weight"] = weight
    return [{"role": "user", "content": "Q1"}, reply,
            {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "SECOND-REPLY"}]


def _render(template, rows):
    batch = pa.RecordBatch.from_struct_array(pa.array(rows))  # every row's keys
    cols = tuple(c for c in ("messages", "tools", "documents") if c in batch.schema.names)
    return render_batch(batch, Shape("chat", cols, templated=True), Renderer(template, SPECIAL), None, "d.jsonl", 0)


def _loss_text(text, spans):
    return "".join(text[a:b] for a, b in spans)


@pytest.mark.parametrize("template", TEMPLATES, indirect=True)
@pytest.mark.parametrize("key", sorted(TURN_KEYS) + sorted(ROW_KEYS))
def test_key_is_rendered_or_counted(template, key):
    value = ROW_KEYS.get(key, TURN_KEYS.get(key))
    row = {"messages": _conv({key: value} if key in TURN_KEYS else None)}
    if key in ROW_KEYS:
        row[key] = value
    rb = _render(template, [{"messages": _conv()}, row])
    where = key if key in ROW_KEYS else f"messages[].{key}"
    shown = json.dumps(value) if key in ROW_KEYS else value
    if template.name.endswith("renders.jinja"):
        assert shown in rb.texts[1] and not rb.unrendered
    else:
        assert shown not in rb.texts[1]
        assert rb.unrendered == {where: [1, 1]}


@pytest.mark.parametrize("template", TEMPLATES, indirect=True)
def test_weight_zero_turn_gets_no_loss(template):
    full = _render(template, [{"messages": _conv()}])
    rb = _render(template, [{"messages": _conv(weight=0)}, {"messages": _conv(weight=1)}])
    assert rb.texts == full.texts * 2  # the template sees the same turns (weight is packtool's)
    kept = _loss_text(rb.texts[0], rb.spans[0])
    assert "FIRST-REPLY" not in kept and "SECOND-REPLY" in kept
    assert _loss_text(rb.texts[1], rb.spans[1]) == _loss_text(full.texts[0], full.spans[0])
    assert len(full.spans[0]) == 2 and rb.spans[0] == full.spans[0][1:]  # the first reply's span, no more


@pytest.mark.parametrize("weight", [0.5, 2, "0", True])
def test_other_weight_is_named(weight):
    with pytest.raises(PacktoolError, match=r"row 0: messages\[1\]\.weight is .*: a turn's weight is 0"):
        _render(load_template("chatml", None), [{"messages": _conv(weight=weight)}])


def test_note_said_fresh_and_on_reuse(tmp_path, monkeypatch):
    data = tmp_path / "d.jsonl"
    rows = [{"messages": _conv({"reasoning_content": "R"})}, {"messages": _conv(), **ROW_KEYS}]
    data.write_text("\n".join(map(json.dumps, rows)) + "\n")
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml")
    want = "messages[].reasoning_content (1 row, first row 0); tools (1 row, first row 1)"
    for _ in range(2):  # built, then reused
        start = notes.mark()
        tokenize_to_cache([str(data)], cfg, cache_dir=str(tmp_path / "cache"), progress=False)
        said = [n for n in notes.since(start) if "does not render these keys" in n]
        assert len(said) == 1 and want in said[0] and "documents (1 row, first row 1)" in said[0], said


def _sharegpt(system=None, weight=None):
    reply = {"from": "gpt", "value": "FIRST-REPLY", **({"weight": weight} if weight is not None else {})}
    row = {"conversations": [{"from": "human", "value": "Q1"}, reply,
                             {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "SECOND-REPLY"}]}
    return {**row, "system": system} if system is not None else row


def _render_shape(kind, rows, template="chatml"):
    batch = pa.RecordBatch.from_struct_array(pa.array(rows))
    col = "messages" if kind == "chat" else "conversations"
    cols = (col,) + tuple(c for c in ("tools", "documents", "system") if c in batch.schema.names)
    return render_batch(batch, Shape(kind, cols, templated=True), Renderer(load_template(template, None), SPECIAL),
                        None, "d.jsonl", 0)


@pytest.mark.parametrize("kind", ["chat", "sharegpt"])
def test_row_system_column_is_the_first_turn(kind):
    """S33-10: a row's `system` (LLaMA-Factory / axolotl ShareGPT, chat exports) is its prompt."""
    plain = {"messages": _conv()} if kind == "chat" else _sharegpt()
    rb = _render_shape(kind, [{**plain, "system": "SYS-PROMPT"}, plain])
    assert rb.texts[0] == "<|im_start|>system\nSYS-PROMPT<|im_end|>\n" + rb.texts[1]
    two = {**plain, "system": "SYS-PROMPT"}
    turns = two["messages" if kind == "chat" else "conversations"]
    turns.insert(0, {"role": "system", "content": "OWN"} if kind == "chat" else {"from": "system", "value": "OWN"})
    with pytest.raises(PacktoolError, match=r"row 0: the row has a system column and .*\[0\] is a system turn"):
        _render_shape(kind, [two])


def test_sharegpt_weight_zero_and_function_call():
    """S33-10: ShareGPT turns carry weight too; LLaMA-Factory's function_call is a tool call."""
    full = _render_shape("sharegpt", [_sharegpt()])
    rb = _render_shape("sharegpt", [_sharegpt(weight=0)])
    assert rb.texts == full.texts and rb.spans[0] == full.spans[0][1:]
    row = _sharegpt()
    row["conversations"][1:1] = [{"from": "function_call", "value": '{"name": "f", "arguments": {"x": 1}}'},
                                 {"from": "observation", "value": "RESULT"}]
    text = _render_shape("sharegpt", [row]).texts[0]
    assert '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>' in text and "RESULT" in text
    row["conversations"][1]["value"] = "not json"
    with pytest.raises(PacktoolError, match=r"conversations\[1\] is a function_call whose value is not"):
        _render_shape("sharegpt", [row])


@pytest.mark.parametrize("value", [None, ""])
def test_a_key_without_text_is_not_counted(value):
    """A key every exporter writes empty (`"name": ""`, or Arrow's null for a key of other rows)
    leaves nothing out."""
    rb = _render(load_template("chatml", None), [{"messages": _conv({"name": value, "refusal": value})}])
    assert rb.unrendered == {}


# A turn key's values of every Arrow kind a reader gives (None: the key absent from that turn)
_KINDS = {
    "string": ["T", "", None], "large_string": pa.array(["T", "", None], pa.large_string()),
    "dictionary": pa.array(["T", "", None]).dictionary_encode(), "null": pa.nulls(3),
    "int": [0, 7, None], "float": [0.0, float("nan"), None], "bool": [False, True, None],
    "list": [[], ["x"], None], "struct": [{"a": None}, {"a": 1}, None]}


def _turn_column(kind: str, null_turn: bool, null_row: bool) -> pa.Array:
    """Rows 0..2 of two turns, the second holding the key's value 0..2 (row 3 without it);
    optionally the turn holding value 0 null and row 1 null, their struct children still
    holding the values. Sliced, so that the rows' offsets point into a longer child."""
    values = _KINDS[kind]
    values = values if isinstance(values, pa.Array) else pa.array(values)
    none = pa.nulls(1, values.type)
    key = pa.concat_arrays([x for i in range(3) for x in (none, values.slice(i, 1))] + [none, none])
    mask = pa.array([null_turn and t == 1 for t in range(8)])
    turns = pa.StructArray.from_arrays([pa.array(["user"] * 8), key], names=["role", "thinking"], mask=mask)
    rows = pa.ListArray.from_arrays(pa.array([0, 2, 4, 6, 8], pa.int32()), turns,
                                    mask=pa.array([False, null_row, False, False]))
    return pa.concat_arrays([rows, rows]).slice(2, 5)


def _keys_by_python(col: pa.Array, kind: str) -> list[tuple[str, ...]]:
    """The definition, turn by turn: a key with a value (neither null nor "") in some turn."""
    label = "messages" if kind == "chat" else "conversations"
    return [tuple(sorted({f"{label}[].{k}" for m in turns or () if isinstance(m, dict)
                          for k, v in m.items() if v is not None and v != "" and k not in ("role", "from")}))
            for turns in col.to_pylist()]


@pytest.mark.parametrize("null_row", [False, True])
@pytest.mark.parametrize("null_turn", [False, True])
@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_keys_counted_from_arrow_are_the_turns_keys(kind, null_turn, null_row):
    """chat_keys reads the keys per batch from the Arrow struct (validity bits, string
    lengths): the same keys, per row, as a scan of every turn's values."""
    from packtool.tokenize.chat_keys import KeyUse, unrendered_turn_keys
    col = _turn_column(kind, null_turn, null_row)
    use = KeyUse(load_template("chatml", None))
    assert unrendered_turn_keys(col, "chat", use) == _keys_by_python(col, "chat")
