"""GSM8K's question/answer rows are detected as a prompt and its response (stranger F15: they
needed --prompt-field/--response-field, though docs/TOKENIZATION.md uses them as its example of
`fields`). Where other columns could belong to the prompt (a context, a passage, choices), the
pairing is the user's call: one line naming the flags."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, GSM8K

from packtool.errors import PacktoolInputError
from packtool.tokenize import TokenizeConfig, tokenize_to_cache


def _tokens(cache):
    r = cache.read_rows(list(range(cache.num_rows)))
    return r.input_ids.tolist(), r.loss_mask.tolist(), r.offsets.tolist()


def test_gsm8k_packs_as_fields_without_flags(tmp_path):
    auto = tokenize_to_cache([GSM8K], TokenizeConfig(tokenizer=GPT2), str(tmp_path / "a"), progress=False)
    said = tokenize_to_cache([GSM8K], TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"),
                             str(tmp_path / "b"), progress=False)
    assert auto.num_rows == said.num_rows == 200
    assert _tokens(auto) == _tokens(said)
    assert auto.meta["inputs"][0]["shape"] == "fields"


@pytest.mark.parametrize("extra,packs", [({"id": 7}, True), ({"context": "c"}, False), ({"choices": "a|b"}, False)])
def test_other_columns_beside_question_answer(tmp_path, extra, packs):
    f = tmp_path / "qa.jsonl"
    f.write_text(json.dumps({"question": "What is 2+2?", "answer": "4", **extra}) + "\n")
    cfg = TokenizeConfig(tokenizer=GPT2)
    if packs:
        assert tokenize_to_cache([str(f)], cfg, str(tmp_path / "c"), progress=False).num_rows == 1
        return
    with pytest.raises(PacktoolInputError) as e:
        tokenize_to_cache([str(f)], cfg, str(tmp_path / "c"), progress=False)
    msg = str(e.value)
    assert "\n" not in msg and next(iter(extra)) in msg, msg
    assert "prompt_field='question' response_field='answer'" in msg and "--" not in msg, msg  # a library call
    assert not (tmp_path / "c").exists()  # the --cache-dir this run made goes with it
