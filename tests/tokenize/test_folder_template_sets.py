"""Stranger trial S35-6: a model folder's templates against transformers' own loading
(AutoTokenizer.from_pretrained + apply_chat_template, the oracle). packtool read
additional_chat_templates/ only beside chat_template.jinja, so a folder holding tool_use.jinja and a
tokenizer_config.json template rendered every row with the config's (transformers: the files replace
it), and a folder with only additional templates had none. Every layout of the three sources
(tokenizer_config.json's `chat_template`, chat_template.jinja, additional_chat_templates/*.jinja):
the same text for a row with tools and one without, or both refuse the row."""
from __future__ import annotations

import json
import os
import shutil
import warnings

import jinja2
import pytest
from conftest import GPT2

from packtool.tokenize.encode import load_tokenizer
from packtool.tokenize.templates import Renderer, load_template

transformers = pytest.importorskip("transformers", reason="the oracle needs transformers (test extra)")

CFG_T = "CFG{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
JIN_T = "JIN{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
DEF_T = "DEF{% for m in messages %}|{{ m.role }}|{{ m.content }}{% endfor %}"
TOOL_T = "TOOL{{ tools | length }}{% for m in messages %}({{ m.role }}){{ m.content }}{% endfor %}"
RAG_T = "RAG{% for m in messages %}{{ m.content }}{% endfor %}"
LIST = [{"name": "default", "template": "OLD"}, {"name": "tool_use", "template": TOOL_T},
        {"name": "default", "template": CFG_T}]  # a repeated name: the last wins
ADD = "additional_chat_templates/"

LAYOUTS = {  # name: (tokenizer_config chat_template, {file: text}); a None text makes a folder
    "config string": (CFG_T, {}),
    "config list": (LIST, {}),
    "jinja over config": (CFG_T, {"chat_template.jinja": JIN_T}),
    "additional tool_use replaces config (S35-6)": (CFG_T, {ADD + "tool_use.jinja": TOOL_T}),
    "additional tool_use alone": (None, {ADD + "tool_use.jinja": TOOL_T}),
    "jinja + additional over config list": (LIST, {"chat_template.jinja": JIN_T, ADD + "tool_use.jinja": TOOL_T,
                                                   ADD + "rag.jinja": RAG_T}),
    "additional default + tool_use": (CFG_T, {ADD + "default.jinja": DEF_T, ADD + "tool_use.jinja": TOOL_T}),
    "additional default over jinja": (None, {"chat_template.jinja": JIN_T, ADD + "default.jinja": DEF_T}),
    "additional default alone": (CFG_T, {ADD + "default.jinja": DEF_T}),
    "hidden .jinja is a template": (CFG_T, {ADD + ".jinja": RAG_T}),
    "a folder named .jinja is none": (CFG_T, {ADD + "sub.jinja": None, "chat_template.jinja": None}),
    "other suffixes are none": (CFG_T, {ADD + "tool_use.txt": TOOL_T, ADD + "tool_use.JINJA": TOOL_T}),
    "CRLF jinja": (None, {"chat_template.jinja": "A\r\nB{% for m in messages %}\r{{ m.content }}{% endfor %}"}),
}
ROWS = {
    "plain": ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], None),
    "tools": ([{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "sunny"}],
              [{"type": "function", "function": {"name": "w", "parameters": {}}}]),
}


def _folder(tmp_path, config, files: dict) -> str:
    d = tmp_path / "model"
    (d / ADD).mkdir(parents=True)
    shutil.copy(GPT2, d / "tokenizer.json")
    conf = {"eos_token": "<|endoftext|>"} | ({"chat_template": config} if config is not None else {})
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    for name, text in files.items():
        if text is None:
            os.makedirs(d / name)
        else:
            (d / name).write_bytes(text.encode())
    return str(d)


def _oracle(tok, messages, tools) -> str | None:
    try:
        return tok.apply_chat_template(messages, tools=tools, tokenize=False)
    except ValueError as e:  # a set without default, a folder without any template
        assert "chat template" in str(e), e
        return None


def _packtool(template, messages, tools) -> str | None:
    if template is None:
        return None
    try:
        return Renderer(template, {}).render(messages, (), {"tools": tools} if tools is not None else None)[0]
    except jinja2.TemplateError as e:
        assert "no `default`" in str(e) and "\n" not in str(e), e
        return None


class TokenizeCfg:
    bos_token = eos_token = pad_token = None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_folder_templates_render_as_transformers_loads_them(tmp_path, layout):
    folder = _folder(tmp_path, *LAYOUTS[layout])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oracle = transformers.AutoTokenizer.from_pretrained(folder)
    template = load_template(None, load_tokenizer(folder, TokenizeCfg).folder_template)
    for messages, tools in ROWS.values():  # one row with tools, one without
        assert _packtool(template, messages, tools) == _oracle(oracle, messages, tools)


def test_set_without_default_refuses_a_row_without_tools_naming_the_row(tmp_path, cache_dir):
    from packtool.errors import PacktoolInputError
    from packtool.tokenize import tokenize_to_cache
    from packtool.tokenize.config import TokenizeConfig
    folder = _folder(tmp_path, CFG_T, {ADD + "tool_use.jinja": TOOL_T})
    rows = tmp_path / "c.jsonl"
    rows.write_text("".join(json.dumps({"messages": m} | ({"tools": t} if t else {})) + "\n"
                            for m, t in (ROWS["tools"], ROWS["plain"])))
    with pytest.raises(PacktoolInputError, match=r"row 1: chat template additional_chat_templates failed: "
                                                 r".*named templates \(tool_use\) and no `default`") as e:
        tokenize_to_cache([str(rows)], TokenizeConfig(tokenizer=folder), cache_dir, progress=False)
    assert "\n" not in str(e.value)
