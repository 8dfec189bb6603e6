"""S47A-3: special tokens a tokenizer folder's JSON files add (tokenizer_config.json's
added_tokens_decoder, additional_special_tokens, extra_special_tokens; special_tokens_map.json's
additional_special_tokens where transformers reads the map) that tokenizer.json lacks were split
into ordinary pieces (every ChatML <|im_start|> 7 tokens), rc 0, no note, while the model's own
tokenizer (transformers' from_pretrained, the oracle here) adds them with ids of their own. Such a
folder is refused in one line naming the file, the key and the tokens, with the fix that works
(save the tokenizer again with transformers' save_pretrained); so is an added_tokens_decoder id
that disagrees with tokenizer.json's. A folder whose files agree packs as before."""
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

CHATML = ["<|im_start|>", "<|im_end|>"]


def _added(t: str) -> dict:
    return {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
            "single_word": False}


# where a folder adds tokens -> (tokenizer_config.json's keys, special_tokens_map.json or None, the file named, key)
WHERE = {
    "added_tokens_decoder": ({"added_tokens_decoder": {"50256": _added("<|endoftext|>"), "50257": _added(CHATML[0]),
                                                       "50258": _added(CHATML[1])}}, None, "tokenizer_config.json",
                             "added_tokens_decoder"),
    "additional_special_tokens (config)": ({"additional_special_tokens": CHATML}, None, "tokenizer_config.json",
                                           "additional_special_tokens"),
    "additional_special_tokens (map, an older save)": ({}, {"eos_token": "<|endoftext|>",
                                                            "additional_special_tokens": CHATML},
                                                       "special_tokens_map.json", "additional_special_tokens"),
    "extra_special_tokens (list)": ({"extra_special_tokens": CHATML}, None, "tokenizer_config.json",
                                    "extra_special_tokens"),
    "extra_special_tokens (object)": ({"extra_special_tokens": {"im_start": CHATML[0], "im_end": CHATML[1]}}, None,
                                      "tokenizer_config.json", "extra_special_tokens"),
    # RA-7: a save before 4.34 (no added_tokens_decoder): transformers adds the file's tokens with their ids
    "added_tokens.json (an older save)": ({}, None, "added_tokens.json", "added_tokens.json"),
}
# the folder's added_tokens.json, where it has one
ADDED_FILE = {"added_tokens.json (an older save)": {CHATML[0]: 50257, CHATML[1]: 50258}}


def _folder(tmp_path, conf: dict, smap: dict | None, name: str = "tok", added: dict | None = None) -> str:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False,
                                                         **conf}))
    if smap is not None:
        (d / "special_tokens_map.json").write_text(json.dumps(smap))
    if added is not None:
        (d / "added_tokens.json").write_text(json.dumps(added))
    return str(d)


def _pack(tmp_path, folder, *extra):
    src = tmp_path / "t.jsonl"
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]} \
        if "--chat-template" in extra else {"text": "<|im_start|>user hi<|im_end|>"}
    src.write_text(json.dumps(row) + "\n")
    return CliRunner().invoke(app, ["pack", str(src), "--tokenizer", folder, "-C", "1024", "-o", str(tmp_path / "o"),
                                    "--cache-dir", str(tmp_path / "c"), "--json", *extra])


PLACES = {"library": None, "pack (text)": [], "pack --chat-template chatml": ["--chat-template", "chatml"]}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("where", WHERE)
def test_tokens_the_folder_adds_and_tokenizer_json_lacks_are_refused(tmp_path, where, place):
    conf, smap, named, key = WHERE[where]
    folder = _folder(tmp_path, conf, smap, added=ADDED_FILE.get(where))
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
    transformers.logging.set_verbosity_error()
    oracle = transformers.AutoTokenizer.from_pretrained(folder)
    assert oracle.convert_tokens_to_ids(CHATML) == [50257, 50258]  # the model's tokenizer adds them
    path = os.path.join(folder, named)
    if PLACES[place] is None:
        with pytest.raises(PacktoolInputError) as e:
            load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
        err = {"path": e.value.path, "flag": e.value.flag, "message": str(e.value)}
    else:
        r = _pack(tmp_path, folder, *PLACES[place])
        assert r.exit_code == 2, r.output
        err = json.loads(r.output.strip().splitlines()[-1])["error"]
        assert err["flag"] == "--tokenizer", err
        assert not os.path.exists(tmp_path / "o")
    msg = err["message"]
    assert err["path"] == path and msg.startswith(f"{path}: {key} names "), msg
    assert all(t in msg for t in CHATML) and "save_pretrained" in msg and "\n" not in msg, msg
    assert "<|endoftext|>" not in msg, msg  # the entry tokenizer.json has is not named


