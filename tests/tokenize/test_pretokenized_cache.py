"""A cache of pre-tokenized inputs keeps its token lists in flat/ only (cache.json
`token_lists: flat`), and `loss_mask` rows that are all targets are stored as nulls (cache
version 3). Both must stay invisible to every reader: read_rows, the flat store rebuilt from
Parquet, Ray's piece reader (`token_lists`), the trust check on reuse."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2

from packtool.tokenize import TokenizeConfig, pipeline, tokenize_to_cache
from packtool.tokenize.cache import CacheDamagedError, TokenizedCache, cache_problem
from packtool.tokenize.cache_parts import CacheWriter, mask_column, mask_values
from packtool.tokenize.flat_tokens import TOKENS_FILE, build_flat_tokens, flat_store_dir, flat_store_for, pack_tokens


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _rows(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, int(k)).tolist() for k in rng.integers(1, 40, n)]


@pytest.fixture
def built(tmp_path):
    rows = _rows(300)
    src = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}), src, row_group_size=70)
    root = str(tmp_path / "cache")
    cache = tokenize_to_cache([src], TokenizeConfig(shape="tokens", batch_size=32), root, progress=False)
    files = {os.path.relpath(os.path.join(d, n), cache.root): _bytes(os.path.join(d, n))
             for d, _, ns in os.walk(cache.root) for n in ns}
    return src, root, cache, rows, files


def _rebuilt(src, root, capsys):
    pipeline.NOTES.clear()
    again = tokenize_to_cache([src], TokenizeConfig(shape="tokens", batch_size=32), root, progress=False)
    return again, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("packtool:")]


def test_token_lists_live_in_flat_only_and_read_back_whole(built):
    _, _, cache, rows, _ = built
    meta = json.loads(_bytes(os.path.join(cache.root, "cache.json")))
    assert meta["token_lists"] == "flat" and cache.flat_only
    assert "input_ids" not in meta["columns"] and "length" in meta["columns"]
    names = pq.read_schema(cache.parquet_files[0]).names
    assert names == ["length", "source_index", "source_file"]
    assert sorted(meta["checksums"]) == sorted(
        [f"data/{p['file']}" for p in meta["parts"]] + ["flat/tokens.i32", "flat/offsets.npy"])
    assert cache.lengths().tolist() == [len(r) for r in rows]
    idx = np.array([5, 0, 299, 5, 120])
    got = cache.read_rows(idx)
    for k, i in enumerate(idx):
        a, b = got.offsets[k], got.offsets[k + 1]
        assert got.input_ids[a:b].tolist() == rows[i] and got.loss_mask[a:b].tolist() == [1] * len(rows[i])
    assert cache.num_loss_tokens == cache.num_tokens == sum(map(len, rows))


def test_ray_piece_reader_gets_the_same_rows(built):
    """engines/ray_write.cache_source reads pieces through TokenizedCache.token_lists."""
    from packtool.tokenize.cache import cache_pieces
    _, _, cache, rows, _ = built
    seen = []
    for path, gs, first, n in cache_pieces(cache, groups_per_task=1):
        t = cache.token_lists(path, gs, first)
        assert t.num_rows == n
        seen += t.column("input_ids").to_pylist()
        assert all(all(v == 1 for v in m) for m in t.column("loss_mask").to_pylist())
    assert seen == rows


@pytest.mark.parametrize("name", ["flat/tokens.i32", "flat/offsets.npy", "data/part-00000.parquet"])
def test_flipped_byte_is_caught_and_rebuilt(built, capsys, name):
    src, root, cache, _, files = built
    p = os.path.join(cache.root, name)
    b = bytearray(_bytes(p))
    b[len(b) // 2] ^= 1
    with open(p, "wb") as f:
        f.write(b)
    again, lines = _rebuilt(src, root, capsys)
    assert not again.reused and len(lines) == 1 and name in lines[0] and "rebuilding" in lines[0]
    assert _bytes(os.path.join(again.root, name)) == files[name]


def test_missing_flat_store_is_a_damaged_cache(built, capsys):
    """flat/ is the only copy of the tokens: gone, the cache is rebuilt from the inputs (one
    line), and a caller opening the cache directly is told to delete it."""
    src, root, cache, _, files = built
    shutil.rmtree(flat_store_dir(cache))
    assert "flat/tokens.i32" in cache_problem(cache.root, cache.fingerprint)
    with pytest.raises(CacheDamagedError, match="only copy"):
        flat_store_for(TokenizedCache(cache.root))
    again, lines = _rebuilt(src, root, capsys)
    assert not again.reused and len(lines) == 1 and "flat/tokens.i32 is missing" in lines[0]
    assert _bytes(os.path.join(flat_store_dir(again), TOKENS_FILE)) == files["flat/tokens.i32"]


def test_a_mixed_cache_keeps_parquet_token_lists(tmp_path, cache_dir):
    """A cache with any text input keeps input_ids/loss_mask in its parts (the documented
    dataset); only all-pre-tokenized caches drop them."""
    tok = tmp_path / "tok.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4]]}), tok)
    txt = tmp_path / "t.jsonl"
    txt.write_text('{"text": "hello there"}\n')
    cache = tokenize_to_cache([str(tok), str(txt)], TokenizeConfig(tokenizer=GPT2), cache_dir, progress=False)
    assert not cache.flat_only
    t = pq.read_table(cache.path)
    assert t.column("input_ids").to_pylist()[:2] == [[1, 2, 3], [4]]
    assert t.column("loss_mask").null_count == 3  # every row is all targets: stored as nulls
    assert cache.read_rows([0, 1]).loss_mask.tolist() == [1, 1, 1, 1]


def test_mask_codec_round_trips_mixed_rows(tmp_path):
    """Rows whose mask is all ones become nulls, others keep their values; mask_values, the
    flat store rebuilt from the part, and read_rows give the original masks back."""
    rng = np.random.default_rng(4)
    lens = rng.integers(0, 12, 500).astype(np.int32)
    offs = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    ids = rng.integers(0, 1000, int(offs[-1])).astype(np.int32)
    mask = np.ones(ids.size, np.uint8)
    some = rng.random(lens.size) < 0.5
    for r in np.nonzero(some & (lens > 0))[0]:
        mask[offs[r] + rng.integers(0, lens[r])] = 0
    col = mask_column(mask, offs)
    assert col.null_count == int((~(some & (lens > 0))).sum())
    ids_col = pa.ListArray.from_arrays(pa.array(offs), pa.array(ids))
    assert np.array_equal(mask_values(ids_col, col), mask)
    assert np.array_equal(mask_values(ids_col.slice(7, 100), col.slice(7, 100)), mask[offs[7]:offs[107]])
    w = CacheWriter(str(tmp_path))
    w.ROWS_PER_GROUP = 64
    for a in range(0, lens.size, 50):
        e = min(a + 50, lens.size)
        w.add(ids[offs[a]:offs[e]], mask[offs[a]:offs[e]], lens[a:e], np.arange(a, e), 0)
    parts = [str(tmp_path / "data" / p["file"]) for p in w.close()]
    store = build_flat_tokens(parts, str(tmp_path / "flat"))
    assert np.array_equal(np.asarray(store.tokens), pack_tokens(ids, mask))
    t = pq.read_table(parts)
    assert np.array_equal(mask_values(t.column("input_ids"), t.column("loss_mask")), mask)


def test_an_input_changed_while_read_is_an_error_and_leaves_no_cache(tmp_path, monkeypatch):
    """The key is the content hashed before reading; the file is hashed again once read (beside
    the writes), and a difference is an error naming the file, with nothing published."""
    from packtool.errors import PacktoolInputError
    src = tmp_path / "tok.parquet"
    pq.write_table(pa.table({"input_ids": pa.array(_rows(200), pa.list_(pa.int32()))}), src, row_group_size=50)
    inner = pipeline._tokens_batch

    def edit_then_read(batch, *a, **k):
        with open(src, "ab") as f:  # the bytes change under the reader (its footer is already read)
            f.write(b"x")
        return inner(batch, *a, **k)
    monkeypatch.setattr(pipeline, "_tokens_batch", edit_then_read)
    root = tmp_path / "cache"
    with pytest.raises(PacktoolInputError, match=r"tok\.parquet: the file changed while it was being tokenized"):
        tokenize_to_cache([str(src)], TokenizeConfig(shape="tokens"), str(root), progress=False)
    assert not os.path.exists(root)  # the cache folder this run made is removed with the rest


def test_an_error_stops_the_read_ahead_thread(tmp_path):
    """A bad row raises in the caller; the thread decoding ahead is stopped, not left behind."""
    import threading

    from packtool.errors import PacktoolInputError
    src = tmp_path / "bad.parquet"
    rows = _rows(400)
    rows[300] = [-1]
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}), src, row_group_size=50)
    try:
        tokenize_to_cache([str(src)], TokenizeConfig(shape="tokens", batch_size=20), str(tmp_path / "c"),
                          progress=False)
    except PacktoolInputError as e:  # checked while the error (and its frames) is still held
        assert "bad.parquet, row 300: input_ids[0] is -1, outside 0..2147483647" in str(e)
        assert not [t for t in threading.enumerate() if t.name == "packtool-read"]
    else:
        pytest.fail("a negative id was accepted")
