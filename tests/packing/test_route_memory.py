"""Routing a spilled plan to its output shards (slabs/routed.py) holds a bounded piece, not a
plan shard's or an output shard's segments (issue 23 class 8: memory flat in rows). Before,
`route_to_files` built every record of a plan shard (up to 131,072 rows) at once and
`put_in_order` a whole output shard's (up to 64Mi tokens) in memory, so a 300k-row chat pack
held ~20 MiB more than a 20k one while routing. The pieces must not change a byte."""
from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import packtool.heap as heap
import packtool.slabs.routed as routed
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

TOK = TokenizeConfig(shape="tokens")
ALIGN = Alignment(tp=2, cp=2, capacity=1024)


def _source(d, n: int, seed: int = 3) -> str:
    rng = np.random.default_rng(seed)
    lens = np.where(rng.random(n) < 0.05, rng.integers(1100, 3000, n), rng.integers(2, 300, n))
    path = str(d / f"tok-{n}.parquet")
    pq.write_table(pa.table({"input_ids": [rng.integers(0, 50000, k).astype(np.int32) for k in lens]}), path)
    return path


def _pack(path, out, cache, **kw):
    return pack([path], ALIGN, PackingConfig("bfd", overflow="split", dp=kw.pop("dp", 1)), TOK, output=str(out),
                cache_dir=str(cache), **kw)


def _files(out) -> dict[str, bytes]:
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out))}


@pytest.mark.parametrize("dp", [1, 2])  # dp=2 moves items between ranks: their own places
def test_pieces_write_the_same_bytes(tmp_path, monkeypatch, dp):
    path = _source(tmp_path, 700)
    kw = dict(dp=dp, plan_shard_rows=150, shard_tokens=30_000)  # several plan and output shards
    _pack(path, tmp_path / "whole", tmp_path / "cache", **kw)
    monkeypatch.setattr(routed, "ROUTE_STEP", 7)
    monkeypatch.setattr(routed, "ORDER_STEP", 5)
    monkeypatch.setattr(routed, "_BUCKETS", 1000)
    _pack(path, tmp_path / "pieces", tmp_path / "cache", **kw)
    assert _files(tmp_path / "pieces") == _files(tmp_path / "whole")


def _route_peak(tmp_path, n: int, monkeypatch) -> int:
    """Traced peak while the plan is routed and each output shard put in order (one plan
    shard, one output shard: the most the old code held)."""
    path = _source(tmp_path, n, seed=n)
    peaks = []

    def traced(f):
        def run(*a, **kw):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            r = f(*a, **kw)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            return r
        return run
    monkeypatch.setattr(routed, "route_to_files", traced(routed.route_to_files))
    monkeypatch.setattr(routed, "put_in_order", traced(routed.put_in_order))
    tracemalloc.start()
    try:
        _pack(path, tmp_path / f"out{n}", tmp_path / f"cache{n}", plan_shard_rows=1 << 20, shard_tokens=1 << 30,
              workers=1)
    finally:
        tracemalloc.stop()
    return max(peaks)


def test_routing_holds_a_piece_not_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(routed, "ROUTE_STEP", 512)
    monkeypatch.setattr(routed, "ORDER_STEP", 512)
    small, large = _route_peak(tmp_path, 2000, monkeypatch), _route_peak(tmp_path, 8000, monkeypatch)
    # the old code: ~120 bytes more per extra row; left: per-bin arrays (~5 rows a bin) and noise
    assert large - small < 16 * 6000, (small, large)


def test_a_repeated_or_missing_position_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(routed, "ORDER_STEP", 4)
    rec = np.zeros(10, routed.ROUTED)
    rec["pos"] = np.arange(10)[::-1]
    rec["pos"][3] = rec["pos"][4]  # one position twice, one never
    path = str(tmp_path / "routed-00000.bin")
    rec.tofile(path)
    with pytest.raises(RuntimeError, match="repeat or miss"):
        routed.put_in_order(path, 10)
    rec["pos"] = np.arange(10)[::-1]
    rec["length"] = np.arange(10)
    rec.tofile(path)
    routed.put_in_order(path, 10)
    got = np.fromfile(path, routed.SEGMENT)
    assert got["length"].tolist() == list(range(10))[::-1] and sorted(os.listdir(tmp_path)) == ["routed-00000.bin"]



@pytest.mark.skipif(heap._LIBC is None, reason="glibc's arenas")
def test_a_shard_is_written_without_the_ordering_freed_heap(tmp_path, monkeypatch):
    """What the main thread freed putting a shard's 60k segments in order (~5 MiB) is handed
    back before the shard is written, not at its end: glibc keeps freed heap pages below its
    trim threshold resident, and a 300k-row chat pack's write held them (~8 MiB above a 20k
    pack's, whose shards hold a few thousand segments). Measured as what a trim right at the
    shard's start still returns."""
    heap.bound_heap()
    heap.unbound_heap()  # glibc's thresholds as a chat pack leaves them for the write
    rng = np.random.default_rng(5)
    lens = rng.integers(2, 30, 60_000)
    ids = pa.array(rng.integers(0, 50000, int(lens.sum())).astype(np.int32))
    path = str(tmp_path / "short.parquet")
    offsets = np.r_[0, np.cumsum(lens)].astype(np.int32)
    pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(offsets, ids)}), path)
    kept, write = [], routed.write_shard_file

    def at_write(*a, **kw):  # one writer: the main thread, right after put_in_order
        before = heap.anon_bytes()
        heap.trim()
        kept.append(before - heap.anon_bytes())
        return write(*a, **kw)
    monkeypatch.setattr(routed, "write_shard_file", at_write)
    _pack(path, tmp_path / "out", tmp_path / "cache", workers=1, shard_tokens=1 << 30)
    assert kept and max(kept) < 1 << 20, kept


@pytest.mark.parametrize("n,step,buckets", [(1, 4, 256), (13, 4, 256), (13, 4, 2), (300, 16, 7), (300, 1000, 256)])
def test_put_in_order_is_the_records_sorted_by_position(tmp_path, monkeypatch, n, step, buckets):
    """put_in_order (ranges through files, then each range in place) against a plain sort by
    position, over odd sizes, range counts that do not divide n, one range and many."""
    monkeypatch.setattr(routed, "ORDER_STEP", step)
    monkeypatch.setattr(routed, "_BUCKETS", buckets)
    rng = np.random.default_rng(n + step)
    rec = np.zeros(n, routed.ROUTED)
    rec["pos"] = rng.permutation(n)
    for f in routed.SEGMENT.names:
        rec[f] = rng.integers(0, 1 << 31, n)
    path = str(tmp_path / "routed-00000.bin")
    rec.tofile(path)
    routed.put_in_order(path, n)
    want = rec[np.argsort(rec["pos"])]
    got = np.fromfile(path, routed.SEGMENT)
    assert got.size == n and all((got[f] == want[f]).all() for f in routed.SEGMENT.names)
    assert sorted(os.listdir(tmp_path)) == ["routed-00000.bin"]  # no range file left


@pytest.mark.parametrize("bad", [-1, 13])
def test_a_position_outside_the_shard_is_refused(tmp_path, monkeypatch, bad):
    monkeypatch.setattr(routed, "ORDER_STEP", 4)
    rec = np.zeros(13, routed.ROUTED)
    rec["pos"] = np.arange(13)
    rec["pos"][5] = bad
    path = str(tmp_path / "routed-00000.bin")
    rec.tofile(path)
    with pytest.raises(RuntimeError, match="outside the shard"):
        routed.put_in_order(path, 13)
