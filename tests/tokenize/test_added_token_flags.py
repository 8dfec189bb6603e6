"""S48A-10: tokenizer_config.json's added_tokens_decoder gives a token tokenizer.json holds its own
lstrip / rstrip / single_word / normalized / special flags; transformers' from_pretrained re-adds the
token with the config's flags (a ChatML end-of-turn marker's rstrip eats the "\\n" its template writes
after it), packtool kept tokenizer.json's: other ids around every marker, rc 0, no note. The config's
flags are applied (tokenize/backend_keys.py) and the ids of text and rendered chat rows equal
transformers' AutoTokenizer on the same folder (the oracle), for each flag and each value."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import GPT2
from tokenizer_support import oracle_ids, packed_ids

from packtool.tokenize.config import TokenizeConfig

transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
transformers.logging.set_verbosity_error()

EOT = "<|endoftext|>"
TEXTS = [f"user: hi{EOT}\nassistant: hello{EOT}\n", f"hi {EOT} there", f"x  {EOT}  y", f"a{EOT}b", EOT]
# the entry's flags (gpt2's tokenizer.json: special, normalized false, no strip, not single_word)
FLAGS = {"rstrip": {"rstrip": True}, "lstrip": {"lstrip": True}, "both strips": {"lstrip": True, "rstrip": True},
         "single_word": {"single_word": True}, "normalized": {"normalized": True},
         "not special": {"special": False}, "none given (AddedToken's defaults)": {}}
TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}<|endoftext|>\n{% endfor %}"
CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _folder(tmp_path, flags: dict) -> str:
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    conf = {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False, "add_eos_token": False,
            "added_tokens_decoder": {"50256": {"content": EOT, **flags}}}
    (d / "tokenizer_config.json").write_text(json.dumps(conf))
    return str(d)


@pytest.mark.parametrize("flags", FLAGS)
def test_text_rows_get_the_models_ids(tmp_path, flags):
    folder = _folder(tmp_path, FLAGS[flags])
    assert packed_ids(folder, [{"text": t} for t in TEXTS], tmp_path) == [oracle_ids(folder, t) for t in TEXTS]


@pytest.mark.parametrize("flags", ["rstrip", "both strips"])
def test_rendered_chat_rows_get_the_models_ids(tmp_path, flags):
    folder = _folder(tmp_path, FLAGS[flags])
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    rendered = f"user: hi{EOT}\nassistant: hello{EOT}\n"
    assert packed_ids(folder, [CHAT], tmp_path, str(template)) == [oracle_ids(folder, rendered)]


def test_a_flag_of_another_type_is_named(tmp_path):
    from packtool.errors import PacktoolInputError
    from packtool.tokenize.encode import load_tokenizer
    folder = _folder(tmp_path, {"rstrip": "yes"})
    with pytest.raises(PacktoolInputError) as e:
        load_tokenizer(folder, TokenizeConfig(tokenizer=folder))
    msg = str(e.value)
    assert "added_tokens_decoder" in msg and "rstrip" in msg and "tokenizer_config.json" in msg, msg
    assert "\n" not in msg, msg
