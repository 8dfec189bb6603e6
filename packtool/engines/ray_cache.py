"""The tokenized cache built on Ray, in one pass over the data.

Rows are numbered globally (source_index), so every file's row count is needed before a
block can be written: Parquet/Arrow have it in their metadata, JSON files are counted first
by Ray tasks running packtool's reader (parsing only, ~free next to tokenizing). Then
read -> tokenize -> write is one fused Ray Data task per input piece: each tokenized block
is written as cache parts by the local `CacheWriter` (same schema, row groups, compression),
named by its first global row, and one summary row per block goes back to the driver (rows,
tokens, its bad rows, its part files): nothing per input row; tokens never enter the object
store. The result is an ordinary `TokenizedCache`
under the same fingerprint, so either engine reuses what the other built.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tokenizers

from packtool.engines.ray_env import remote, task_options
from packtool.engines.ray_source import ALL_MASKED, EMPTY, OK, TokenizeJob, make_datasource, tokenize_block
from packtool.errors import PacktoolInputError, spelled_as, spelling_now
from packtool.output.files import make_parents, remove_created
from packtool.output.leftovers import owned_temp_dir, remove_tree
from packtool.progress import bar
from packtool.tokenize.cache import (
    DATA_DIR,
    CacheWriter,
    TokenizedCache,
    publish_cache,
    tokenizer_meta,
)
from packtool.tokenize.cache_entry import CACHE_FORMAT, CACHE_VERSION
from packtool.storage import file_stat, is_uri, join_uri, locate
from packtool.tokenize.blank_lines import say_record, stored
from packtool.tokenize.cache_parts import CHECKSUM_ALG, file_record
from packtool.tokenize.chat_keys import merge, say_unrendered
from packtool.tokenize.checksum import changed_since, hashed_version, sha256_file
from packtool.tokenize.store_cache import commit_entry
from packtool.tokenize.pipeline import all_skipped_error
from packtool.tokenize.readers import count_rows, iter_batches
from packtool.tokenize.reply_roles import merge_records, record, run_roles, say_untrained
from packtool.tokenize.request import no_rows_error

# same column descriptions as packtool.tokenize.pipeline writes into cache.json
_COLUMNS = {"input_ids": "list<int32> token ids", "loss_mask": "list<uint8> 1 = token is a target; null row: every token is",
            "length": "int32 tokens in the row", "source_index": "int64 global input row (read order)",
            "source_file": "int32 index into inputs"}

# one row per tokenized block goes back to the driver (never one per input row)
BLOCK_SCHEMA = pa.schema([
    ("fi", pa.int32()), ("first_row", pa.int64()), ("rows", pa.int64()),
    ("tokens", pa.int64()), ("loss", pa.int64()),        # rows kept (not bad) only
    ("bad_row", pa.list_(pa.int64())), ("bad_kind", pa.list_(pa.int8())),  # file rows
    ("part_file", pa.list_(pa.string())), ("part_rows", pa.list_(pa.int64())),
    ("part_tokens", pa.list_(pa.int64())),
    ("part_bytes", pa.list_(pa.int64())), ("part_xxh3", pa.list_(pa.string())),  # cache.json records
    ("unrendered", pa.string()),  # the block's chat keys its template does not render (chat_keys), JSON
    ("blank_lines", pa.string()),  # its file's blank-line record (blank_lines), JSON: one block of the file has it
    ("untrained", pa.string()),  # its chat rows of no trained turn: their roles (reply_roles.record), JSON
])


@dataclass(frozen=True)
class BlockTable:
    """What the driver learns from the tokenize pass: per file, per bad row, per cache part."""
    file_base: np.ndarray  # int64[n_files+1] global row of each file's first row
    bad_row: np.ndarray    # int64 global rows that are empty or all-masked, ascending
    bad_kind: np.ndarray   # int8 EMPTY | ALL_MASKED
    bad_fi: np.ndarray     # int32 their file
    tokens: int            # kept rows' tokens
    loss: int              # kept rows' loss tokens
    parts: list            # [{"file", "rows", "tokens"}] sorted by name (= first row)
    records: dict          # part file -> its cache.json record (bytes, xxh3-128), hashed by its task
    unrendered: list       # per file: chat key -> [rows, first row] (chat_keys), said and kept as locally
    blank_lines: list      # per file: BlankLines.record() (None: none inside), said and kept as locally
    untrained: list        # per file: its rows of no trained turn, their roles (reply_roles.record), as locally


def _flat(col: pa.ChunkedArray, order: np.ndarray, dtype) -> np.ndarray:
    """A list column's values, blocks taken in `order`."""
    return np.asarray(pc.list_flatten(col.take(pa.array(order))).to_numpy(zero_copy_only=False), dtype)


