"""Where a chat template comes from, read as transformers reads it (issue 23, S34-2/4/10, S34-8):
named template sets (`default` for every row, `tool_use` for rows with tools, a row without
tools refused where there is no `default`), a model folder's chat_template.jinja (wins over
tokenizer_config.json), a tokenizer_config.json given to --chat-template (its chat_template key,
never its JSON text), and jinja comments, which render no row key."""
from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import jinja2
import pytest
from conftest import GPT2

from packtool.errors import PacktoolInputError
from packtool.tokenize.chat_keys import KeyUse
from packtool.tokenize.encode import load_tokenizer
from packtool.tokenize.templates import Renderer, load_template, make_template

D = "{% for m in messages %}<D|{{ m.role }}>{{ m.content }}{% endfor %}"
T = "TOOLS{{ tools | tojson }}{% for m in messages %}<T|{{ m.role }}>{{ m.content }}{% endfor %}"
OLD = "{% for m in messages %}<OLD|{{ m.role }}>{{ m.content }}{% endfor %}"
MSGS = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
TOOLS = [{"type": "function", "function": {"name": "TOOLDEF"}}]
CFG = SimpleNamespace(bos_token=None, eos_token=None, pad_token=None)


def _folder(tmp_path, config: dict, files: dict[str, str] = {}) -> str:
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", **config}))
    for name, text in files.items():
        os.makedirs(os.path.dirname(d / name), exist_ok=True)
        (d / name).write_text(text)
    return str(d)


def _template(folder: str, spec: str | None):
    return load_template(spec, load_tokenizer(folder, CFG).folder_template)


NAMED = [{"name": "default", "template": D}, {"name": "tool_use", "template": T}]
SOURCES = {  # every way a named set reaches packtool: (tokenizer_config, files, --chat-template)
    "config list": ({"chat_template": NAMED}, {}, None),
    "jinja + additional_chat_templates": ({"chat_template": OLD}, {
        "chat_template.jinja": D, "additional_chat_templates/tool_use.jinja": T}, None),
    "--chat-template tokenizer_config.json": ({"chat_template": NAMED}, {}, "tokenizer_config.json"),
}


@pytest.mark.parametrize("config,files,spec", SOURCES.values(), ids=list(SOURCES))
def test_named_set_picks_tool_use_for_rows_with_tools(tmp_path, config, files, spec):
    folder = _folder(tmp_path, config, files)
    t = _template(folder, os.path.join(folder, spec) if spec else None)
    r = Renderer(t, {})
    assert r.render(MSGS, (), {"tools": TOOLS})[0].startswith('TOOLS[{"type": "function"')
    assert r.render(MSGS)[0] == "<D|user>Q<D|assistant>A"
    assert KeyUse(t).renders("tools")  # the set's tool_use renders them: no false note


NO_DEFAULT = [{"name": "rag", "template": D}, {"name": "tool_use", "template": T}]
NO_DEFAULT_SOURCES = {
    "config list": ({"chat_template": NO_DEFAULT}, {}, None),
    "additional_chat_templates": ({"chat_template": OLD}, {
        "additional_chat_templates/rag.jinja": D, "additional_chat_templates/tool_use.jinja": T}, None),
    "--chat-template tokenizer_config.json": ({"chat_template": NO_DEFAULT}, {}, "tokenizer_config.json"),
}


@pytest.mark.parametrize("config,files,spec", NO_DEFAULT_SOURCES.values(), ids=list(NO_DEFAULT_SOURCES))
def test_named_set_without_default_renders_tool_rows_and_refuses_others(tmp_path, config, files, spec):
    """As transformers' get_chat_template: tool_use for a row with tools, no template for the
    others (S35-6); refused at that row, so a pack that renders no such row is not refused."""
    folder = _folder(tmp_path, config, files)
    r = Renderer(_template(folder, os.path.join(folder, spec) if spec else None), {})
    assert r.render(MSGS, (), {"tools": TOOLS})[0].startswith('TOOLS[{"type": "function"')
    with pytest.raises(jinja2.TemplateError, match=r"named templates \(rag, tool_use\) and no `default`") as e:
        r.render(MSGS)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("source", ["folder", "--chat-template"])
@pytest.mark.parametrize("config,match", [
    ({"chat_template": [{"name": "default"}]}, "neither a template string nor a list"),
    ({"chat_template": None, "eos_token": "x"}, "no chat_template key"),
])
def test_unusable_config_refused_in_one_line(tmp_path, source, config, match):
    folder = _folder(tmp_path, config)
    if source == "folder" and config["chat_template"] is None:
        assert _template(folder, None) is None  # a folder without a template: none, as before
        return
    spec = os.path.join(folder, "tokenizer_config.json") if source == "--chat-template" else None
    with pytest.raises(PacktoolInputError, match=match) as e:
        _template(folder, spec)
    assert "\n" not in str(e.value) and ("tokenizer_config.json" in str(e.value))


@pytest.mark.parametrize("config", [{}, {"chat_template": OLD}])
def test_folder_chat_template_jinja_is_read_and_wins(tmp_path, config):
    t = _template(_folder(tmp_path, config, {"chat_template.jinja": D}), None)
    assert t.name == "chat_template.jinja" and Renderer(t, {}).render(MSGS)[0] == "<D|user>Q<D|assistant>A"


@pytest.mark.parametrize("text", ['[{"name": "default", "template": "x"}]', '{"messages": []}'])
def test_chat_template_flag_on_other_json_refused(tmp_path, text):
    (tmp_path / "t.json").write_text(text)
    with pytest.raises(PacktoolInputError, match="JSON file with no chat_template key, not a template"):
        load_template(str(tmp_path / "t.json"), None)


def test_chat_template_flag_on_config_renders_its_template_not_json(tmp_path):
    folder = _folder(tmp_path, {"chat_template": D})
    t = _template(folder, os.path.join(folder, "tokenizer_config.json"))
    assert Renderer(t, {}).render(MSGS)[0] == "<D|user>Q<D|assistant>A"


@pytest.mark.parametrize("comment", ["{# ignores tools #}", "{#- this template ignores\ntools -#}"])
def test_key_named_only_in_a_comment_is_not_rendered(comment):
    assert not KeyUse(make_template("x.jinja", comment + D)).renders("tools")
    assert KeyUse(make_template("x.jinja", comment + T)).renders("tools")
