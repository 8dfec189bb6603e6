"""S46A-7: a chat template file saved with a UTF-8 BOM (Notepad, PowerShell's Out-File) rendered the
BOM into every conversation (two junk tokens, and a second BOS: the text no longer starts with it),
rc 0, no note. Every door a template file comes in by (--chat-template FILE.jinja, a
tokenizer_config.json given to --chat-template, a model folder's chat_template.jinja and its
additional_chat_templates/*.jinja) now refuses it in one line naming the file, through the library
and the CLI (templates.read_template_file, their one reader)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app
from packtool.tokenize import TokenizeConfig

runner = CliRunner()
BOM = b"\xef\xbb\xbf"
TMPL = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {% if m.role == 'assistant' %}{% generation %}"
        "{{ m.content }}{{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")


def _model(tmp_path, rel: str | None) -> str:
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}))
    if rel:
        os.makedirs(os.path.dirname(d / rel), exist_ok=True)
        (d / rel).write_bytes(BOM + TMPL.encode())
    return str(d)


DOORS = {  # door -> (tokenizer, --chat-template, the file the refusal names), made in tmp_path
    "--chat-template FILE.jinja": lambda t: (GPT2, _file(t / "t.jinja", TMPL.encode()), "t.jinja"),
    "--chat-template tokenizer_config.json": lambda t: (
        GPT2, _file(t / "tokenizer_config.json", json.dumps({"chat_template": TMPL}).encode()),
        "tokenizer_config.json"),
    "model folder chat_template.jinja": lambda t: (_model(t, "chat_template.jinja"), None, "chat_template.jinja"),
    "model folder additional_chat_templates": lambda t: (
        _model(t, "additional_chat_templates/default.jinja"), None, "default.jinja"),
}


def _file(path, data: bytes) -> str:
    path.write_bytes(BOM + data)
    return str(path)


def _rows(tmp_path) -> str:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
                 + "\n")
    return str(p)


@pytest.mark.parametrize("door", DOORS)
def test_cli_refuses_a_template_file_opened_by_a_bom(tmp_path, door):
    tok, tmpl, name = DOORS[door](tmp_path)
    args = ["pack", _rows(tmp_path), "--tokenizer", tok, "-C", "64", "--dry-run", "-q",
            "--cache-dir", str(tmp_path / "c")] + (["--chat-template", tmpl] if tmpl else [])
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in r.output, r.output
    assert name in line and "byte order mark" in line and "save it without one" in line, line


@pytest.mark.parametrize("door", DOORS)
def test_library_refuses_a_template_file_opened_by_a_bom(tmp_path, door):
    tok, tmpl, name = DOORS[door](tmp_path)
    with pytest.raises(packtool.PacktoolError, match="byte order mark") as e:
        packtool.pack([_rows(tmp_path)], tokenize=TokenizeConfig(tokenizer=tok, chat_template=tmpl), dry_run=True,
                      cache_dir=str(tmp_path / "c"))
    assert name in str(e.value), str(e.value)


def test_the_same_template_without_a_bom_packs(tmp_path):
    p = tmp_path / "t.jinja"
    p.write_text(TMPL)
    res = packtool.pack([_rows(tmp_path)], tokenize=TokenizeConfig(tokenizer=GPT2, chat_template=str(p)),
                        dry_run=True, cache_dir=str(tmp_path / "c"))
    assert res.summary.sequences == 1