def collect_blocks(ds, n_files: int, advance=lambda rows: None) -> BlockTable:
    cols = {f.name: [] for f in BLOCK_SCHEMA}
    for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        for k in cols:
            cols[k].append(b.column(k))
        advance(int(pc.sum(b.column("rows")).as_py() or 0))
    t = pa.Table.from_arrays([pa.chunked_array(cols[f.name], f.type) for f in BLOCK_SCHEMA],
                             schema=BLOCK_SCHEMA)
    fi, first, rows = (t.column(k).to_numpy() for k in ("fi", "first_row", "rows"))
    order = np.lexsort((first, fi))  # blocks arrive in any order; each carries its place
    fi, first, rows = fi[order].astype(np.int64), first[order], rows[order]
    counts = np.bincount(fi, weights=rows, minlength=n_files).astype(np.int64)
    base = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    # blocks of a file must tile its rows: each starts where the one before ended
    expect = np.concatenate(([0], np.cumsum(rows)[:-1])) - base[fi]
    if not np.array_equal(first, expect):
        raise RuntimeError("ray engine: tokenized rows are missing or duplicated (a read task "
                           "returned an incomplete piece); re-run")
    n_bad = pc.list_value_length(t.column("bad_row")).to_numpy()[order]
    bad_fi = np.repeat(fi, n_bad).astype(np.int32)
    bad_row = base[bad_fi] + _flat(t.column("bad_row"), order, np.int64)
    bad_kind = _flat(t.column("bad_kind"), order, np.int8)
    cols = [pc.list_flatten(t.column(n)).to_pylist() for n in
            ("part_file", "part_rows", "part_tokens", "part_bytes", "part_xxh3")]
    parts = [{"file": f, "rows": int(r), "tokens": int(k)} for f, r, k, _, _ in zip(*cols)]
    records = {f: {"bytes": int(b), CHECKSUM_ALG: x} for f, _, _, b, x in zip(*cols)}
    o = np.argsort(bad_row, kind="stable")
    unrendered: list = [{} for _ in range(n_files)]
    for f, said in zip(t.column("fi").to_pylist(), t.column("unrendered").to_pylist()):
        merge(unrendered[f], json.loads(said) if said else {})
    blank: list = [None] * n_files
    for f, said in zip(t.column("fi").to_pylist(), t.column("blank_lines").to_pylist()):
        if said:  # the whole file's record, read by one task: nothing to add up
            blank[f] = json.loads(said)
    untrained: list = [{} for _ in range(n_files)]
    for f, said in zip(t.column("fi").to_pylist(), t.column("untrained").to_pylist()):
        merge_records(untrained[f], json.loads(said) if said else {})
    return BlockTable(base, bad_row[o], bad_kind[o], bad_fi[o], int(t.column("tokens").to_numpy().sum()),
                      int(t.column("loss").to_numpy().sum()), sorted(parts, key=lambda d: d["file"]), records,
                      unrendered, blank, untrained)


