"""Slab writer: a `Plan` plus a token store in, FORMAT.md shards out.

Shards are written row group by row group (memory bounded by one row group), zstd, under a
temporary name; the caller renames the whole output directory when everything is written.
Shards are independent, so one thread per core writes them: pyarrow encodes and compresses
without the GIL, and so does the numba gather.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, wait
from dataclasses import replace
from typing import Callable, Iterator

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.arrays import arrow_of, np_of
from packtool.heap import WRITE_SLACK, HeapBound, trim, writing_heap
from packtool.layout import cp_local_cu_seqlens_padded, flat_cu
from packtool.planning.core import Plan
from packtool.slabs.format import ShardInfo
from packtool.slabs.gather import fill_pads, fill_side_pads, gather_from_files, gather_side, row_sums, side_bits
from packtool.slabs.names import partial_shard_file, shard_file
from packtool.slabs.schema import SCHEMA, side_encoding, slab_schema
from packtool.slabs.shard_sizes import GROUP_TOKENS, group_ranges, shard_ranges, side_group_tokens
from packtool.tokenize.checksum import shard_checksum
from packtool.tokenize.flat_tokens import FlatTokens, token_id, token_loss
from packtool.workers import cores as default_cores, running, thread_pool


@nb.njit(nogil=True, cache=True)
def _gather(tokens, tok_off, src, src_off, length, dest, out_ids, out_mask):
    # copy each segment's tokens into its physical place; the first token of every segment
    # predicts nothing inside the segment, so it is never a target. Returns the largest id
    # copied (-1: none), as gather.gather_from_files does
    top = -1
    for i in range(src.size):
        a = tok_off[src[i]] + src_off[i]
        d = dest[i]
        for j in range(length[i]):
            v = tokens[a + j]
            t = token_id(v)
            out_ids[d + j] = t
            out_mask[d + j] = token_loss(v)
            if t > top:
                top = t
        if length[i] > 0:
            out_mask[d] = 0
    return top


def _buffer(n: int, dtype) -> np.ndarray:
    """A writable array in Arrow's memory pool, where the Parquet writer allocates and frees
    its own buffers: one allocator reuses the same pages group after group."""
    return np.frombuffer(pa.allocate_buffer(n * np.dtype(dtype).itemsize), dtype)


def _arrow(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A numpy array as an Arrow array without a copy. `pa.array` on an int32 array scans it
    (about 5 ns per value here, a second and a half of CPU over 300M tokens) although it
    does not copy; wrapping the buffer costs nothing."""
    a = np.ascontiguousarray(values, typ.to_pandas_dtype())
    return pa.Array.from_buffers(typ, a.size, [None, pa.py_buffer(a)])


