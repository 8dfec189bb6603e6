"""S47A-13: a tokenizer folder's file that is a link to nothing (a Hub cache snapshot copied
without -L: its relative links into blobs/ lead nowhere) was taken for no file: a dangling
tokenizer_config.json dropped its add_bos_token, special tokens and chat template without a
word (the ids changed, rc 0), a dangling tokenizer.json said "no tokenizer.json in folder".
Every settings file packtool reads from the folder (tokenize/folder_files.file_present, the one
rule) is refused naming the link and where it points, at every door that loads a tokenizer; an
absent file is still absent. A template file's link to nothing is refused where the folder's
templates are used (test_template_links: RA-9)."""
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
from packtool.tokenize.encode import load_tokenizer

runner = CliRunner()

# the file a link to nothing stands in for -> the folder's other files (written whole)
FILES = {
    "tokenizer.json": {},
    "tokenizer_config.json": {},
    "special_tokens_map.json": {"tokenizer_config.json": {}},  # read: the config has no added_tokens_decoder
}


def _folder(tmp_path, dangling: str) -> str:
    d = tmp_path / "snap"
    (d / "additional_chat_templates").mkdir(parents=True)
    if dangling != "tokenizer.json":
        shutil.copy(GPT2, d / "tokenizer.json")
    for name, obj in FILES[dangling].items():
        (d / name).write_text(json.dumps(obj))
    os.symlink("../blobs/4f2a9e", d / dangling)
    return str(d)


def _data(tmp_path) -> str:
    p = tmp_path / "hw.jsonl"
    p.write_text(json.dumps({"text": "Hello world"}) + "\n")
    return str(p)


def _cli(tok, t):
    r = runner.invoke(app, ["pack", _data(t), "--tokenizer", tok, "-C", "1024", "--dry-run", "-q",
                            "--cache-dir", str(t / "c")])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def _library(tok, t):
    with pytest.raises(PacktoolInputError) as e:
        pack([_data(t)], tokenize=TokenizeConfig(tokenizer=tok), dry_run=True, cache_dir=str(t / "c"))
    return str(e.value)


def _load(tok, t):
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(tok, TokenizeConfig(tokenizer=tok))
    return str(e.value)


DOORS = {"cli pack": _cli, "library pack": _library, "load_tokenizer": _load}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("dangling", FILES)
def test_a_link_to_nothing_is_refused_naming_it(dangling, door, tmp_path):
    said = DOORS[door](_folder(tmp_path, dangling), tmp_path)
    assert os.path.join("snap", dangling) in said and "link to nothing" in said and "../blobs/4f2a9e" in said, said


@pytest.mark.parametrize("door", DOORS)
def test_a_dangling_tokenizer_file_given_itself(door, tmp_path):
    os.symlink("blobs/gone", tmp_path / "tok.json")
    said = DOORS[door](str(tmp_path / "tok.json"), tmp_path)
    assert "tok.json" in said and "link to nothing" in said and "blobs/gone" in said, said


def test_an_absent_file_is_still_absent(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    os.mkdir(d / "additional_chat_templates")  # a folder without templates: none read, as transformers
    loaded = load_tokenizer(str(d), TokenizeConfig(tokenizer=str(d)))
    assert loaded.folder_template is None and loaded.switches.path is None
