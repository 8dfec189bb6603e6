"""Inputs that are objects, not files: Hugging Face datasets and Arrow tables, read by the
pipeline as record batches exactly like a file.

Owns: `as_source` (a `datasets.Dataset`, `IterableDataset`, `DatasetDict` + split,
`pyarrow.Table`/`RecordBatch` or `pyarrow.dataset.Dataset` -> `ArrowSource`), and the
per-input questions the pipeline asks of files and sources alike: columns, row count,
batches, cache-key identity and cache.json entry. A dataset by name or repo folder is loaded
by `hub_load`. `datasets` is an extra (packtool[hf]); it is imported only to load by name,
objects are recognized through the already-loaded module.
"""
from __future__ import annotations

import os
import sys
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.storage import file_stat
from packtool.tokenize.checksum import digest_again, fast_digest, sha256_file
from packtool.tokenize.hf_format import has_transform, transformed
from packtool.tokenize.hub_load import by_datasets, load_dataset
from packtool.tokenize.late_columns import fragment_batches, stream_batches
from packtool.tokenize.readers import InputFile, count_rows, iter_batches, peek_columns, resolve_each
from packtool.tokenize.read_checks import refuse_repeated_names
from packtool.tokenize.store_split import refuse_store_split
from packtool.workers import thread_pool

_HASH_POOL = thread_pool(1, "packtool-input-sha")


@dataclass(frozen=True, eq=False)
class ArrowSource:
    """An in-memory or streamed input. `identity` keys the cache (None: never reused)."""
    path: str                  # how messages and cache.json name it
    kind: str                  # hf-dataset | hf-iterable | arrow-table | arrow-dataset
    columns: tuple[str, ...]
    num_rows: int | None
    identity: str | None
    read: Callable[..., Iterator]  # (batch rows, columns[, judge]) -> tables/batches
    fingerprint: str | None = None  # the object's own, recorded in cache.json when not the key
    # columns told from its first file or row: `read` takes a late_columns judge (late_columns.grows)
    grows: bool = False
    # the file(s) its identity hashed that hold other bytes now, asked once it is read: None for
    # rows held in memory, which nothing replaces under it (changed_since_hashed)
    changed: Callable[[], str | None] | None = None

    def batches(self, batch_size: int, columns: list[str] | None, judge=None) -> Iterator[pa.RecordBatch]:
        """Record batches of at most `batch_size` rows, zero-copy slices of what `read` gives."""
        parts = self.read(batch_size, columns) if judge is None else self.read(batch_size, columns, judge)
        for part in parts:
            if isinstance(part, pa.Table) and part.num_columns and part.column(0).num_chunks > 1:
                part = part.combine_chunks()  # a stream's batch arrives as one chunk per row
            for b in (part.to_batches() if isinstance(part, pa.Table) else [part]):
                if columns is not None:
                    b = b.select(columns)
                for start in range(0, b.num_rows, batch_size):
                    yield b.slice(start, batch_size)


def _is(obj, module: str, *names: str) -> bool:
    mod = sys.modules.get(module)
    return mod is not None and any(isinstance(obj, getattr(mod, n, ())) for n in names)


def _content_hash(table: pa.Table) -> str:
    """xxh3-128 of a table's schema and the bytes of every array (offset and length included,
    so two slices of one buffer differ): one pass at memory speed."""
    import xxhash
    h = xxhash.xxh3_128(table.schema.to_string().encode())
    for col in table.columns:
        for chunk in col.chunks:
            h.update(f"{chunk.offset}:{len(chunk)};".encode())
            for buf in chunk.buffers():
                h.update(b"-" if buf is None else memoryview(buf))
    return h.hexdigest()


def _hf_dataset(ds, name: str) -> ArrowSource:
    fp = getattr(ds, "_fingerprint", None)
    if has_transform(ds):  # rows as ds[i] gives them, never keyed (hf_format)
        columns, read_through = transformed(ds, name)
        return ArrowSource(name, "hf-dataset", columns, ds.num_rows, None, read_through, fp)

    def read(batch_size, columns):
        sel = ds.select_columns(columns) if columns is not None else ds
        if sel._indices is None:  # the memory-mapped table itself, no copy
            return iter(sel.data.table.to_batches(max_chunksize=batch_size))
        return sel.with_format("arrow").iter(batch_size=batch_size)  # after select/shuffle
    # Keyed, as the CLI keys a file, by the bytes read (the table, mapped or in memory; its
    # indices after select/shuffle), never by `_fingerprint`: datasets derives that from
    # state.json and the transforms, so files rewritten under an unchanged state.json keep it,
    # and so does every dataset made from them in memory (map/flatten_indices/filter with
    # keep_in_memory=True, load_from_disk(keep_in_memory=True)), which holds no file to check
    def identity() -> str:
        out = "xxh3:" + _content_hash(ds.data.table)
        return out + "+" + _content_hash(ds._indices.table) if ds._indices is not None else out
    ident = identity()
    files = [c["filename"] for c in ds.cache_files]
    # a mapped file rewritten in place shows its new bytes to the read that follows the key
    changed = (lambda: ", ".join(files) if identity() != ident else None) if files else None
    return ArrowSource(name, "hf-dataset", tuple(ds.column_names), ds.num_rows, ident, read, fp, changed=changed)


