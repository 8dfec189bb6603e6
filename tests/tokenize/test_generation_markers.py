"""S43-1: U+E000 / U+E001 mark a chat template's {% generation %} blocks while it renders, so they
are packtool's. Only a turn's string `content` was checked: the same characters in a turn's
`name`, a tool call's arguments, a row's `tools` or `documents` (or content parts, the system
column, a special token) were stripped from the text and moved the loss (user text trained on,
or a reply's loss lost). Now every value a generation-block template gets is checked: a data
error naming the row and the value's path (exit 2, not the template's fault), wherever the row
comes from (JSON Lines, Parquet with tools as JSON text holding the escape), and whatever the
template is (a user's, a built-in's plain-Python rendering)."""
from __future__ import annotations

import json
import resource
import shutil
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.tokenize.gen_markers import CLOSE, OPEN, arrow_may_hold, marked_at

runner = CliRunner()

# Renders every key of every place below, with {% generation %} around the assistant's turn.
TEMPLATE = """\
{%- if tools %}TOOLS {{ tools | tojson }}
{% endif -%}
{%- if documents %}DOCS {{ documents | tojson }}
{% endif -%}
{%- for m in messages -%}
<|{{ m.role }}{% if m.name %} {{ m.name }}{% endif %}|>
{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif -%}
{%- if m.role == 'assistant' %}{% generation %}{{ m.content or '' }}
{%- for c in m.tool_calls or [] %} CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}
<|end|>{% endgeneration %}
{% else %}{{ m.content }}<|end|>
{% endif -%}
{%- endfor -%}
"""


def _row(place: str, mark: str) -> tuple[dict, str]:
    """A good chat row with `mark` (inside text, as "a<mark>b") at `place`, and that place's path."""
    bad = f"a{mark}b"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}
    turns = row["messages"]
    if place == "content":
        turns[1]["content"] = bad
    elif place == "content parts":
        turns[0]["content"] = [{"type": "text", "text": "x"}, {"type": "text", "text": bad}]
        return row, "messages[0].content"  # the parts are joined (messages.normalize_message)
    elif place == "name":
        turns[0]["name"] = bad
        return row, "messages[0].name"
    elif place == "reasoning":
        turns[1]["reasoning_content"] = bad
        return row, "messages[1].reasoning_content"
    elif place in ("call arguments", "call arguments text", "call name"):
        args = {"q": bad} if place == "call arguments" else json.dumps({"q": bad}, ensure_ascii=False)
        name = bad if place == "call name" else "f"
        turns[1]["tool_calls"] = [{"type": "function", "function": {"name": name, "arguments": args}}]
        return row, {"call arguments": "messages[1].tool_calls[0].function.arguments.q",
                     "call arguments text": "messages[1].tool_calls[0].function.arguments",
                     "call name": "messages[1].tool_calls[0].function.name"}[place]
    elif place in ("tool name", "tool description", "tool parameter"):
        params = {"type": "object", "properties": {"q": {"type": "string", "description": bad}}}
        fn = {"name": bad if place == "tool name" else "f",
              "description": bad if place == "tool description" else "d",
              "parameters": params if place == "tool parameter" else {}}
        row["tools"] = [{"type": "function", "function": fn}]
        return row, {"tool name": "tools[0].function.name", "tool description": "tools[0].function.description",
                     "tool parameter": "tools[0].function.parameters.properties.q.description"}[place]
    elif place == "document":
        row["documents"] = [{"title": "t", "text": bad}]
        return row, "documents[0].text"
    elif place == "system column":
        row["system"] = bad
        return row, "system"
    return row, "messages[1].content"


PLACES = ["content", "content parts", "name", "reasoning", "call arguments", "call arguments text",
          "call name", "tool name", "tool description", "tool parameter", "document", "system column"]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gen.jinja").write_text(TEMPLATE)
    return tmp_path


def _pack(proj, rows, template, name="rows.jsonl", tokenizer=GPT2):
    data = proj / name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), data)
    else:
        data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    r = runner.invoke(app, ["pack", str(data), "--tokenizer", str(tokenizer), "--chat-template", template,
                            "-o", str(proj / "out"), "--cache-dir", str(proj / "cache"), "-C", "512",
                            "--no-progress", "--json"])
    return r, data


def _refused(r, data, row: int, where: str, mark: str) -> str:
    text = r.stdout + r.stderr
    assert r.exit_code == 2, text
    assert "Traceback" not in text, text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert f"{data}, row {row}: {where} holds U+{ord(mark):04X}" in line, line
    assert "--chat-template" not in line, line  # the row's data, not the template
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert (err["kind"], err["row"], err["flag"]) == ("input", row, None), err
    return line