def _write_part(batch: pa.Table, tmp: str | None, file_base: np.ndarray, entry: str | None = None,
                push: str | None = None, spelling: dict | None = None) -> pa.Table:
    """map_batches UDF: one tokenized block (a run of consecutive rows of one file) -> cache
    part files named by their first global row (sorted names = read order), each hashed here;
    into the build folder `tmp`, or (`entry`, a store cache) written on this node's own
    scratch and uploaded under the entry (`spelling`: the caller's words, errors.arg: a refused put
    names --cache-dir / cache_dir). Returns one summary row for the block (BLOCK_SCHEMA)."""
    fi_all = batch.column("fi").to_numpy()
    rows_all = batch.column("file_row").to_numpy()
    bad = batch.column("bad").to_numpy()
    if fi_all.size and (fi_all.min() != fi_all.max() or (np.diff(rows_all) != 1).any()):
        raise RuntimeError("ray engine: a tokenized block mixes files or is out of order")
    keep = bad == OK
    parts: list[dict] = []
    if keep.any():
        b = batch.filter(pa.array(keep))
        first = int(file_base[int(fi_all[0])] + b.column("file_row")[0].as_py())
        if entry is None:
            stage = os.path.join(tmp, f".stage-{first:012d}")
            shutil.rmtree(stage, ignore_errors=True)  # a retried task starts clean
            parts = _parts(b, file_base, stage,
                           lambda path, name, rec: os.replace(path, os.path.join(tmp, DATA_DIR, name)))
            shutil.rmtree(stage, ignore_errors=True)
        else:
            from packtool.output.store import scratch
            from packtool.tokenize.store_push import put_proven
            # each part's proof first (the push's), then the part
            with scratch("part") as stage, spelled_as(spelling or {}):
                parts = _parts(b, file_base, stage,
                               lambda path, name, rec: put_proven(path, entry, push, f"{DATA_DIR}/{name}", rec))
    length = batch.column("length").to_numpy()
    loss = batch.column("loss").to_numpy()
    unrendered: dict = {}
    for said in batch.column("unrendered").drop_null().to_pylist():
        merge(unrendered, json.loads(said))
    blank = batch.column("blank_lines").drop_null().to_pylist()  # a block is one file's: one record at most
    untrained: dict = {}
    roles = batch.column("roles")
    if roles.null_count < len(roles):  # the rows of no trained turn only
        at = np.flatnonzero(np.asarray(pc.is_valid(roles)))
        for row, said in zip(rows_all[at].tolist(), roles.take(pa.array(at)).to_pylist()):
            record(untrained, json.loads(said), row)
    return pa.table({
        "fi": pa.array([int(fi_all[0]) if fi_all.size else 0], pa.int32()),
        "first_row": pa.array([int(rows_all[0]) if rows_all.size else 0], pa.int64()),
        "rows": pa.array([int(fi_all.size)], pa.int64()),
        "tokens": pa.array([int(length[keep].sum())], pa.int64()),
        "loss": pa.array([int(loss[keep].sum())], pa.int64()),
        "bad_row": pa.array([rows_all[~keep].tolist()], pa.list_(pa.int64())),
        "bad_kind": pa.array([bad[~keep].tolist()], pa.list_(pa.int8())),
        **{f"part_{k}": pa.array([[p[k] for p in parts]], BLOCK_SCHEMA.field(f"part_{k}").type)
           for k in ("file", "rows", "tokens", "bytes", "xxh3")},
        "unrendered": pa.array([json.dumps(unrendered) if unrendered else None], pa.string()),
        "blank_lines": pa.array(blank[:1] or [None], pa.string()),
        "untrained": pa.array([json.dumps(untrained) if untrained else None], pa.string()),
    }, schema=BLOCK_SCHEMA)


def _parts(b: pa.Table, file_base: np.ndarray, stage: str, put) -> list[dict]:
    """The kept rows `b` of one block as cache parts written in `stage`; `put(path, name, record)`
    moves each to where the cache keeps it, after it is hashed (`record`: its size and xxh3-128)."""
    fi = int(b.column("fi")[0].as_py())
    src = file_base[fi] + b.column("file_row").to_numpy()
    ids, mask = b.column("input_ids").combine_chunks(), b.column("loss_mask").combine_chunks()
    offs = ids.offsets.to_numpy()
    lens = b.column("length").to_numpy().astype(np.int32)
    w = CacheWriter(stage)
    step = CacheWriter.ROWS_PER_GROUP
    for r0 in range(0, lens.size, step):  # add in row-group-sized pieces, as the local build does
        r1 = min(r0 + step, lens.size)
        a, e = int(offs[r0]), int(offs[r1])
        w.add(ids.values.to_numpy()[a:e].astype(np.int32), mask.values.to_numpy()[a:e].astype(np.uint8),
              lens[r0:r1], src[r0:r1], fi)
    parts = []
    for k, part in enumerate(w.close()):
        name = f"part-{int(src[0]):012d}-{k:03d}.parquet"
        path = os.path.join(stage, DATA_DIR, part["file"])
        rec = file_record(path)
        put(path, name, rec)
        parts.append({"file": name, "rows": int(part["rows"]), "tokens": int(part["tokens"]),
                      "bytes": int(rec["bytes"]), "xxh3": rec[CHECKSUM_ALG]})
    return parts


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
        ds = ds.map_batches(_count_udf, batch_format="pyarrow", batch_size=1, fn_kwargs={"job": job},
                            **task_options())
        for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for fi, n in zip(b.column("fi").to_pylist(), b.column("rows").to_pylist()):
                counts[fi] = n
    return np.asarray(counts, np.int64)


