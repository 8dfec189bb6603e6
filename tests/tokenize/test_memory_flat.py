"""Tokenizing holds no memory per row (issue 23 class 8): what is alive at once is set by the
encode chunks in flight and the writers' bounded queues, not by how many rows went by.

Two probes, each at N and 4N chat rows in one process with small chunks, batches and row
groups (so every bounded buffer is full at N already): the traced Python/numpy heap's peak
(a list kept per row or per batch, rendered texts or EncodedBatches held to the end: all
traced), and the rendered characters whose Encodings are alive at once (native, untraced:
what set the raw chat pack's peak RSS). The probe is shown to see a per-row holder.
"""
from __future__ import annotations

import gzip
import json
import threading
import tracemalloc

import pytest
from conftest import GPT2, TASKMASTER

import packtool.tokenize.pipeline as pipeline
import packtool.tokenize.readers as readers
import packtool.tokenize.sink as sink
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.cache import CacheWriter
from packtool.tokenize.config import TokenizeConfig

CFG = TokenizeConfig(tokenizer=GPT2, chat_template="chatml", batch_size=16)
N = 40
PER_ROW = 1024  # bytes of traced heap a row may add: above the peak's noise (~250 B/row here);
# a row's ids are ~2.4 KB, its rendered text ~1.9 KB


def _chats(path, n: int) -> str:
    rows = [json.loads(line) for line in gzip.open(TASKMASTER, "rt")]
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({**rows[i % len(rows)], "id": f"r{i}"}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("chats")
    files = {n: _chats(d / f"chats_{n}.jsonl", n) for n in (N, 4 * N)}
    tokenize_to_cache([files[N]], CFG, str(d / "warm"), progress=False)  # imports, compiled code
    return files


@pytest.fixture
def small_buffers(monkeypatch):
    monkeypatch.setattr(pipeline, "_CHUNK_CHARS", 4000)  # a few rows per encode chunk
    monkeypatch.setattr(CacheWriter, "ROWS_PER_GROUP", 16)
    monkeypatch.setattr(CacheWriter, "TOKENS_PER_GROUP", 1 << 14)
    monkeypatch.setattr(readers, "_JSONL_BLOCK", 1 << 14)  # whole lines read at once


def _peak(path: str, cache_dir: str, monkeypatch) -> int:
    """Traced heap's peak from the first rows written to the end of tokenizing `path`, over
    what was held then (set-up, such as the tokenizer's vocabulary, is left out)."""
    at_start, add = [], sink.CacheSink.add

    def first(self, *a, **k):
        if not at_start:
            tracemalloc.reset_peak()
            at_start.append(tracemalloc.get_traced_memory()[0])
        return add(self, *a, **k)

    monkeypatch.setattr(sink.CacheSink, "add", first)
    tracemalloc.start()
    try:
        tokenize_to_cache([path], CFG, cache_dir, progress=False)
        return tracemalloc.get_traced_memory()[1] - at_start[0]
    finally:
        tracemalloc.stop()
        monkeypatch.setattr(sink.CacheSink, "add", add)


@pytest.mark.parametrize("holder", [False, True], ids=["as shipped", "a holder of each row's ids (control)"])
def test_traced_peak_does_not_grow_with_rows(data, small_buffers, monkeypatch, tmp_path, holder):
    if holder:  # what the probe must catch: every row's ids kept until the end
        kept, add = [], sink.CacheSink.add
        monkeypatch.setattr(sink.CacheSink, "add", lambda self, ids, *a, **k: kept.append(ids.copy())
                            or add(self, ids, *a, **k))
    small = _peak(data[N], str(tmp_path / "a"), monkeypatch)
    large = _peak(data[4 * N], str(tmp_path / "b"), monkeypatch)
    grown = (large - small) / (3 * N)
    if holder:
        assert grown > PER_ROW, f"the probe missed a per-row holder ({grown:.0f} B/row)"
    else:
        assert grown < PER_ROW, f"traced peak grew {grown:.0f} B per row ({small:,} -> {large:,} B)"


def test_encodings_alive_at_once_do_not_grow_with_rows(data, small_buffers, monkeypatch, tmp_path):
    live, most, longest, lock = [0], [0], [0], threading.Lock()
    real = pipeline._encode_chunk

    def counted(loaded, rb, *a):
        chars = sum(map(len, rb.texts))
        with lock:
            live[0] += chars
            most[0] = max(most[0], live[0])
            longest[0] = max(longest[0], *map(len, rb.texts))
        try:
            return real(loaded, rb, *a)  # its Encodings die inside
        finally:
            with lock:
                live[0] -= chars

    monkeypatch.setattr(pipeline, "_encode_chunk", counted)
    for n in (N, 4 * N):
        most[0] = 0
        tokenize_to_cache([data[n]], CFG, str(tmp_path / str(n)), progress=False)
        # a chunk ends at the row that reaches _CHUNK_CHARS: at most one row over
        assert 0 < most[0] <= pipeline._IN_FLIGHT * (pipeline._CHUNK_CHARS + longest[0]), (n, most[0])


def test_default_encode_budget():
    """At the defaults, the chunks in flight hold at most 768 Ki rendered characters (~190 MiB
    of glibc heap at 3 x 1 Mi, which set the chat pack's peak RSS: BENCHMARKS.md)."""
    assert pipeline._IN_FLIGHT * pipeline._CHUNK_CHARS <= 3 << 18
