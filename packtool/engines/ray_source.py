"""Read and tokenize on Ray Data: a Datasource over packtool's readers, then `map_batches`
running packtool's own render/encode code.

Why a Datasource and not `ray.data.read_json`/`read_parquet` for raw inputs: the plan needs
every row's provenance (file, row inside the file) to number rows exactly like the local
engine, JSON arrays and JSONL with packtool's UTF-8/line-numbered errors are not what Ray's
JSON reader parses, and identical bytes need identical Arrow values. So each read task runs
`packtool.tokenize.readers` on one piece (a whole file, or a range of Parquet row groups) and tags
rows with `__fi`/`__row`; the tokenize UDF is fused into the same task by Ray Data.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.errors import PacktoolInputError, cli_flag, spelled_as, spelling_now
from packtool.storage import arrow_file
from packtool.tokenize.blank_lines import BlankLines
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import TokenizerInfo, encode_rendered, load_tokenizer, row_sums
from packtool.tokenize.long_rows import RowTooLongError
from packtool.tokenize.pipeline import _tokens_batch
from packtool.tokenize.readers import InputFile, iter_batches
from packtool.tokenize.shapes import Shape, render_batch
from packtool.tokenize.templates import ChatTemplate, Renderer

# Parquet row groups per read task: enough rows per task to amortize the task, small enough
# that a big file still spreads over the cluster.
PARQUET_ROWS_PER_TASK = 65536

# bad-row codes in the tokenized blocks
OK, EMPTY, ALL_MASKED = 0, 1, 2

TOKENIZED_SCHEMA = pa.schema([
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.uint8())),
    ("length", pa.int32()),    # tokens of the row (0 for a bad row; its tokens are dropped)
    ("loss", pa.int64()),
    ("fi", pa.int32()),        # index into the resolved input files
    ("file_row", pa.int64()),  # row inside that file
    ("bad", pa.int8()),
    # chat keys the template does not render (chat_keys): a rendered batch's counts, as JSON,
    # on its first row (null elsewhere); the driver says them per file, as the local engine does
    ("unrendered", pa.string()),
    # the blank lines a JSON Lines file holds (blank_lines.BlankLines.record(), JSON): on one row
    # of the file's last block (null elsewhere), said and kept per file as locally
    ("blank_lines", pa.string()),
    # a chat row with no trained turn, read as one with no loss tokens: its turns' roles, JSON
    # (null elsewhere); the driver names them as the local engine does (tokenize.reply_roles)
    ("roles", pa.string()),
])

BLANK = "__blank"  # a read table's column carrying its file's blank-line record to the tokenize UDF


@dataclass(frozen=True)
class Piece:
    fi: int
    row_groups: tuple[int, ...] | None  # Parquet only; None = the whole file
    first_row: int                      # row inside the file of the piece's first row


@dataclass(frozen=True)
class TokenizeJob:
    """What every worker needs to tokenize exactly like the driver would (small, picklable)."""
    files: tuple[InputFile, ...]
    shapes: tuple[Shape, ...]
    cfg: TokenizeConfig
    info: TokenizerInfo | None          # the driver's, with template fields filled
    template: ChatTemplate | None
    check_lengths: Callable | None = None  # pack's early refusal (planning.core.FirstTooLong)
    spelling: dict = field(default_factory=spelling_now)  # the caller's words for its arguments (errors.arg)


def plan_pieces(files: list[InputFile]) -> list[Piece]:
    out = []
    for fi, f in enumerate(files):
        if f.kind != "parquet":
            out.append(Piece(fi, None, 0))
            continue
        md = pq.ParquetFile(arrow_file(f.path)).metadata
        group, rows, first = [], 0, 0
        for g in range(md.num_row_groups):
            group.append(g)
            rows += md.row_group(g).num_rows
            if rows >= PARQUET_ROWS_PER_TASK:
                out.append(Piece(fi, tuple(group), first))
                first += rows
                group, rows = [], 0
        if group or md.num_row_groups == 0:
            out.append(Piece(fi, tuple(group) if group else None, first))
    return out


def _read_piece(job: TokenizeJob, piece: Piece):
    """The piece's tables, tagged with each row's file and row. A whole JSON Lines file is one
    piece read in order, so one BlankLines hears all of its blocks; its record is known only
    once the file is read (blank lines count only when a row follows them), so each table is
    yielded when the next one is read and the last carries the record."""
    last = None
    blank = BlankLines()
    for t in _tagged(job, piece, blank):
        if last is not None:
            yield last
        last = t
    if last is not None:
        rec = blank.record()
        said = [json.dumps(rec) if rec and i == 0 else None for i in range(last.num_rows)]
        yield last.set_column(last.schema.get_field_index(BLANK), BLANK, pa.array(said, pa.string()))


def _tagged(job: TokenizeJob, piece: Piece, blank: BlankLines):
    f, shape = job.files[piece.fi], job.shapes[piece.fi]
    cols = list(shape.columns)
    if piece.row_groups is not None:
        try:
            batches = pq.ParquetFile(arrow_file(f.path)).iter_batches(
                batch_size=job.cfg.batch_size, row_groups=list(piece.row_groups), columns=cols)
        except (pa.ArrowInvalid, OSError) as e:
            raise PacktoolInputError(f"cannot read Parquet ({e})", path=f.path) from None
    else:
        from packtool.tokenize.late_columns import late_columns
        batches = iter_batches(f, job.cfg.batch_size, cols, blank=blank, judge=late_columns(f, shape, job.cfg))
    row = piece.first_row
    for b in batches:
        n = b.num_rows
        t = pa.Table.from_batches([b])
        t = t.append_column("__fi", pa.array(np.full(n, piece.fi, np.int32)))
        t = t.append_column("__row", pa.array(np.arange(row, row + n, dtype=np.int64)))
        t = t.append_column(BLANK, pa.nulls(n, pa.string()))
        row += n
        yield t


def make_datasource(job: TokenizeJob):
    """A `ray.data.Datasource` with one read task per piece."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    pieces = plan_pieces(list(job.files))

    class PacktoolInputs(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            tasks = []
            for p in pieces:
                meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                                     input_files=[job.files[p.fi].path])
                tasks.append(ReadTask(lambda p=p: _read_piece(job, p), meta))
            return tasks

        def get_name(self) -> str:
            return "PacktoolInputs"

    src = PacktoolInputs()
    src.n_tasks = len(pieces)  # read with override_num_blocks=n_tasks: Ray's default splits
    return src                 # blocks up to 200 pieces, which only adds tasks here


