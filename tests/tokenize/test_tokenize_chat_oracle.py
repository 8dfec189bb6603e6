"""Chat loss masks against an independent oracle: transformers' `apply_chat_template(...,
return_assistant_tokens_mask=True)` with a `{% generation %}` copy of the same template, on a
PreTrainedTokenizerFast built from the same tokenizer.json (offline). Token ids must also equal
a plain `tokenizers` encoding of the text transformers renders."""
from __future__ import annotations

import functools
import gzip
import json
import re

import numpy as np
import pytest
from conftest import GPT2, GSM8K, MISTRAL, MISTRAL_DIR, SHAREGPT, TASKMASTER
from tokenizers import Tokenizer

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.messages import normalize_message, sharegpt_to_messages
from packtool.tokenize.templates import BUILTIN

transformers = pytest.importorskip("transformers", reason="the oracle needs transformers (test extra)")


def _oracle(tokenizer_file: str, info, template: str, messages: list[dict]):
    special = {k: v for k, v in (("bos_token", info.bos_token), ("eos_token", info.eos_token)) if v}
    hf = _hf(tokenizer_file, tuple(sorted(special.items())))
    out = hf.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True,
                                 return_assistant_tokens_mask=True)
    text = hf.apply_chat_template(messages, chat_template=template, tokenize=False)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    assert ids == _plain(tokenizer_file).encode(text, add_special_tokens=False).ids
    if info.bos_id is not None and not text.startswith(info.bos_token):
        ids, mask = [info.bos_id] + ids, [0] + mask   # packtool adds the BOS id the template lacks
    return ids, mask


_HF_CACHE: dict = {}


@functools.lru_cache(maxsize=None)
def _plain(tokenizer_file: str) -> Tokenizer:
    return Tokenizer.from_file(tokenizer_file)


def _hf(tokenizer_file, special):
    key = (tokenizer_file, special)
    if key not in _HF_CACHE:
        _HF_CACHE[key] = transformers.PreTrainedTokenizerFast(tokenizer_file=tokenizer_file, **dict(special))
    return _HF_CACHE[key]


def _rows(cache):
    r = cache.read_rows(np.arange(cache.num_rows))
    return [(r.input_ids[a:b].tolist(), r.loss_mask[a:b].tolist())
            for a, b in zip(r.offsets[:-1], r.offsets[1:])]


def _taskmaster():
    with gzip.open(TASKMASTER, "rt") as f:
        return [[normalize_message(m) for m in json.loads(line)["messages"]] for line in f]


@pytest.mark.parametrize("tokenizer,template", [(MISTRAL, "mistral"), (GPT2, "chatml"),
                                                (MISTRAL, "llama3"), (GPT2, "mistral")])
def test_taskmaster_builtin_templates(tokenizer, template, cache_dir):
    cfg = TokenizeConfig(tokenizer=tokenizer, chat_template=template)
    cache = tokenize_to_cache([TASKMASTER], cfg, cache_dir, progress=False)
    convs = _taskmaster()
    got = _rows(cache)
    assert len(got) == len(convs)
    for (ids, mask), msgs in zip(got, convs):
        assert (ids, mask) == _oracle(tokenizer, cache.tokenizer_info, BUILTIN[template], msgs)
    assert 0 < cache.num_loss_tokens < cache.num_tokens


