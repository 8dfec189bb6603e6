"""Issue 23 class 5: nothing in a row's content is dropped, truncated or put into the loss
without a word. Each case runs the command: exit status, one `error:` line naming the file,
the row and the key (or one note), no traceback."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, MISTRAL_DIR
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _rows(tmp_path, rows, name="data.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _pack(tmp_path, data, *flags):
    return runner.invoke(app, ["pack", data, "--tokenizer", GPT2, "--cache-dir", str(tmp_path / "cache"),
                               "--dry-run", "--no-progress", "--json", *flags])


def _one_error(r, code=2):
    text = r.stdout + r.stderr
    assert r.exit_code == code, text
    assert "Traceback" not in text
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def chat(assistant: dict, user="hi"):
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", **assistant}]}


def parts(*kinds):
    out = []
    for k in kinds:
        out.append({"type": "text", "text": "look"} if k == "text" else {"type": k, k: {"url": "http://x"}})
    return out


class TestContentParts:
    """OpenAI content parts: the text ones are joined; any other kind is refused (TOKENIZATION.md),
    never dropped without a count."""

    @pytest.mark.parametrize("kinds", [("text", "image_url"), ("image_url",), ("text", "input_audio", "file")])
    def test_non_text_parts_are_refused(self, tmp_path, kinds):
        rows = [chat({"content": parts("text")}, user=parts("text")),
                chat({"content": parts("text")}, user=parts(*kinds))]
        line = _one_error(_pack(tmp_path, _rows(tmp_path, rows), "--chat-template", "chatml"))
        assert "row 1:" in line and "messages[0].content" in line and "(rows count from 0)" in line
        assert f"has {len([k for k in kinds if k != 'text'])} non-text part(s)" in line  # the count, not just the kinds
        for k in set(kinds) - {"text"}:
            assert k in line

    def test_text_parts_pack(self, tmp_path):
        rows = [chat({"content": parts("text")}, user=parts("text", "text"))]
        r = _pack(tmp_path, _rows(tmp_path, rows), "--chat-template", "chatml")
        assert r.exit_code == 0, r.stderr


TOOL_CALLS = {
    "no arguments": [{"name": "f"}],
    "a dict, not a list": {"name": "f", "arguments": "{}"},
    "a number in the list": [1],
    "name not a string": [{"type": "function", "function": {"name": 3, "arguments": "{}"}}],
    "function without name": [{"type": "function", "function": {"arguments": "{}"}}],
    "arguments a list": [{"type": "function", "function": {"name": "f", "arguments": [1, 2]}}],
}


class TestToolCallShapes:
    """An odd tool_calls shape is named by its key, not "Object of type Undefined is not JSON
    serializable" from inside a template."""

    @pytest.mark.parametrize("case", sorted(TOOL_CALLS))
    @pytest.mark.parametrize("template", ["chatml", "llama3"])
    def test_named(self, tmp_path, case, template):
        rows = [chat({"content": None, "tool_calls": TOOL_CALLS[case]})]
        line = _one_error(_pack(tmp_path, _rows(tmp_path, rows), "--chat-template", template))
        assert "row 0" in line and "messages[1].tool_calls" in line and "Undefined" not in line, line

    @pytest.mark.parametrize("calls", [[{"name": "f", "arguments": {"a": 1}}],
                                       [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]])
    def test_good_shapes_pack(self, tmp_path, calls):
        rows = [chat({"content": "ok", "tool_calls": calls})]
        r = _pack(tmp_path, _rows(tmp_path, rows), "--chat-template", "chatml")
        assert r.exit_code == 0, r.stderr


class TestRowOfAnotherShape:
    """A `{"text": ...}` row in a chat file is named as such, with the flag that reads it;
    "empty example; pass --on-empty skip" would have dropped real rows."""

    @pytest.mark.parametrize("other,flag", [({"text": "plain row"}, "--shape text"),
                                            ({"prompt": "p", "completion": "c"}, "--shape prompt_completion")])
    def test_named_with_its_shape(self, tmp_path, other, flag):
        rows = [chat({"content": "ok"}), other]  # --shape chat: else both shapes' columns are refused at once
        line = _one_error(_pack(tmp_path, _rows(tmp_path, rows), "--chat-template", "chatml", "--shape", "chat"))
        assert "row 1" in line and flag in line and "not an empty example" in line, line

    def test_a_truly_empty_chat_row_is_still_an_empty_example(self, tmp_path):
        rows = [chat({"content": "ok"}), {"messages": []}]
        line = _one_error(_pack(tmp_path, _rows(tmp_path, rows), "--chat-template", "chatml"))
        assert "empty example" in line and "row 1" in line


NO_AGP = ("{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
          "{%- endfor -%}")


class TestGenerationPrompt:
    """A template that ignores add_generation_prompt puts each assistant header into the loss:
    said on every run that uses it (cached or not); templates that mark the reply say nothing."""

    def _note(self, tmp_path, *flags):
        rows = [chat({"content": "ok"})]
        r = _pack(tmp_path, _rows(tmp_path, rows), *flags)
        assert r.exit_code == 0, r.stderr
        return [ln for ln in r.stderr.splitlines() if "add_generation_prompt" in ln]

    def test_said_on_every_run(self, tmp_path):
        t = tmp_path / "t.jinja"
        t.write_text(NO_AGP)
        for _ in range(2):  # the second run reuses the cache
            assert len(self._note(tmp_path, "--chat-template", str(t))) == 1

    @pytest.mark.parametrize("flags", [("--chat-template", "chatml"), ("--chat-template", "llama3")])
    def test_not_said_for_templates_that_mark_the_reply(self, tmp_path, flags):
        assert self._note(tmp_path, *flags) == []

    def test_not_said_for_a_template_without_assistant_header(self, tmp_path):
        rows = [chat({"content": "ok"})]
        r = runner.invoke(app, ["pack", _rows(tmp_path, rows), "--tokenizer", MISTRAL_DIR, "--cache-dir",
                                str(tmp_path / "cache"), "--dry-run", "--no-progress", "--json"])
        assert r.exit_code == 0, r.stderr
        assert "add_generation_prompt" not in r.stderr
