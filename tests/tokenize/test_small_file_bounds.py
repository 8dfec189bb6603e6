"""S32-9, S32-20: what packtool reads whole is bounded. A file small by nature (manifest,
tokenizer_config.json, chat template, datasets state.json, cache.json) over its bound, a
lengths text file of NULs, and one JSON line over the line bound are each refused before they
are read whole, naming the file (and the line): never a bare out-of-memory. The big files are
sparse (no disk used); with the bounds in place none is read."""
from __future__ import annotations

import gzip
import os
import re

import pytest

import packtool.tokenize.text_readers as text_readers
from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.slabs.format import MANIFEST_BYTES, read_manifest
from packtool.tokenize.cache import read_cache_json
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer
from packtool.tokenize.json_depth import SETTINGS_BYTES
from packtool.tokenize.readers import iter_batches, resolve_inputs
from packtool.tokenize.templates import load_template


def _sparse(path, size: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


def _manifest(tmp_path):
    _sparse(tmp_path / "out" / ".manifest.json", MANIFEST_BYTES + 1)
    return lambda: read_manifest(str(tmp_path / "out")), tmp_path / "out" / ".manifest.json"


def _store_manifest(tmp_path):  # the object-store route, through a file:// URI
    _sparse(tmp_path / "out" / ".manifest.json", MANIFEST_BYTES + 1)
    return lambda: read_manifest(f"file://{tmp_path}/out"), tmp_path / "out" / ".manifest.json"


def _tokenizer_config(tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    p = _sparse(tmp_path / "tok" / "tokenizer_config.json", SETTINGS_BYTES + 1)
    return lambda: load_tokenizer(str(tmp_path / "tok"), TokenizeConfig()), p


def _template(tmp_path):
    p = _sparse(tmp_path / "t.jinja", SETTINGS_BYTES + 1)
    return lambda: load_template(p, None), p


def _hf_state(tmp_path):
    p = _sparse(tmp_path / "ds" / "state.json", SETTINGS_BYTES + 1)
    (tmp_path / "ds" / "dataset_info.json").write_text("{}")
    return lambda: resolve_inputs([str(tmp_path / "ds")]), p


def _cache_json(tmp_path):
    p = _sparse(tmp_path / "c" / "cache.json", (256 << 20) + 1)
    return lambda: read_cache_json(str(tmp_path / "c")), p


def _lengths(name):
    def make(tmp_path):
        p = _sparse(tmp_path / name, 3 << 20)
        return lambda: load_lengths(p), p
    return make


SMALL = {"manifest": _manifest, "store manifest": _store_manifest, "tokenizer_config": _tokenizer_config, "chat template": _template,
         "hf state.json": _hf_state, "cache.json": _cache_json,
         **{f"lengths {e}": _lengths(f"l{e}") for e in (".txt", ".csv", ".tsv", ".jsonl")}}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_a_file_over_its_bound_is_refused_by_name_before_reading(tmp_path, case):
    call, path = SMALL[case](tmp_path)
    with pytest.raises(PacktoolError) as e:
        call()
    assert str(e.value).startswith(str(path)) or str(path) in str(e.value), str(e.value)
    assert re.search(r"over the [\d.]+ MiB any|is NUL: not a text file|cache\.json cannot be read", str(e.value))


def _jsonl(path, body: bytes) -> None:
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(body)
    else:
        path.write_bytes(body)


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.ndjson", "l.jsonl"])
@pytest.mark.parametrize("newline_after", [True, False])
def test_a_json_line_over_the_bound_is_refused_naming_file_and_line(tmp_path, monkeypatch, name, newline_after):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", 1 << 18, raising=False)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 16)  # the line spans many reads
    p = tmp_path / name
    _jsonl(p, b'{"text": "ok", "length": 1}\n{"text": "' + b"a" * (1 << 19) + b'"}' + (b"\n" if newline_after else b""))
    with pytest.raises(PacktoolError) as e:
        if name.startswith("l."):
            load_lengths(str(p))
        else:
            for f in resolve_inputs([str(p)]):
                for _ in iter_batches(f, 1000):
                    pass
    assert re.search(rf"^{re.escape(str(p))}: line 2 is longer than 0\.2 MiB.*split that row", str(e.value)), str(e.value)


def test_a_line_under_the_bound_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", 1 << 18, raising=False)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 16)  # the line spans many reads
    p = tmp_path / "d.jsonl"
    p.write_bytes((b'{"text": "' + b"a" * ((1 << 18) - 20) + b'"}\n') * 3)
    rows = sum(b.num_rows for f in resolve_inputs([str(p)]) for b in iter_batches(f, 1000))
    assert rows == 3 and os.path.getsize(p) > 1 << 18


def _intent(tmp_path, pad: int):
    from packtool.slabs.names import read_intents
    name = ".packtool-pending-0123456789ab.json"
    (tmp_path / name).write_bytes(b'{"new": ["slabs-00000.parquet"], "old": []}' + b" " * pad)
    return read_intents(f"file://{tmp_path}")[name]


def _store_cache_json(tmp_path, pad: int):
    from packtool.storage import locate
    from packtool.tokenize.store_cache import recorded_files
    (tmp_path / "cache.json").write_bytes(b'{"checksums": {"part": "x"}}' + b" " * pad)
    return recorded_files(locate(f"file://{tmp_path}"))


# packtool's own small objects on a store, read through Location.read_bytes(limit): over the
# bound each reads as "not one packtool wrote" (the caller's existing path) instead of whole.
STORE = {"intent": (_intent, "packtool.slabs.names.INTENT_BYTES", None),
         "store cache.json": (_store_cache_json, "packtool.tokenize.store_cache.META_BYTES", [])}


@pytest.mark.parametrize("case", sorted(STORE))
def test_a_store_object_over_its_bound_is_not_read_whole(tmp_path, monkeypatch, case):
    read, bound, over = STORE[case]
    monkeypatch.setattr(bound, 1 << 12, raising=False)
    assert read(tmp_path, 100) not in (over, None, [])  # under the bound: read as before
    assert read(tmp_path, 1 << 13) == over
