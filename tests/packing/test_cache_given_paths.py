"""A tokenized cache entry is keyed by the tokenizer's content, not its path: a second `pack` with
the same tokenizer copied elsewhere reuses the entry, and its manifest names what that run was
given (`tokenizer.path`, `input.tokenize.tokenizer`), not the earlier run's copy, so that
`verify --source` re-reads the tokenizer from where this run found it."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool
import packtool.tokenize.pipeline as pipeline
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.slabs.names import MANIFEST
from packtool.tokenize.config import TokenizeConfig


def _manifest(out) -> dict:
    with open(os.path.join(out, MANIFEST)) as f:
        return json.load(f)


def _verify_source(out) -> None:
    r = CliRunner().invoke(app, ["verify", str(out), "--source", GSM8K, "--no-progress"])
    assert r.exit_code == 0, r.output


def test_a_reused_entry_names_this_runs_tokenizer(tmp_path, cache_dir, monkeypatch):
    tok = {}
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
        shutil.copy(GPT2, tmp_path / name / "tokenizer.json")
        tok[name] = str(tmp_path / name)  # a folder: the manifest names its tokenizer.json
    encodes = [0]
    real = pipeline.start_encode

    def counting(*a, **kw):
        encodes[0] += 1
        return real(*a, **kw)
    monkeypatch.setattr(pipeline, "start_encode", counting)
    res = {}
    for name in ("a", "b"):
        cfg = TokenizeConfig(tokenizer=tok[name], prompt_field="question", response_field="answer")
        res[name] = packtool.pack([GSM8K], Alignment(capacity=1024), tokenize=cfg,
                                  output=str(tmp_path / f"out-{name}"), cache_dir=cache_dir)
        if name == "a":
            built = encodes[0]
    assert built > 0 and encodes[0] == built, "the second run tokenized again: the entry was not reused"
    assert res["a"].cache_path == res["b"].cache_path
    for name in ("a", "b"):
        m = _manifest(res[name].output)
        assert m["tokenizer"]["path"] == os.path.join(tok[name], "tokenizer.json"), m["tokenizer"]
        assert m["input"]["tokenize"]["tokenizer"] == tok[name], m["input"]["tokenize"]
        _verify_source(res[name].output)
    shutil.rmtree(tmp_path / "a")  # the second output needs only the copy it was packed with
    _verify_source(res["b"].output)


def _reuse_by_pack(inputs, cfg, cache_dir, out):
    return packtool.pack(inputs, Alignment(capacity=1024), tokenize=cfg, output=out, cache_dir=cache_dir)


def _reuse_by_tokenize(inputs, cfg, cache_dir, out):
    from packtool.tokenize import tokenize_to_cache
    return tokenize_to_cache(inputs, cfg, cache_dir=cache_dir, progress=False)


@pytest.mark.parametrize("entry", [_reuse_by_pack, _reuse_by_tokenize], ids=["pack", "tokenize_to_cache"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_reuse_loads_and_hashes_the_tokenizer_once(tmp_path, cache_dir, monkeypatch, entry, given):
    """What the request resolved (tokenizer loaded, its files hashed) names the reused entry:
    no second load, no second hash of a tokenizer.json that may be megabytes."""
    import packtool.tokenize.encode as encode
    import packtool.tokenize.request as request
    os.makedirs(tmp_path / "tok")
    shutil.copy(GPT2, tmp_path / "tok" / "tokenizer.json")
    tok = str(tmp_path / "tok") if given == "folder" else str(tmp_path / "tok" / "tokenizer.json")
    cfg = TokenizeConfig(tokenizer=tok, prompt_field="question", response_field="answer")
    entry([GSM8K], cfg, cache_dir, str(tmp_path / "out-1"))  # builds the entry
    counts = {"loads": 0, "hashes": 0}
    real_load, real_hash = encode.load_tokenizer, encode.sha256_file

    def load(*a, **kw):
        counts["loads"] += 1
        return real_load(*a, **kw)

    def hash_(path, *a, **kw):
        counts["hashes"] += os.path.abspath(path) == str(tmp_path / "tok" / "tokenizer.json")
        return real_hash(path, *a, **kw)
    for module in (encode, request):  # where it is defined, and where the request bound it
        monkeypatch.setattr(module, "load_tokenizer", load)
    monkeypatch.setattr(encode, "sha256_file", hash_)
    res = entry([GSM8K], cfg, cache_dir, str(tmp_path / "out-2"))
    assert getattr(res, "reused", True), "the second run did not reuse the entry"
    assert counts == {"loads": 1, "hashes": 1}, counts
