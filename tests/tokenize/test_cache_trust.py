"""A tokenized cache is reused only when every file it holds re-hashes to what cache.json
recorded and its key covers the inputs' content (issue 13, item 2): a flipped byte anywhere,
a truncated or missing file, a garbled cache.json, or an input edited in place with the same
size and mtime is caught; the cache is rebuilt (one line says so) and never feeds wrong
tokens. `verify --source` re-tokenizes into a fresh cache instead of trusting the cache."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

import packtool.tokenize.pipeline as pipeline
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack_cache
from packtool.slabs.names import MANIFEST
from packtool.tokenize import TokenizeConfig, tokenize_to_cache
from packtool.tokenize.cache import CACHE_FORMAT, CACHE_VERSION, CacheDamagedError, TokenizedCache, cache_problem
from packtool.tokenize.cache_entry import cache_json_bytes
from packtool.tokenize.flat_tokens import TOKENS_FILE, flat_store_dir, flat_store_for

CFG = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _flip(path: str, at: int) -> None:
    b = bytearray(_bytes(path))
    b[at % len(b)] ^= 0x01
    with open(path, "wb") as f:
        f.write(b)


@pytest.fixture
def built(tmp_path):
    """A cache of GSM8K (a copy the test may edit) and the bytes of its files."""
    src = str(tmp_path / "gsm.jsonl")
    shutil.copy(GSM8K, src)
    root = str(tmp_path / "cache")
    cache = tokenize_to_cache([src], CFG, root, progress=False)
    files = {os.path.relpath(os.path.join(d, n), cache.root): _bytes(os.path.join(d, n))
             for d, _, ns in os.walk(cache.root) for n in ns}
    return src, root, cache, files


def _rebuilt(src, root, capsys):
    pipeline.NOTES.clear()
    again = tokenize_to_cache([src], CFG, root, progress=False)
    err = capsys.readouterr().err
    return again, [ln for ln in err.splitlines() if ln.startswith("packtool:")]


@pytest.mark.parametrize("where", [0, 1, 4, 1001, -4, -1], ids=lambda w: f"byte{w}")
def test_flipped_byte_in_token_store_is_caught_on_reuse(built, capsys, where):
    src, root, cache, files = built
    tokens = os.path.join(flat_store_dir(cache), TOKENS_FILE)
    _flip(tokens, where)
    assert cache_problem(cache.root, cache.fingerprint) is not None
    again, lines = _rebuilt(src, root, capsys)
    assert not again.reused
    assert len(lines) == 1 and "damaged" in lines[0] and "flat/tokens.i32" in lines[0]
    assert "rebuilding" in lines[0]
    assert _bytes(tokens) == files["flat/tokens.i32"]  # the right tokens again
    assert cache_problem(again.root, again.fingerprint) is None
    assert not [n for n in os.listdir(root) if n != os.path.basename(again.root)]


@pytest.mark.parametrize("name", ["flat/offsets.npy", "data/part-00000.parquet"])
@pytest.mark.parametrize("where", [0, 200, -1])
def test_flipped_byte_in_offsets_or_parquet_is_caught(built, capsys, name, where):
    src, root, cache, files = built
    _flip(os.path.join(cache.root, name), where)
    again, lines = _rebuilt(src, root, capsys)
    assert not again.reused and len(lines) == 1 and name in lines[0]
    assert _bytes(os.path.join(again.root, name)) == files[name]


def _truncate(p):
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def _edit_meta(c, fn):
    p = os.path.join(c.root, "cache.json")
    meta = json.load(open(p))
    with open(p, "w") as f:
        json.dump(fn(meta), f)


DAMAGE = {
    "truncated-tokens": lambda c: _truncate(os.path.join(c.root, "flat", TOKENS_FILE)),
    "truncated-parquet": lambda c: _truncate(c.parquet_files[0]),
    "missing-parquet": lambda c: os.remove(c.parquet_files[0]),
    "garbled-cache-json": lambda c: open(os.path.join(c.root, "cache.json"), "wb").write(b"\x00{not json"),
    "truncated-cache-json": lambda c: _truncate(os.path.join(c.root, "cache.json")),
    "cache-json-wrong-types": lambda c: _edit_meta(c, lambda m: dict(m, parts=5)),
    "cache-json-wrong-row-count": lambda c: _edit_meta(c, lambda m: dict(m, num_rows="many")),
    "no-cache-json": lambda c: os.remove(os.path.join(c.root, "cache.json")),
    "checksum-record-removed": lambda c: _edit_meta(
        c, lambda m: {k: v for k, v in m.items() if k != "checksums"}),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_damaged_cache_is_rebuilt_in_one_line_not_a_traceback(built, capsys, damage):
    src, root, cache, files = built
    DAMAGE[damage](cache)
    again, lines = _rebuilt(src, root, capsys)
    assert not again.reused and len(lines) == 1 and "rebuilding" in lines[0]
    for name in ("flat/tokens.i32", "data/part-00000.parquet"):
        assert _bytes(os.path.join(again.root, name)) == files[name]


def test_undamaged_cache_is_reused_quietly(built, capsys):
    src, root, cache, _ = built
    again, lines = _rebuilt(src, root, capsys)
    assert again.reused and again.root == cache.root and lines == []


def test_in_place_edit_with_same_size_and_mtime_is_caught(built, capsys, tmp_path):
    src, root, cache, _ = built
    st = os.stat(src)
    text = _bytes(src)
    i = text.index(b"48")  # a digit inside an answer: same length, other content
    edited = text[:i] + b"49" + text[i + 2:]
    with open(src, "wb") as f:
        f.write(edited)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.path.getsize(src), os.stat(src).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again, _ = _rebuilt(src, root, capsys)
    assert not again.reused and again.fingerprint != cache.fingerprint
    assert again.input_files[0].sha256 == hashlib.sha256(edited).hexdigest()
    out = str(tmp_path / "out")
    pack_cache(again, Alignment(capacity=1024), output=out)
    man = json.load(open(os.path.join(out, MANIFEST)))
    assert man["input"]["files"][0][2] == hashlib.sha256(edited).hexdigest()  # the true hash


def test_opening_a_damaged_cache_directly_names_it(built):
    _, _, cache, _ = built
    with open(os.path.join(cache.root, "cache.json"), "wb") as f:
        # sealed as packtool writes it: what is refused is the value, not the edit
        f.write(cache_json_bytes({"format": CACHE_FORMAT, "version": CACHE_VERSION, "num_rows": "x"}))
    with pytest.raises(CacheDamagedError, match="cache.json is damaged"):
        TokenizedCache(cache.root)
    with open(os.path.join(cache.root, "cache.json"), "wb") as f:
        f.write(b"\xff\xfe")
    with pytest.raises(CacheDamagedError, match="cannot be read"):
        TokenizedCache(cache.root)


def test_flat_store_rebuilt_from_parquet_is_held_to_its_record(built):
    _, _, cache, files = built
    d = flat_store_dir(cache)
    shutil.rmtree(d)
    flat_store_for(cache)  # rebuilt from the (verified) Parquet: the same bytes as recorded
    assert _bytes(os.path.join(d, TOKENS_FILE)) == files["flat/tokens.i32"]
    meta = json.load(open(os.path.join(cache.root, "cache.json")))
    meta["checksums"]["flat/tokens.i32"]["xxh3_128"] = "0" * 32
    with open(os.path.join(cache.root, "cache.json"), "wb") as f:  # sealed: a record packtool wrote
        f.write(cache_json_bytes(meta))
    shutil.rmtree(d)
    with pytest.raises(CacheDamagedError, match="does not match cache.json's checksum"):
        flat_store_for(TokenizedCache(cache.root))


def test_cache_without_flat_checksums_records_them_when_the_store_is_built(built):
    """A Ray-built cache has Parquet parts only: the store built for it is recorded, so the
    next reuse checks it too."""
    _, _, cache, files = built
    shutil.rmtree(flat_store_dir(cache))
    meta = json.load(open(os.path.join(cache.root, "cache.json")))
    for n in ("flat/tokens.i32", "flat/offsets.npy"):
        del meta["checksums"][n]
    with open(os.path.join(cache.root, "cache.json"), "wb") as f:  # sealed, as the Ray engine writes it
        f.write(cache_json_bytes(meta))
    assert cache_problem(cache.root, cache.fingerprint) is None
    flat_store_for(TokenizedCache(cache.root))
    sums = json.load(open(os.path.join(cache.root, "cache.json")))["checksums"]
    assert "flat/tokens.i32" in sums and cache_problem(cache.root, cache.fingerprint) is None


# ---------------------------------------------------------------- the CLI, end to end

def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _pack_args(src, root, out, *more):
    return ("pack", src, "--tokenizer", GPT2, "--prompt-field", "question", "--response-field",
            "answer", "-C", "1024", "-o", out, "--no-progress", "--cache-dir", root, *more)


def _shard_bytes(out) -> dict:
    return {n: _bytes(os.path.join(out, n)) for n in os.listdir(out) if n.endswith(".parquet")}


def test_pack_from_a_damaged_cache_rebuilds_and_writes_the_right_tokens(built, tmp_path):
    src, root, cache, _ = built
    clean = str(tmp_path / "clean")
    assert _cli(*_pack_args(src, root, clean)).exit_code == 0
    _flip(os.path.join(flat_store_dir(cache), TOKENS_FILE), 777)
    again = str(tmp_path / "again")
    res = _cli(*_pack_args(src, root, again))
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert sum("rebuilding" in ln for ln in res.stderr.splitlines()) == 1
    assert _shard_bytes(again) == _shard_bytes(clean)


def test_verify_source_catches_an_output_packed_from_a_damaged_cache(built, tmp_path):
    """The issue's case: a damaged cache fed a wrong token into the output. `verify --source`
    re-tokenizes the source into a fresh cache, so the damaged one cannot vouch for it."""
    src, root, cache, _ = built
    store = flat_store_for(cache)
    word = int(np.asarray(store.tokens[500]))
    tokens = os.path.join(flat_store_dir(cache), TOKENS_FILE)
    b = bytearray(_bytes(tokens))
    b[500 * 4:500 * 4 + 4] = np.int32((word & 0x7FFFFFFF) ^ 0x1 | (word & ~0x7FFFFFFF)).tobytes()
    with open(tokens, "wb") as f:
        f.write(b)
    out = str(tmp_path / "out")
    pack_cache(TokenizedCache(cache.root), Alignment(capacity=1024), output=out)  # no check
    before = {n: _bytes(os.path.join(cache.root, n)) for n in ("flat/tokens.i32", "cache.json")}
    res = subprocess.run([sys.executable, "-m", "packtool.cli", "verify", out, "--source", src,
                          "--cache-dir", root, "--workers", "1"], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "source_tokens" in res.stdout and "Traceback" not in res.stderr
    # the cache under check was neither used nor repaired, and nothing temporary is left
    assert {n: _bytes(os.path.join(cache.root, n)) for n in before} == before
    assert sorted(os.listdir(root)) == [os.path.basename(cache.root)]


def test_verify_source_passes_a_good_output_even_when_the_cache_is_damaged_later(built, tmp_path):
    src, root, cache, _ = built
    out = str(tmp_path / "out")
    assert _cli(*_pack_args(src, root, out)).exit_code == 0
    _flip(os.path.join(flat_store_dir(cache), TOKENS_FILE), 123)
    res = _cli("verify", out, "--source", src, "--cache-dir", root, "--workers", "1")
    assert res.exit_code == 0, res.output
