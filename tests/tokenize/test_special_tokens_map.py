"""S46A-12: a tokenizer folder's special_tokens_map.json was never read: a folder naming its EOS
only there (how transformers before 4.34 saved special tokens: a ChatML fine-tune's <|im_end|>)
got a well-known-name EOS (<|endoftext|>) in every text row and in templates' `eos_token`, one
the model never emits. It is read as transformers' from_pretrained reads it
(tokenize/tokenizer_config.FolderSpecials): where tokenizer_config.json has no
added_tokens_decoder, its bos/eos/pad replace the config's; where it has one (every newer save),
the map is not read. transformers' AutoTokenizer on the same folder is the oracle, over every
special token, every place a token can be named, both value forms; a value of another type is
refused naming the map and the key; the map read is in the cache key and the manifest; the ids
of CLI and library packs on both engines end with the map's EOS."""
from __future__ import annotations

import hashlib
import json
import os

import pyarrow.parquet as pq
import pytest
from conftest import GPT2, LOCAL_RAY_GROUP
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer
from tokenizer_support import refused_loading

transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
transformers.logging.set_verbosity_error()

ADDED = ["<|im_start|>", "<|im_end|>", "<|pad|>", "<|cfg|>"]  # ids 50257.. after gpt2's 50256
IM_END = 50258
KEYS = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>"}
# where the key is named -> (in tokenizer_config.json, in special_tokens_map.json, added_tokens_decoder)
WHERE = {"map only": (False, True, False), "both, an older save": (True, True, False),
         "both, a newer save (map unread)": (True, True, True), "config only": (True, False, False),
         "neither": (False, False, False)}
_ADDED = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
# how transformers saves an AddedToken: the config's with its "__type", the map's without
FORMS = {"string": lambda t, conf: t,
         "object": lambda t, conf: {**({"__type": "AddedToken"} if conf else {}), "content": t, **_ADDED}}


def _tokenizer_json(d) -> None:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(GPT2)
    tok.add_special_tokens(ADDED)
    tok.save(str(d / "tokenizer.json"))


def _folder(tmp_path, conf: dict | None, smap: dict | None, name="tok") -> str:
    d = tmp_path / name
    d.mkdir()
    _tokenizer_json(d)
    if conf is not None:
        (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer", **conf}))
    if smap is not None:
        (d / "special_tokens_map.json").write_text(json.dumps(smap))
    return str(d)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("key", KEYS)
def test_folder_special_tokens_are_transformers(tmp_path, key, where, form):
    in_conf, in_map, decoder = WHERE[where]
    conf = {"added_tokens_decoder": {}} if decoder else {}
    if in_conf:
        conf[key] = FORMS[form]("<|cfg|>", True)
    smap = {"unk_token": "<|endoftext|>", **({key: FORMS[form](KEYS[key], False)} if in_map else {})}
    folder = _folder(tmp_path, conf, smap)
    info = load_tokenizer(folder, TokenizeConfig(tokenizer=folder)).info
    oracle = getattr(transformers.AutoTokenizer.from_pretrained(folder), key)
    if where == "neither":  # packtool's own fallbacks (post_processor, well-known names): as without a map
        bare = _folder(tmp_path, {}, None, "bare")
        assert getattr(info, key) == getattr(load_tokenizer(bare, TokenizeConfig(tokenizer=bare)).info, key)
    else:
        assert getattr(info, key) == str(oracle), (key, where)
    smap_sha = hashlib.sha256(open(os.path.join(folder, "special_tokens_map.json"), "rb").read()).hexdigest()
    assert info.special_tokens_map_sha256 == (None if decoder else smap_sha)


def test_a_map_without_a_config_is_read(tmp_path):
    folder = _folder(tmp_path, None, {"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>"})
    info = load_tokenizer(folder, TokenizeConfig(tokenizer=folder)).info
    oracle = transformers.AutoTokenizer.from_pretrained(folder)
    assert (info.bos_token, info.eos_token) == (oracle.bos_token, oracle.eos_token) == ("<|im_start|>", "<|im_end|>")


BAD = {"list": ["<|im_end|>"], "object of a list": {"content": ["<|im_end|>"]}, "number": 5, "true": True,
       "object without content": {"special": True}}


@pytest.mark.parametrize("place", ["library", "pack"])
@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("key", KEYS)
def test_a_map_value_of_another_type_is_named(tmp_path, key, bad, place):
    folder = _folder(tmp_path, {}, {key: BAD[bad]})
    smap = os.path.join(folder, "special_tokens_map.json")
    if place == "library":
        err = refused_loading(folder)
        assert err.path == smap
        msg = str(err)
    else:
        src = tmp_path / "t.jsonl"
        src.write_text('{"text": "hello world"}\n')
        r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", folder, "-C", "64", "-o", str(tmp_path / "o"),
                                     "--cache-dir", str(tmp_path / "c"), "--json"])
        assert r.exit_code == 2, r.output
        err = json.loads(r.output.strip().splitlines()[-1])["error"]
        assert err["path"] == smap and err["flag"] == "--tokenizer", err
        msg = err["message"]
    assert msg.startswith(f"{smap}: {key}") and "not a token string" in msg and "\n" not in msg, msg