def _hf_iterable(ds, name: str) -> ArrowSource:
    def read(batch_size, columns, judge=None):
        if judge is not None:  # no features: a later row may hold a column the first did not
            return stream_batches(ds, batch_size, columns, judge, name)
        sel = ds.select_columns(columns) if columns is not None else ds
        return sel.with_format("arrow").iter(batch_size=batch_size)  # streamed, never held
    cols = ds.column_names
    if cols is None:  # features unknown until read: one small batch says
        first = next(iter(ds.with_format("arrow").iter(batch_size=1)), None)
        cols = first.column_names if first is not None else []
    return ArrowSource(name, "hf-iterable", tuple(cols), None, None, read, grows=ds.column_names is None)


def _arrow_dataset(dset, name: str) -> ArrowSource:
    import pyarrow.dataset as pads

    def read(batch_size, columns, judge=None):
        return fragment_batches(dset, batch_size, columns, judge)
    ident = changed = None
    if isinstance(dset, pads.FileSystemDataset):
        import pyarrow.fs as pafs
        fs = dset.filesystem
        # by content, as the CLI keys a file: one edited in place keeping size and mtime is new;
        # paths are the dataset's file system's (S3, a sub-tree), read through it
        digest = fast_digest if isinstance(fs, pafs.LocalFileSystem) else (lambda f: _fs_digest(fs, f))
        hashed = [[f, digest(f)] for f in dset.files]
        ident = repr([type(dset.format).__name__] + hashed)
        # read by path after the key: a file replaced between the two is read new, keyed old
        changed = lambda: next((_fs_shown(fs, f) for f, d in hashed if digest(f) != d), None)  # noqa: E731
    # its schema is its first file's (unless given): a later file may hold more (late_columns)
    return ArrowSource(name, "arrow-dataset", tuple(dset.schema.names), None, ident, read, grows=True,
                       changed=changed)


def _fs_shown(fs, path: str) -> str:
    """A dataset file's path as its user knows it: a sub-tree's base before it, a store's scheme."""
    import pyarrow.fs as pafs
    if isinstance(fs, pafs.SubTreeFileSystem):
        return _fs_shown(fs.base_fs, fs.base_path.rstrip("/") + "/" + path)
    return path if isinstance(fs, pafs.LocalFileSystem) else f"{fs.type_name}://{path}"


def _fs_digest(fs, path: str) -> str:
    """xxh3-128 of a file read through a pyarrow file system, block by block."""
    import xxhash
    h = xxhash.xxh3_128()
    with fs.open_input_stream(path) as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def as_source(obj, split: str | None = None) -> ArrowSource:
    """The object as an ArrowSource; PacktoolInputError naming the fix for anything else."""
    what = type(obj).__name__
    if _is(obj, "datasets", "DatasetDict", "IterableDatasetDict"):
        if split is None or split not in obj:
            raise PacktoolInputError(f"a {what} needs a split; pass {arg('split')} one of "
                                     f"{', '.join(obj)}", flag=cli_flag("split"))
        return as_source(obj[split])
    if split is not None and not _is(obj, "datasets", "Dataset", "IterableDataset"):
        raise PacktoolInputError(f"{arg('split', split)} applies to a DatasetDict, not a {what}", flag=cli_flag("split"))
    if _is(obj, "datasets", "Dataset"):
        return _hf_dataset(obj, f"<datasets.Dataset {getattr(obj, '_fingerprint', '')}>")
    if _is(obj, "datasets", "IterableDataset"):
        return _hf_iterable(obj, "<datasets.IterableDataset>")
    if isinstance(obj, pa.RecordBatch):
        obj = pa.Table.from_batches([obj])
    if isinstance(obj, pa.Table):
        return ArrowSource(f"<pyarrow.Table {obj.num_rows} rows>", "arrow-table", tuple(obj.column_names),
                           obj.num_rows, _content_hash(obj),
                           lambda bs, cols: iter((obj.select(cols) if cols else obj).to_batches(max_chunksize=bs)))
    if _is(obj, "pyarrow.dataset", "Dataset"):
        return _arrow_dataset(obj, f"<pyarrow.dataset {type(obj).__name__}>")
    raise PacktoolInputError(
        f"cannot read a {what}; pass file paths, a datasets.Dataset/IterableDataset/DatasetDict "
        "(with split), a pyarrow.Table or a pyarrow.dataset.Dataset")


