"""The library's config parameters of the wrong type (stranger-test R9): one PacktoolConfigError
naming the function, the parameter and the object that fixes it, not an AttributeError from
inside a stage. Checked before anything is read or written."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import GPT2, GSM8K

import packtool
from packtool.errors import PacktoolConfigError

A = packtool.Alignment(capacity=1024)
TOK = packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


def _one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


def test_pack_tokenize_as_a_path_string(tmp_path):
    with pytest.raises(PacktoolConfigError) as e:
        packtool.pack([GSM8K], A, tokenize="/path/tok", output=str(tmp_path / "out"))
    text = _one_line(e)
    assert "pack(tokenize=...)" in text and "got str '/path/tok'" in text
    assert "TokenizeConfig(tokenizer='/path/tok')" in text
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("call,needle", [
    (lambda o: packtool.pack([GSM8K], {"capacity": 1024}, tokenize=TOK, output=o), "pack(alignment=...) takes an Alignment"),
    (lambda o: packtool.pack([GSM8K], A, packing="bfd", tokenize=TOK, output=o), "pack(packing=...) takes a PackingConfig"),
    (lambda o: packtool.plan(np.full(4, 8), 1024), "plan(alignment=...)"),
    (lambda o: packtool.plan(np.full(4, 8), A, "mffd"), "PackingConfig(algorithm="),
    (lambda o: packtool.inspect_lengths(np.full(4, 8), A, {"dp": 2}), "inspect_lengths(packing=...)"),
    (lambda o: packtool.verify(o, source_tokenize=GPT2), "verify(source_tokenize=...)"),
])
def test_wrong_config_types_are_one_line(tmp_path, call, needle):
    with pytest.raises(PacktoolConfigError) as e:
        call(str(tmp_path / "out"))
    assert needle in _one_line(e)
    assert not (tmp_path / "out").exists()


def test_pack_cache_wants_a_cache(tmp_path):
    from packtool.packing import pack_cache
    with pytest.raises(PacktoolConfigError, match=r"pack_cache\(cache=...\) takes a TokenizedCache"):
        pack_cache(str(tmp_path), A, output=str(tmp_path / "out"))