@pytest.mark.parametrize("mark", [OPEN, CLOSE], ids=["U+E000", "U+E001"])
@pytest.mark.parametrize("place", PLACES)
def test_a_marker_anywhere_in_a_row_is_refused_naming_the_row_and_place(proj, place, mark):
    good = [_row("content", "")[0]] * 3
    bad, where = _row(place, mark)
    r, data = _pack(proj, [*good, bad, *good], "gen.jinja")
    _refused(r, data, 3, where, mark)
    assert not (proj / "out").exists()


@pytest.mark.parametrize("place", ["content", "name", "call arguments", "tool description", "document"])
def test_a_builtin_template_refuses_the_same_rows(proj, place):
    """The built-ins' plain-Python rendering (native_templates) uses no markers, but a row it
    hands to jinja (tools, an unusual key) would be read by them: one rule for both."""
    bad, where = _row(place, OPEN)
    r, data = _pack(proj, [_row("content", "")[0], bad], "chatml")
    _refused(r, data, 1, where, OPEN)


@pytest.mark.parametrize("escape", ["\\ue000", "\\uE001"])
def test_tools_as_json_text_holding_the_escape_are_refused(proj, escape):
    """A Parquet row's tools kept as JSON text: the character is there only once decoded."""
    tools = '[{"type": "function", "function": {"name": "f", "description": "a' + escape + 'b"}}]'
    rows = [{"messages": _row("content", "")[0]["messages"], "tools": t} for t in ("[]", tools)]
    r, data = _pack(proj, rows, "gen.jinja", name="rows.parquet")
    _refused(r, data, 1, "tools[0].function.description", OPEN if escape.endswith("0") else CLOSE)


