"""A damaged tokenized-cache entry on a store follows a local entry's rule (S45A-9): one that
holds objects packtool did not write there is named with them and left, and the run stops
(exit 2), on both engines; before, it was rebuilt in place with the user's object left inside,
unnamed. A damaged entry holding only packtool's objects is rebuilt, and the note names the
store entry (not only the machine's local mirror of it)."""
from __future__ import annotations

import pytest
from conftest import GPT2, GSM8K, ray_grouped

from packtool.errors import PacktoolCacheError
from packtool.storage import Location, locate
from packtool.tokenize import TokenizeConfig, tokenize_to_cache

CFG = TokenizeConfig(tokenizer=GPT2)
FOREIGN = ["MY_NOTES.txt", "flat/MY_NOTES.txt", "data/x/notes.txt"]


def _src(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    with open(GSM8K) as f:
        path.write_text("".join(f.readlines()[:10]))
    return str(path)


def _objects(store: str) -> dict[str, bytes]:
    root = locate(store)
    return {i.path[len(root.path) + 1:]: Location(root.fs, i.path, "", False).read_bytes() for i in root.list()}


def _damaged_entry(store: str, src: str, tmp_path, monkeypatch) -> str:
    """Build the entry on machine `a`, flip one byte of its tokens; the entry's URI."""
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "a"))
    tokenize_to_cache([src], CFG, cache_dir=store, progress=False)
    key = next(k.split("/")[0] for k in _objects(store) if k.endswith("/cache.json"))
    tokens = locate(store).join(key, "flat", "tokens.i32")
    data = bytearray(tokens.read_bytes())
    data[100] ^= 1
    tokens.write_bytes(bytes(data))
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "b"))  # another machine: a fresh mirror
    return f"{store}/{key}"


def _local(src, store):
    tokenize_to_cache([src], CFG, cache_dir=store, progress=False)


def _ray(src, store):
    from packtool.engines.ray_engine import tokenized_cache
    tokenized_cache([src], CFG, store)


ENGINES = {"local": _local, "ray": _ray}


@pytest.mark.parametrize("foreign", FOREIGN)
@pytest.mark.parametrize("engine", ray_grouped(ENGINES))
def test_a_damaged_store_entry_holding_a_foreign_object_is_named_and_left(engine, foreign, s3, tmp_path,
                                                                          monkeypatch, request):
    if engine == "ray":
        request.getfixturevalue("local_ray")
    store, src = f"{s3}/c", _src(tmp_path)
    entry = _damaged_entry(store, src, tmp_path, monkeypatch)
    locate(entry).join(*foreign.split("/")).write_bytes(b"mine")
    before = _objects(store)
    with pytest.raises(PacktoolCacheError) as e:
        ENGINES[engine](src, store)
    message = str(e.value)
    assert "\n" not in message and entry in message and foreign in message, message
    assert "did not write there" in message and "damaged" in message, message
    assert _objects(store) == before  # left as it was: the user's object and the damaged entry


@pytest.mark.parametrize("engine", ray_grouped(ENGINES))
def test_a_damaged_store_entry_is_rebuilt_and_named(engine, s3, tmp_path, monkeypatch, capsys, request):
    if engine == "ray":
        request.getfixturevalue("local_ray")
    store, src = f"{s3}/c", _src(tmp_path)
    entry = _damaged_entry(store, src, tmp_path, monkeypatch)
    capsys.readouterr()
    ENGINES[engine](src, store)
    err = capsys.readouterr().err
    assert f"tokenized cache {entry} is damaged" in err and "rebuilding" in err, err
    assert str(tmp_path / "b") not in err, err  # the store entry is named, not the mirror
