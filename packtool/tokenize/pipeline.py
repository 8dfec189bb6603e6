"""`tokenize_to_cache`: inputs + TokenizeConfig -> a TokenizedCache (reused when it exists),
and the encode pipeline that builds one (`_build`, `_encode_chunk`). What a run settles before
encoding (inputs, shapes, tokenizer, the cache key, the cache to reuse) is `tokenize.request`'s.

Work split over the cores: the main thread reads and renders (Python, holds the GIL) and cuts
each rendered batch into chunks of about 256 Ki characters; encode threads run
`encode_batch` on a chunk (Rust, GIL released, parallel over all cores) and turn its
Encodings into flat ids + loss masks; two writer threads (tokenize/sink.py) append finished
chunks, in row order, to the Parquet parts and to the flat token store that `pack` gathers
from, so both are published together by one rename. Pre-tokenized batches skip the encoders:
their list columns' values go to the writers as they are (no per-row Python).
"""
from __future__ import annotations

import gc
import os
from collections import deque
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import tokenizers

from packtool.notes import NOTES  # noqa: F401  (the owner; NOTES kept here for callers)
from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.heap import HeapBound, bound_heap, unbound_heap
from packtool.output.files import make_parents, remove_created
from packtool.output.leftovers import owned_temp_dir, remove_tree
from packtool.side import parse_side_spec, side_columns_to_manifest
from packtool.storage import file_size, is_uri, join_uri, shown
from packtool.tokenize.bar import TokenizeBar as _Progress
from packtool.tokenize.cache import CACHE_FORMAT, CACHE_VERSION, SIDE_STORE, TokenizedCache, publish_cache, tokenizer_meta
from packtool.tokenize.blank_lines import BlankLines, say_record, stored
from packtool.tokenize.chat_keys import merge, say_stored, say_unrendered
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import EncodedBatch, LoadedTokenizer, encode_rendered, start_encode
from packtool.tokenize.long_rows import RowTooLongError
from packtool.tokenize.hf_input import batches_of, changed_since_hashed, rows_of, start_meta
from packtool.tokenize.late_columns import late_columns
from packtool.tokenize.prefetch import EncodePool, read_ahead, warm_compiled_code
from packtool.tokenize.readers import InputFile
from packtool.tokenize.reply_roles import record, run_roles, say_untrained
from packtool.tokenize.request import default_cache_dir, no_rows_error, resolve_cache, reusable_cache, special_tokens
from packtool.tokenize.row_checks import bad_example
from packtool.tokenize.shapes import RenderedBatch, Shape, refuse_other_row, render_batch
from packtool.tokenize.side_values import SideReader
from packtool.tokenize.sink import CacheSink
from packtool.tokenize.cache_root import check_cache_dir
from packtool.tokenize.store_cache import mirror_dir, pull_entry, push_entry, refuse_foreign_objects
from packtool.tokenize.store_push import sweep_pushes
from packtool.tokenize.templates import Renderer
from packtool.tokenize.token_rows import tokens_batch as _tokens_batch

_LIST_COLUMNS = {"input_ids": "list<int32> token ids",
                 "loss_mask": "list<uint8> 1 = token is a target; null row: every token is"}
# Encode chunks queued or running: one encoding (encode_batch uses every core), one ready to
# start the moment it ends, and a third being rendered for. Two cost raw chat 3.2% wall (cores
# idle while the reader rendered the next chunk) for 7 MiB less peak; the peak is flat with rows
# at either depth since the flat store keeps nothing per row (BENCHMARKS.md "Raw chat pack").
_IN_FLIGHT = 3
# Rendered characters per encode_batch call. A chunk's Encodings (ids, type ids, per-token
# strings, offsets, words, masks: ~100 bytes a token) and encode_batch's scratch live in
# glibc's arenas, which keep their high-water mark: at 1 Mi characters (with the earlier
# ThreadPoolExecutor) the in-flight chunks held up to ~190 MiB of heap, 98-115 MiB at 256 Ki
# (issue 23 class 8, BENCHMARKS.md "Raw chat pack: peak RSS"). The bound holds whatever the pool.
_CHUNK_CHARS = 1 << 18
# How far the process's anonymous memory may rise above its low point since the last trim
# before an encode thread trims glibc's arenas (packtool.heap.HeapBound). Trimming after every
# chunk kept the least, but the next chunk faulted the returned pages in again (+28-30k minor
# faults, +0.15-0.2 CPU-s per 2k chat rows). At 32 MiB a 60k-row chat tokenize trimmed 3 times
# and peaked as low as at 16 MiB (42 trims): BENCHMARKS.md "Raw chat pack: peak RSS".
_HEAP_SLACK = 32 << 20