def test_a_special_token_holding_a_marker_is_refused_before_any_row(proj):
    tok = json.loads(open(GPT2).read())
    eos = f"<e{OPEN}>"
    tok["added_tokens"].append({"id": 50257, "content": eos, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    folder = proj / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    r, _ = _pack(proj, [_row("content", "")[0]], "gen.jinja", tokenizer=folder)
    assert r.exit_code == 2, r.stdout + r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "special token eos_token holds U+E000" in line[0] and "--tokenizer" in line[0], r.stderr


def test_other_private_use_text_and_templates_without_blocks_pack(proj):
    """U+E002 is anyone's; a template with no generation blocks (prefix rendering) uses no markers."""
    (proj / "plain.jinja").write_text("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"
                                      "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    for template, rows in (("gen.jinja", [_row("name", "\ue002")[0]]), ("plain.jinja", [_row("content", OPEN)[0]])):
        shutil.rmtree(proj / "out", ignore_errors=True)
        r, _ = _pack(proj, rows, template)
        assert r.exit_code == 0, r.stdout + r.stderr


# --- the batch prefilter (gen_markers.arrow_may_hold) never misses what the row walk finds -----------

ARRAYS = {
    "string": lambda v: pa.array(["x", v, "y"]),
    "large_string": lambda v: pa.array(["x", v], pa.large_string()),
    "sliced away": lambda v: pa.array([v, "x", "y"]).slice(1),
    "sliced to": lambda v: pa.array(["x", v, "y"]).slice(1, 1),
    "list of structs": lambda v: pa.array([[{"role": "user", "content": "x"}], [{"role": "user", "content": v}]]),
    "nested deep": lambda v: pa.array([{"a": [{"b": {"c": [v]}}]}]),
    "dictionary": lambda v: pa.array(["x", v]).dictionary_encode(),
    "string view": lambda v: pa.array(["x", v], pa.string_view()),
    "large list": lambda v: pa.array([["x"], [v]], pa.large_list(pa.string())),
    "list of dictionary": lambda v: pa.array([["x"], [v]], pa.list_(pa.dictionary(pa.int32(), pa.string()))),
}


@pytest.mark.parametrize("value", ["plain", f"a{OPEN}", f"{CLOSE}b", "\ue002", "a\\ue000 escaped"])
@pytest.mark.parametrize("kind", sorted(ARRAYS))
def test_the_batch_search_is_a_superset_of_the_row_walk(kind, value):
    arr = ARRAYS[kind](value)
    held = marked_at({"c": arr.to_pylist()}) is not None
    if kind == "string" and value.endswith("escaped"):
        held = True  # a top-level string may be JSON text, decoded later (a row's tools)
    assert arrow_may_hold([arr]) or not held
    if kind in ("string", "large_string", "sliced to", "list of structs", "nested deep", "large list") \
            and value in ("plain", "\ue002"):
        assert not arrow_may_hold([arr])  # no false hit on clean text: that would cost every row a walk


# --- S43-12: a template that rewrites its own blocks ------------------------------------------------
# The marker search looped for ever, growing the text, on a block whose end came before its
# start (`{% filter reverse %}` around a block): all the box's memory, then a MemoryError's
# traceback. The rendered text must hold the markers as the blocks wrote them.

BLOCK = "{% generation %}{{ m.content }}<|end|>{% endgeneration %}"
REWRITES = {
    "filter reverse": "{% filter reverse %}" + BLOCK + "{% endfilter %}",
    "slice reversed": "{% set x %}" + BLOCK + "{% endset %}{{ x[::-1] }}",
    "end cut off": "{% set x %}" + BLOCK + "{% endset %}{{ x[:-1] }}",
    "start cut off": "{% set x %}" + BLOCK + "{% endset %}{{ x[1:] }}",
    "end replaced": "{% filter replace('\ue001', '') %}" + BLOCK + "{% endfilter %}",
    "an end of its own": "{{ '\ue001' }}" + BLOCK,
    "a start of its own": "{{ '\ue000' }}" + BLOCK,
    "a start at the end": BLOCK + "{{ '\ue000' }}",
    "nested": "{% generation %}" + BLOCK + "{% endgeneration %}",
}


@contextmanager
def bounded_memory():
    """The process may grow 2 GiB more within: a search that grows the text for ever fails here
    at once instead of taking the box's memory (and the limit is lifted before pytest reports)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        size = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_a_template_rewriting_its_blocks_is_refused(proj, rewrite):
    (proj / "bad.jinja").write_text("{% for m in messages %}{% if m.role == 'assistant' %}" + REWRITES[rewrite]
                                    + "{% else %}<|user|>{{ m.content }}<|end|>{% endif %}{% endfor %}")
    with bounded_memory():
        r, data = _pack(proj, [_row("content", "")[0]], "bad.jinja")
    text = r.stdout + r.stderr
    assert r.exit_code == 2 and "Traceback" not in text, text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    said = "does not hold the {% generation %} blocks as written"
    assert f"{data}, row 0: chat template" in lines[0] and said in lines[0] and "--chat-template" in lines[0], lines[0]
    assert not (proj / "out").exists()


@pytest.mark.parametrize("keeps", ["{% filter upper %}" + BLOCK + "{% endfilter %}",
                                   "{% set x %}" + BLOCK + "{% endset %}{{ x }}{{ x }}",
                                   "{% filter indent(2, true) %}" + BLOCK + "{% endfilter %}"])
def test_a_filter_that_keeps_the_blocks_in_order_packs(proj, keeps):
    (proj / "ok.jinja").write_text("{% for m in messages %}{% if m.role == 'assistant' %}" + keeps
                                   + "{% else %}<|user|>{{ m.content }}<|end|>{% endif %}{% endfor %}")
    r, _ = _pack(proj, [_row("content", "")[0]], "ok.jinja")
    assert r.exit_code == 0, r.stdout + r.stderr


# --- the place is named as the row holds it ----------------------------------------------------------

SHAREGPT_ROW = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": f"a{OPEN}b"}]}
PLACES_IN_ROWS = {
    "sharegpt value": ([SHAREGPT_ROW], "conversations[1].value"),
    "sharegpt after a system column": ([{**SHAREGPT_ROW, "system": "be brief"}], "conversations[1].value"),
    "system column": ([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
                        "system": f"a{OPEN}"}], "system"),
    "chat after a system column": ([{"messages": [{"role": "user", "content": f"a{OPEN}"},
                                                  {"role": "assistant", "content": "ok"}],
                                     "system": "be brief"}], "messages[0].content"),
    "prompt": ([{"prompt": f"a{OPEN}", "completion": "ok"}], "the prompt (prompt)"),
    "response": ([{"prompt": "hi", "completion": f"a{OPEN}"}], "the response (completion)"),
}


@pytest.mark.parametrize("case", sorted(PLACES_IN_ROWS))
def test_the_place_is_named_as_the_row_holds_it(proj, case):
    rows, where = PLACES_IN_ROWS[case]
    r, data = _pack(proj, rows, "gen.jinja")
    _refused(r, data, 0, where, OPEN)
