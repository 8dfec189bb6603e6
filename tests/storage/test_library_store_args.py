"""Issue 23 class 6, left at stop 35: a library call refused for a store reason names the Python
argument that gave the URI (`output='s3://BUCKET/PREFIX'`, "refused in output"), never a
command-line flag, as the CLI names its flag for the same URI (cli.store_flags;
errors.arg is the one spelling rule). Over every library argument that takes a store URI and
every refusal of a URI's text (params.path holds each path argument to storage.uri.check_form),
and a missing bucket under pack's `output=` (checked before the lease, as the CLI's flag is)."""
from __future__ import annotations

import re

import pytest
from conftest import GSM8K

import packtool
from packtool.errors import PacktoolError

BAD = {"no bucket": ("s3://", "names no bucket"),
       "credentials in it": ("s3://KEYID:hunter2@bucket/p", "user:password@ is refused"),
       "a secret query": ("s3://bucket/p?secret_key=x", "looks like a credential"),
       "an unknown scheme": ("ftp://host/p", "ftp:// is not supported")}


def _pack(**kw):
    return lambda tmp: packtool.pack(kw.get("inputs", [GSM8K]), output=kw.get("output", str(tmp / "out")),
                                     cache_dir=kw.get("cache_dir", str(tmp / "cache")),
                                     tokenize=packtool.TokenizeConfig(prompt_field="question", response_field="answer"))


# (call, the argument it is about) -> the call made with `uri` there
CALLS = {
    ("pack", "output"): lambda uri: _pack(output=uri),
    ("pack", "inputs"): lambda uri: _pack(inputs=[uri]),
    ("pack", "cache_dir"): lambda uri: _pack(cache_dir=uri),
    ("verify", "directory"): lambda uri: lambda tmp: packtool.verify(uri),
    ("inspect", "directory"): lambda uri: lambda tmp: packtool.inspect(uri),
    ("SlabManifest.read", "path"): lambda uri: lambda tmp: packtool.SlabManifest.read(uri),
    ("hf.SlabDataset", "path"): lambda uri: lambda tmp: __import__("packtool.hf", fromlist=["x"]).SlabDataset(uri),
}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("call", CALLS, ids=[f"{c}-{a}" for c, a in CALLS])
def test_a_store_refusal_names_the_library_argument(tmp_path, monkeypatch, call, bad):
    monkeypatch.chdir(tmp_path)
    uri, said = BAD[bad]
    name = call[1]
    with pytest.raises(PacktoolError) as e:
        CALLS[call](uri)(tmp_path)
    msg = str(e.value)
    assert said in msg and "\n" not in msg, msg
    assert re.search(rf"\b{name}\b", msg), f"{call}: the argument {name} is not named: {msg}"
    assert not re.search(r"(^|[\s(`])--?[a-z]", msg) and getattr(e.value, "flag", None) is None, msg
    if bad == "no bucket":
        assert f"{name}='s3://BUCKET/PREFIX'" in msg, msg  # the value as the call would take it


def test_a_missing_bucket_under_output_is_named_before_the_work(s3, tmp_path, monkeypatch):
    import packtool.tokenize.pipeline as pl
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("tokenized before the store was checked"))
    with pytest.raises(PacktoolError, match=r"bucket no-such-bkt-left36 does not exist.* give output a prefix") as e:
        _pack(output="s3://no-such-bkt-left36/out")(tmp_path)
    assert "--output" not in str(e.value) and "-o " not in str(e.value)