def test_mistral_rendering_documented_layout(cache_dir):
    """System folded into the first user turn; tool calls/results as non-loss text."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one latte"},
            {"role": "assistant", "tool_call": {"name": "add", "arguments": "{\"item\": \"latte\"}"}},
            {"role": "tool", "name": "add", "content": "{\"ok\": true}"},
            {"role": "assistant", "content": "Done."}]
    from packtool.tokenize.templates import Renderer, make_template
    r = Renderer(make_template("mistral", BUILTIN["mistral"]), {"bos_token": "<s>", "eos_token": "</s>"})
    text, spans = r.render([normalize_message(m) for m in msgs])
    assert text == ('<s>[INST] Be brief.\n\none latte [/INST] [TOOL_CALLS] [{"name": "add", "arguments": '
                    '{"item": "latte"}}]</s> [TOOL_RESULTS] {"ok": true}[/TOOL_RESULTS] Done.</s>')
    assert [text[a:b] for a, b in spans] == ["Done.</s>"]


def test_sharegpt_chatml_gpt2(cache_dir):
    cache = tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"),
                              cache_dir, progress=False)
    assert cache.meta["inputs"][0]["shape"] == "sharegpt"
    with open(SHAREGPT) as f:
        convs = [sharegpt_to_messages(c["conversations"], SHAREGPT, i) for i, c in enumerate(json.load(f))]
    for (ids, mask), msgs in zip(_rows(cache), convs):
        assert (ids, mask) == _oracle(GPT2, cache.tokenizer_info, BUILTIN["chatml"], msgs)


def _with_generation_tags(template: str) -> str:
    """The folder's Mistral-Instruct template, with the assistant turn wrapped in generation tags."""
    old = "{{ message['content'] + eos_token}}"
    assert old in template
    return template.replace(old, "{% generation %}" + old + "{% endgeneration %}")


def test_folder_template_prefix_spans_match_oracle(cache_dir):
    """The model folder's template has no generation tags: spans come from prefix rendering;
    the oracle runs a tagged copy of the same template."""
    with open(f"{MISTRAL_DIR}/tokenizer_config.json") as f:
        folder_template = json.load(f)["chat_template"]
    assert not re.search(r"generation", folder_template)
    tagged = _with_generation_tags(folder_template)
    cache = tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=MISTRAL_DIR), cache_dir, progress=False)
    assert cache.tokenizer_info.chat_template == "tokenizer_config.json"
    with open(SHAREGPT) as f:
        convs = [sharegpt_to_messages(c["conversations"], SHAREGPT, i) for i, c in enumerate(json.load(f))]
    for (ids, mask), msgs in zip(_rows(cache), convs):
        assert (ids, mask) == _oracle(MISTRAL, cache.tokenizer_info, tagged, msgs)
    # GSM8K as a two-turn conversation through the same folder template
    cfg = TokenizeConfig(tokenizer=MISTRAL_DIR, prompt_field="question", response_field="answer")
    cache = tokenize_to_cache([GSM8K], cfg, cache_dir, progress=False)
    with open(GSM8K) as f:
        rows = [json.loads(line) for line in f]
    for (ids, mask), r in zip(_rows(cache), rows):
        msgs = [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}]
        assert (ids, mask) == _oracle(MISTRAL, cache.tokenizer_info, tagged, msgs)


def test_jinja_file_template_and_errors(tmp_path, cache_dir):
    p = tmp_path / "t.jinja"
    p.write_text(BUILTIN["chatml"])
    a = tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=GPT2, chat_template=str(p)), cache_dir, progress=False)
    b = tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=GPT2, chat_template="chatml"), cache_dir, progress=False)
    assert _rows(a) == _rows(b)
    assert a.tokenizer_info.template_sha256 == b.tokenizer_info.template_sha256
    with pytest.raises(PacktoolInputError, match="chat_template='nosuch' is neither"):
        tokenize_to_cache([SHAREGPT], TokenizeConfig(tokenizer=GPT2, chat_template="nosuch"), cache_dir)
    with pytest.raises(PacktoolInputError, match="need a chat template"):
        tokenize_to_cache([TASKMASTER], TokenizeConfig(tokenizer=GPT2), cache_dir, progress=False)
    # the Mistral-Instruct folder template rejects tool turns: the error names file, row and flag
    with pytest.raises(PacktoolInputError, match=r"taskmaster4_chat_200\.jsonl\.gz, row 0: chat template"):
        tokenize_to_cache([TASKMASTER], TokenizeConfig(tokenizer=MISTRAL_DIR), cache_dir, progress=False)