def test_an_added_tokens_decoder_id_that_disagrees_is_refused(tmp_path):
    folder = _folder(tmp_path, {"added_tokens_decoder": {"50000": _added("<|endoftext|>")}}, None)
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    msg = str(e.value)
    assert e.value.path == os.path.join(folder, "tokenizer_config.json"), msg
    assert "added_tokens_decoder" in msg and "50000" in msg and "50256" in msg and "save_pretrained" in msg, msg


def test_the_map_is_not_read_where_the_config_has_added_tokens_decoder(tmp_path):
    """As transformers: a newer save's map (its additional_special_tokens too) is not read."""
    folder = _folder(tmp_path, {"added_tokens_decoder": {"50256": _added("<|endoftext|>")}},
                     {"additional_special_tokens": CHATML})
    assert load_tokenizer(folder, TokenizeConfig(tokenizer=folder)).info.vocab_size == 50257


@pytest.mark.parametrize("bad", [["<|im_start|>", 3], "<|im_start|>", 5])
@pytest.mark.parametrize("key", ["additional_special_tokens", "extra_special_tokens"])
def test_a_list_of_another_type_is_named(tmp_path, key, bad):
    folder = _folder(tmp_path, {key: bad}, None)
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    assert str(e.value).startswith(os.path.join(folder, "tokenizer_config.json") + f": {key}"), str(e.value)


@pytest.mark.parametrize("bad", [[1, 2], {"x": _added("a")}, {"50257": 3}, {"50257": {"special": True}}])
def test_an_added_tokens_decoder_of_another_shape_is_named(tmp_path, bad):
    folder = _folder(tmp_path, {"added_tokens_decoder": bad}, None)
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    assert "added_tokens_decoder" in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_folder_whose_files_agree_packs_as_before(tmp_path):
    folder = _folder(tmp_path, {"added_tokens_decoder": {"50256": _added("<|endoftext|>")},
                                "additional_special_tokens": ["<|endoftext|>"]}, None)
    r = _pack(tmp_path, folder)
    assert r.exit_code == 0, r.output


class _CountingVocab(dict):
    """A vocabulary that counts the lookups made in it."""

    looked = 0

    def __contains__(self, t):
        type(self).looked += 1
        return super().__contains__(t)

    def __getitem__(self, t):
        type(self).looked += 1
        return super().__getitem__(t)


@pytest.mark.parametrize("lacking", [None, "the second key's last token"])
def test_the_check_is_linear_in_the_added_tokens(lacking):
    """RA-12: every entry rescanned every entry (n^2 lookups: seconds per load at 3k added tokens,
    minutes at 32k); now each entry is looked up at most twice, and the refusal is the same one."""
    from packtool.tokenize.tokenizer_config import FolderSpecials
    n = 3000
    toks = [f"<|v{i}|>" for i in range(n)]
    added = tuple(("added_tokens_decoder", "tokenizer_config.json", 50257 + i, t) for i, t in enumerate(toks[:n // 2]))
    added += tuple(("additional_special_tokens", "tokenizer_config.json", None, t) for t in toks[n // 2:])
    vocab = _CountingVocab({t: 50257 + i for i, t in enumerate(toks)})
    if lacking:
        del vocab[toks[-1]]
    _CountingVocab.looked = 0
    specials = FolderSpecials({}, None, added)
    if lacking:
        with pytest.raises(PacktoolInputError) as e:
            specials.refuse_absent(vocab, "tokenizer.json")
        assert "additional_special_tokens names '<|v2999|>', which tokenizer.json lacks" in str(e.value)
    else:
        specials.refuse_absent(vocab, "tokenizer.json")
    assert _CountingVocab.looked <= 2 * n


@pytest.mark.parametrize("added, ok", [({"<|endoftext|>": 50256}, True), ({"<|endoftext|>": 50300}, False),
                                       ({"<|endoftext|>": "50256"}, False), ({"<|endoftext|>": True}, False),
                                       (["<|endoftext|>"], False), ({"": 50257}, False)])
def test_added_tokens_json_is_held_to_tokenizer_json(tmp_path, added, ok):
    """Its tokens as tokenizer.json holds them pack as before; another id, or another shape, is
    named; the file is not read where the config has added_tokens_decoder, as transformers."""
    folder = _folder(tmp_path, {}, None, added=added)
    if ok:
        assert load_tokenizer(folder, TokenizeConfig(tokenizer=folder)).info.vocab_size == 50257
        return
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    assert e.value.path == os.path.join(folder, "added_tokens.json") and "\n" not in str(e.value), str(e.value)
    newer = _folder(tmp_path, {"added_tokens_decoder": {"50256": _added("<|endoftext|>")}}, None, "newer", added)
    assert load_tokenizer(newer, TokenizeConfig(tokenizer=newer)).info.vocab_size == 50257
