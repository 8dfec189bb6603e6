"""The tokenized cache built on Ray: tokenized blocks stay in the object store, the driver
collects only per-row lengths/flags (about 30 bytes a row), numbers rows exactly like the
local engine, and each block is written as cache parts by `map_batches` with the local
`CacheWriter` (same schema, row groups, compression). The result is an ordinary
`TokenizedCache` under the same fingerprint, so either engine reuses what the other built.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import tokenizers

from packtool.io.cache import (CACHE_FORMAT, CACHE_VERSION, DATA_DIR, CacheWriter, TokenizedCache,
                               tokenizer_meta, write_cache_json)
from packtool.io.errors import PacktoolInputError
from packtool.io.tokenize import _sha256_file

from .ray_source import ALL_MASKED, EMPTY, OK, TokenizeJob, make_datasource, tokenize_block

# same column descriptions as packtool.io.pipeline writes into cache.json
_COLUMNS = {"input_ids": "list<int32> token ids", "loss_mask": "list<uint8> 1 = token is a target",
            "length": "int32 tokens in the row", "source_index": "int64 global input row (read order)",
            "source_file": "int32 index into inputs"}

_PART_SCHEMA = pa.schema([("file", pa.string()), ("rows", pa.int64()), ("tokens", pa.int64()),
                          ("first", pa.int64()), ("last", pa.int64())])


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
    cols = {k: [] for k in ("length", "loss", "fi", "file_row", "bad")}
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
    part files named by their first global row, so sorted names are read order."""
    keep = batch.column("bad").to_numpy() == OK
    if not keep.any():
        return _PART_SCHEMA.empty_table()
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
    rows = []
    for k, part in enumerate(w.close()):
        name = f"part-{int(src[0]):012d}-{k:03d}.parquet"
        os.replace(os.path.join(stage, DATA_DIR, part["file"]), os.path.join(tmp, DATA_DIR, name))
        rows.append((name, part["rows"], part["tokens"]))
    shutil.rmtree(stage, ignore_errors=True)
    return pa.table({"file": [r[0] for r in rows], "rows": [r[1] for r in rows],
                     "tokens": [r[2] for r in rows], "first": [int(src[0])] * len(rows),
                     "last": [int(src[-1])] * len(rows)}, schema=_PART_SCHEMA)


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
        source = make_datasource(job)
        tokenized = (ray.data.read_datasource(source, override_num_blocks=source.n_tasks)
                     .map_batches(tokenize_block, batch_format="pyarrow", batch_size=None,
                                  fn_kwargs={"job": job})
                     .materialize())
        rt = collect_rows(tokenized, len(job.files))
        for fi in np.flatnonzero(np.diff(rt.file_base) == 0):
            raise PacktoolInputError("empty dataset (no rows)", path=job.files[int(fi)].path)
        skipped = _check_bad(rt, job)
        keep = rt.bad == OK
        if not keep.any():
            raise PacktoolInputError("every row was skipped; nothing to tokenize")
        parts = tokenized.map_batches(_write_part, batch_format="pyarrow", batch_size=None,
                                      fn_kwargs={"tmp": tmp, "file_base": rt.file_base}).to_arrow_refs()
        parts = pa.concat_tables([b for b in ray.get(parts) if b.num_columns]).sort_by([("first", "ascending"), ("file", "ascending")])
        first, last = parts.column("first").to_numpy(), parts.column("last").to_numpy()
        if (first[1:] <= last[:-1]).any():
            raise RuntimeError("ray engine: cache parts overlap; re-run")
        sha = {}
        inputs_meta = []
        for fi, (f, shape) in enumerate(zip(job.files, job.shapes)):
            if f.path not in sha:
                sha[f.path] = _sha256_file(f.path)
            inputs_meta.append({"path": f.path, "bytes": os.path.getsize(f.path), "sha256": sha[f.path],
                                "mtime_ns": os.stat(f.path).st_mtime_ns, "format": f.kind,
                                "shape": shape.kind, "columns": list(shape.columns),
                                "rows": int(rt.file_base[fi + 1] - rt.file_base[fi])})
        meta = {
            "format": CACHE_FORMAT, "version": CACHE_VERSION, "columns": _COLUMNS,
            "config": job.cfg.as_dict(), "tokenizer": tokenizer_meta(job.info),
            "template_text": job.template.text if job.template else None,
            "inputs": inputs_meta,
            "parts": [{"file": n, "rows": int(r), "tokens": int(t)} for n, r, t in
                      zip(*(parts.column(c).to_pylist() for c in ("file", "rows", "tokens")))],
            "num_rows": int(keep.sum()), "num_source_rows": int(rt.length.size),
            "num_tokens": int(rt.length[keep].sum()), "num_loss_tokens": int(rt.loss[keep].sum()),
            "skipped": skipped, "tokenizers_version": tokenizers.__version__,
            "fingerprint": fingerprint,
        }
        write_cache_json(tmp, meta)
        try:
            os.rename(tmp, final)
        except OSError:  # another run finished the same cache first: use theirs
            if not os.path.exists(os.path.join(final, "cache.json")):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TokenizedCache(final)
