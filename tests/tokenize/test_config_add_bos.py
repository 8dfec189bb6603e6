"""S45A-2: tokenizer_config.json's add_bos_token decides whether rows get a BOS when add_bos is not
given: false (GPT-NeoX/Pythia, OLMo, GPT-2-style configs that name a bos_token) adds none, as the
model's own tokenizer adds none; true or absent keeps the default (BOS when the tokenizer has one).
--bos/--no-bos (add_bos=) given wins. Every row kind that gets a default BOS (text, untemplated
prompt/completion, templated chat), from the command line and the library; the manifest names what
was done (input.tokenize.add_bos false), so verify --source agrees and --no-bos shares the cache."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

BOS = 50256  # gpt2's <|endoftext|>, named bos_token by the configs below
ROWS = {"text": ({"text": "Hello world"}, None, 15496),
        "prompt_completion": ({"prompt": "Hello", "completion": " world"}, None, 15496),
        "chat": ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
                 "chatml", 27)}  # "<" of <|im_start|>, plain text to gpt2
# name -> (add_bos_token in the config (absent: ...), add_bos given, the post_processor adds BOS, BOS wanted)
CONFIGS = {"false": (False, None, False, False), "true": (True, None, False, True),
           "absent": (..., None, False, True), "false, --bos": (False, True, False, True),
           "true, --no-bos": (True, False, False, False),
           "false, post_processor adds BOS": (False, None, True, False)}


def _folder(tmp_path, add_bos_token, pp: bool) -> str:
    d = tmp_path / "tok"
    d.mkdir()
    if pp:  # a TemplateProcessing that puts BOS before each text, as Llama's tokenizer.json does
        tok = json.load(open(GPT2))
        tok["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                            {"Sequence": {"id": "A", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                                 "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [BOS],
                                                                      "tokens": ["<|endoftext|>"]}}}
        (d / "tokenizer.json").write_text(json.dumps(tok))
    else:
        shutil.copy(GPT2, d / "tokenizer.json")
    conf = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    if add_bos_token is not ...:
        conf["add_bos_token"] = add_bos_token
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    return str(d)


def _first_ids(out: str) -> list[int]:
    return pq.read_table(out, columns=["input_ids"]).column("input_ids")[0].as_py()[:2]


@pytest.mark.parametrize("place", ["cli", "library"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", ROWS)
def test_add_bos_token_decides_the_default_bos(tmp_path, kind, config, place):
    row, template, first = ROWS[kind]
    add_bos_token, given, pp, want = CONFIGS[config]
    folder = _folder(tmp_path, add_bos_token, pp)
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(row) + "\n")
    out, cache = str(tmp_path / "o"), str(tmp_path / "c")
    if place == "library":
        pack([str(src)], Alignment(capacity=64), PackingConfig(),
             TokenizeConfig(tokenizer=folder, chat_template=template, add_bos=given), out, cache_dir=cache,
             progress=False)
    else:
        flags = ([] if given is None else ["--bos" if given else "--no-bos"]) + \
                (["--chat-template", template] if template else [])
        r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", folder, "-C", "64", "-o", out,
                                     "--cache-dir", cache, "-q", *flags])
        assert r.exit_code == 0, r.output
        said = "add_bos_token is false, while tokenizer.json's post_processor adds <|endoftext|>"
        assert (said in r.stderr) == (pp and given is None), r.stderr
        if pp and given is None:
            assert "pass --bos to add it" in r.stderr
        v = CliRunner().invoke(app, ["verify", out, "--source", str(src), "--tokenizer", folder,
                                     "--cache-dir", cache, "-q"])
        assert v.exit_code == 0, v.output
    assert _first_ids(out) == ([BOS, first] if want else [first, _first_ids(out)[1]])
    assert (_first_ids(out)[0] == BOS) == want
    man = json.load(open(os.path.join(out, ".manifest.json")))
    assert man["input"]["tokenize"]["add_bos"] == (False if add_bos_token is False and given is None else given)


def test_config_false_shares_the_cache_of_no_bos(tmp_path):
    """The key holds add_bos false as --no-bos does (the same tokens): not the key of the
    default, under which an older packtool cached rows with a BOS."""
    from packtool.tokenize.hf_input import resolve_sources
    from packtool.tokenize.pipeline import tokenize_to_cache
    folder = _folder(tmp_path, False, False)
    src = tmp_path / "t.jsonl"
    src.write_text('{"text": "Hello world"}\n')
    cd = str(tmp_path / "c")
    first = tokenize_to_cache(resolve_sources([str(src)]), TokenizeConfig(tokenizer=folder), cd, progress=False)
    flag = tokenize_to_cache(resolve_sources([str(src)]), TokenizeConfig(tokenizer=folder, add_bos=False), cd,
                             progress=False)
    assert flag.reused and flag.fingerprint == first.fingerprint
    assert first.meta["config"]["add_bos"] is False
