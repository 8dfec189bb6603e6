"""What the shard writers hold does not grow with the shards' length (issue 23 class 8).

Longer shards (more rows) used to keep more: a shard marked for read-ahead from its start ran
beside the other writers with extra batches in flight for as long as they lasted, and each
writer's glibc arena kept its freed top (trim threshold 64 MiB after tokenizing) and its free
pages between shards. Each rule is tested against its mechanism: batches alive at once, when a
read-ahead starts, and a writer thread's freed top (in a fresh process: glibc's settings are
per process)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from slab_support import PAD, write_source

from packtool import heap
from packtool.align import Alignment
from packtool.planning.core import PackingConfig, plan
from packtool.slabs import writer
from packtool.slabs.writer import SlabWriter, write_shard_file

LENGTHS = np.random.default_rng(11).integers(1, 700, 1500)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_source(str(tmp_path_factory.mktemp("src")), LENGTHS, seed=4)


@pytest.fixture(scope="module")
def packed():
    return plan(LENGTHS, Alignment(capacity=2048), PackingConfig("bfd", overflow="split", seed=2))


class _Counting(SlabWriter):
    def __init__(self, *a):
        super().__init__(*a)
        self.made = 0

    def batch(self, b0, b1):
        out = super().batch(b0, b1)
        self.made += 1
        return out


def test_a_shard_with_read_ahead_holds_two_batches_at_most(tmp_path, store, packed, monkeypatch):
    """While row group i is encoded, at most group i + 1 is made (a queue of depth 1 let the
    helper make i + 2 and wait with it: three batches of one shard alive)."""
    w = _Counting(packed, store, PAD)
    seen, real = [], pq.ParquetWriter.write_batch

    def write_batch(self, batch, **kw):
        time.sleep(0.02)  # the helper runs as far ahead as it may
        seen.append(w.made - len(seen))
        return real(self, batch, **kw)
    monkeypatch.setattr(pq.ParquetWriter, "write_batch", write_batch)
    sl = packed.layout.slab_len
    write_shard_file(w, sl, 0, str(tmp_path / "s.parquet"), 4_000, ahead=lambda: True)
    assert len(seen) > 5 and max(seen) == 2, seen  # this one and the next


def test_a_shard_without_read_ahead_makes_each_batch_when_written(tmp_path, store, packed, monkeypatch):
    w = _Counting(packed, store, PAD)
    seen, real = [], pq.ParquetWriter.write_batch
    monkeypatch.setattr(pq.ParquetWriter, "write_batch",
                        lambda self, b, **kw: seen.append(w.made - len(seen)) or real(self, b, **kw))
    write_shard_file(w, packed.layout.slab_len, 0, str(tmp_path / "s.parquet"), 4_000, ahead=lambda: False)
    assert len(seen) > 5 and set(seen) == {1}


def test_read_ahead_starts_only_once_a_core_is_spare():
    """4 shards, 2 writers: shard 3 runs beside shard 2 and may read ahead only once shard 2 is
    done (before, the last shard read ahead from its start, beside the other writer)."""
    asked, two_done, three_asked = {}, threading.Event(), threading.Event()

    def write_one(k, rows_cb, ahead):
        if k == 2:  # still writing while shard 3 asks; done (counted) a moment after it returns
            assert three_asked.wait(10)
            threading.Timer(0.1, two_done.set).start()
            return k
        asked.setdefault(k, []).append(ahead())
        if k == 3:
            three_asked.set()
            assert two_done.wait(10)
            asked[k].append(ahead())
        return k
    assert writer.run_shards(4, write_one, workers=2) == [0, 1, 2, 3]
    assert asked[0] == [False] and asked[1] == [False], asked
    assert asked[3] == [False, True], asked


def test_every_row_group_checks_the_heap_bound(monkeypatch):
    checks = []
    monkeypatch.setattr(heap.HeapBound, "check", lambda self: checks.append(1))

    def write_one(k, rows_cb, ahead):
        for _ in range(3):
            rows_cb(1)
        return k
    for workers in (1, 2):
        checks.clear()
        assert writer.run_shards(5, write_one, workers=workers) == list(range(5))
        assert len(checks) == 15, (workers, checks)


GLIBC = pytest.mark.skipif(heap._LIBC is None, reason="glibc's arenas (no-ops elsewhere)")

WRITER_TOP = r"""
import sys, threading
from packtool import heap
from packtool.slabs.writer import run_shards
heap.bound_heap(); heap.unbound_heap()  # the thresholds a pack's write starts with, after tokenizing
def write_one(k, rows_cb, ahead):  # a writer thread: ~12 MB of 64 KB blocks, all freed into its arena's top
    blocks = [None] * 192
    for i in range(192):
        blocks[i] = b"x" * (64 << 10)
    del blocks
    return k
base = heap.anon_bytes()
if sys.argv[1] == "run_shards":
    run_shards(2, write_one, workers=2)
else:  # the same threads without the write's bound (control)
    ts = [threading.Thread(target=write_one, args=(k, None, None)) for k in range(2)]
    [t.start() for t in ts]; [t.join() for t in ts]
heap.trim()  # what release_memory does at a shard's end: never a thread arena's top
print((heap.anon_bytes() - base) >> 20)
"""


@GLIBC
@pytest.mark.parametrize("how", ["run_shards", "bare threads"])
def test_a_writer_threads_freed_top_is_handed_back(how):
    got = subprocess.run([sys.executable, "-c", WRITER_TOP, how], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert got.returncode == 0, got.stderr
    kept = int(got.stdout.split()[-1])
    if how == "run_shards":
        assert kept < 3, kept
    else:  # at the 64 MiB threshold what was freed at the tops (~12 MiB and more) stays: what writing_heap is for
        assert kept >= 8, kept
