"""Tokenizing holds no memory per row (issue 23 class 8): what is alive at once is set by the
encode chunks in flight and the writers' bounded queues, not by how many rows went by, and
glibc's arenas do not keep more than that plus a bounded slack.

Two probes, each at N and 4N chat rows in one process with small chunks, batches and row
groups (so every bounded buffer is full at N already): the traced Python/numpy heap's peak
(a list kept per row or per batch, rendered texts or EncodedBatches held to the end: all
traced), and the rendered characters whose Encodings are alive at once (native, untraced).
The probe is shown to see a per-row holder.

What the arenas keep is not measured here by RSS: its growth showed from 10k to 30k rows
(minutes of tokenizing; bench/chat_memory.py, BENCHMARKS.md "Raw chat pack: peak RSS"), and
the RSS of a few hundred rows moves more with imports than with rows. The two bounds that
flattened it are tested instead, each against the glibc behaviour it answers (a control that
fails without it): large blocks keep pages of their own once tokenizing fixed the mmap
threshold, and a HeapBound over its slack hands a fragmented arena's free pages back; the
pipeline checks its bound after every encode chunk.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import tracemalloc

import pytest
from conftest import GPT2, TASKMASTER

import packtool.heap as heap
import packtool.tokenize.pipeline as pipeline
import packtool.tokenize.text_readers as text_readers
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
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 14)  # whole lines read at once


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
    # the least of three runs, the sizes taken in turn: what is in flight at the peak (encode
    # chunks, a read batch) varies with the threads' timing and only ever adds (one run under
    # load measured 1,036 B/row; a spike in both small runs of two, back to back, once made the
    # control read -32,104 B/row)
    peaks: dict[int, list[int]] = {N: [], 4 * N: []}
    for i in range(3):
        for n in peaks:
            peaks[n].append(_peak(data[n], str(tmp_path / f"r{n}-{i}"), monkeypatch))
    small, large = min(peaks[N]), min(peaks[4 * N])
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


GLIBC = pytest.mark.skipif(heap._LIBC is None, reason="the bounds are glibc's (no-ops elsewhere)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fresh(code: str, *args: str) -> str:
    """`code` in a fresh process (glibc's settings are per process and cannot be undone)."""
    got = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout.split()[-1]


LARGE_BLOCK = r"""
import ctypes, sys
from packtool import heap
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
block = bytearray(16 << 20)  # a 16 MB JSON block: mapped, then freed, and glibc's threshold follows it
del block
if sys.argv[1] != "default":
    heap.bound_heap()
if sys.argv[1] == "unbound":  # after the encoding: tens-of-MB arrays come from the arenas again
    heap.unbound_heap()
mapped = libc.mallinfo2().hblkhd
block = bytearray(heap.MMAP_THRESHOLD + (1 << 20))  # the next large block
print(libc.mallinfo2().hblkhd - mapped >= heap.MMAP_THRESHOLD)
"""


@GLIBC
@pytest.mark.parametrize("bound", ["bound", "default", "unbound"])
def test_large_blocks_keep_pages_of_their_own(bound):
    """glibc's default threshold rises to the largest mapped block freed, so every later block
    below it is carved from an arena that keeps it resident; bound_heap fixes it while text is
    encoded, and unbound_heap gives the arenas back the large blocks after (no page faults per
    batch in the ingest of pre-tokenized rows and the write)."""
    assert _fresh(LARGE_BLOCK, bound) == str(bound == "bound")


FRAGMENTED = r"""
import sys, threading
from packtool import heap
bound = heap.HeapBound(int(sys.argv[1]))
bound.check()  # the low point
def encode(keep):  # an encode thread's arena: ~60 MB of 1 KB blocks, 1 in 16 still alive after
    blocks = [bytes(1000) for _ in range(60000)]
    keep.extend(blocks[::16])
keep = []
t = threading.Thread(target=encode, args=(keep,))
t.start()
t.join()
before = heap.anon_bytes()
bound.check()
print(bound.trims, (before - heap.anon_bytes()) >> 20, sep=",")
"""


@GLIBC
@pytest.mark.parametrize("slack", [8 << 20, 1 << 40], ids=["over the slack", "under it (control)"])
def test_a_heap_bound_hands_back_what_the_arenas_keep(slack):
    trims, freed = map(int, _fresh(FRAGMENTED, str(slack)).split(","))
    if slack < 1 << 30:
        assert trims == 1 and freed > 20, (trims, freed)
    else:  # without a trim the freed blocks' pages stay resident: what the bound is for
        assert trims == 0 and freed < 5, (trims, freed)


THREAD_TOP = r"""
import threading
from packtool import heap
heap.bound_heap()
def encode():  # an encode thread: ~6 MB of 64 KB blocks (written), all freed into its arena's top
    blocks = [None] * 96  # sized first: nothing of this thread's lands above the blocks
    for i in range(96):
        blocks[i] = b"x" * (64 << 10)
    del blocks
base = heap.anon_bytes()
t = threading.Thread(target=encode)
t.start()
t.join()
heap.trim()  # what HeapBound does: returns free pages inside every arena, never a thread arena's top
print((heap.anon_bytes() - base) >> 20)
"""


@GLIBC
def test_a_thread_arenas_freed_top_is_handed_back():
    """A thread's arena keeps what is freed at its top up to the trim threshold, and no trim
    returns it: with every encode and writer thread's arena doing so, what a run left resident
    grew with its length (issue 23 class 8). bound_heap's threshold returns it as it is freed
    (at the old 8 MiB the whole ~6 MiB stayed)."""
    assert int(_fresh(THREAD_TOP)) < 2

def test_heap_bound_trims_only_over_its_slack(monkeypatch):
    anon, trims = [100], []
    monkeypatch.setattr(heap, "_LIBC", object())
    monkeypatch.setattr(heap, "anon_bytes", lambda: anon[0])
    monkeypatch.setattr(heap, "trim", lambda: trims.append(anon[0]) or anon.__setitem__(0, 105))
    b = heap.HeapBound(10)
    for now, trimmed in [(100, 0), (110, 0), (90, 0), (100, 0), (101, 1), (112, 1), (116, 2)]:
        anon[0] = now  # the low point follows the lowest seen; a trim sets it to what is left
        b.check()
        assert b.trims == trimmed, (now, b.trims, b.low)


def test_the_pipeline_bounds_the_heap_after_every_encode_chunk(data, small_buffers, monkeypatch, tmp_path):
    chunks, checks, bounds = [0], [0], []
    real_chunk, real_check, real_bound = pipeline._encode_chunk, heap.HeapBound.check, pipeline.bound_heap

    def chunk(*a):
        chunks[0] += 1
        return real_chunk(*a)

    def check(self):
        checks[0] += 1
        return real_check(self)
    monkeypatch.setattr(pipeline, "_encode_chunk", chunk)
    monkeypatch.setattr(heap.HeapBound, "check", check)
    monkeypatch.setattr(pipeline, "bound_heap", lambda: bounds.append(1) or real_bound())
    tokenize_to_cache([data[N]], CFG, str(tmp_path / "c"), progress=False)
    assert bounds == [1] and chunks[0] > 3 and checks[0] == chunks[0], (bounds, chunks, checks)
    assert not heap._bound  # undone for what follows the encoding


def test_pre_tokenized_rows_leave_the_heap_unbound(tmp_path, monkeypatch):
    """No text to encode, no bound: a pre-tokenized ingest's large arrays stay in the arenas."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    bounds = []
    real_bound = pipeline.bound_heap
    monkeypatch.setattr(pipeline, "bound_heap", lambda: bounds.append(1) or real_bound())
    path = str(tmp_path / "ids.parquet")
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]]}), path)
    tokenize_to_cache([path], TokenizeConfig(), str(tmp_path / "c"), progress=False)
    assert bounds == [] and not heap._bound
