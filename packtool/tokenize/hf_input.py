"""Inputs that are objects, not files: Hugging Face datasets and Arrow tables, read by the
pipeline as record batches exactly like a file.

Owns: `as_source` (a `datasets.Dataset`, `IterableDataset`, `DatasetDict` + split,
`pyarrow.Table`/`RecordBatch` or `pyarrow.dataset.Dataset` -> `ArrowSource`), `load_dataset`
for the CLI (a Hub name or a local dataset repo folder through `datasets.load_dataset`), and
the per-input questions the pipeline asks of files and sources alike: columns, row count,
batches, cache-key identity and cache.json entry. `datasets` is an extra (packtool[hf]); it is
imported only to load by name, objects are recognized through the already-loaded module.
"""
from __future__ import annotations

import os
import sys
import uuid
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from packtool.errors import PacktoolInputError, arg, cli_flag, shown
from packtool.storage import file_stat, is_uri
from packtool.tokenize.checksum import fast_digest, sha256_file
from packtool.tokenize.hf_format import has_transform, transformed
from packtool.tokenize.late_columns import fragment_batches, stream_batches
from packtool.tokenize.readers import InputFile, count_rows, iter_batches, peek_columns, resolve_inputs
from packtool.tokenize.read_checks import refuse_repeated_names
from packtool.tokenize.repo_folder import generation_cause, split_files
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
    ident = "xxh3:" + _content_hash(ds.data.table)
    if ds._indices is not None:
        ident += "+" + _content_hash(ds._indices.table)
    return ArrowSource(name, "hf-dataset", tuple(ds.column_names), ds.num_rows, ident, read, fp)


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
    ident = None
    if isinstance(dset, pads.FileSystemDataset):
        import pyarrow.fs as pafs
        fs = dset.filesystem
        # by content, as the CLI keys a file: one edited in place keeping size and mtime is new;
        # paths are the dataset's file system's (S3, a sub-tree), read through it
        digest = fast_digest if isinstance(fs, pafs.LocalFileSystem) else (lambda f: _fs_digest(fs, f))
        ident = repr([type(dset.format).__name__] + [[f, digest(f)] for f in dset.files])
    # its schema is its first file's (unless given): a later file may hold more (late_columns)
    return ArrowSource(name, "arrow-dataset", tuple(dset.schema.names), None, ident, read, grows=True)


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


def resolve_sources(inputs, split: str | None = None) -> list:
    """Files (strings: files, folders, globs) and objects, in order, as InputFile/ArrowSource."""
    if isinstance(inputs, (str, os.PathLike)) or not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    if split is not None:  # as the CLI: a folder or a name with a split is read by `datasets`
        loaded = [load_dataset(os.fspath(i), split, None) if _by_datasets(i) else i for i in inputs]
        # a DatasetDict folder's split comes back as its files (_saved_split)
        inputs = [x for i in loaded for x in (i if isinstance(i, list) else [i])]
    strings = [os.fspath(i) for i in inputs if isinstance(i, (str, os.PathLike))]
    if strings and split is not None:
        raise PacktoolInputError(f"{arg('split')} applies to a dataset object or name, not a file",
                                 path=strings[0], flag=cli_flag("split"))
    if strings and len(strings) == len(inputs):
        return resolve_inputs(strings)  # one call: its checks (a file reached twice) see them all
    if strings:
        resolve_inputs(strings)
    out: list = []
    for item in inputs:
        if isinstance(item, (InputFile, ArrowSource)):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            out += resolve_inputs([os.fspath(item)])
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


# ---------------------------------------------------------------- the CLI: a dataset by name

OFFLINE_HINT = ("download it where the Hub is reachable (`hf download --repo-type dataset NAME "  # flags of `hf`
                "--local-dir DIR`, or `datasets.load_dataset(...).save_to_disk(DIR)`), copy DIR here "
                "and pass DIR")


def offline_hint(name: str) -> str:
    """OFFLINE_HINT for `name`, with the flags a downloaded repo folder is read with: as a plain
    folder it would pack every configuration and split (repo_folder)."""
    pick = f" with {arg('split', 'SPLIT')}"
    if cli_flag("config"):
        pick += f" (and {arg('config', 'CONFIG')} for a dataset of several configurations)"
    return OFFLINE_HINT.replace("NAME", name) + pick


# Suffixes that say "a file" (a Hub dataset name has none of them): a missing one is a typo or
# a wrong path, never a name to look up on the Hub (which retries the network for ~30 s).
FILE_SUFFIXES = (".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".gz", ".zst", ".zstd", ".bz2",
                 ".xz", ".lz4", ".zip", ".tar", ".tgz", ".7z", ".arrow", ".feather", ".ipc", ".csv",
                 ".tsv", ".txt", ".orc", ".avro")


def _by_datasets(item) -> bool:
    """A path or name `datasets.load_dataset` reads with a split: a folder, or a Hub name."""
    if not isinstance(item, (str, os.PathLike)):
        return False
    spec = os.fspath(item)
    return (os.path.isdir(spec) and not is_uri(spec)) or is_dataset_name(spec)


def is_dataset_name(spec: str) -> bool:
    """Not a local path or glob: a Hub dataset name (`owner/name` or `name`)."""
    return not is_uri(spec) and not os.path.exists(spec) and not any(c in spec for c in "*?[") and \
        not spec.lower().endswith(FILE_SUFFIXES)


