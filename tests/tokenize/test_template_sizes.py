"""A chat template from a file or a model folder is untrusted code: every operation that can
build a large string or list (S31-8: `replace` x3 built 1e9 characters, `center(3e8)` ran at
compile time outside the timer, `~` and list doubling) is refused before it allocates, one
case per operation kind; a loop keeping many large results is refused by their running total;
and legitimate templates render exactly as in jinja's own sandbox."""
from __future__ import annotations

import gzip
import json
import tracemalloc

import jinja2
import jinja2.ext
import pytest
from conftest import MISTRAL_DIR, SHAREGPT, TASKMASTER

import packtool.tokenize.template_limits as limits
from packtool.tokenize.template_sizes import Sandbox
from packtool.tokenize.messages import normalize_message, sharegpt_to_messages
from packtool.tokenize.templates import BUILTIN, Renderer, _Generation, _raise, _tojson, make_template

BIG = 20_000_000  # over the bound (lowered to 1M below), small enough to build without the fix

CASES = {  # operation named in the error -> template asking for about BIG characters or items
    "|replace": "{{ ('a' * 20000)|replace('a', 'a' * 1000)|length }}",
    "|center": "{{ 'a'|center(20000000)|length }}",
    "`~`": "{% set ns = namespace(s='ab') %}{% for i in range(24) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "`+`": "{% set ns = namespace(s='ab') %}{% for i in range(24) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "`+` #list": "{% set ns = namespace(l=[1]) %}{% for i in range(25) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "`*`": "{{ ('x' * 20000000)|length }}",
    "`*` #list": "{{ ([1] * 20000000)|length }}",
    "`%`": "{{ ('%20000000s' % 'a')|length }}",
    "`%` #star": "{{ ('%*s' % (20000000, 'a'))|length }}",
    "|format": "{{ '%20000000s'|format('a')|length }}",
    "format()": "{{ '{:>20000000}'.format('a')|length }}",
    "format() #nested": "{{ '{:>{w}}'.format('a', w=20000000)|length }}",
    "format_map()": "{{ '{x:>20000000}'.format_map({'x': 'a'})|length }}",
    "replace()": "{{ ('a' * 20000).replace('a', 'a' * 1000)|length }}",
    "center()": "{{ 'a'.center(20000000)|length }}",
    "ljust()": "{{ 'a'.ljust(20000000)|length }}",
    "rjust()": "{{ 'a'.rjust(20000000)|length }}",
    "zfill()": "{{ 'a'.zfill(20000000)|length }}",
    "expandtabs()": "{{ ('\t' * 1000).expandtabs(20000)|length }}",
    "join()": "{{ ('y' * 20000).join(['x'] * 1000)|length }}",
    "translate()": "{{ ('a' * 1000).translate({97: 'b' * 20000})|length }}",
    "split()": "{{ ('a ' * 150000).split()|length }}",
    "splitlines()": "{{ ('a\n' * 150000).splitlines()|length }}",
    "replace() #bytes": "{{ ('a' * 20000).encode().replace('a'.encode(), ('a' * 1000).encode())|length }}",
    "to_bytes()": "{{ (1).to_bytes(20000000, 'big')|length }}",
    "fromkeys()": "{{ {}.fromkeys(range(150000))|length }}",
    "|join": "{{ (['x'] * 1000)|join('y' * 20000)|length }}",
    "|join #attribute": "{{ ([{'a': 'x' * 20000}] * 1000)|join(attribute='a')|length }}",
    "|indent": "{{ ('a\n' * 1000)|indent(20000)|length }}",
    "|wordwrap": "{{ ('a ' * 1000)|wordwrap(1, wrapstring='x' * 20000)|length }}",
    "|batch": "{{ [1]|batch(2000000, 0)|list|length }}",
    "|slice": "{{ [1]|slice(2000000)|list|length }}",
    "|list": "{{ ('a' * 200000)|list|length }}",
    "|sort": "{{ ('a' * 200000)|sort|length }}",
    "|sum": "{{ ([[1] * 1000] * 2000)|sum(start=[])|length }}",
    "|string": "{{ (['x' * 1000] * 20000)|string|length }}",
    "|tojson": "{{ ([[1] * 1000] * 100)|tojson(indent=200)|length }}",
    "|pprint": "{{ (['x' * 1000] * 20000)|pprint|length }}",
    "|urlencode": "{{ ({'a': 'x' * 1000000} if false else ['x' * 1000] * 20000)|urlencode|length }}",
    "|escape": "{{ ('<' * 1000000)|escape|length }}",
    "|urlize": "{{ ('a.com ' * 1000)|urlize(target='x' * 20000)|length }}",
    "|upper": "{{ ('\u0390' * 800000)|upper|length }}",
    "lipsum()": "{{ lipsum(20000)|length }}",
    "rendering a value": "{% set a = ['x' * 1000] * 1000 %}{{ [a] * 100 }}",
    "a block's output": "{% set s = 'x' * 500000 %}{% set b %}{% for i in range(40) %}{{ s }}{% endfor %}{% endset %}",
    "a block's output #macro": "{% macro m(s) %}{% for i in range(40) %}{{ s }}{% endfor %}{% endmacro %}{{ m('x' * 500000)|length }}",
    "large strings": "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + ['x' * 500000 ~ i] %}{% endfor %}",
    "large lists": "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + [[i] * 70000] %}{% endfor %}",
}


@pytest.fixture
def small_bounds(monkeypatch):
    """The README's bounds scaled down 16x, so that each case costs little even where unchecked."""
    monkeypatch.setattr(limits, "MAX_RENDER_CHARS", 1 << 20)
    monkeypatch.setattr(limits, "MAX_ITEMS", 100_000)
    monkeypatch.setattr(limits, "LARGE_CHARS", 1 << 16)
    monkeypatch.setattr(limits, "HELD_CHARS", 4 << 20)
    monkeypatch.setattr(limits, "LARGE_ITEMS", 1 << 12)
    monkeypatch.setattr(limits, "HELD_ITEMS", 250_000)


@pytest.mark.parametrize("op", list(CASES))
def test_every_large_operation_is_refused_before_it_allocates(small_bounds, op):
    text = CASES[op] + "{% for m in messages %}{{ m.content }}{% endfor %}"
    renderer = Renderer(make_template("/models/x/chat.jinja", text), {})  # compiles: nothing runs yet
    tracemalloc.start()
    try:
        with pytest.raises(limits.TemplateBudgetError) as e:
            renderer.render([{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert msg.startswith(op.split(" #")[0]) or f": {op.split(' #')[0]}" in msg, msg
    assert "fix the template" in msg and "\n" not in msg
    assert any(f"{b:,}" in msg for b in (1 << 20, 100_000, 4 << 20, 250_000)), msg  # names the bound
    assert peak < 24 << 20, (op, peak)  # refused before the result (20M+) was built


def test_the_cli_error_names_template_row_operation_and_bound(tmp_path):
    """S31-8's own template, through `pack`: exit 2, one line, packtool's error type."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    from conftest import GPT2
    data = tmp_path / "chats.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    (tmp_path / "repl.jinja").write_text(
        "{% set s = 'ab'|replace('a', 'a'*1000)|replace('a','a'*1000)|replace('a','a'*1000) %}{{ s|length }}"
        "{% for m in messages %}{{ m.content }}{% endfor %}")
    r = CliRunner().invoke(app, ["pack", str(data), "--tokenizer", GPT2, "--chat-template",
                                 str(tmp_path / "repl.jinja"), "-C", "1024", "-o", str(tmp_path / "out")])
    text = r.stdout + r.stderr
    assert r.exit_code == 2, text
    assert "Traceback" not in text
    line = [x for x in text.splitlines() if "error" in x.lower()]
    assert len(line) == 1, text
    for needle in ("repl.jinja", "chats.jsonl", "row 0", "|replace", "1,000,000,001 characters", "16,777,216"):
        assert needle in line[0], text


def _conversations():
    with gzip.open(TASKMASTER, "rt") as f:
        rows = [json.loads(x) for x in f][:25]
    chats = [[normalize_message(m, TASKMASTER, i, f"messages[{j}]") for j, m in enumerate(r["messages"])]
             for i, r in enumerate(rows)]
    with open(SHAREGPT) as f:
        chats += [sharegpt_to_messages(r["conversations"], SHAREGPT, i) for i, r in enumerate(json.load(f)[:25])]
    return chats


def _templates():
    with open(f"{MISTRAL_DIR}/tokenizer_config.json") as f:
        folder = json.load(f)["chat_template"]
    return {**BUILTIN, "mistral-7b-v0.1 folder": folder}


@pytest.mark.parametrize("name", list(_templates()))
def test_legitimate_templates_render_as_in_jinjas_sandbox(name):
    """Built-ins (compiled untrusted here) and a real model folder's template: the size hooks
    change nothing about the text."""
    text = _templates()[name]
    envs = [cls(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
            for cls in (jinja2.sandbox.ImmutableSandboxedEnvironment, Sandbox)]
    for env in envs:
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
    plain, sized = [e.from_string(text) for e in envs]
    special = {"bos_token": "<s>", "eos_token": "</s>"}
    rendered = 0
    for chat in _conversations():
        for gen in (False, True):
            try:
                want = plain.render(messages=chat, add_generation_prompt=gen, **special)
            except jinja2.TemplateError:  # the template's own rule (mistral: roles alternate)
                with pytest.raises(jinja2.TemplateError):
                    sized.render(messages=chat, add_generation_prompt=gen, **special)
                continue
            with limits.rendering():
                assert sized.render(messages=chat, add_generation_prompt=gen, **special) == want
            rendered += 1
    assert rendered >= 20
