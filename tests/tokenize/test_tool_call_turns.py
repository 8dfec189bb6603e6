"""S43-6: an assistant turn holding tool calls (its content null, missing, "" or text) renders as
its template writes it, and its loss is what that template trains. A template without
{% generation %} blocks (prefix rendering) skipped every assistant turn with tool calls: the
call, and even the turn's text beside it, were never trained, although the turn is what the
assistant generated. Under the built-ins tool calls are context (docs/TOKENIZATION.md): a row
whose only reply is a call has nothing to train, and its refusal told the user to give the turn
a weight of 1, which it had.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.tokenize.shapes import Shape, render_batch
from packtool.tokenize.templates import Renderer, load_template

runner = CliRunner()
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
CALL = {"type": "function", "function": {"name": "lookup", "arguments": {"q": "CALLARG"}}}
# The shapes of an assistant turn that calls a tool, as data sets write it.
TURNS = {
    "content null": {"role": "assistant", "content": None, "tool_calls": [CALL]},
    "content missing": {"role": "assistant", "tool_calls": [CALL]},
    "content empty": {"role": "assistant", "content": "", "tool_calls": [CALL]},
    "content and call": {"role": "assistant", "content": "SAYS", "tool_calls": [CALL]},
    "single tool_call": {"role": "assistant", "tool_call": {"name": "lookup", "arguments": '{"q": "CALLARG"}'}},
}
CALLS = """{% for c in m.tool_calls or [] %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor %}"""
# a user template that trains the whole assistant turn, calls included
GEN = ("{%- for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' %}{% generation %}"
       "{{ m.content or '' }}" + CALLS + "<|end|>{% endgeneration %}{% else %}{{ m.content }}<|end|>{% endif %}\n"
       "{% endfor %}")
# the same turns without generation blocks: spans come by prefix rendering
PREFIX = ("{%- for m in messages %}<|{{ m.role }}|>{{ m.content or '' }}" + CALLS + "<|end|>\n{% endfor %}"
          "{%- if add_generation_prompt %}<|assistant|>{% endif %}")
TEMPLATES = {"chatml": None, "llama3": None, "mistral": None, "gen.jinja": GEN, "prefix.jinja": PREFIX}


def _template(tmp_path, name):
    if TEMPLATES[name] is None:
        return load_template(name, None)
    p = tmp_path / name
    p.write_text(TEMPLATES[name])
    return load_template(str(p), None)


def _rows(turn: str) -> list[dict]:
    return [{"messages": [{"role": "user", "content": "ASK"}, TURNS[turn], {"role": "tool", "content": "RESULT"},
                          {"role": "assistant", "content": "FINAL"}]}]


def _loss(template, rows) -> tuple[str, str]:
    batch = pa.RecordBatch.from_struct_array(pa.array(rows))
    rb = render_batch(batch, Shape("chat", ("messages",), templated=True), Renderer(template, SPECIAL),
                      None, "d.jsonl", 0)
    text, spans = rb.texts[0], rb.spans[0]
    return text, "|".join(text[a:b] for a, b in spans)


@pytest.mark.parametrize("turn", sorted(TURNS))
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_tool_call_turn_is_trained_as_its_template_says(tmp_path, name, turn):
    text, loss = _loss(_template(tmp_path, name), _rows(turn))
    assert "CALLARG" in text and "RESULT" in text and "FINAL" in text, text
    assert "ASK" not in loss and "RESULT" not in loss and "FINAL" in loss, loss
    says = "SAYS" in TURNS[turn].get("content", "") if TURNS[turn].get("content") else False
    assert ("SAYS" in loss) == says, loss  # the turn's own text is trained beside its call, always
    # what the assistant generated: the call, where the template trains it (the built-ins: context)
    assert ("CALLARG" in loss) == name.endswith(".jinja"), loss


@pytest.mark.parametrize("turn", sorted(TURNS))
def test_prefix_spans_are_the_turns_as_rendered(tmp_path, turn):
    """Prefix rendering's span of the call turn is exactly that turn's text: from after the
    generation prompt to the end of the turn (its trailing newline aside)."""
    text, loss = _loss(_template(tmp_path, "prefix.jinja"), _rows(turn))
    said = TURNS[turn].get("content") or ""
    args = json.dumps(TURNS[turn]["tool_call"]["arguments"] if "tool_call" in TURNS[turn] else {"q": "CALLARG"})
    assert loss == f"{said}<call>lookup {args}</call><|end|>|FINAL<|end|>", loss


@pytest.mark.parametrize("turn", ["content null", "content missing", "single tool_call"])
@pytest.mark.parametrize("template", ["chatml", "llama3", "mistral"])
def test_a_row_whose_only_reply_is_a_call_names_why(tmp_path, template, turn):
    """Under a built-in such a row has nothing to train: refused (or skipped) with the real
    reason, never only "give a reply turn a weight of 1" (it has no weight)."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "ASK"}, TURNS[turn]]}) + "\n")
    r = runner.invoke(app, ["pack", str(data), "--tokenizer", GPT2, "--chat-template", template, "-o",
                            str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    text = r.stdout + r.stderr
    assert r.exit_code == 2 and "Traceback" not in text, text
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1, r.stderr
    assert "row 0" in line[0] and "tool calls alone is context" in line[0] and "{% generation %}" in line[0], line[0]
