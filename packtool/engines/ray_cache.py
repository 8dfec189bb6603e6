"""The tokenized cache built on Ray, in one pass over the data.

Rows are numbered globally (source_index), so every file's row count is needed before a
block can be written: Parquet/Arrow have it in their metadata, JSON files are counted first
by Ray tasks running packtool's reader (parsing only, ~free next to tokenizing). Then
read -> tokenize -> write is one fused Ray Data task per input piece: each tokenized block
is written as cache parts by the local `CacheWriter` (same schema, row groups, compression),
named by its first global row, and only per-row lengths/flags (~30 bytes a row) go back to
the driver; tokens never enter the object store. The result is an ordinary `TokenizedCache`
under the same fingerprint, so either engine reuses what the other built.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tokenizers

from packtool.io.cache import (CACHE_FORMAT, CACHE_VERSION, DATA_DIR, CacheWriter, TokenizedCache,
                               tokenizer_meta, publish_cache)
from packtool.io.errors import PacktoolInputError
from packtool.io.readers import count_rows, iter_batches
from packtool.io.checksum import sha256_file

from .ray_source import ALL_MASKED, EMPTY, OK, TokenizeJob, make_datasource, tokenize_block

# same column descriptions as packtool.io.pipeline writes into cache.json
_COLUMNS = {"input_ids": "list<int32> token ids", "loss_mask": "list<uint8> 1 = token is a target",
            "length": "int32 tokens in the row", "source_index": "int64 global input row (read order)",
            "source_file": "int32 index into inputs"}

_ROW_COLS = ["length", "loss", "fi", "file_row", "bad"]


@dataclass(frozen=True)
class RowTable:
    """Every raw input row in read order (file by file), as the driver holds it."""
    length: np.ndarray    # int64 tokens (0 for a bad row)
    loss: np.ndarray      # int64 loss tokens
    fi: np.ndarray        # int32 file index
    file_row: np.ndarray  # int64 row inside the file
    bad: np.ndarray       # int8 OK | EMPTY | ALL_MASKED
    file_base: np.ndarray  # int64[n_files+1] global row of each file's first row


def collect_rows(ds, n_files: int) -> RowTable:
    cols = {k: [] for k in _ROW_COLS}
    for b in ds.select_columns(list(cols)).iter_batches(batch_format="pyarrow", batch_size=None):
        for k in cols:
            cols[k].append(b.column(k).to_numpy())
    a = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    order = np.lexsort((a["file_row"], a["fi"]))  # blocks arrive in any order; rows carry their place
    a = {k: v[order] for k, v in a.items()}
    counts = np.bincount(a["fi"].astype(np.int64), minlength=n_files)
    base = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    expect = np.arange(a["fi"].size, dtype=np.int64) - base[a["fi"].astype(np.int64)]
    if not np.array_equal(a["file_row"], expect):
        raise RuntimeError("ray engine: tokenized rows are missing or duplicated (a read task "
                           "returned an incomplete piece); re-run")
    return RowTable(a["length"].astype(np.int64), a["loss"].astype(np.int64), a["fi"].astype(np.int32),
                    a["file_row"].astype(np.int64), a["bad"].astype(np.int8), base)


def _write_part(batch: pa.Table, tmp: str, file_base: np.ndarray) -> pa.Table:
    """map_batches UDF: one tokenized block (a run of consecutive rows of one file) -> cache
    part files named by their first global row (sorted names = read order); returns the
    block's per-row lengths and flags only."""
    small = batch.select(_ROW_COLS)
    keep = batch.column("bad").to_numpy() == OK
    if not keep.any():
        return small
    b = batch.filter(pa.array(keep))
    fi = b.column("fi").to_numpy()
    src = file_base[fi] + b.column("file_row").to_numpy()
    if fi.min() != fi.max() or (src.size > 1 and (np.diff(src) <= 0).any()):
        raise RuntimeError("ray engine: a tokenized block mixes files or is out of order")
    ids, mask = b.column("input_ids").combine_chunks(), b.column("loss_mask").combine_chunks()
    offs = ids.offsets.to_numpy()
    lens = b.column("length").to_numpy().astype(np.int32)
    stage = os.path.join(tmp, f".stage-{int(src[0]):012d}")
    shutil.rmtree(stage, ignore_errors=True)  # a retried task starts clean
    w = CacheWriter(stage)
    step = CacheWriter.ROWS_PER_GROUP
    for r0 in range(0, lens.size, step):  # add in row-group-sized pieces, as the local build does
        r1 = min(r0 + step, lens.size)
        a, e = int(offs[r0]), int(offs[r1])
        w.add(ids.values.to_numpy()[a:e].astype(np.int32), mask.values.to_numpy()[a:e].astype(np.uint8),
              lens[r0:r1], src[r0:r1], int(fi[0]))
    for k, part in enumerate(w.close()):
        name = f"part-{int(src[0]):012d}-{k:03d}.parquet"
        os.replace(os.path.join(stage, DATA_DIR, part["file"]), os.path.join(tmp, DATA_DIR, name))
    shutil.rmtree(stage, ignore_errors=True)
    return small


def _count_udf(batch: pa.Table, job: TokenizeJob) -> pa.Table:
    fis = batch.column("fi").to_pylist()
    rows = [sum(b.num_rows for b in iter_batches(job.files[fi], job.cfg.batch_size,
                                                  list(job.shapes[fi].columns))) for fi in fis]
    return pa.table({"fi": pa.array(fis, pa.int64()), "rows": pa.array(rows, pa.int64())})