def refuse_other_shape(f: InputFile, shape: Shape, batch_size: int, row: int) -> None:
    """Before calling `row` an empty example: re-read it whole (the run reads its shape's
    columns only) and name it as a row of another shape if it holds other columns, with the
    flag that reads it (`--on-empty skip` would drop real data)."""
    if not isinstance(f, InputFile):  # an in-memory table or a stream: not read twice
        return
    columns = None
    while True:
        try:
            return _refuse_other_row_in(f, shape, batch_size, row, columns)
        except PacktoolInputError as e:  # a JSON field of two types the run does not read stops nothing
            clash = getattr(e, "clash", None)
            if clash is None or clash in shape.columns:
                raise
            columns = [c for c in (columns or e.columns) if c != clash]


def _refuse_other_row_in(f: InputFile, shape: Shape, batch_size: int, row: int, columns) -> None:
    seen = 0
    for batch in batches_of(f, batch_size, columns):
        if row < seen + batch.num_rows:
            refuse_other_row(batch, shape, f.path, row, row - seen)
            return
        seen += batch.num_rows


def all_skipped_error(empty: int, all_masked: int, files) -> PacktoolInputError:
    """--on-empty skip dropped every row: say why, and what usually causes it."""
    names = ", ".join(str(getattr(f, "path", f)) for f in files[:3]) + (" ..." if len(files) > 3 else "")
    return PacktoolInputError(
        f"{names}: every row was skipped under {arg('on_empty', 'skip')} ({empty:,} empty, {all_masked:,} "
        f"with no loss tokens), so nothing is left to pack; check the shape and field settings "
        f"({arg('shape')}, {arg('text_field')}, {arg('prompt_field')}/{arg('response_field')}) and, for chats, "
        f"that assistant turns exist", flag=cli_flag("on_empty"))


def tokenize_to_cache(inputs, cfg: TokenizeConfig, cache_dir: str | None = None,
                      progress: bool = True, check_lengths=None) -> TokenizedCache:
    """Tokenize `inputs` (paths, or objects: hf_input.as_source) into a Parquet cache, or return
    the existing cache for the same inputs (content, objects' too: hf_input.key_of),
    tokenizer (content hash), template text and options."""
    warm_compiled_code()
    store = cache_dir if is_uri(cache_dir) else None
    if not store:
        return _to_cache(inputs, cfg, cache_dir, None, progress, check_lengths)
    # a local mirror of the store's entries (packtool.tokenize.store_cache)
    check_cache_dir(store, inputs if isinstance(inputs, (list, tuple)) else [inputs])  # before the mirror is made
    sweep_pushes(store)  # what killed pushes left there (store_push)
    mirror = mirror_dir(store, default_cache_dir())
    made = make_parents(mirror)
    try:
        return _to_cache(inputs, cfg, mirror, store, progress, check_lengths)
    except BaseException:
        remove_created(made)  # the mirror's folders a failed run made, while empty: as a local root's
        raise


def _to_cache(inputs, cfg: TokenizeConfig, cache_dir: str | None, store: str | None, progress: bool,
              check_lengths) -> TokenizedCache:
    r = resolve_cache(inputs, cfg, cache_dir)
    damaged = False  # a pulled entry that fails the check is replaced on the store too
    if r.existing is None and store and pull_entry(store, r.final):
        entry, mirror = join_uri(store, os.path.basename(r.final)), r.final
        r = replace(r, existing=reusable_cache(mirror, r.fingerprint, named=shown(entry), before_rebuild=(
            lambda problem: refuse_foreign_objects(entry, problem, mirror=mirror))))
        damaged = r.existing is None
    if r.existing is not None:
        say_stored(r.existing.meta, r.template)
        if store:
            push_entry(store, r.final)
        return r.existing
    made = make_parents(r.root)  # a run that fails removes the --cache-dir folders it made, no others
    tmp = owned_temp_dir(f".tmp-{r.fingerprint[:12]}-{os.getpid()}-", r.root, made)
    try:
        with _fewer_collections():
            try:
                meta, known = _build(r.files, r.shapes, r.loaded, r.template, r.cfg, tmp, progress,
                                     list(r.digests), check_lengths)
            finally:  # the plan + write after allocate large arrays, as before the bound
                unbound_heap()
        meta["fingerprint"] = r.fingerprint
        cache = publish_cache(tmp, r.final, meta, known)
        if store:
            push_entry(store, r.final, replace=damaged)
        return cache
    except BaseException:
        remove_tree(tmp)
        remove_created(made)
        raise