def test_a_map_token_not_in_the_vocabulary_names_the_map(tmp_path):
    folder = _folder(tmp_path, {}, {"eos_token": "<|not-there|>"})
    err = refused_loading(folder)
    assert err.path == os.path.join(folder, "special_tokens_map.json")
    assert "fix eos_token in special_tokens_map.json" in str(err)


# the map's bos_token (<|endoftext|>, 50256) is the folder's BOS: added by default, as one its
# tokenizer_config.json names (docs/TOKENIZATION.md; add_bos_token false or --no-bos drop it)
ROWS = {"text": ({"text": "Hello world"}, None, [50256, 15496, 995, IM_END]),
        "chat": ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
                 "eos", [50256, 5303, 8226, IM_END])}
EOS_TEMPLATE = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                "{{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
PLACES = ["cli local", pytest.param("cli ray", marks=LOCAL_RAY_GROUP), "library",
          pytest.param("library ray", marks=LOCAL_RAY_GROUP)]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ROWS)
def test_packed_rows_end_with_the_maps_eos(tmp_path, request, kind, place):
    """The finding's folder: the EOS named only in the map ends text rows and is the template's
    eos_token; the map's sha is in the manifest, verify --source agrees, and an edit of the map
    is a new cache key."""
    if "ray" in place:
        request.getfixturevalue("local_ray")
    folder = _folder(tmp_path, {"model_max_length": 1024},
                     {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"})
    row, template, want = ROWS[kind]
    if template:
        template = str(tmp_path / "eos.jinja")
        open(template, "w").write(EOS_TEMPLATE)
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(row) + "\n")
    out, cache = str(tmp_path / "o"), str(tmp_path / "c")
    if place.startswith("library"):
        fn = pack
        if place == "library ray":
            from packtool.engines import pack_ray as fn
        fn([str(src)], Alignment(capacity=64), PackingConfig(),
           TokenizeConfig(tokenizer=folder, chat_template=template), out, cache_dir=cache)
    else:
        r = CliRunner().invoke(app, ["pack", str(src), "--tokenizer", folder, "-C", "64", "-o", out, "--cache-dir",
                                     cache, "-q", "--engine", place.split()[-1]]
                               + (["--chat-template", template] if template else []))
        assert r.exit_code == 0, r.output
    ids = pq.read_table(out, columns=["input_ids"]).column("input_ids")[0].as_py()
    assert ids[:len(want)] == want
    man = json.load(open(os.path.join(out, ".manifest.json")))
    smap = os.path.join(folder, "special_tokens_map.json")
    assert man["tokenizer"]["eos_token"] == "<|im_end|>" and man["tokenizer"]["eos_id"] == IM_END
    assert man["tokenizer"]["special_tokens_map_sha256"] == hashlib.sha256(open(smap, "rb").read()).hexdigest()
    if place != "cli local":
        return
    flags = ["--tokenizer", folder, "--cache-dir", cache] + (["--chat-template", template] if template else [])
    v = CliRunner().invoke(app, ["verify", out, "--source", str(src), *flags, "-q"])
    assert v.exit_code == 0, v.output
    entries = set(os.listdir(cache))
    with open(smap, "a") as f:
        f.write("\n")  # the same tokens: the map's content alone keys the entry
    r = CliRunner().invoke(app, ["pack", str(src), "-C", "64", "-o", str(tmp_path / "o2"), "-q", *flags])
    assert r.exit_code == 0, r.output
    assert set(os.listdir(cache)) != entries