def count_file_rows(job: TokenizeJob) -> np.ndarray:
    """Rows per input file: from metadata where the format has it, else counted on Ray."""
    import ray.data

    counts = [count_rows(f) for f in job.files]
    need = [i for i, c in enumerate(counts) if c is None]
    if need:
        ds = ray.data.from_items([{"fi": i} for i in need], override_num_blocks=len(need))
        for b in ds.map_batches(_count_udf, batch_format="pyarrow", batch_size=1,
                                fn_kwargs={"job": job}).iter_batches(batch_format="pyarrow", batch_size=None):
            for fi, n in zip(b.column("fi").to_pylist(), b.column("rows").to_pylist()):
                counts[fi] = n
    return np.asarray(counts, np.int64)


def _parts(tmp: str, rt: RowTable, keep: np.ndarray) -> list[dict]:
    """cache.json's part list, from the part footers and the driver's per-row table."""
    names = sorted(n for n in os.listdir(os.path.join(tmp, DATA_DIR)) if n.endswith(".parquet"))
    rows = np.asarray([pq.ParquetFile(os.path.join(tmp, DATA_DIR, n)).metadata.num_rows for n in names],
                      np.int64)
    kept_src = np.flatnonzero(keep)
    if rows.sum() != kept_src.size:
        raise RuntimeError(f"ray engine: cache parts hold {int(rows.sum())} rows, expected {kept_src.size}")
    start = np.concatenate(([0], np.cumsum(rows)))
    first = np.asarray([int(n.split("-")[1]) for n in names], np.int64)
    if names and not np.array_equal(kept_src[start[:-1]], first):
        raise RuntimeError("ray engine: cache parts do not tile the rows; re-run")
    cum = np.concatenate(([0], np.cumsum(rt.length[keep])))
    return [{"file": n, "rows": int(r), "tokens": int(cum[e] - cum[a])}
            for n, r, a, e in zip(names, rows, start[:-1], start[1:])]


def _check_bad(rt: RowTable, job: TokenizeJob) -> dict:
    bad = np.flatnonzero(rt.bad != OK)
    if bad.size and job.cfg.on_empty == "error":
        r = int(bad[0])
        what = "empty example" if rt.bad[r] == EMPTY else "example with no loss tokens (all masked)"
        raise PacktoolInputError(f"{what}; drop it from the data or pass --on-empty skip "
                                 "(skipped rows are counted in cache.json)",
                                 path=job.files[int(rt.fi[r])].path, row=int(rt.file_row[r]))
    return {"empty": int((rt.bad == EMPTY).sum()), "all_masked": int((rt.bad == ALL_MASKED).sum()),
            "rows": bad[:100].tolist()}


def build_cache(job: TokenizeJob, fingerprint: str, final: str, root: str) -> TokenizedCache:
    """Tokenize with Ray Data and publish the cache at `final` (atomically, like the local build)."""
    import ray.data

    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{fingerprint[:12]}-", dir=root)
    try:
        os.makedirs(os.path.join(tmp, DATA_DIR))
        counts = count_file_rows(job)
        for fi in np.flatnonzero(counts == 0):
            raise PacktoolInputError("empty dataset (no rows)", path=job.files[int(fi)].path)
        file_base = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        source = make_datasource(job)
        rows = (ray.data.read_datasource(source, override_num_blocks=source.n_tasks)
                .map_batches(tokenize_block, batch_format="pyarrow", batch_size=None,
                             fn_kwargs={"job": job})
                .map_batches(_write_part, batch_format="pyarrow", batch_size=None,
                             fn_kwargs={"tmp": tmp, "file_base": file_base}))
        rt = collect_rows(rows, len(job.files))
        if not np.array_equal(rt.file_base, file_base):
            fi = int(np.flatnonzero(np.diff(rt.file_base) != counts)[0])
            raise RuntimeError(f"{job.files[fi].path}: read {int(np.diff(rt.file_base)[fi])} rows, "
                               f"counted {int(counts[fi])} (file changed during the run?)")
        skipped = _check_bad(rt, job)
        keep = rt.bad == OK
        if not keep.any():
            raise PacktoolInputError("every row was skipped; nothing to tokenize")
        parts = _parts(tmp, rt, keep)
        sha = {}
        inputs_meta = []
        for fi, (f, shape) in enumerate(zip(job.files, job.shapes)):
            if f.path not in sha:
                sha[f.path] = sha256_file(f.path)
            inputs_meta.append({"path": f.path, "bytes": os.path.getsize(f.path), "sha256": sha[f.path],
                                "mtime_ns": os.stat(f.path).st_mtime_ns, "format": f.kind,
                                "shape": shape.kind, "columns": list(shape.columns),
                                "rows": int(rt.file_base[fi + 1] - rt.file_base[fi])})
        meta = {
            "format": CACHE_FORMAT, "version": CACHE_VERSION, "columns": _COLUMNS,
            "config": job.cfg.as_dict(), "tokenizer": tokenizer_meta(job.info),
            "template_text": job.template.text if job.template else None,
            "inputs": inputs_meta,
            "parts": parts,
            "num_rows": int(keep.sum()), "num_source_rows": int(rt.length.size),
            "num_tokens": int(rt.length[keep].sum()), "num_loss_tokens": int(rt.loss[keep].sum()),
            "skipped": skipped, "tokenizers_version": tokenizers.__version__,
            "fingerprint": fingerprint,
        }
        return publish_cache(tmp, final, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
