"""cache.json is checked as the files it records are (S43-3): the counts, the inputs' hashes,
the tokenizer, the side columns' declarations are read from cache.json alone, so a hand edit
of ANY of its values is caught on reuse (the entry is rebuilt, one line says so) and never
reaches a pack; re-indenting or re-ordering its keys is no edit. Parametrized over every key
of a raw-text entry and of a pre-tokenized entry with side columns, on the library path, the
CLI and a store cache."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2, GSM8K
from side_support import side_rows, write_input
from typer.testing import CliRunner

import packtool.tokenize.pipeline as pipeline
from packtool.cli.app import app
from packtool.slabs.names import MANIFEST
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.cache import CacheDamagedError, TokenizedCache, cache_problem
SEAL = "cache_json_xxh3_128"  # cache_entry.SEAL: cache.json's checksum of its own content

TEXT = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
SIDE = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))


def _changed(v):
    """`v` with its first leaf changed, its type kept where it can be."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    if isinstance(v, str):
        return v + "x"
    if v is None:
        return 0
    if isinstance(v, list):
        return [_changed(v[0])] + v[1:] if v else [0]
    k = next(iter(v), None)
    return {**v, k: _changed(v[k])} if k is not None else {"x": 0}


def _meta(root) -> dict:
    with open(os.path.join(root, "cache.json")) as f:
        return json.load(f)


def _write(root, meta, **dump) -> None:
    with open(os.path.join(root, "cache.json"), "w") as f:
        json.dump(meta, f, **dump)


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    """One entry of each kind, built once; each test edits a copy."""
    d = tmp_path_factory.mktemp("sealed")
    src = str(d / "gsm.jsonl")
    shutil.copy(GSM8K, src)
    inp = write_input(str(d / "side.parquet"), *side_rows(n=20))
    out = {}
    for kind, inputs, cfg in (("text", [src], TEXT), ("side", [inp], SIDE)):
        c = tokenize_to_cache(inputs, cfg, str(d / kind), progress=False)
        out[kind] = (inputs, cfg, str(d / kind), os.path.basename(c.root), sorted(c.meta))
    return out


KEYS = {kind: sorted(set(keys) - {SEAL}) for kind, keys in (
    ("text", ["format", "version", "token_lists", "columns", "config", "tokenizer", "template_text", "inputs",
              "parts", "num_rows", "num_source_rows", "num_tokens", "num_loss_tokens", "skipped",
              "tokenizers_version", "fingerprint", "checksums"]),
    ("side", ["side_columns", "side_store", "side_nonfinite"]))}


@pytest.fixture
def copy(entries, tmp_path):
    def make(kind):
        inputs, cfg, root, name, keys = entries[kind]
        mine = str(tmp_path / kind)
        shutil.copytree(root, mine)
        return inputs, cfg, mine, os.path.join(mine, name), keys
    return make


def test_every_key_of_cache_json_is_listed(entries):
    """The class below covers every key the two entries hold (a new key is a new case)."""
    assert set(entries["text"][4]) - {SEAL} <= set(KEYS["text"]) | set(KEYS["side"])
    assert set(entries["side"][4]) - {SEAL} <= set(KEYS["text"]) | set(KEYS["side"])


@pytest.mark.parametrize("kind,key", [(k, key) for k in KEYS for key in KEYS[k]] +
                         [("side", key) for key in ("num_loss_tokens", "inputs", "checksums")])
def test_an_edited_value_is_caught_and_the_entry_rebuilt(copy, capsys, kind, key):
    inputs, cfg, root, entry, keys = copy(kind)
    meta = _meta(entry)
    if key not in meta:
        pytest.skip(f"a {kind} entry has no {key}")
    good = {n: open(os.path.join(entry, n), "rb").read() for n in ("flat/tokens.i32", "flat/offsets.npy")}
    meta[key] = _changed(meta[key])
    _write(entry, meta, indent=1)
    assert "changed after packtool wrote it" in cache_problem(entry)
    with pytest.raises(CacheDamagedError, match="cache.json was changed after packtool wrote it"):
        TokenizedCache(entry)
    pipeline.NOTES.clear()
    again = tokenize_to_cache(inputs, cfg, root, progress=False)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("packtool:")]
    assert not again.reused and again.root == entry
    assert len(lines) == 1 and "cache.json was changed after packtool wrote it" in lines[0] and \
        "rebuilding" in lines[0], lines
    assert _meta(entry)[key] != meta[key] and cache_problem(entry) is None
    assert {n: open(os.path.join(entry, n), "rb").read() for n in good} == good


@pytest.mark.parametrize("kind", list(KEYS))
def test_a_reformatted_cache_json_is_no_edit(copy, capsys, kind):
    inputs, cfg, root, entry, _ = copy(kind)
    meta = _meta(entry)
    _write(entry, dict(reversed(list(meta.items()))), indent=4)
    pipeline.NOTES.clear()
    assert tokenize_to_cache(inputs, cfg, root, progress=False).reused
    assert "packtool:" not in capsys.readouterr().err


def test_a_removed_seal_is_caught(copy, capsys):
    inputs, cfg, root, entry, _ = copy("text")
    meta = _meta(entry)
    del meta[SEAL]
    _write(entry, meta)
    assert "no checksum of its own" in cache_problem(entry)
    pipeline.NOTES.clear()
    assert not tokenize_to_cache(inputs, cfg, root, progress=False).reused


def _pack(src, root, out):
    return CliRunner().invoke(app, ["pack", src, "--tokenizer", GPT2, "--prompt-field", "question",
                                    "--response-field", "answer", "-C", "1024", "-o", out, "--no-progress",
                                    "--cache-dir", root])


def test_pack_never_reports_what_an_edited_cache_json_says(copy, tmp_path):
    """The tester's case: skipped rows and an input's sha256 edited in cache.json were reused
    (a warning of 7 skipped rows, the false hash in the manifest, verify blaming the manifest)."""
    inputs, _, root, entry, _ = copy("text")
    clean = str(tmp_path / "clean")
    assert _pack(inputs[0], root, clean).exit_code == 0
    meta = _meta(entry)
    meta["skipped"]["empty"] = 7
    meta["num_source_rows"] += 7
    meta["inputs"][0]["sha256"] = "0" * 64
    meta["num_loss_tokens"] = 5
    _write(entry, meta, indent=1)
    out = str(tmp_path / "out")
    r = _pack(inputs[0], root, out)
    assert r.exit_code == 0, r.output
    assert "cache.json was changed after packtool wrote it" in r.output and "skipped" not in r.output
    with open(os.path.join(out, MANIFEST)) as f, open(os.path.join(clean, MANIFEST)) as g:
        got, want = json.load(f), json.load(g)
    assert got["input"] == want["input"] and got["stats"] == want["stats"]
    v = CliRunner().invoke(app, ["verify", out, "--source", inputs[0]])
    assert v.exit_code == 0, v.output
