"""The plain-Python fast paths of the built-in templates render exactly what the jinja
templates render (text and assistant spans), on every fixture conversation and edge cases."""
from __future__ import annotations

import gzip
import json

import jinja2
import pytest
from conftest import GSM8K, SHAREGPT, TASKMASTER

from packtool.tokenize.messages import normalize_message, sharegpt_to_messages
from packtool.tokenize.native_templates import NATIVE, Fallback
from packtool.tokenize.templates import BUILTIN, Renderer, make_template

SPECIALS = [{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>"},
            {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}]   # gpt2: no BOS

EDGE = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "  hello  "}],
    [{"role": "user", "content": "order"},
     {"role": "assistant", "content": "Sure.", "tool_call": {"name": "add", "arguments": {"item": "lätte", "n": 2}}},
     {"role": "tool", "name": "add", "content": "{\"ok\": true}"},
     {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "a", "arguments": "{}"}},
                                         {"name": "b", "arguments": {"x": [1, 2]}}]},
     {"role": "tool", "content": "done"}, {"role": "assistant", "content": ""},
     {"role": "assistant", "content": "Bye."}],
    [{"role": "user", "content": "only a user turn"}],
    [],
]


def _conversations():
    with gzip.open(TASKMASTER, "rt") as f:
        convs = [[normalize_message(m) for m in json.loads(line)["messages"]] for line in f]
    with open(SHAREGPT) as f:
        convs += [sharegpt_to_messages(c["conversations"], SHAREGPT, i) for i, c in enumerate(json.load(f))]
    with open(GSM8K) as f:
        convs += [[{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}]
                  for r in map(json.loads, f)]
    return convs + [[normalize_message(m) for m in c] for c in EDGE]


def _alternates(msgs) -> bool:
    """Mistral's order: user/assistant from a user turn, tool results and tool-call turns aside."""
    turns = [m["role"] for m in msgs[1 if msgs and msgs[0]["role"] == "system" else 0:]
             if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls"))]
    return turns == ["user", "assistant"] * (len(turns) // 2) + ["user"] * (len(turns) % 2)


@pytest.mark.parametrize("name", sorted(NATIVE))
@pytest.mark.parametrize("special", SPECIALS, ids=["bos", "nobos"])
def test_native_equals_jinja(name, special):
    r = Renderer(make_template(name, BUILTIN[name]), special)
    assert r._native is NATIVE[name]
    for msgs in _conversations():
        refused = name == "mistral" and not _alternates(msgs)  # the template raises its error (S43-10)
        try:
            got = NATIVE[name](msgs, special)
        except Fallback:
            assert refused, msgs
            r._native = None
            with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
                r.render(msgs)
            r._native = NATIVE[name]
            continue
        assert not refused, msgs
        r._native = None
        want = r.render(msgs)
        r._native = NATIVE[name]
        assert got == want, msgs


def test_unusual_input_falls_back_to_jinja():
    special = SPECIALS[0]
    with pytest.raises(Fallback):
        NATIVE["chatml"]([{"role": "user", "content": 5}], special)
    with pytest.raises(Fallback):
        NATIVE["mistral"]([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], special)
    # through the Renderer, jinja then reports the template's own error
    r = Renderer(make_template("mistral", BUILTIN["mistral"]), special)
    with pytest.raises(jinja2.TemplateError, match="system message must be followed by a user"):
        r.render([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])