def _check_parts(where: str, bt: BlockTable, n_kept: int) -> None:
    """The parts the tasks reported are in the build folder, or on the store entry (where
    objects a dead build left may lie beside them: cache.json lists only this build's)."""
    names = [n for n in locate(join_uri(where, DATA_DIR)).names() if n.endswith(".parquet")]
    want = [p["file"] for p in bt.parts]
    if (sorted(names) != want) if not is_uri(where) else not set(want) <= set(names):
        raise RuntimeError("ray engine: cache part files do not match what the tasks wrote; re-run")
    if sum(p["rows"] for p in bt.parts) != n_kept:
        raise RuntimeError(f"ray engine: cache parts hold {sum(p['rows'] for p in bt.parts)} rows, "
                           f"expected {n_kept}")


def _check_bad(bt: BlockTable, job: TokenizeJob) -> dict:
    if bt.bad_row.size and job.cfg.on_empty == "error":
        fi = int(bt.bad_fi[0])
        row = int(bt.bad_row[0] - bt.file_base[fi])
        if bt.bad_kind[0] == EMPTY:
            from packtool.tokenize.pipeline import refuse_other_shape
            refuse_other_shape(job.files[fi], job.shapes[fi], job.cfg.batch_size, row)
        from packtool.tokenize.row_checks import bad_example
        acc = bt.untrained[fi]  # the roles of its first such row, where that is the row refused
        raise bad_example(job.shapes[fi], bt.bad_kind[0] == EMPTY, job.files[fi].path, row,
                          acc["first_roles"] if acc.get("first") == row else None)
    roles = run_roles(bt.untrained)
    return {"empty": int((bt.bad_kind == EMPTY).sum()), "all_masked": int((bt.bad_kind == ALL_MASKED).sum()),
            "rows": bt.bad_row[:100].tolist(), **({"roles": roles} if roles else {})}


def _refuse_changed(hashed: dict) -> None:
    """The inputs hashed for the key (InputHashes.read), asked again by tasks once every read task
    is done: a file replaced whole by one of the same row count (a re-export renamed into place)
    passed the row count above, and the entry held one version's rows under the other's key
    (S49A-6). Refused as the local engine refuses it (pipeline's recheck)."""
    import ray
    paths = sorted(hashed)
    changed = ray.get([remote(changed_since).remote(p, *hashed[p]) for p in paths])
    for p, c in zip(paths, changed):
        if c:
            raise PacktoolInputError("the file changed while it was being tokenized; re-run once it is complete",
                                     path=p)


class InputHashes:
    """`resolve_cache`'s `digest`: every input file hashed by a Ray task of its own, one read
    for both its xxh3-128 (the cache key) and its sha256 (cache.json), so the driver never
    reads the inputs' bytes."""

    def __init__(self):
        self.sha256: dict[str, str] = {}
        self.read: dict[str, tuple] = {}  # path -> (xxh3-128, object version): what build_cache rechecks

    def __call__(self, files: list) -> list[str]:
        import ray

        from packtool.tokenize.request import input_digests
        from packtool.tokenize.readers import InputFile
        if not all(isinstance(f, InputFile) for f in files):  # objects hash themselves (hf_input)
            return input_digests(files)
        got = ray.get([remote(hashed_version).remote(f.path) for f in files])
        self.sha256 = {f.path: sha for f, (_, sha, _) in zip(files, got)}
        self.read = {f.path: (x, version) for f, (x, _, version) in zip(files, got)}
        return [x for x, _, _ in got]


