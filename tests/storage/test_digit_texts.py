"""RA-6 (s50): a digit test guarding an int() took str.isdigit() for "int() reads it": `²` and `①`
pass isdigit and int() refuses them, and int() of 4,300+ digits raises. A store lease, write probe
or cache push record whose owner's pid was such a text, or a tokenizer_config.json whose
added_tokens_decoder had such a key, ended in a bare ValueError where the record is not
packtool's (left alone) and the key is refused naming the fix. Each door, with each such text."""
from __future__ import annotations

import json

import pytest

from packtool.errors import PacktoolInputError

TEXTS = {"a superscript": "\u00b2", "a circled digit": "\u2460", "digits and a superscript": "12\u00b3",
         "20 digits": "9" * 20, "5,000 digits": "7" * 5000}


@pytest.mark.parametrize("text", TEXTS)
def test_a_pid_text_int_refuses_names_no_pid(text):
    from packtool.pids import pid_in_text
    assert pid_in_text(TEXTS[text]) is None


@pytest.mark.parametrize("text", TEXTS)
def test_a_record_owned_by_such_a_pid_is_not_packtools(text):
    import socket

    from packtool.storage.lease import _dead_here, holder_ok
    rec = {"owner": f"pid {TEXTS[text]} on {socket.gethostname()}", "renewed": 1.0}
    assert holder_ok(rec) is False
    assert _dead_here(rec) is False  # no process asked about


def test_a_plain_pid_still_reads():
    from packtool.pids import pid_in_text
    from packtool.storage.lease import holder_ok
    assert pid_in_text("123") == 123 and holder_ok({"owner": "pid 123 on h", "renewed": 1.0})


@pytest.mark.parametrize("text", TEXTS)
def test_an_added_tokens_decoder_key_of_such_digits_is_refused(tmp_path, text):
    from packtool.tokenize.tokenizer_config import _token_list
    conf = {"added_tokens_decoder": {TEXTS[text]: {"content": "<x>"}}}
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps(conf))
    with pytest.raises(PacktoolInputError, match="not an object of token ids"):
        _token_list(conf, "added_tokens_decoder", str(path))


@pytest.mark.parametrize("text", TEXTS)
def test_the_backend_rule_passes_such_a_key_over(text):
    tokenizers = pytest.importorskip("tokenizers")
    from packtool.tokenize.backend_keys import _flag_edits
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    conf = {"added_tokens_decoder": {TEXTS[text]: {"content": "<x>", "lstrip": True}}}
    assert _flag_edits(conf, None, tok) == ()
