"""Slab writer: a `Plan` plus a token store in, FORMAT.md shards out.

Shards are written row group by row group (memory bounded by one row group), zstd, under a
temporary name; the caller renames the whole output directory when everything is written.
"""
from __future__ import annotations

import os
import warnings
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..layout import cp_local_cu_seqlens_padded, flat_cu
from ..plan import Plan
from .checksum import sha256_file
from .flat_tokens import FlatTokens
from .pread_gather import gather_from_files

SCHEMA_VERSION = 1

SCHEMA = pa.schema([
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.uint8())),
    ("seq_lens", pa.list_(pa.int32())),
    ("cu_seqlens", pa.list_(pa.int32())),
    ("cu_seqlens_padded", pa.list_(pa.int32())),
    ("cp_offsets", pa.list_(pa.int32())),
    ("source_index", pa.list_(pa.int64())),
    ("chunk_index", pa.list_(pa.int32())),
    ("source_offset", pa.list_(pa.int64())),
    ("num_tokens", pa.int32()),
    ("num_loss_tokens", pa.int32()),
    ("layout_pad", pa.int32()),
    ("tail_pad", pa.int32()),
    ("fill_pad", pa.int32()),
    ("singleton", pa.bool_()),
    ("slab_index", pa.int64()),
    ("dp_rank", pa.int32()),
    ("step", pa.int32()),
    ("microbatch", pa.int32()),
], metadata={b"packtool.schema_version": str(SCHEMA_VERSION).encode()})


@dataclass(frozen=True)
class ShardInfo:
    file: str
    rows: int
    tokens: int  # physical tokens
    loss_tokens: int
    bytes: int
    sha256: str


@nb.njit(cache=True)
def _gather(tok_ids, tok_mask, tok_off, src, src_off, length, dest, out_ids, out_mask):
    # copy each segment's tokens into its physical place; the first token of every segment
    # predicts nothing inside the segment, so it is never a target
    for i in range(src.size):
        a = tok_off[src[i]] + src_off[i]
        d = dest[i]
        for j in range(length[i]):
            out_ids[d + j] = tok_ids[a + j]
            out_mask[d + j] = tok_mask[a + j]
        if length[i] > 0:
            out_mask[d] = 0


def _list(values: np.ndarray, offsets: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ))