@contextmanager
def _fewer_collections():
    """Tokenizing allocates millions of short-lived containers (parsed rows, rendered texts,
    Encodings' id lists). At CPython's default thresholds (700, 10, 10) the cyclic collector
    runs every few rows and promotes each in-flight batch to the older generations, whose
    passes then walk it again: 0.76 s of CPU per 10M gpt2 tokens here, 0.15 s with these.
    Reference counting frees nearly all of it anyway; the caller's thresholds come back."""
    old = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _build(files, shapes, loaded, template, cfg, tmp, progress, digests,
           check_lengths=None) -> tuple[dict, dict]:
    info = loaded.info if loaded else None
    heap = HeapBound(_HEAP_SLACK)
    renderer = Renderer(template, special_tokens(info)) if template else None
    counts = [rows_of(f) for f in files]
    total, by_bytes = (sum(counts), False) if all(c is not None for c in counts) else (None, False)
    sizes = [file_size(f.path) if isinstance(f, InputFile) else None for f in files]
    if total is None and all(s is not None for s in sizes):
        total, by_bytes = sum(sizes), True
    bytes_before = 0  # bytes of the inputs already read (bytes mode)
    skipped = {"empty": 0, "all_masked": 0, "rows": []}
    inputs_meta = []
    global_row = 0
    totals = {"rows": 0, "tokens": 0, "loss": 0}
    flat_only = all(s.kind == "tokens" for s in shapes)  # ids are in the inputs already
    if not flat_only:  # text to encode: before the reads and encode threads (issue 23 class 8)
        bound_heap()
    sink = CacheSink(tmp, token_lists=not flat_only)
    side = SideReader(parse_side_spec(cfg.side_columns, cfg.support_columns))
    waiting: dict = {}  # (file, row) -> roles of a chat row rendered with no trained turn, till finished
    no_reply = [{} for _ in files]  # per file: the skipped such rows' roles (reply_roles.record)

    def finish(enc: EncodedBatch, f: InputFile, fi: int, first_row: int, first_global: int,
               sides: list | None = None) -> None:
        bad = enc.empty | enc.all_masked
        if bad.any():
            r = int(np.nonzero(bad)[0][0])
            if cfg.on_empty == "error":
                if enc.empty[r]:
                    refuse_other_shape(f, shapes[fi], cfg.batch_size, first_row + r)
                raise bad_example(shapes[fi], bool(enc.empty[r]), f.path, first_row + r,
                                  waiting.get((fi, first_row + r)))
            for r in np.nonzero(bad)[0].tolist() if waiting else ():  # skipped rows only
                roles = waiting.pop((fi, first_row + r), None)
                if roles is not None and not enc.empty[r]:
                    record(no_reply[fi], roles, first_row + r)
            skipped["empty"] += int(enc.empty.sum())
            skipped["all_masked"] += int((enc.all_masked & ~enc.empty).sum())
            bad_rows = (first_global + np.nonzero(bad)[0]).tolist()
            skipped["rows"] = (skipped["rows"] + bad_rows)[:100]
        if check_lengths is not None:  # the caller's early refusal (pack: --overflow error)
            check_lengths(enc.lengths, bad, f.path, first_row)
        src = first_global + np.arange(enc.lengths.size, dtype=np.int64)
        ids, mask, lens = enc.ids, enc.mask, enc.lengths
        sides = sides or []
        if bad.any():
            keep = ~bad
            tok_keep = np.repeat(keep, enc.lengths)
            ids, lens, src = ids[tok_keep], lens[keep], src[keep]
            mask = None if mask is None else mask[tok_keep]
            sides = [v[np.repeat(tok_keep, v.size // max(tok_keep.size, 1))] for v in sides]
        if sides:
            side.count_nonfinite(sides, lens, f.path, first_row + (src - first_global))
        sink.add(ids, mask, lens, src, fi, sides, side.resolved())
        totals["rows"] += int(lens.size)
        totals["tokens"] += int(ids.size)
        totals["loss"] += int(ids.size if mask is None else mask.sum(dtype=np.int64))
        bar.advance(enc.lengths.size, int(enc.ids.size))

    pending: deque = deque()  # (future, file, file index, first file row, first global row)
    rechecks: list = []  # the file each input's key hashed that changed since (None: none)
    readers: list = []  # read-ahead generators, closed (their threads stopped) on an error

    def drain(limit: int) -> None:
        """Finish encoded chunks in order: every finished one, and more until `limit` remain."""
        while pending and (len(pending) > limit or pending[0][0].done()):
            fut, *where = pending.popleft()
            try:
                enc = fut.result()
            except RowTooLongError as e:  # the encode knew the chunk, not its file and first row
                raise e.at(where[0].path, where[2]) from None
            finish(enc, *where)

    def read_all(pool: EncodePool) -> None:
        nonlocal global_row, bytes_before
        for fi, (f, shape) in enumerate(zip(files, shapes)):
            file_rows = 0
            unrendered: dict = {}  # chat keys the template leaves out (chat_keys), said per file
            meta = start_meta(f)
            base = bytes_before
            blank = BlankLines()  # the blank lines JSON Lines skips, said per file (blank_lines)
            batches = batches_of(f, cfg.batch_size, list(shape.columns) + list(shape.side),
                                 read_bytes=lambda n, base=base: bar.at_bytes(base + n), blank=blank,
                                 judge=late_columns(f, shape, cfg))
            if shape.kind == "tokens" and isinstance(f, InputFile):  # decoding overlaps the rest
                batches = read_ahead(batches)
                readers.append(batches)
            for batch in batches:
                n = batch.num_rows
                if shape.kind == "tokens":
                    enc = _tokens_batch(batch, shape, info.vocab_size if info else None, f.path, file_rows,
                                         lean=True)
                    sides = side.take(batch, enc.lengths, f.path, file_rows, enc.ids, enc.mask,
                                      enc.empty | enc.all_masked, info.vocab_size if info else None) if side.spec else None
                    drain(0)
                    finish(enc, f, fi, file_rows, global_row, sides)
                else:
                    rb = render_batch(batch, shape, renderer, cfg.prompt_separator, f.path, file_rows,
                                      skip_null=cfg.on_empty == "skip")
                    merge(unrendered, rb.unrendered)
                    waiting.update({(fi, file_rows + j): roles for j, roles in rb.no_reply.items()})
                    for off, part in split_rendered(rb, _CHUNK_CHARS):
                        fut = pool.submit(_encode_chunk, loaded, part, cfg, shape.templated, heap)
                        pending.append((fut, f, fi, file_rows + off, global_row + off))
                        drain(_IN_FLIGHT)
                file_rows += n
                global_row += n
                # dropped before the next read: a batch is a slice of its whole JSON block's table
                batch = rb = enc = sides = part = None
                if by_bytes and counts[fi]:  # a file that stores its rows, in a bytes-mode bar
                    bar.at_bytes(base + sizes[fi] * file_rows // counts[fi])
            if file_rows == 0:
                raise no_rows_error(f.path)
            if by_bytes:
                bytes_before += sizes[fi]
                bar.at_bytes(bytes_before)
            # the key must describe what was read: re-hashed beside the writes (objects too)
            rechecks.append(pool.submit(changed_since_hashed, f, digests[fi]))
            extra = {"xxh3_128": digests[fi]} if isinstance(f, InputFile) else {}
            if unrendered:  # kept, so that a run reusing this cache says the note too
                say_unrendered(f.path, unrendered, template.name)
                extra["unrendered"] = unrendered
            if blank.count:  # kept too, said again on reuse (chat_keys.say_stored)
                say_record(f.path, blank.record())
            extra.update(stored(f.kind, blank.record()))  # a CSV's none too: counted (blank_lines.uncounted)
            inputs_meta.append({**meta.result(), **extra, "shape": shape.kind, "columns": list(shape.columns),
                                "rows": file_rows})
        drain(0)
        for rec, acc in zip(inputs_meta, no_reply):
            if acc:  # kept, so that a run reusing this cache says the note too
                say_untrained(rec["path"], acc)
                rec["untrained"] = acc
        if any(no_reply):
            skipped["roles"] = run_roles(no_reply)

    # Chunks of ~_CHUNK_CHARS queued _IN_FLIGHT deep: the encoder always has work while this
    # thread reads and renders, and the last chunk (whose tail nothing overlaps) is small.
    try:
        # an EncodePool: Ctrl-C (or an error) does not wait for the encodes running (seconds each)
        with _Progress(progress, total, by_bytes) as bar, EncodePool(_IN_FLIGHT) as pool:
            try:
                read_all(pool)
            except BaseException:
                for fut in [p[0] for p in pending] + rechecks:
                    fut.cancel()  # queued work is dropped; running encodes finish unwaited, results dropped
                for it in readers:
                    it.close()
                raise
        for changed in rechecks:
            if changed.result() is not None:
                raise PacktoolInputError("the file changed while it was being tokenized; re-run "
                                         "once it is complete", path=changed.result())
        parts, known = sink.close(side.resolved())
    except BaseException:
        sink.abort()
        raise
    if totals["rows"] == 0:
        raise all_skipped_error(skipped["empty"], skipped["all_masked"], files)
    return {
        "format": CACHE_FORMAT, "version": CACHE_VERSION,
        "token_lists": "flat" if flat_only else "parts",
        "columns": {**({} if flat_only else _LIST_COLUMNS),
                    "length": "int32 tokens in the row", "source_index": "int64 global input row (read order)",
                    "source_file": "int32 index into inputs"},
        "config": cfg.as_dict(), "tokenizer": tokenizer_meta(info),
        "template_text": template.text if template else None,
        "inputs": inputs_meta, "parts": parts,
        "num_rows": totals["rows"], "num_source_rows": global_row, "num_tokens": totals["tokens"],
        "num_loss_tokens": totals["loss"], "skipped": skipped,
        "tokenizers_version": tokenizers.__version__,
        **({"side_columns": side_columns_to_manifest(side.resolved()), "side_store": SIDE_STORE,
            "side_nonfinite": side.nonfinite} if side.spec else {}),
    }, known


def _encode_chunk(loaded: LoadedTokenizer, rb: RenderedBatch, cfg: TokenizeConfig,
                  templated: bool, heap: HeapBound) -> EncodedBatch:
    """Runs on an encode thread: encode_batch (GIL released, all cores), then ids + masks, so
    a chunk's Python work starts as soon as it is encoded and its Encodings die here.

    Then `heap` may trim glibc's arenas: a chunk's Encodings and encode_batch's scratch (~100
    bytes a token, millions of small blocks) are allocated by the tokenizer's threads, each in
    an arena of its own, and freed here; each arena keeps its own high-water mark, and their sum
    rose with the rows (issue 23 class 8, BENCHMARKS.md "Raw chat pack: peak RSS")."""
    encodings = start_encode(loaded.tokenizer, rb)
    out = encode_rendered(loaded.tokenizer, rb, loaded.info, cfg.add_bos, cfg.add_eos,
                          templated, encodings=encodings)
    del encodings  # freed before the check, not on return
    heap.check()
    return out


def split_rendered(rb: RenderedBatch, max_chars: int) -> list[tuple[int, RenderedBatch]]:
    """(first row offset, rows) runs of about `max_chars` rendered characters each (a longer
    row is a run of its own). A row is always encoded whole."""
    out, start, chars = [], 0, 0
    for i, t in enumerate(rb.texts):
        chars += len(t)
        if chars >= max_chars:
            out.append((start, i + 1))
            start, chars = i + 1, 0
    if start < len(rb.texts) or not out:
        out.append((start, len(rb.texts)))
    if len(out) == 1:
        return [(0, rb)]
    return [(a, RenderedBatch(rb.texts[a:b], rb.spans[a:b], rb.empty[a:b])) for a, b in out]
