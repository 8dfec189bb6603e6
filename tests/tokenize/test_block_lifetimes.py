"""Issue 23 class 8: a raw pack's peak rose with its rows because the reading side held two
generations of its transients at once: the JSON Lines reader read, copied, checked and parsed
block N+1 while block N's bytes (the read chunk and its joined copy) and parsed table were still
referenced, and the tokenize loop held batch N (a slice of block N's whole table) while block
N+1 was read. A run's peak was its rarest overlap of those with the encoders' and writers'
transients, and a longer run met a rarer one. These tests hold each to one generation, and the
cache writer's group of token lists (its largest sawtooth) to a fixed size."""
from __future__ import annotations

import bz2
import gzip
import json
import tracemalloc
import weakref

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import GPT2

from packtool.tokenize import pipeline, text_readers, tokenize_to_cache
from packtool.tokenize.cache import DATA_DIR
from packtool.tokenize.cache_parts import CacheWriter
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.text_readers import jsonl_batches

BLOCK = 256 << 10
OPENERS = {".jsonl": open, ".jsonl.gz": gzip.open, ".jsonl.bz2": bz2.open}


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"text": " ".join(f"w{x}" for x in rng.integers(0, 10_000, 60)), "id": i} for i in range(n)]


@pytest.fixture(scope="module", params=sorted(OPENERS))
def blocks_file(request, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("blocks") / f"rows{request.param}"
    with OPENERS[request.param](path, "wt") as f:  # ~2 MiB of text: eight blocks of BLOCK
        f.writelines(json.dumps(r) + "\n" for r in _rows(6000))
    return str(path)


def test_the_json_reader_holds_one_blocks_bytes_at_a_time(blocks_file):
    """Python-side bytes alive while the reader moves to its next block: the read chunk and its
    joined copy of one block (2x), never the last block's too (4x, 5x with the UTF-8 check's
    decoded copy: what it held before)."""
    it = jsonl_batches(blocks_file, 1 << 20, ["text"], block_bytes=BLOCK)
    rows = next(it).num_rows  # the first block: the reader's (and Arrow's) start-up
    tracemalloc.start()
    try:
        peaks = []
        while True:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            batch = next(it, None)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            if batch is None:
                break
            rows += batch.num_rows
            del batch
    finally:
        tracemalloc.stop()
    assert rows == 6000 and len(peaks) > 6
    assert max(peaks) < 2.6 * BLOCK, [round(p / BLOCK, 2) for p in peaks]


@pytest.mark.parametrize("kind", ["text", "chat"])
def test_tokenizing_drops_each_block_before_the_next_is_read(tmp_path, monkeypatch, kind):
    """The tokenize loop holds no batch of a block (each a slice of the block's whole table) when
    the next block is read: blocks of a few rows here, one batch each. (Pre-tokenized batches
    are read ahead on purpose, two deep: tokenize.prefetch.)"""
    rows = _rows(300)
    if kind == "chat":
        rows = [{"messages": [{"role": "user", "content": r["text"][:40]},
                              {"role": "assistant", "content": r["text"][40:]}]} for r in rows]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    real, alive, checked = pipeline.batches_of, [], []

    def watched(*a, **k):
        for b in real(*a, **k):
            checked.append(all(ref() is None for ref in alive))
            alive.append(weakref.ref(b))
            yield b
            del b
    monkeypatch.setattr(pipeline, "batches_of", watched)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 8 << 10)
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml" if kind == "chat" else None)
    cache = tokenize_to_cache([str(path)], cfg, str(tmp_path / "cache"), progress=False)
    assert cache.num_rows == 300 and len(checked) > 10
    assert all(checked), checked


@pytest.mark.parametrize("rows_per_add", [1, 64, 512])
def test_a_cache_parts_row_group_of_token_lists_stays_under_its_token_bound(tmp_path, rows_per_add):
    """The writer's group (ids and masks waiting, then encoded at once) ends at
    LIST_TOKENS_PER_GROUP tokens plus the add that crossed it, however many rows that is."""
    w = CacheWriter(str(tmp_path), token_lists=True)
    per_row = 3 * CacheWriter.LIST_TOKENS_PER_GROUP // 4096  # 3 groups' worth in 4096 rows
    lens = np.full(rows_per_add, per_row, np.int32)
    for k in range(0, 4096, rows_per_add):
        ids = np.arange(lens.sum(), dtype=np.int32) % 50_000
        w.add(ids, None, lens, np.arange(k, k + rows_per_add, dtype=np.int64), 0)
    parts = w.close()
    f = pq.ParquetFile(tmp_path / DATA_DIR / parts[0]["file"])
    groups = [f.metadata.row_group(g).num_rows * per_row for g in range(f.num_row_groups)]
    assert sum(groups) == 4096 * per_row and len(groups) >= 3
    assert max(groups) <= CacheWriter.LIST_TOKENS_PER_GROUP + rows_per_add * per_row, groups