def resolve_sources(inputs, split: str | None = None, config: str | None = None) -> list:
    """Files (strings: files, folders, globs) and objects, in order, as InputFile/ArrowSource."""
    if isinstance(inputs, (str, os.PathLike)) or not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    if config is not None and split is None:
        raise PacktoolInputError(f"{arg('config')} picks a dataset's configuration, read with {arg('split')}: "
                                 f"pass the split too", flag=cli_flag("config"))
    if split is not None:  # as the CLI: a folder or a name with a split is read by `datasets`
        refuse_store_split([os.fspath(i) for i in inputs if isinstance(i, (str, os.PathLike))], split, config)
        loaded = [load_dataset(os.fspath(i), split, config) if by_datasets(i) else i for i in inputs]
        # a DatasetDict folder's split comes back as its files (hub_load._saved_split)
        inputs = [x for i in loaded for x in (i if isinstance(i, list) else [i])]
    strings = [os.fspath(i) for i in inputs if isinstance(i, (str, os.PathLike))]
    if strings and split is not None:
        raise PacktoolInputError(f"{arg('split')} applies to a dataset object or name, not a file",
                                 path=strings[0], flag=cli_flag("split"))
    # one resolution: its checks (a file reached twice) see every path, its notes are said once
    each = iter(resolve_each(strings)) if strings else iter(())
    out: list = []
    for item in inputs:
        if isinstance(item, (InputFile, ArrowSource)):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            out += next(each)
        else:
            out.append(as_source(item, split))
    if not out:
        raise PacktoolInputError("no input files given")
    return out


# ---------------------------------------------------------------- per input: file or source

def columns_of(f) -> list[str]:
    if isinstance(f, ArrowSource):
        refuse_repeated_names(list(f.columns), f.path, "its schema: ")
        return list(f.columns)
    return peek_columns(f)


def rows_of(f) -> int | None:
    return f.num_rows if isinstance(f, ArrowSource) else count_rows(f)


def batches_of(f, batch_size: int, columns: list[str] | None, read_bytes=None,
               blank=None, judge=None) -> Iterator[pa.RecordBatch]:
    if isinstance(f, ArrowSource):
        return f.batches(batch_size, columns, judge)
    return iter_batches(f, batch_size, columns, read_bytes=read_bytes, blank=blank, judge=judge)


def key_of(f) -> list:
    """The input's part of the cache key: a file by path, size and mtime (as before); a source
    by its identity (the content it reads: its Arrow buffers, or the files behind it), or a
    fresh id when it has none (a stream: never reused)."""
    if isinstance(f, ArrowSource):
        return [f.kind, f.identity or f"unkeyed-{uuid.uuid4().hex}"]
    size, mtime = file_stat(f.path)
    return [f.path, size, mtime]


def changed_since_hashed(f, digest: str) -> str | None:
    """The file that no longer holds the bytes the key hashed (`digest`: the input's part of it),
    asked once the input is read: its rows may be the new bytes', kept under the old bytes' key
    and reused by every later run over them. None: unchanged, or rows held in memory."""
    if isinstance(f, InputFile):
        return f.path if digest_again(f.path) != digest else None
    return f.changed() if f.changed is not None else None


def start_meta(f) -> Future:
    """The input's cache.json entry; a file's sha256 runs on a thread (hashlib releases the
    GIL) while the file is read."""
    if isinstance(f, ArrowSource):
        done: Future = Future()
        done.set_result({"path": f.path, "bytes": None, "sha256": None, "fingerprint": f.fingerprint or f.identity,
                         "mtime_ns": None, "format": f.kind})
        return done

    def meta() -> dict:
        size, mtime = file_stat(f.path)
        return {"path": f.path, "bytes": size, "sha256": sha256_file(f.path),
                "mtime_ns": mtime, "format": f.kind}
    return _HASH_POOL.submit(meta)