def _hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hub's host answers on its port within `timeout` (name lookup included)."""
    import socket
    import threading
    from urllib.parse import urlparse
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((url.hostname or "huggingface.co", url.port or
                                      (80 if url.scheme == "http" else 443)), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass
    t = threading.Thread(target=probe, daemon=True, name="packtool-hub-probe")
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


# What `datasets` and `huggingface_hub` read when imported: HF_DATASETS_OFFLINE when set, else
# HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE, true for these values (their ENV_VARS_TRUE_VALUES).
_TRUE = {"1", "ON", "YES", "TRUE"}
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _offline_asked() -> bool:
    """Whether the environment puts the Hub libraries offline, as they decide it at import."""
    own = os.environ.get("HF_DATASETS_OFFLINE")
    if own is not None:
        return own.upper() in _TRUE
    return (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").upper() in _TRUE


@contextmanager
def _offline_unless_reachable(spec: str):
    """A Hub name asked offline, or with no network: offline mode for the call, so the local
    cache answers at once (a cached dataset loads, an uncached one fails) instead of ~25 s of
    retries. The libraries read the environment once, at import: a caller that imported them
    (or set the variable) before this call has constants that say otherwise, so they are set
    for the call too, and put back."""
    if os.path.isdir(spec) or (not _offline_asked() and _hub_reachable()):
        yield
        return
    prev = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    os.environ.update(dict.fromkeys(_OFFLINE_ENV, "1"))  # for a first import inside the call
    mods = [(m, k) for m, keys in ((sys.modules.get("datasets.config"), ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
                                   (sys.modules.get("huggingface_hub.constants"), ("HF_HUB_OFFLINE",))) if m
            for k in keys if hasattr(m, k)]
    old = [getattr(m, k) for m, k in mods]
    for m, k in mods:
        setattr(m, k, True)
    try:
        yield
    finally:
        for (m, k), v in zip(mods, old):
            setattr(m, k, v)
        for k, v in prev.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_dataset(spec: str, split: str | None, config: str | None):
    """`datasets.load_dataset(spec, config, split=split)`: a Hub name (the local cache serves it
    offline, at once when the Hub cannot be reached) or a local dataset repo folder. One line
    naming the fix when it cannot."""
    saved = _saved_split(spec, split, config)
    if saved is not None:
        return saved
    files = split_files(spec, split, config) if split and os.path.isdir(spec) else None
    if files:  # a JSON/Parquet repo's split: its files, by packtool's readers
        return resolve_inputs(files)
    with _offline_unless_reachable(spec):
        return _load_dataset(spec, split, config)


def _saved_split(spec: str, split: str | None, config: str | None):
    """A `save_to_disk` folder given with --split/--config, which `datasets.load_dataset`
    refuses with its own fix ("use load_from_disk", a function a CLI user cannot call, blamed on
    --config): a DatasetDict folder's split is its subfolder, read as the folder; a one-split
    folder is the split itself. None: not such a folder (load_dataset's to read)."""
    if not isinstance(spec, str) or is_uri(spec) or not os.path.isdir(spec):
        return None
    dict_folder = os.path.exists(os.path.join(spec, "dataset_dict.json"))
    if not dict_folder and not os.path.exists(os.path.join(spec, "state.json")):
        return None
    if config is not None:
        raise PacktoolInputError(f"a datasets save_to_disk folder has no configurations; drop {arg('config')}",
                                 path=spec, flag=cli_flag("config"))
    if not dict_folder:
        raise PacktoolInputError(f"a datasets save_to_disk folder of one split (it is read as itself); "
                                 f"drop {arg('split')}", path=spec, flag=cli_flag("split"))
    splits = sorted(d for d in os.listdir(spec) if os.path.isdir(os.path.join(spec, d)))
    if split not in splits:
        raise PacktoolInputError(f"a DatasetDict folder with no split {split!r}; its splits: {', '.join(splits)}",
                                 path=spec, flag=cli_flag("split"))
    from packtool.tokenize.readers import resolve_inputs
    return resolve_inputs([os.path.join(spec, split)])


def _load_dataset(spec: str, split: str | None, config: str | None):
    try:
        import datasets
    except ImportError:
        raise PacktoolInputError("reading a dataset by name needs the `datasets` package: "
                                 "pip install 'packtool[hf]'", path=spec) from None
    from packtool.output.datasets_cache import check_datasets_cache
    check_datasets_cache(shown(spec), "")  # its Arrow conversion is written there
    try:
        ds = datasets.load_dataset(spec, config, split=split)
    except datasets.exceptions.DatasetGenerationError as e:  # the data's fault: its cause says which
        raise PacktoolInputError(f"datasets.load_dataset could not read it: {generation_cause(e)}; correct "
                                 f"that file, or pass the split's files by name (packtool's readers name the "
                                 f"row)", path=spec) from None
    except (ConnectionError, OSError, FileNotFoundError, ValueError) as e:
        text = f"{type(e).__name__} {e}".lower()
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false") or any(
            w in text for w in ("offline", "connect", "not found", "couldn't reach", "could not reach",
                                "localentrynotfound"))
        if offline and not os.path.isdir(spec):
            raise PacktoolInputError(f"dataset not in the local cache and the Hub cannot be "
                                     f"reached; {offline_hint(spec)}", path=spec) from None
        raise PacktoolInputError(f"datasets.load_dataset failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                                 path=spec, flag=cli_flag("config")) from None
    if split is None and _is(ds, "datasets", "DatasetDict", "IterableDatasetDict"):
        if len(ds) != 1:
            raise PacktoolInputError(f"dataset has splits {', '.join(ds)}; pick one", path=spec, flag=cli_flag("split"))
        ds = next(iter(ds.values()))
    return ds