def _list(values: np.ndarray, offsets: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(_arrow(offsets, pa.int32()), _arrow(values, typ))


def _per_segment(real: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    out = np.full(real.size, fill, dtype)
    out[real] = values
    return out


class SlabWriter:
    """Builds the Arrow columns of slabs [b0, b1) of a plan. Holds nothing per segment beyond
    the plan itself (the provenance columns are built per row group), and `batch` may run in
    several threads at once."""

    def __init__(self, plan: Plan, tokens: FlatTokens, pad_id: int):
        self.p, self.tok, self.pad_id = plan, tokens, int(pad_id)
        self.side = tuple(tokens.side)  # side columns travel with the store that holds them
        self.schema = slab_schema(self.side)
        lay = plan.layout
        self.real = ~lay.is_fill  # layout segment -> holds a plan segment (not a fill)
        self.slab_base = np.concatenate(([0], np.cumsum(lay.slab_len))).astype(np.int64)
        # (b0, b1) -> the largest id of that batch, pads included: the gather finds it while
        # the spans are in cache, and write_shard_file takes it for the manifest's max_token_id
        self.tops: dict[tuple[int, int], int] = {}

    def batch(self, b0: int, b1: int) -> pa.RecordBatch:
        p, lay = self.p, self.p.layout
        lo, hi = int(lay.seg_offsets[b0]), int(lay.seg_offsets[b1])
        r0, r1 = int(p.slab_offsets[b0]), int(p.slab_offsets[b1])  # the plan's segments
        real = self.real[lo:hi]
        # source fields per layout segment, -1 on fill segments
        src = _per_segment(real, p.segments.source[r0:r1], -1, np.int64)
        chunk = _per_segment(real, p.segments.chunk[r0:r1], -1, np.int32)
        off = _per_segment(real, p.segments.offset[r0:r1], 0, np.int64)
        base = self.slab_base[b0]
        total = int(self.slab_base[b1] - base)
        ids, mask = _buffer(total, np.int32), _buffer(total, np.uint8)
        seg_slab = np.repeat(np.arange(b0, b1), np.diff(lay.seg_offsets[b0:b1 + 1]))
        start = self.slab_base[seg_slab] - base + lay.seg_start[lo:hi]
        fill_pads(ids, mask, self.pad_id, start, lay.seg_len[lo:hi], lay.seg_padded[lo:hi])
        dest = start[real]
        rsrc, roff, rlen = p.segments.source[r0:r1], p.segments.offset[r0:r1], lay.seg_len[lo:hi][real]
        if self.tok.directory:  # file-backed store: read spans, map nothing
            top = gather_from_files(self.tok.directory, self.tok.offsets, rsrc, roff, rlen, dest, ids, mask)
        else:
            top = _gather(self.tok.tokens, self.tok.offsets, rsrc, roff, rlen, dest, ids, mask)
        # segments tile the slabs: every position the gather did not write is a pad
        self.tops[(b0, b1)] = max(int(top), self.pad_id) if total > int(rlen.sum()) else max(int(top), 0)
        row_off = (self.slab_base[b0:b1 + 1] - base).astype(np.int64)
        pads = (start, lay.seg_len[lo:hi], lay.seg_padded[lo:hi])
        side = [self._side(k, total, rsrc, roff, rlen, dest, row_off, pads) for k in range(len(self.side))]
        seg_off = (lay.seg_offsets[b0:b1 + 1] - lo).astype(np.int32)
        cu, cup, cu_off = flat_cu(lay, b0, b1)
        seg_len = lay.seg_len[lo:hi]
        cols = [
            _list(ids, row_off, pa.int32()),
            _list(mask, row_off, pa.uint8()),
            _list(seg_len.astype(np.int32), seg_off, pa.int32()),
            _list(cu, cu_off, pa.int32()),
            _list(cup, cu_off, pa.int32()),
            _list(cp_local_cu_seqlens_padded(cup, p.alignment.cp).astype(np.int32), cu_off, pa.int32()),
            _list(src, seg_off, pa.int64()),
            _list(chunk, seg_off, pa.int32()),
            _list(off, seg_off, pa.int64()),
            _arrow(np.add.reduceat(seg_len, seg_off[:-1]), pa.int32()),
            _arrow(row_sums(mask, row_off), pa.int32()),
            _arrow(lay.layout_pad[b0:b1], pa.int32()),
            _arrow(lay.tail_pad[b0:b1], pa.int32()),
            _arrow(lay.fill[b0:b1], pa.int32()),
            arrow_of(np.asarray(p.singleton[b0:b1], np.bool_)),  # bits in Arrow: packed, not wrapped
            _arrow(p.slab_index[b0:b1], pa.int64()),
            _arrow(p.dp_rank[b0:b1], pa.int32()),
            _arrow(p.step[b0:b1], pa.int32()),
            _arrow(p.microbatch[b0:b1], pa.int32()),
            *side,
        ]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _side(self, k: int, total: int, src, src_off, length, dest, row_off, pads) -> pa.Array:
        """Side column k of these slabs: the fill on every pad (layout gaps, tail, fill
        segments), every segment's values at its tokens' places."""
        c = self.side[k]
        out = _buffer(total * c.width, c.np_dtype).reshape(total, c.width)
        fill_side_pads(side_bits(out), side_bits(np.asarray(c.fill, c.np_dtype)).item(), *pads)
        gather_side(self.tok, k, self.tok.offsets, src, src_off, length, dest, out)
        t = pa.from_numpy_dtype(c.np_dtype)
        values = _arrow(out.reshape(-1), t)
        if c.row:
            values = pa.FixedSizeListArray.from_arrays(values, c.width)
        return pa.ListArray.from_arrays(_arrow(row_off, pa.int32()), values)


def release_memory() -> None:
    """Hand free pages back to the OS: Arrow's pool, and the C heap (glibc keeps freed pages
    otherwise; planning 1M sequences frees ~100 MB of temporaries that would stay resident
    through the whole write). Per shard, not per row group: returning pages that the next
    group would fault in again costs a third more time when writers run in threads."""
    pa.default_memory_pool().release_unused()
    trim()


def write_shards(plan: Plan, tokens: FlatTokens, directory: str, pad_id: int,
                 shard_tokens: int = 64 << 20, group_tokens: int = GROUP_TOKENS,
                 on_rows: Callable[[int], None] | None = None,
                 workers: int | None = None) -> list[ShardInfo]:
    """Write every slab of `plan` into `directory` as slabs-NNNNN.parquet shards, by up to
    `workers` threads (default: one per core). A shard is written whole by one thread, so the
    bytes do not depend on `workers`; the threads share the plan, and Parquet encoding and
    the gather run without the GIL."""
    ranges = shard_ranges(plan.layout.slab_len, shard_tokens)
    w = SlabWriter(plan, tokens, pad_id)

    def one(k: int, rows_cb, ahead: Callable[[], bool]) -> ShardInfo:
        s0, s1 = ranges[k]
        return write_shard_file(w, plan.layout.slab_len[s0:s1], s0,
                                os.path.join(directory, shard_file(k)), group_tokens,
                                rows_cb, ahead)
    return run_shards(len(ranges), one, workers, on_rows)


def run_shards(n: int, write_one: Callable[..., ShardInfo], workers: int | None = None,
               on_rows: Callable[[int], None] | None = None,
               prepare: Callable[[int], None] | None = None) -> list[ShardInfo]:
    """Shards 0..n-1 by up to `workers` threads (default: one per core):
    `write_one(k, on_rows, ahead)` writes shard k whole (`ahead()`: whether a core is spare for
    a read-ahead helper), and `prepare(k)`, if given, runs in this thread just before shard k
    is queued. The first failure (or Ctrl-C) stops every other shard at its next row group and
    is raised here."""
    cores = max(1, workers or default_cores())
    threads = min(n, cores)
    done = [0]
    # a core is spare once fewer shards are left than cores: the last ones' writers then
    # gather their next row group in a helper thread while encoding. Decided per row group, not
    # per shard: a shard marked ahead from its start ran beside the other writers' shards with
    # a third batch in flight for as long as they lasted, a longer stretch the longer the shards
    # (issue 23 class 8)
    spare = lambda: n - done[0] < cores  # noqa: E731
    heap = HeapBound(WRITE_SLACK)
    with writing_heap(), running(threads):
        if threads <= 1:
            out = []
            for k in range(n):
                if prepare:
                    prepare(k)
                out.append(write_one(k, _checked(on_rows, heap), lambda: False))
                done[0] += 1
            return out
        return _in_threads(n, threads, write_one, on_rows, prepare, spare, done, heap)


def _checked(on_rows, heap: HeapBound):
    def group_done(rows: int) -> None:
        heap.check()
        if on_rows:
            on_rows(rows)
    return group_done


def _in_threads(n, threads, write_one, on_rows, prepare, spare, done, heap) -> list[ShardInfo]:
    lock, failed = threading.Lock(), threading.Event()

    def group_done(rows: int) -> None:
        if failed.is_set():  # another shard failed, or Ctrl-C: stop at this row group
            raise _Cancelled()
        heap.check()
        if on_rows:
            with lock:
                on_rows(rows)

    def one(k: int) -> ShardInfo:
        try:
            return write_one(k, group_done, spare)
        finally:
            with lock:
                done[0] += 1

    with thread_pool(threads, "packtool-shard") as ex:
        futs = []
        try:
            for k in range(n):
                if any(f.done() and f.exception() is not None for f in futs):
                    break
                if prepare:
                    prepare(k)
                futs.append(ex.submit(one, k))
            wait(futs, return_when=FIRST_EXCEPTION)  # the first failure, not the first shard
            for f in futs:
                if f.done() and f.exception() is not None:
                    raise f.exception()
            return [f.result() for f in futs]
        except BaseException:
            failed.set()
            for f in futs:
                f.cancel()
            raise


class _Cancelled(Exception):
    pass


def write_shard_file(w: SlabWriter, slab_len: np.ndarray, first: int, path: str,
                     group_tokens: int, on_rows: Callable[[int], None] | None = None,
                     ahead: bool | Callable[[], bool] = False) -> ShardInfo:
    """Slabs [first, first + len(slab_len)) of the writer's plan as one shard file, row group
    by row group, under a temporary name renamed when complete. Every engine writes shards
    through here, so their bytes agree. While `ahead` (or `ahead()`, asked per row group)
    holds, the next row group is gathered by a helper thread while this one encodes."""
    tmp = partial_shard_file(path)  # a name the sweep of a killed run's folder knows (slabs.names)
    loss, top = 0, 0  # top: the shard's largest id, pads too (0 below any id: ids are >= 0)
    groups = group_ranges(slab_len, side_group_tokens(group_tokens, w.side))
    # no dictionary pages: token ids have ~vocab distinct values and dictionary
    # attempts cost more than they save; zstd does the compressing. The two token columns
    # are byte-stream-split first: their high bytes are (nearly) constant, so zstd skips
    # over them instead of modelling interleaved bytes (a third less encoding CPU, the same
    # size on real ids, smaller on random ones: BENCHMARKS.md, Pack end to end)
    make = lambda g: w.batch(first + g[0], first + g[1])  # noqa: E731
    batches = _batches(make, groups, ahead if callable(ahead) else (lambda: bool(ahead)))
    try:
        with pq.ParquetWriter(tmp, w.schema, compression="zstd", write_statistics=False,
                              use_dictionary=False, column_encoding=side_encoding(w.side)) as pw:
            for (g0, g1), batch in zip(groups, batches):
                loss += int(np_of(batch.column("num_loss_tokens")).sum())
                # the manifest's max_token_id: a trainer refuses a vocabulary below it before it starts
                top = max(top, w.tops.pop((first + g0, first + g1)))
                pw.write_batch(batch, row_group_size=g1 - g0)
                del batch
                if on_rows:
                    on_rows(g1 - g0)
    finally:
        batches.close()  # stops the gather thread when a write fails
    os.replace(tmp, path)
    release_memory()
    return ShardInfo(os.path.basename(path), int(slab_len.size), int(slab_len.sum()), loss,
                     os.path.getsize(path), shard_checksum(path), top)


def _batches(make: Callable, groups: list[tuple[int, int]], ahead: Callable[[], bool]) -> Iterator:
    """`make(g)` of every row group, in order. When `ahead()` holds, the next group's batch is
    gathered by a helper thread while the caller encodes this one: one ahead at most, so a
    shard holds two batches (a queue of depth 1 held three: the queued, the one waiting to be
    queued, and the caller's)."""
    ex, nxt = None, None
    try:
        for i, g in enumerate(groups):
            b = nxt.result() if nxt is not None else make(g)
            nxt = None
            if i + 1 < len(groups) and ahead():
                ex = ex or thread_pool(1, "packtool-read")
                nxt = ex.submit(make, groups[i + 1])
            yield b
            del b
    finally:
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)


_SRC = SCHEMA.get_field_index("source_index")


_OFF = SCHEMA.get_field_index("source_offset")


class ShardSlabWriter(SlabWriter):
    """`SlabWriter` over a shard-local token store: row k of the store is exactly real
    segment k of the shard, so the gather runs on local ids; the provenance columns
    (source_index, source_offset) are put back to the plan's global values."""

    def __init__(self, sub: Plan, store: FlatTokens, pad_id: int):
        n = sub.segments.source.size
        local = replace(sub, segments=replace(sub.segments, source=np.arange(n, dtype=np.int64),
                                              offset=np.zeros(n, np.int64)))
        super().__init__(local, store, pad_id)
        self.gsrc = np.full(self.real.size, -1, np.int64)
        self.gsrc[self.real] = sub.segments.source
        self.goff = np.zeros(self.real.size, np.int64)
        self.goff[self.real] = sub.segments.offset

    def batch(self, b0: int, b1: int) -> pa.RecordBatch:
        rb = super().batch(b0, b1)
        so = self.p.layout.seg_offsets
        lo, hi = int(so[b0]), int(so[b1])
        seg_off = (so[b0:b1 + 1] - lo).astype(np.int32)
        cols = list(rb.columns)
        cols[_SRC] = _list(self.gsrc[lo:hi], seg_off, pa.int64())
        cols[_OFF] = _list(self.goff[lo:hi], seg_off, pa.int64())
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)
