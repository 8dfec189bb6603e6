"""The flat token store written by tokenize_to_cache (beside the Parquet parts, published with
them) equals the store the pack path rebuilds from Parquet; encode chunking changes nothing;
a failing write leaves no cache behind."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2, GSM8K, PEPS, TASKMASTER

import packtool.tokenize.pipeline as pipeline
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.cache import CacheWriter
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.flat_tokens import TOKENS_FILE, build_flat_tokens, flat_store_dir, flat_store_for
from packtool.tokenize.shapes import RenderedBatch

# one config for every shape: GSM8K as fields through chatml, Taskmaster chats, PEPs as text
CFG = TokenizeConfig(tokenizer=GPT2, chat_template="chatml", prompt_field="question",
                     response_field="answer", on_empty="skip", batch_size=17)


def _inputs(tmp_path) -> list[str]:
    """Real slices plus a file with an empty row (skipped) and a pre-tokenized Parquet file."""
    skip = tmp_path / "skip.jsonl"
    skip.write_text('{"text": "kept"}\n{"text": "  "}\n{"text": "also kept"}\n')
    tok = tmp_path / "tok.parquet"
    # each row trains a token past its first (a labeled row whose only target is its first is all masked)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 7], [5, 6]],
                             "labels": [[-100, 2, 3], [4, 7], [-100, 6]]}), tok)
    return [GSM8K, str(skip), TASKMASTER, str(tok), PEPS]


def _files(d: str) -> dict[str, bytes]:
    return {n: open(os.path.join(d, n), "rb").read() for n in (TOKENS_FILE, "offsets.npy")}


def test_flat_store_is_written_with_the_cache(monkeypatch, tmp_path, cache_dir):
    monkeypatch.setattr(pipeline, "_CHUNK_CHARS", 3000)  # many encode chunks per read batch
    cache = tokenize_to_cache(_inputs(tmp_path), CFG, cache_dir, progress=False)
    assert cache.skipped["empty"] == 1 and cache.num_rows == 200 + 2 + 200 + 3 + 5
    written = flat_store_dir(cache)
    assert os.path.isdir(written) and os.listdir(cache.path) == ["part-00000.parquet"]
    rebuilt = build_flat_tokens(cache.parquet_files, str(tmp_path / "rebuilt"))
    assert _files(written) == _files(rebuilt.directory)
    stamp = {n: os.stat(os.path.join(written, n)).st_mtime_ns for n in os.listdir(written)}
    store = flat_store_for(cache)  # what pack opens: the written store, not a rebuild
    assert store.directory == written
    assert {n: os.stat(os.path.join(written, n)).st_mtime_ns for n in os.listdir(written)} == stamp
    np.testing.assert_array_equal(np.diff(store.offsets), cache.lengths())
    assert int(store.decoded()[1].sum()) == cache.num_loss_tokens


def test_cache_without_flat_store_still_packs(tmp_path, cache_dir):
    """Caches from older builds or the Ray engine have no flat/: the pack path builds it."""
    cache = tokenize_to_cache([GSM8K], CFG, cache_dir, progress=False)
    before = _files(flat_store_dir(cache))
    for n in os.listdir(flat_store_dir(cache)):
        os.remove(os.path.join(flat_store_dir(cache), n))
    os.rmdir(flat_store_dir(cache))
    assert _files(flat_store_for(cache).directory) == before


def test_store_in_the_older_two_file_layout_is_rebuilt_by_pack(tmp_path, cache_dir):
    """A cache from before the one-word store has flat/ids.i32, mask.u8 and offsets.npy: the
    pack (spilled plan, the default) rebuilds the store instead of reading a missing file."""
    from packtool.align import Alignment
    from packtool.packing import pack_cache
    from packtool.verification.run import verify
    cache = tokenize_to_cache([GSM8K], CFG, cache_dir, progress=False)
    d = flat_store_dir(cache)
    want = _files(d)
    ids, mask = flat_store_for(cache).decoded()
    os.remove(os.path.join(d, TOKENS_FILE))
    ids.tofile(os.path.join(d, "ids.i32"))
    mask.tofile(os.path.join(d, "mask.u8"))
    out = str(tmp_path / "out")
    pack_cache(cache, Alignment(capacity=1024), output=out, plan_shard_rows=64)
    assert _files(d) == want and not os.path.exists(os.path.join(d, "mask.u8"))
    assert verify(out).ok


def test_encode_chunking_does_not_change_the_cache(monkeypatch, tmp_path):
    inputs = _inputs(tmp_path)
    whole = tokenize_to_cache(inputs, CFG, str(tmp_path / "a"), progress=False)
    monkeypatch.setattr(pipeline, "_CHUNK_CHARS", 1)  # one row per encode_batch call
    monkeypatch.setattr(pipeline, "_IN_FLIGHT", 1)
    seen = []
    real_build = pipeline._build
    monkeypatch.setattr(pipeline, "_build", lambda *a: seen.append(__import__("gc").get_threshold()) or real_build(*a))
    chunked = tokenize_to_cache(inputs, CFG, str(tmp_path / "b"), progress=False)
    assert seen and seen[0][0] == 50_000  # tokenizing runs with a relaxed collector
    assert pq.read_table(whole.path).equals(pq.read_table(chunked.path))
    for k in ("num_rows", "num_tokens", "num_loss_tokens", "skipped", "inputs"):
        assert whole.meta[k] == chunked.meta[k]


def test_split_rendered_keeps_rows_whole_and_in_order():
    texts = ["a" * 5, "b" * 30, "c", "d" * 4, "e" * 6]
    rb = RenderedBatch(texts, [None, [(0, 1)], None, [], None], [False] * 5)
    parts = pipeline.split_rendered(rb, 10)
    assert [(off, p.texts) for off, p in parts] == [(0, texts[:2]), (2, texts[2:5])]
    assert parts[0][1].spans == [None, [(0, 1)]] and parts[1][1].spans == [None, [], None]
    assert pipeline.split_rendered(rb, 100) == [(0, rb)]
    assert [off for off, _ in pipeline.split_rendered(rb, 1)] == [0, 1, 2, 3, 4]


def test_failed_write_leaves_no_cache(monkeypatch, tmp_path, cache_dir):
    def full_disk(self, *a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(CacheWriter, "add", full_disk)
    import gc
    before = gc.get_threshold()
    with pytest.raises(OSError, match="No space left"):
        tokenize_to_cache([GSM8K], CFG, cache_dir, progress=False)
    assert os.listdir(cache_dir) == []
    assert gc.get_threshold() == before  # the collector's thresholds come back on failure too
