"""S44-9: a special token (bos/eos/pad) that is not in the vocabulary is named where its value
came from: tokenizer_config.json (the file is the error's path; no flag on the command line, whose
`pack` has no --eos-token), `TokenizeConfig(eos_token=)` (the argument, library only), or the
tokenizer.json's own post_processor. Never a flag the command does not have."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer

KINDS = ("bos_token", "eos_token", "pad_token")
BAD = "<|not-there|>"


def _folder(tmp_path, config: dict | None, pp: str | None = None) -> str:
    d = tmp_path / "tok"
    d.mkdir()
    if pp is None:
        shutil.copy(GPT2, d / "tokenizer.json")
    else:  # a post_processor adding `pp` after each text, as a TemplateProcessing tokenizer does
        tok = json.load(open(GPT2))
        tok["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                            {"SpecialToken": {"id": pp, "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                                 "special_tokens": {pp: {"id": pp, "ids": [50256], "tokens": [pp]}}}
        (d / "tokenizer.json").write_text(json.dumps(tok))
    if config is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(config))
    return str(d)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("as_dict", [False, True], ids=["string", "AddedToken dict"])
def test_config_token_cli_names_the_config(tmp_path, kind, as_dict, monkeypatch):
    folder = _folder(tmp_path, {kind: {"content": BAD, "special": True} if as_dict else BAD})
    src = tmp_path / "t.jsonl"
    src.write_text('{"text": "hello world"}\n')
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "cache"))
    r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", folder, "-C", "64", "-o", str(tmp_path / "o"),
                                 "-q", "--json"])
    assert r.exit_code == 2, r.output
    err = json.loads(r.output.strip().splitlines()[-1])["error"]
    conf = os.path.join(folder, "tokenizer_config.json")
    assert err["path"] == conf
    assert err["flag"] in (None, "--tokenizer")
    msg = err["message"]
    assert msg.startswith(f"{conf}: {kind} '{BAD}' is not in the vocabulary of {os.path.join(folder, 'tokenizer.json')}")
    assert f"fix {kind} in tokenizer_config.json" in msg
    assert "--eos-token" not in msg and "--bos-token" not in msg and "--pad-token" not in msg
    assert f"{kind}=" not in msg  # the command line has no such argument


@pytest.mark.parametrize("kind", KINDS)
def test_config_token_library_names_the_config_and_the_argument(tmp_path, kind):
    folder = _folder(tmp_path, {kind: BAD})
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    conf = os.path.join(folder, "tokenizer_config.json")
    assert e.value.path == conf and e.value.flag is None
    assert f"fix {kind} in tokenizer_config.json" in str(e.value)
    assert f"or pass {kind}=" in str(e.value)  # the library can override it


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("with_config", [False, True], ids=["folder", "folder with a config"])
def test_argument_token_names_the_argument(tmp_path, kind, with_config):
    folder = _folder(tmp_path, {kind: "<|endoftext|>"} if with_config else None)
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder, **{kind: BAD}))
    assert e.value.flag is None
    assert e.value.path == os.path.join(folder, "tokenizer.json")
    assert f"{kind}='{BAD}' is not in the vocabulary" in str(e.value)
    assert "--" not in str(e.value)


def test_post_processor_token_names_the_tokenizer_json(tmp_path):
    folder = _folder(tmp_path, None, pp=BAD)
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    assert e.value.path == os.path.join(folder, "tokenizer.json")
    assert "post_processor" in str(e.value) and "--eos-token" not in str(e.value)
