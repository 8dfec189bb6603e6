"""Every library argument of `packtool.verify` is checked at the call, before any work (README:
"Every public call ... checks its arguments at the call"): a wrong one raises packtool's
PacktoolInputError naming the argument, never a silent drop. The source's record arguments
(`source_fingerprint`, `source_tokenize`, `source_files`) describe `source_dir`: without it they
were ignored (ok=True, source_checked=False), S31-13. The output folder does not exist: an
argument not checked at the call would end in the folder's error (naming `directory`) instead."""
from __future__ import annotations

import pytest

import packtool
from packtool.errors import PacktoolError

FP = "0" * 64
NOWHERE = "no-such-output"


def _tok():
    return packtool.TokenizeConfig(tokenizer="gpt2/tokenizer.json")


# (argument named in the error, keyword arguments); `directory` defaults to a missing folder
CASES = [
    ("directory", dict(directory=None)),
    ("directory", dict(directory=5)),
    ("source_dir", dict(source_dir=5)),
    ("workers", dict(workers=0)),
    ("workers", dict(workers="2")),
    ("max_problems", dict(max_problems=-1)),
    ("batch_rows", dict(batch_rows=0)),
    ("progress", dict(progress="yes")),
    ("source_fingerprint", dict(source_fingerprint=5, source_dir="src")),
    ("source_fingerprint", dict(source_fingerprint="zz", source_dir="src")),
    ("source_fingerprint", dict(source_fingerprint="A" * 64, source_dir="src")),
    ("source_fingerprint", dict(source_fingerprint=FP)),
    ("source_tokenize", dict(source_tokenize={"tokenizer": "x"}, source_dir="src")),
    ("source_tokenize", dict(source_tokenize="tok")),
    ("source_files", dict(source_files=["/nonexistent.parquet"])),
    ("source_files", dict(source_files=["/nonexistent.parquet"], source_dir="src", source_fingerprint=FP)),
    ("source_files", dict(source_files=[5], source_dir="src")),
    ("source_files", dict(source_files=[""], source_dir="src")),
]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_checked_at_the_call(name, kwargs):
    if name == "source_tokenize" and "source_dir" not in kwargs:
        kwargs = dict(kwargs, source_tokenize=_tok())  # a good config with no source_dir: still refused
    kwargs = {"directory": NOWHERE, **kwargs}
    with pytest.raises(PacktoolError) as e:
        packtool.verify(**kwargs)
    msg = str(e.value)
    assert name in msg and "\n" not in msg, msg


def test_every_argument_has_a_case():
    import inspect
    assert set(inspect.signature(packtool.verify).parameters) == {n for n, _ in CASES}