_WORKER: dict = {}  # per worker process: job id -> (tokenizer, info, renderer)


def _worker_state(job: TokenizeJob):
    key = (job.cfg, job.info, job.template)  # each task unpickles its own copy of the job
    hit = _WORKER.get(key)
    if hit is not None:
        return hit
    tok = renderer = None
    info = job.info
    if job.cfg.tokenizer:
        loaded = load_tokenizer(job.cfg.tokenizer, job.cfg)
        if loaded.info.sha256 != job.info.sha256:
            raise PacktoolInputError("tokenizer.json differs on this worker from the driver's "
                                     "(sha256); put the same file on every node",
                                     path=loaded.info.path, flag=cli_flag("tokenizer"))
        tok = loaded.tokenizer
        special = {k: v for k, v in (("bos_token", info.bos_token), ("eos_token", info.eos_token),
                                     ("pad_token", info.pad_token)) if v}
        renderer = Renderer(job.template, special) if job.template else None
    _WORKER[key] = (tok, info, renderer)
    return tok, info, renderer


def tokenize_block(batch: pa.Table, job: TokenizeJob) -> pa.Table:
    """The map_batches UDF: raw rows of one file piece -> TOKENIZED_SCHEMA (every row kept,
    bad rows flagged, so the driver counts and names them like the local engine). Ray hands
    over whole blocks (up to its target block size, often a whole file), so they are
    tokenized `cfg.batch_size` rows at a time: pack's length check stops at the first
    over-long row, not after the block."""
    with spelled_as(job.spelling):  # a task's errors name the flags (or arguments) its caller used
        return _tokenize_block(batch, job)


def _tokenize_block(batch: pa.Table, job: TokenizeJob) -> pa.Table:
    state = _worker_state(job)
    fi = int(batch.column("__fi")[0].as_py())
    rows = batch.column("__row").to_numpy()
    rb = batch.drop_columns(["__fi", "__row", BLANK]).combine_chunks().to_batches()
    raw = rb[0] if rb else pa.RecordBatch.from_pylist([])
    step = job.cfg.batch_size
    out = pa.concat_tables([_tokenize_rows(raw.slice(a, step), rows[a:a + step], fi, job, state)
                            for a in range(0, max(raw.num_rows, 1), step)])
    # the record rides on the same row out as in: Ray may cut or join blocks between the UDFs
    return out.set_column(out.schema.get_field_index("blank_lines"), "blank_lines", batch.column(BLANK))


def _tokenize_rows(raw: pa.RecordBatch, rows: np.ndarray, fi: int, job: TokenizeJob, state) -> pa.Table:
    tok, info, renderer = state
    f, shape, cfg = job.files[fi], job.shapes[fi], job.cfg
    first_row = int(rows[0]) if rows.size else 0
    unrendered = [None] * int(rows.size)
    no_reply: dict = {}
    if shape.kind == "tokens":
        enc = _tokens_batch(raw, shape, info.vocab_size if info else None, f.path, first_row)
    else:
        rendered = render_batch(raw, shape, renderer, cfg.prompt_separator, f.path, first_row,
                                skip_null=cfg.on_empty == "skip")
        try:
            enc = encode_rendered(tok, rendered, info, cfg.add_bos, cfg.add_eos, shape.templated)
        except RowTooLongError as e:  # the encode knew the row's place in this batch, not its file and row
            raise e.at(f.path, first_row) from None
        if rendered.unrendered and unrendered:
            unrendered[0] = json.dumps(rendered.unrendered)
        no_reply = rendered.no_reply
    bad = np.where(enc.empty, EMPTY, np.where(enc.all_masked, ALL_MASKED, OK)).astype(np.int8)
    roles = [None] * int(rows.size)
    for j, said in no_reply.items():  # the rows of no trained turn only
        if bad[j] == ALL_MASKED:
            roles[j] = json.dumps(said)
    keep = bad == OK
    if job.check_lengths is not None:
        job.check_lengths(enc.lengths, ~keep, f.path, first_row)
    lens = np.where(keep, enc.lengths, 0).astype(np.int32)
    tok_keep = np.repeat(keep, enc.lengths)
    ids, mask = enc.ids[tok_keep], enc.mask[tok_keep]
    offs = pa.array(np.concatenate(([0], np.cumsum(lens, dtype=np.int64))).astype(np.int32))
    loss = row_sums(mask, lens)
    return pa.Table.from_arrays([
        pa.ListArray.from_arrays(offs, pa.array(ids, pa.int32())),
        pa.ListArray.from_arrays(offs, pa.array(mask, pa.uint8())),
        pa.array(lens), pa.array(loss.astype(np.int64)),
        pa.array(np.full(lens.size, fi, np.int32)), pa.array(rows.astype(np.int64)),
        pa.array(bad), pa.array(unrendered, pa.string()), pa.nulls(lens.size, pa.string()),
        pa.array(roles, pa.string()),
    ], schema=TOKENIZED_SCHEMA)
