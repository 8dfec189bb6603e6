"""`verify`, one shard: the worker's entry. `check_shard` opens one shard file (or a run of
its row groups), hashes it, holds its footer to FORMAT.md's columns and the manifest's side
columns, streams its record batches to `verification/batch.py` (memory bounded by one batch)
and hands back a `ShardResult`: digest, size, rows, the `Tally` of what the rows add up to,
and the problems found.
"""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from packtool.errors import spelled_as
from packtool.storage import arrow_file, file_size, reading, store_failure
from packtool.slabs.schema import repeated_column
from packtool.tokenize.checksum import file_digest
from packtool.verification.batch import LIST_COLUMNS, SCALAR_COLUMNS, check_batch
from packtool.verification.job import ShardJob, ShardResult
from packtool.verification.problems import ProblemLog
from packtool.verification.side import check_side_schema
from packtool.verification.tally import Tally


def check_shard(job: ShardJob) -> ShardResult:
    # in a worker process too, a store that stops answering is verify's one line naming
    # `directory` (storage.failures.reading), never a shard "truncated or corrupt"
    with spelled_as(job.spelling), reading(job.path, "directory"):
        return _check_shard(job)


def _check_shard(job: ShardJob) -> ShardResult:
    digest, size = ((file_digest(job.path, job.checksum), file_size(job.path)) if job.hash_file
                    else ("", 0))
    res = ShardResult(job.name, digest, size, log=ProblemLog(job.max_problems))
    log = res.log
    try:
        pf = pq.ParquetFile(arrow_file(job.path))
    except (OSError, pa.ArrowException) as e:
        if (gone := store_failure(e, job.path, "footer")) is not None:
            raise gone from None
        res.readable = False
        log.add("shard_unreadable", f"cannot open as Parquet ({e}); the file is truncated or "
                f"corrupt: re-run `packtool pack`", shard=job.name)
        return res
    # every piece checks the schema; only the first reports it
    schema_log = log if job.hash_file else ProblemLog()
    twice = repeated_column(pf.schema_arrow)
    if twice:  # every lookup by name below would call the column missing
        schema_log.add("schema", twice, shard=job.name)
        res.readable = False
        return res
    if not (_check_schema(pf.schema_arrow, job.name, schema_log)
            & check_side_schema(pf.schema_arrow, job.side, job.name, schema_log)):
        res.readable = False
        return res
    src = rows_of = None
    if job.source_dir:
        from packtool.tokenize.flat_tokens import FlatTokens
        src = FlatTokens.open(job.source_dir)
        if job.source_side:
            src = replace(src, side=job.source_side)
        # a source row is named by its input file and row there (read only if a message needs it)
        from packtool.tokenize.source_rows import source_rows_at
        rows_of = source_rows_at(job.source_dir)
    acc = Tally(SCALAR_COLUMNS)
    row0 = job.row0
    groups = None if job.row_groups is None else list(range(*job.row_groups))
    try:
        for batch in pf.iter_batches(batch_size=job.batch_rows, row_groups=groups, use_threads=False):
            check_batch(batch, row0, job, src, log, acc, rows_of)
            # every id, skipped slabs' too: the shard's max_token_id is held to it (run.py)
            top = pc.max(pc.list_flatten(batch.column("input_ids"))).as_py()
            if top is not None and (res.top_id is None or top > res.top_id):
                res.top_id = top
            row0 += batch.num_rows
    except (OSError, pa.ArrowException) as e:  # a store gone or no memory to decode: not the file's fault
        if (gone := store_failure(e, job.path, f"from row {row0}")) is not None:
            raise gone from None
        res.readable = False
        log.add("shard_unreadable", f"cannot decode after row {row0} ({e}); the file is "
                f"truncated or corrupt: re-run `packtool pack`", shard=job.name, row=row0)
    res.rows = row0 - job.row0
    res.totals, res.slabs, res.segments, res.nulls = acc.finish()
    res.skipped = acc.skipped
    return res


def _check_schema(schema: pa.Schema, name: str, log: ProblemLog) -> bool:
    ok = True
    want = {**{k: pa.list_(v) for k, v in LIST_COLUMNS.items()}, **SCALAR_COLUMNS}
    for col, typ in want.items():
        i = schema.get_field_index(col)
        if i < 0:
            log.add("schema", f"column {col!r} is missing (FORMAT.md v1 needs it)", shard=name,
                    expected=str(typ), found=None)
            ok = False
        elif schema.field(i).type != typ:
            log.add("schema", f"column {col!r} has type {schema.field(i).type}, FORMAT.md v1 says {typ}",
                    shard=name, expected=str(typ), found=str(schema.field(i).type))
            ok = False
    return ok