def build_cache(job: TokenizeJob, fingerprint: str, final: str, root: str | None,
                progress: bool = False, sha256: dict | None = None, push: str | None = None,
                hashed: dict | None = None) -> TokenizedCache:
    """Tokenize with Ray Data and publish the cache at `final` (atomically, like the local build),
    or, `final` a store entry URI (packtool.tokenize.store_cache), upload its parts from the
    tasks that tokenize and put its cache.json last (`push`: the run id of the driver's
    store_push.Push, which names each part's proof). `progress`: packtool's own bar, by rows, as
    blocks come back (Ray's bars stay off)."""
    import ray.data

    store = is_uri(final)
    tmp, made = None, []
    if not store:
        made = make_parents(root)  # a failed run removes the --cache-dir folders it made, no others
        tmp = owned_temp_dir(f".tmp-{fingerprint[:12]}-{os.getpid()}-", root, made)  # the next run removes it if we die
    try:
        if tmp:
            os.makedirs(os.path.join(tmp, DATA_DIR))
        counts = count_file_rows(job)
        for fi in np.flatnonzero(counts == 0):
            raise no_rows_error(job.files[int(fi)].path)
        file_base = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        source = make_datasource(job)
        env = task_options()
        rows = (ray.data.read_datasource(source, override_num_blocks=source.n_tasks, **env)
                .map_batches(tokenize_block, batch_format="pyarrow", batch_size=None,
                             fn_kwargs={"job": job}, **env)
                .map_batches(_write_part, batch_format="pyarrow", batch_size=None,
                             fn_kwargs={"tmp": tmp, "file_base": file_base, "entry": final if store else None,
                                        "push": push, "spelling": spelling_now()}, **env))
        with bar("Tokenizing (Ray)", int(file_base[-1]), "rows", progress) as advance:
            bt = collect_blocks(rows, len(job.files), advance)
        if not np.array_equal(bt.file_base, file_base):
            fi = int(np.flatnonzero(np.diff(bt.file_base) != counts)[0])
            raise PacktoolInputError(f"read {int(np.diff(bt.file_base)[fi])} rows, counted {int(counts[fi])}: the "
                                     f"file changed during the run; re-run once it no longer changes",
                                     path=job.files[fi].path)
        _refuse_changed(hashed or {})
        skipped = _check_bad(bt, job)
        n_rows = int(file_base[-1])
        n_kept = n_rows - int(bt.bad_row.size)
        if n_kept == 0:
            raise all_skipped_error(skipped["empty"], skipped["all_masked"], job.files)
        _check_parts(final if store else tmp, bt, n_kept)
        sha = {}
        inputs_meta = []
        for fi, (f, shape) in enumerate(zip(job.files, job.shapes)):
            if f.path not in sha:
                sha[f.path] = (sha256 or {}).get(f.path) or sha256_file(f.path)
            size, mtime = file_stat(f.path)
            inputs_meta.append({"path": f.path, "bytes": size, "sha256": sha[f.path],
                                "mtime_ns": mtime, "format": f.kind,
                                "shape": shape.kind, "columns": list(shape.columns),
                                "rows": int(file_base[fi + 1] - file_base[fi])})
            if bt.unrendered[fi]:  # as the local engine: said, and kept for a run that reuses the cache
                say_unrendered(f.path, bt.unrendered[fi], job.template.name if job.template else None)
                inputs_meta[-1]["unrendered"] = bt.unrendered[fi]
            if bt.blank_lines[fi]:  # the same: said, and kept for reuse (chat_keys.say_stored says it then)
                say_record(f.path, bt.blank_lines[fi])
            inputs_meta[-1].update(stored(f.kind, bt.blank_lines[fi]))
            if bt.untrained[fi]:  # the same: said, and kept for reuse
                say_untrained(f.path, bt.untrained[fi])
                inputs_meta[-1]["untrained"] = bt.untrained[fi]
        meta = {
            "format": CACHE_FORMAT, "version": CACHE_VERSION, "columns": _COLUMNS,
            "config": job.cfg.as_dict(), "tokenizer": tokenizer_meta(job.info),
            "template_text": job.template.text if job.template else None,
            "inputs": inputs_meta,
            "parts": bt.parts,
            "num_rows": n_kept, "num_source_rows": n_rows,
            "num_tokens": bt.tokens, "num_loss_tokens": bt.loss,
            "skipped": skipped, "tokenizers_version": tokenizers.__version__,
            "fingerprint": fingerprint,
        }
        known = {f"{DATA_DIR}/{p['file']}": bt.records[p["file"]] for p in bt.parts}
        if store:  # cache.json put last: the entry's commit
            commit_entry(final, dict(meta, checksums=known))
            return TokenizedCache(final)
        return publish_cache(tmp, final, meta, known)
    except BaseException:
        if tmp:
            remove_tree(tmp)
        remove_created(made)
        raise
