"""S45A-3: every value packtool takes from a tokenizer folder's tokenizer_config.json has a type;
a value of another type (a special token given as a list, a number, a boolean, an object whose
"content" is not a string; a switch given as a string) is one line naming the file and the key,
exit 2, at every place that loads a tokenizer (pack, pack --dry-run, verify --source, the
library): never "internal error ... unhashable type", never a truthy string read as true."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app
from tokenizer_support import refused_loading

TOKENS = ("bos_token", "eos_token", "pad_token")
BAD_TOKENS = {"list": ["<|endoftext|>"], "object of a list": {"content": ["<|endoftext|>"]},
              "number": 5, "float": 1.5, "true": True, "object without content": {"special": True}}
SWITCHES = ("add_bos_token", "add_eos_token")
BAD_SWITCHES = {"string": "false", "number": 0, "list": [False], "object": {"value": False}}
CASES = [(k, v, "a token string") for k in TOKENS for v in BAD_TOKENS] + \
        [(k, v, "true or false") for k in SWITCHES for v in BAD_SWITCHES]
PLACES = ("library", "pack", "pack --dry-run", "verify --source")


def _value(key: str, name: str):
    return (BAD_TOKENS if key in TOKENS else BAD_SWITCHES)[name]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """An output packed with a good tokenizer, for verify --source to re-read with a bad one."""
    d = tmp_path_factory.mktemp("packed")
    src = d / "t.jsonl"
    src.write_text('{"text": "hello world"}\n')
    r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", GPT2, "-C", "64", "-o", str(d / "o"),
                                 "--cache-dir", str(d / "c"), "-q"])
    assert r.exit_code == 0, r.output
    return str(src), str(d / "o")


def _folder(tmp_path, config: dict) -> str:
    """A small word-level tokenizer (it loads in milliseconds, as the value is checked after the load)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    d = tmp_path / "tok"
    d.mkdir()
    tok = Tokenizer(models.WordLevel({"<|endoftext|>": 0, "hello": 1, "world": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return str(d)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("key,name,want", CASES)
def test_config_value_of_another_type_is_named(tmp_path, packed, key, name, want, place):
    folder = _folder(tmp_path, {key: _value(key, name)})
    conf = os.path.join(folder, "tokenizer_config.json")
    if place == "library":
        err = refused_loading(folder)
        assert err.path == conf
        msg = str(err)
    else:
        src, out = packed
        cmd = {"pack": ["pack", src, "-o", str(tmp_path / "o"), "-C", "64"],
               "pack --dry-run": ["pack", src, "-o", str(tmp_path / "o"), "-C", "64", "--dry-run"],
               "verify --source": ["verify", out, "--source", src]}[place]
        r = CliRunner().invoke(app, [*cmd, "--tokenizer", folder, "--cache-dir", str(tmp_path / "c"), "--json"])
        assert r.exit_code == 2, r.output
        err = json.loads(r.output.strip().splitlines()[-1])["error"]
        assert err["kind"] == "input" and err["path"] == conf and err["flag"] == "--tokenizer", err
        msg = err["message"]
        assert "\n" not in msg and "internal" not in msg
    assert msg.startswith(f"{conf}: {key}")
    assert f"not {want}" in msg and "remove the key" in msg
