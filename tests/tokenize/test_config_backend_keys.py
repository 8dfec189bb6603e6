"""S46A-2: tokenizer_config.json's keys that change the ids (packtool/tokenize/backend_keys.py).
`add_prefix_space` is applied as the model's own tokenizer applies it: the ids of every row kind
(text, untemplated prompt/completion, templated chat) equal transformers' AutoTokenizer on the
same folder, for every backend form (ByteLevel, ByteLevel in a Sequence, Metaspace, a legacy
SentencePiece conversion's Prepend normalizer), every class the folder names (a model class, the
generic ones, none with or without a config.json) and both values. A key packtool does not apply
(split_special_tokens true, do_lower_case against the normalizer) is refused in one line; the
applied keys join the cache key, so a cache made before they were read is not reused."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from cli_main import run_main
from conftest import GPT2, MISTRAL
from tokenizer_support import oracle_ids, packed_ids

from packtool.errors import PacktoolInputError

transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
transformers.logging.set_verbosity_error()

TEXTS = ["Hello world", "Hello\nworld", "a b"]


def _sequence(tok: dict) -> dict:  # Qwen2's form: NFC, a Split, then ByteLevel without its regex
    tok["normalizer"] = {"type": "NFC"}
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
        {**tok["pre_tokenizer"], "use_regex": False}]}
    return tok


QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def _metaspace(tok: dict) -> dict:  # a current SentencePiece conversion: Metaspace, no normalizer
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    return tok


# backend form -> (tokenizer.json, its edit, the model class that reads the key)
FORMS = {"bytelevel": (GPT2, None, "GPT2Tokenizer"), "bytelevel_sequence": (GPT2, _sequence, "Qwen2Tokenizer"),
         "metaspace": (MISTRAL, _metaspace, "LlamaTokenizer"), "prepend_normalizer": (MISTRAL, None, "LlamaTokenizer")}
CLASSES = ["model", "PreTrainedTokenizerFast", "none"]


def _folder(tmp_path, form: str, cls: str, prefix, extra: dict | None = None) -> str:
    src, edit, model = FORMS[form]
    d = tmp_path / f"tok-{form}-{cls}-{prefix}"
    d.mkdir()
    tok = json.load(open(src))
    (d / "tokenizer.json").write_text(json.dumps(edit(tok) if edit else tok))
    conf = {"add_bos_token": False, "add_eos_token": False, **(extra or {})}
    if prefix is not ...:
        conf["add_prefix_space"] = prefix
    if cls == "model":
        conf["tokenizer_class"] = model
    elif cls == "PreTrainedTokenizerFast":
        conf["tokenizer_class"] = cls
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    return str(d)


@pytest.mark.parametrize("prefix", [True, False, ...], ids=["true", "false", "absent"])
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("form", FORMS)
def test_text_ids_equal_the_models_own_tokenizer(tmp_path, form, cls, prefix):
    """A folder naming no class, whose key would change the ids, is refused (AutoTokenizer picks
    a class by config.json's model_type, and only some read the key); every other is packed
    with transformers' ids."""
    folder = _folder(tmp_path, form, cls, prefix)
    if cls == "none" and prefix is not ...:
        (tmp_path / "model").mkdir()
        model = _folder(tmp_path / "model", form, "model", prefix)
        if [oracle_ids(model, t) for t in TEXTS] != [oracle_ids(folder, t) for t in TEXTS]:  # the key changes ids
            with pytest.raises(PacktoolInputError, match="no tokenizer_class says"):
                packed_ids(folder, [{"text": t} for t in TEXTS], tmp_path)
            return
    assert packed_ids(folder, [{"text": t} for t in TEXTS], tmp_path) == [oracle_ids(folder, t) for t in TEXTS]


ROWS = {"prompt_completion": ({"prompt": "Hello", "completion": " world"}, None, "Hello world"),
        "chat": ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "yo"}]},
                 "chatml", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n")}


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("form", ["bytelevel", "prepend_normalizer"])
def test_every_row_kind_gets_the_models_ids(tmp_path, form, kind):
    """The key reaches untemplated prompt/completion and rendered chat rows, not only text."""
    row, template, rendered = ROWS[kind]
    folder = _folder(tmp_path, form, "model", form == "bytelevel")  # the value that changes each
    assert packed_ids(folder, [row], tmp_path, template) == [oracle_ids(folder, rendered)]


@pytest.mark.parametrize("conf, words", [
    ({"split_special_tokens": True, "tokenizer_class": "GPT2Tokenizer"}, "split_special_tokens is true"),
    ({"split_special_tokens": True, "tokenizer_class": "PreTrainedTokenizerFast"}, "split_special_tokens is true"),
    ({"do_lower_case": True, "tokenizer_class": "GPT2Tokenizer"}, "do_lower_case is true"),
    ({"add_prefix_space": True}, "tokenizer_class"),                       # no class: refused, not guessed
    ({"add_prefix_space": "yes", "tokenizer_class": "GPT2Tokenizer"}, "add_prefix_space is a string"),
])
def test_a_key_packtool_does_not_apply_is_refused_in_one_line(tmp_path, monkeypatch, conf, words):
    folder = _folder(tmp_path, "bytelevel", "none", ..., conf)
    with pytest.raises(PacktoolInputError) as e:
        packed_ids(folder, [{"text": "Hello"}], tmp_path)
    assert words in str(e.value) and "tokenizer_config.json" in str(e.value) and "\n" not in str(e.value)
    data = tmp_path / "rows.jsonl"  # the command line: exit 2, the same line, no traceback
    assert run_main(monkeypatch, ["pack", str(data), "--tokenizer", folder, "-C", "64", "-o",
                                  str(tmp_path / "cli-out"), "-q"]) == [2]


def test_the_config_that_adds_a_space_packs_the_models_ids_on_the_command_line(tmp_path, monkeypatch, capsys):
    """The finding's case, as a user runs it: gpt2 + add_prefix_space true, `pack hw.jsonl`."""
    folder = _folder(tmp_path, "bytelevel", "model", True)
    data = tmp_path / "hw.jsonl"
    data.write_text('{"text": "Hello world"}\n')
    out = tmp_path / "out"
    assert run_main(monkeypatch, ["pack", str(data), "--tokenizer", folder, "-C", "64", "-o", str(out), "-q"]) == [0]
    import pyarrow.parquet as pq
    ids = pq.read_table(str(out), columns=["input_ids"]).column("input_ids")[0].as_py()
    assert ids[:3] == [18435, 995, 50256]  # " Hello", " world", EOS: transformers' [18435, 995]


def test_a_cache_made_before_the_key_was_read_is_not_reused(tmp_path, monkeypatch):
    """The same folder, tokenized once as if the key were not read (the tokens of a cache made
    before this rule): with the rule, that cache is not the one found."""
    import packtool.tokenize.encode as encode
    folder = _folder(tmp_path, "bytelevel", "model", True)
    with monkeypatch.context() as m:
        m.setattr(encode, "backend_edits", lambda *a: ())
        before = packed_ids(folder, [{"text": "Hello world"}], tmp_path)
    assert before == [[15496, 995]] and packed_ids(folder, [{"text": "Hello world"}], tmp_path) == [[18435, 995]]
