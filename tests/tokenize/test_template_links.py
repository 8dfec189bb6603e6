"""A chat template that is a link to nothing (a Hub cache snapshot copied without -L), at every
door a template comes in by (S48A-12, RA-9): `--chat-template FILE` said "neither a built-in ...
nor a file" (`ls` shows the name); a tokenizer folder's additional_chat_templates that is itself
a link to nothing said "chat rows need a chat template ... a folder that has one", or, beside a
chat_template.jinja, was dropped without a word (rows with tools rendered by the one template
left). And a folder's chat_template.jinja link to nothing refused runs no template renders: text
or pre-tokenized rows, or rows given their own --chat-template. One rule (folder_templates:
refuse_gone; folder_files.link_to_nothing's words): the link is named, where it points, where
the folder's templates would render the rows; elsewhere the run reads on."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.tokenize.config import TokenizeConfig

runner = CliRunner()
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"

# the link to nothing -> (the folder's entry that is the link, a chat_template.jinja beside it)
GONE = {
    "chat_template.jinja": ("chat_template.jinja", False),
    "additional_chat_templates/tool_use.jinja": ("additional_chat_templates/tool_use.jinja", False),
    "additional_chat_templates/tool_use.jinja beside a template": ("additional_chat_templates/tool_use.jinja", True),
    "additional_chat_templates (the folder)": ("additional_chat_templates", False),
    "additional_chat_templates (the folder) beside a template": ("additional_chat_templates", True),
}
# rows -> whether the folder's template renders them (no --chat-template given)
ROWS = {
    "chat": ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, True),
    "prompt_completion": ({"prompt": "hi", "completion": "yo"}, True),
    "text": ({"text": "Hello world"}, False),
    "tokens": ({"input_ids": [1, 2, 3]}, False),
}


def _folder(tmp_path, gone: str) -> tuple[str, str]:
    entry, beside = GONE[gone]
    d = tmp_path / "snap"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    if beside:
        (d / "chat_template.jinja").write_text(TEMPLATE)
    if "/" in entry:
        (d / os.path.dirname(entry)).mkdir()
    os.symlink("../" * entry.count("/") + "../blobs/4f2a9e", d / entry)
    return str(d), os.path.join("snap", entry)


def _data(tmp_path, rows: str) -> str:
    p = tmp_path / "rows.jsonl"
    p.write_text(json.dumps(ROWS[rows][0]) + "\n")
    return str(p)


def _cli(tmp_path, data, tok, template):
    r = runner.invoke(app, ["--json", "pack", data, "--tokenizer", tok, "-C", "1024", "--dry-run", "-q",
                            "--cache-dir", str(tmp_path / "c"), *(["--chat-template", template] if template else [])])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert "Traceback" not in r.output and r.exit_code in (0, 2), r.output
    return None if r.exit_code == 0 else d["error"]["message"]


def _library(tmp_path, data, tok, template):
    try:
        pack([data], tokenize=TokenizeConfig(tokenizer=tok, chat_template=template), dry_run=True,
             cache_dir=str(tmp_path / "c"))
    except PacktoolInputError as e:
        return str(e)
    return None


DOORS = {"cli pack": _cli, "library pack": _library}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("template", [None, "chatml"])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("gone", GONE)
def test_a_template_link_to_nothing_is_refused_where_the_folder_renders_the_rows(tmp_path, gone, rows, template,
                                                                                   door):
    tok, link = _folder(tmp_path, gone)
    said = DOORS[door](tmp_path, _data(tmp_path, rows), tok, template)
    if ROWS[rows][1] and template is None:
        assert said is not None and link in said and "link to nothing" in said and "blobs/4f2a9e" in said, said
        assert "need a chat template" not in said, said
    else:
        assert said is None, said


@pytest.mark.parametrize("door", DOORS)
def test_a_chat_template_file_that_is_a_link_to_nothing_is_said_so(tmp_path, door):
    os.symlink("nowhere", tmp_path / "t.jinja")
    said = DOORS[door](tmp_path, _data(tmp_path, "chat"), GPT2, str(tmp_path / "t.jinja"))
    assert said is not None and "t.jinja" in said and "link to nothing (nowhere)" in said, said
    assert "neither a built-in" not in said and "\n" not in said, said


# RA-14: a template entry that is a FIFO (or device) is unreadable as a link to nothing is, and was
# refused for every run (text rows too): one rule, refused only where the folder's templates render
@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("template", [None, "chatml"])
@pytest.mark.parametrize("rows", ["chat", "text"])
@pytest.mark.parametrize("entry", ["chat_template.jinja", "additional_chat_templates/tool_use.jinja"])
def test_a_template_fifo_is_refused_where_a_link_to_nothing_is(tmp_path, entry, rows, template, door):
    d = tmp_path / "snap"
    (d / "additional_chat_templates").mkdir(parents=True)
    shutil.copy(GPT2, d / "tokenizer.json")
    os.mkfifo(d / entry)
    said = DOORS[door](tmp_path, _data(tmp_path, rows), str(d), template)
    if ROWS[rows][1] and template is None:
        assert said is not None and os.path.join("snap", entry) in said and "FIFO" in said, said
    else:
        assert said is None, said
