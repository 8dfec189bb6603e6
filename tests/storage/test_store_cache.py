"""The tokenized cache on an object store (`--cache-dir s3://...`): built once, pulled by another
machine (a fresh local mirror) and reused with the same output bytes; a partial entry (no
cache.json) is never used; a damaged one is rebuilt."""
from __future__ import annotations

import os

from conftest import GPT2, PEPS

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.storage import locate
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.store_cache import ENTRY_META

ARGS = ([PEPS], Alignment(capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))


def _machine(monkeypatch, tmp_path, name):
    """Another machine: its own local cache folder (the store's mirror lives there)."""
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / name))


def _files(out):
    return {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}


def test_a_cache_on_the_store_is_shared_partial_never_used(s3, tmp_path, monkeypatch):
    store = f"{s3}/cache"
    _machine(monkeypatch, tmp_path, "a")
    first = pack(*ARGS, output=str(tmp_path / "o1"), cache_dir=store)
    assert not first.cache_path.startswith("s3:")  # read from the local mirror
    entries = {i.path.split("/")[-2] for i in locate(store).list() if i.path.endswith("/" + ENTRY_META)}
    assert len(entries) == 1
    _machine(monkeypatch, tmp_path, "b")  # pulls the entry instead of tokenizing
    import packtool.tokenize.pipeline as pl
    built = []
    orig = pl._build
    monkeypatch.setattr(pl, "_build", lambda *a, **k: built.append(1) or orig(*a, **k))
    second = pack(*ARGS, output=str(tmp_path / "o2"), cache_dir=store)
    assert built == [] and _files(str(tmp_path / "o1")) == _files(str(tmp_path / "o2"))
    assert second.cache_path.startswith(str(tmp_path / "b"))
    # a partial entry (its writer died before cache.json) is never used: rebuilt, then committed
    (entry,) = entries
    locate(store).join(entry, ENTRY_META).delete()
    _machine(monkeypatch, tmp_path, "c")
    pack(*ARGS, output=str(tmp_path / "o3"), cache_dir=store)
    assert built == [1] and locate(store).join(entry, ENTRY_META).is_file()
    assert _files(str(tmp_path / "o1")) == _files(str(tmp_path / "o3"))


def test_a_damaged_entry_on_the_store_is_rebuilt(s3, tmp_path, monkeypatch, capsys):
    store = f"{s3}/cache"
    _machine(monkeypatch, tmp_path, "a")
    pack(*ARGS, output=str(tmp_path / "o1"), cache_dir=store)
    part = next(i for i in locate(store).list() if i.path.endswith(".parquet"))
    from packtool.storage import Location
    obj = Location(locate(store).fs, part.path, "", False)
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    _machine(monkeypatch, tmp_path, "b")
    pack(*ARGS, output=str(tmp_path / "o2"), cache_dir=store)
    assert "damaged" in capsys.readouterr().err
    assert _files(str(tmp_path / "o1")) == _files(str(tmp_path / "o2"))
    assert obj.read_bytes() != bytes(data)  # the store's entry was replaced by the rebuilt one
    _machine(monkeypatch, tmp_path, "c")
    pack(*ARGS, output=str(tmp_path / "o3"), cache_dir=store)
    assert "damaged" not in capsys.readouterr().err


def _pretokenized(tmp_path) -> str:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(5)
    rows = [rng.integers(1, 50000, int(n)).tolist() for n in rng.integers(5, 900, 300)]
    path = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}), path, row_group_size=64)
    return path


def test_an_entry_is_read_in_place_as_the_local_cache_and_strays_are_never_pulled(s3, tmp_path, monkeypatch):
    """What the Ray engine's tasks do with a store entry: open it as a TokenizedCache by URI and
    read lengths, pieces and token lists by ranged GETs, both layouts (Parquet parts; flat/
    only, for pre-tokenized rows). An object beside the recorded ones (a dead build's part)
    is neither pulled nor read."""
    import numpy as np

    from packtool.tokenize.cache import TokenizedCache, cache_pieces, cache_problem
    from packtool.tokenize.pipeline import tokenize_to_cache
    _machine(monkeypatch, tmp_path, "a")
    for inputs, cfg in (([PEPS], TokenizeConfig(tokenizer=GPT2)), ([_pretokenized(tmp_path)], TokenizeConfig(shape="tokens"))):
        store = f"{s3}/c-{cfg.shape or 'text'}"
        local = tokenize_to_cache(inputs, cfg, store, progress=False)
        key = os.path.basename(local.root)
        remote = TokenizedCache(f"{store}/{key}")
        assert remote.flat_only == (cfg.shape == "tokens") and cache_problem(remote.root, local.fingerprint) is None
        assert np.array_equal(remote.lengths(), local.lengths())
        for (lp, gs, first, _), (rp, _, _, _) in zip(cache_pieces(local, 2), cache_pieces(remote, 2)):
            assert local.token_lists(lp, gs, first).equals(remote.token_lists(rp, gs, first))
        locate(store).join(key, "data", "part-999999999999-000.parquet").write_bytes(b"a dead build's part")
        _machine(monkeypatch, tmp_path, f"b-{key}")
        again = tokenize_to_cache(inputs, cfg, store, progress=False)
        assert again.reused and sorted(os.listdir(again.path)) == sorted(os.listdir(local.path))


def test_an_edited_cache_json_on_the_store_is_rebuilt(s3, tmp_path, monkeypatch, capsys):
    """cache.json's own values are checked as its files are (S43-3): an entry whose cache.json
    was edited on the store (a count, here) is pulled, refused and rebuilt, never reused."""
    import json
    store = f"{s3}/cache"
    _machine(monkeypatch, tmp_path, "a")
    pack(*ARGS, output=str(tmp_path / "o1"), cache_dir=store)
    meta_obj = next(i for i in locate(store).list() if i.path.endswith("/" + ENTRY_META))
    from packtool.storage import Location
    obj = Location(locate(store).fs, meta_obj.path, "", False)
    meta = json.loads(obj.read_bytes())
    meta["num_loss_tokens"] += 1
    obj.write_bytes(json.dumps(meta, indent=1).encode())
    _machine(monkeypatch, tmp_path, "b")
    capsys.readouterr()
    pack(*ARGS, output=str(tmp_path / "o2"), cache_dir=store)
    assert "cache.json was changed after packtool wrote it" in capsys.readouterr().err
    assert _files(str(tmp_path / "o1")) == _files(str(tmp_path / "o2"))
    assert json.loads(obj.read_bytes())["num_loss_tokens"] == meta["num_loss_tokens"] - 1  # replaced