class SlabWriter:
    """Builds the Arrow columns of slabs [b0, b1) of a plan."""

    def __init__(self, plan: Plan, tokens: FlatTokens, pad_id: int):
        self.p, self.tok, self.pad_id = plan, tokens, int(pad_id)
        lay = plan.layout
        self.real = ~lay.is_fill
        self.slab_base = np.concatenate(([0], np.cumsum(lay.slab_len))).astype(np.int64)
        # per layout segment: source fields, -1 on fill segments
        n = lay.seg_len.size
        self.src = np.full(n, -1, np.int64)
        self.src[self.real] = plan.seg_source
        self.chunk = np.full(n, -1, np.int32)
        self.chunk[self.real] = plan.seg_chunk
        self.off = np.zeros(n, np.int64)
        self.off[self.real] = plan.seg_offset

    def batch(self, b0: int, b1: int) -> pa.RecordBatch:
        p, lay = self.p, self.p.layout
        lo, hi = int(lay.seg_offsets[b0]), int(lay.seg_offsets[b1])
        base = self.slab_base[b0]
        total = int(self.slab_base[b1] - base)
        ids = np.full(total, self.pad_id, np.int32)
        mask = np.zeros(total, np.uint8)
        seg_slab = np.repeat(np.arange(b0, b1), np.diff(lay.seg_offsets[b0:b1 + 1]))
        real = self.real[lo:hi]
        dest = (self.slab_base[seg_slab] - base + lay.seg_start[lo:hi])[real]
        src, off, ln = self.src[lo:hi][real], self.off[lo:hi][real], lay.seg_len[lo:hi][real]
        if self.tok.directory:  # file-backed store: read spans, map nothing
            gather_from_files(self.tok.directory, self.tok.offsets, src, off, ln, dest, ids, mask)
        else:
            _gather(self.tok.ids, self.tok.mask, self.tok.offsets, src, off, ln, dest, ids, mask)
        row_off = (self.slab_base[b0:b1 + 1] - base).astype(np.int64)
        seg_off = (lay.seg_offsets[b0:b1 + 1] - lo).astype(np.int32)
        cu, cup, cu_off = flat_cu(lay, b0, b1)
        loss = np.add.reduceat(mask.astype(np.int64), row_off[:-1]) if total else np.zeros(0)
        seg_len = lay.seg_len[lo:hi]
        cols = [
            _list(ids, row_off, pa.int32()),
            _list(mask, row_off, pa.uint8()),
            _list(seg_len.astype(np.int32), seg_off, pa.int32()),
            _list(cu, cu_off, pa.int32()),
            _list(cup, cu_off, pa.int32()),
            _list(cp_local_cu_seqlens_padded(cup, p.alignment.cp).astype(np.int32), cu_off, pa.int32()),
            _list(self.src[lo:hi], seg_off, pa.int64()),
            _list(self.chunk[lo:hi], seg_off, pa.int32()),
            _list(self.off[lo:hi], seg_off, pa.int64()),
            pa.array(np.add.reduceat(seg_len, seg_off[:-1]).astype(np.int32)),
            pa.array(loss.astype(np.int32)),
            pa.array(lay.layout_pad[b0:b1].astype(np.int32)),
            pa.array(lay.tail_pad[b0:b1].astype(np.int32)),
            pa.array(lay.fill[b0:b1].astype(np.int32)),
            pa.array(p.singleton[b0:b1]),
            pa.array(p.slab_index[b0:b1]),
            pa.array(p.dp_rank[b0:b1]),
            pa.array(p.step[b0:b1]),
            pa.array(p.microbatch[b0:b1]),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def _chunks(slab_len: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive slab ranges of about `budget` tokens (at least one slab each)."""
    out, b0 = [], 0
    ends = np.cumsum(slab_len)
    n = slab_len.size
    while b0 < n:
        start = ends[b0 - 1] if b0 else 0
        b1 = int(np.searchsorted(ends, start + budget, side="right"))
        b1 = max(b1, b0 + 1)
        out.append((b0, b1))
        b0 = b1
    return out


def write_shards(plan: Plan, tokens: FlatTokens, directory: str, pad_id: int,
                 shard_tokens: int = 64 << 20, group_tokens: int = 1 << 20,
                 on_rows: Callable[[int], None] | None = None,
                 workers: int | None = None) -> list[ShardInfo]:
    """Write every slab of `plan` into `directory` as slabs-NNNNN.parquet shards, by up to
    `workers` processes (default: one per core; each holds the plan and its own buffers)."""
    ranges = _chunks(plan.layout.slab_len, shard_tokens)
    jobs = [(k, s0, s1, os.path.join(directory, f"slabs-{k:05d}.parquet"), group_tokens)
            for k, (s0, s1) in enumerate(ranges)]
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers > 1 and tokens.directory:  # shards are independent: one process per core
        try:
            return _write_parallel(plan, tokens.directory, pad_id, jobs, workers, on_rows)
        except BrokenProcessPool:
            # e.g. a caller's script without an `if __name__ == "__main__":` guard: the
            # workers cannot start, so write here instead (same bytes, one core)
            warnings.warn("packtool: shard writer processes could not start; writing in one process")
    w = SlabWriter(plan, tokens, pad_id)
    return [write_shard_file(w, plan.layout.slab_len[s0:s1], s0, path, g, on_rows)
            for _, s0, s1, path, g in jobs]


_WORKER: SlabWriter | None = None


def _init_worker(plan: Plan, directory: str, pad_id: int) -> None:
    global _WORKER
    _WORKER = SlabWriter(plan, FlatTokens.open(directory), pad_id)


def _write_job(job) -> ShardInfo:
    _, s0, s1, path, group_tokens = job
    return write_shard_file(_WORKER, _WORKER.p.layout.slab_len[s0:s1], s0, path, group_tokens)


def _write_parallel(plan: Plan, directory: str, pad_id: int, jobs: list, workers: int,
                    on_rows: Callable[[int], None] | None) -> list[ShardInfo]:
    """Each worker gets the plan once; a shard is written whole by one worker, so the bytes
    are those of the sequential path."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    out: list[ShardInfo] = []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("forkserver"),
                             initializer=_init_worker, initargs=(plan, directory, pad_id)) as ex:
        for info in ex.map(_write_job, jobs):
            out.append(info)
            if on_rows:
                on_rows(info.rows)
    return out


def write_shard_file(w: SlabWriter, slab_len: np.ndarray, first: int, path: str,
                     group_tokens: int, on_rows: Callable[[int], None] | None = None) -> ShardInfo:
    """Slabs [first, first + len(slab_len)) of the writer's plan as one shard file, row group
    by row group, under a temporary name renamed when complete. Every engine writes shards
    through here, so their bytes agree."""
    tmp = path + ".tmp"
    loss = 0
    # no dictionary pages: token ids have ~vocab distinct values and dictionary
    # attempts cost more than they save; zstd does the compressing
    with pq.ParquetWriter(tmp, SCHEMA, compression="zstd", write_statistics=False,
                          use_dictionary=False) as pw:
        for g0, g1 in _chunks(slab_len, group_tokens):
            batch = w.batch(first + g0, first + g1)
            loss += int(np.asarray(batch.column("num_loss_tokens")).sum())
            pw.write_batch(batch, row_group_size=g1 - g0)
            pa.default_memory_pool().release_unused()
            if on_rows:
                on_rows(g1 - g0)
    os.replace(tmp, path)
    return ShardInfo(os.path.basename(path), int(slab_len.size), int(slab_len.sum()), loss,
                     os.path.getsize(path), sha256_file(path))
