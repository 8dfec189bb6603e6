"""`SlabDataset.to_hf()`'s calls into `datasets` and fsspec (packtool.hf's bridge): every
failure there is packtool's own error, one line naming the argument (`load_kwargs` and its key,
the dataset's `path`) and the location (the shard, the cache folder, the store).

`datasets` raised its own errors and Python's, untranslated: a shard removed or damaged after
packtool's checks (FileNotFoundError "Unable to find", DatasetGenerationError over an
ArrowInvalid), a cache folder it cannot write (FileExistsError), a keyword it does not take or
one to_hf sets itself (TypeError "got multiple values for keyword argument 'split'"), a bad
value (ZeroDivisionError for num_proc=0, ValueError), a store that stopped answering.
"""
from __future__ import annotations

import os

from packtool.errors import PacktoolConfigError, PacktoolError, PacktoolInputError
from packtool.free_memory import decode_out_of_memory
from packtool.integers import short

# what to_hf decides itself: the output's shards, all of them as one split, every column in the
# dataset's order (a caller selects rows or columns on the dataset to_hf returns), the
# conversion's name (checked_name)
SET_BY_TO_HF = ("path", "name", "data_files", "data_dir", "split", "streaming", "columns")
_NETWORK = ("ConnectionError", "ClientConnectorError", "EndpointConnectionError", "ConnectTimeoutError",
            "ReadTimeoutError", "ServerDisconnectedError", "NoCredentialsError")


def check_load_kwargs(kwargs: dict) -> None:
    """Refuse a keyword to_hf sets itself, before any work."""
    for k in kwargs:
        if k in SET_BY_TO_HF:
            raise PacktoolConfigError(f"to_hf(load_kwargs): {k}={short(kwargs[k])} is to_hf's own: it loads "
                                      f"every shard of the output as one split, every column, in the "
                                      f"dataset's order, named by the checksums it checked; drop {k} (select "
                                      f"rows or columns on the dataset to_hf returns)", flag="load_kwargs")


def checked_name(manifest) -> str:
    """The name of the conversion of these shards in the datasets cache: a digest of every
    shard's checksum in the manifest, which to_hf has just held each file to. datasets keys a
    local file by its path and mtime only, so another output landed at the same paths with the
    mtimes kept (cp -p, rsync -a, tar x, a mount with coarse or fixed mtimes) would be handed
    out as the earlier conversion, rows of bytes never checked; the same bytes keep one name,
    so they still convert once."""
    import hashlib
    from packtool.tokenize.checksum import CHECKSUMS
    sums = [f"{a}:{e[a]}" for e in manifest.raw["shards"] for a in CHECKSUMS if a in e]
    return "packtool-" + hashlib.sha256("\n".join(sums).encode()).hexdigest()[:32]


def fsspec_can_read(path: str) -> None:
    """`datasets` reads a store through fsspec's own package for it (s3fs, gcsfs, adlfs); say
    so in one line instead of its ImportError deep in load_dataset."""
    from packtool.storage import is_uri
    if not is_uri(path):
        return
    import fsspec
    scheme = path.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        raise PacktoolInputError(f"to_hf(streaming=False) of a {scheme}:// output is read by datasets "
                                 f"through fsspec, which needs its {scheme} package (s3fs, gcsfs, adlfs); "
                                 f"install it, or pass streaming=True (read through packtool)", path=path) from None


def _cache_placed(kwargs: dict) -> dict:
    """`kwargs` with cache_dir's `~` expanded by packtool's one rule (params.expanded: no home
    refused, naming HOME); with no cache_dir, refuse a datasets cache that no home holds (HOME
    unset, no password entry: datasets' ~/.cache/huggingface would be a folder named `~` here)."""
    from packtool.output.paths import refuse_inside_packed
    given = kwargs.get("cache_dir")
    if isinstance(given, (str, os.PathLike)):
        from packtool.params import expanded
        placed = expanded(os.fspath(given), None, PacktoolConfigError)
        # datasets writes its lock and Arrow files there: inside a packed output they are strays
        # that every reader then refuses (S41-9); in a cache entry or checkpoint, foreign files
        refuse_inside_packed(placed, "load_kwargs['cache_dir']", itself=True, error=PacktoolConfigError)
        return {**kwargs, "cache_dir": placed}
    if given is None:  # HF_DATASETS_CACHE / HF_HOME: the same rule, and a home to hold it
        from packtool.output.datasets_cache import check_datasets_cache
        check_datasets_cache("to_hf", ", or pass load_kwargs cache_dir= a folder", flag="load_kwargs")
    return kwargs


def load_shards(path: str, files: list[str], kwargs: dict, name: str):
    """`datasets.load_dataset` of the output's shard `files` as one "train" split, its
    conversion called `name` (checked_name) in the datasets cache."""
    import datasets
    check_load_kwargs(kwargs)
    fsspec_can_read(path)
    kwargs = _cache_placed(kwargs)
    try:
        return datasets.load_dataset("parquet", name=name, data_files=files, split="train", **kwargs)
    except PacktoolError:
        raise
    except Exception as e:  # noqa: BLE001  datasets' and fsspec's errors, all of them: see translated
        raise translated(e, path, files, kwargs) from None


def loaded_as_checked(manifest, files: list[str], kwargs: dict, view):
    """`view(dataset)` of datasets' load of the output's shard `files`, the conversion named by
    what to_hf has just checked (checked_name: datasets' own key is a path and an mtime), and held
    to the output `manifest` was read from (S46B-8): another run's `pack --overwrite` landing after
    the checks and before or while datasets read the shards gave the new output's rows, never
    checked, or datasets' IndexError blamed on the user's keywords. A change (the slab readers'
    own check, output.unchanged) is that one line, on success and on any failure of the load,
    and the conversion this call wrote is removed: it holds rows of neither checked output and
    would be served under the checked output's name."""
    name = checked_name(manifest)
    before = _conversions(kwargs, name)
    try:
        full = load_shards(manifest.path, files, kwargs, name)
        _hold(kwargs, name)  # the conversion's bytes, as datasets wrote them (S48B-6)
        out = in_datasets(lambda: view(full), manifest.path, files, kwargs)
    except Exception as e:
        from packtool.output.datasets_cache import ConversionChanged
        _refuse_if_replaced(manifest, kwargs, name, before)
        if before and not isinstance(e, ConversionChanged):  # a reused conversion changed since: that, not datasets' words
            _hold(kwargs, name, record=False)
        raise
    _refuse_if_replaced(manifest, kwargs, name, before)
    return out


def _hold(kwargs: dict, name: str, record: bool = True) -> None:
    from packtool.output.datasets_cache import hold_conversion
    try:
        base = os.path.join(_cache_dir(kwargs), "parquet", name)
    except PacktoolError:  # a cache no home holds: load_shards says it
        return
    hold_conversion(base, record)


def _conversions(kwargs: dict, name: str) -> set[str]:
    """What the datasets cache holds for the conversion `name`: its folders (one per datasets
    config id) and the locks beside them, down to the config id's level."""
    import glob
    try:
        base = os.path.join(_cache_dir(kwargs), "parquet", glob.escape(name))
    except PacktoolError:  # a cache no home holds: load_shards says it
        return set()
    return {p for pattern in ("*", "*/*", "*/*/*") for p in glob.glob(base + pattern)}


def _refuse_if_replaced(manifest, kwargs: dict, name: str, before: set[str]) -> None:
    from packtool.output.unchanged import check_unchanged
    try:
        check_unchanged(manifest.path, manifest.state, None)
    except PacktoolError:
        from packtool.output import removal
        new = _conversions(kwargs, name) - before  # only what this call wrote
        if new:
            removal.remove_written(new, os.path.join(_cache_dir(kwargs), "parquet"))
        raise


def in_datasets(step, path: str, files: list[str], kwargs: dict):
    """`step()`, a call on the loaded dataset (select, select_columns: they write index files
    into the datasets cache), its failures translated as load_shards' are."""
    try:
        return step()
    except PacktoolError:
        raise
    except Exception as e:  # noqa: BLE001  as in load_shards
        raise translated(e, path, files, kwargs) from None


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _said(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _shard_named(chain: list[BaseException], files: list[str]) -> str | None:
    """The shard of `files` an error of the chain names (by its filename or in its text)."""
    for x in chain:
        for f in files:
            if getattr(x, "filename", None) == f or f in str(x):
                return f
    return None


def _unreadable(files: list[str]) -> str | None:
    """The first shard whose Parquet footer no longer reads (datasets' error does not say which)."""
    import pyarrow.parquet as pq
    for f in files:
        try:
            pq.read_metadata(f)
        except Exception:  # noqa: BLE001  any failure names this shard; the caller says why
            return f
    return None


def _cache_dir(kwargs: dict) -> str:
    given = kwargs.get("cache_dir")
    if given is not None:
        from packtool.params import expanded
        return os.path.abspath(expanded(os.fspath(given)))
    import datasets.config
    return os.path.abspath(str(datasets.config.HF_DATASETS_CACHE))


def translated(e: Exception, path: str, files: list[str], kwargs: dict) -> PacktoolError | MemoryError:
    """packtool's one line for what `datasets` (or fsspec under it) raised while loading the
    output at `path`: the shard, the cache folder, the store or the keyword at fault; or out of
    memory (free_memory's rule for every door that decodes a shard), never a damaged output."""
    chain = _chain(e)
    root = chain[-1]
    shard = _shard_named(chain, files)
    for x in chain:  # the shards passed packtool's checks: an allocation failing is this process's memory
        oom = decode_out_of_memory(x, shard or path, "in to_hf's datasets conversion",
                                   what="the file" if shard else "the output",
                                   less="pass to_hf(streaming=True) (read through packtool: at most "
                                        "row_group_cache row groups held, no conversion)")
        if oom is not None:
            return oom
    again = f"check the output with `packtool verify {path}` and re-open it"
    if shard is not None:
        what = "is gone (or no longer a file)" if any(isinstance(x, FileNotFoundError) for x in chain) \
            else "cannot be read"
        return PacktoolInputError(f"to_hf: shard {os.path.basename(shard)} {what} ({_said(root)}), though it "
                                  f"passed packtool's checks a moment before: another run replaced or damaged "
                                  f"the output while to_hf read it; {again}", path=shard)
    if any(type(x).__name__ in _NETWORK or isinstance(x, (ConnectionError, TimeoutError)) for x in chain):
        return PacktoolInputError(f"to_hf: the store that holds the output cannot be reached ({_said(root)}); "
                                  f"check the endpoint and credentials, and re-run", path=path)
    oserr = next((x for x in chain if isinstance(x, OSError) and getattr(x, "filename", None)), None)
    if oserr is not None:
        where = os.fspath(oserr.filename)
        cache = _cache_dir(kwargs)
        if os.path.abspath(where).startswith(cache):
            flag = "load_kwargs['cache_dir']" if "cache_dir" in kwargs else "the datasets cache (HF_DATASETS_CACHE)"
            return PacktoolConfigError(f"to_hf: {flag} {cache} cannot be written ({oserr.strerror or _said(oserr)}"
                                       f" at {where}); pass load_kwargs cache_dir= a folder to_hf may write",
                                       path=path, flag="load_kwargs")
        return PacktoolInputError(f"to_hf: {where} cannot be used by datasets ({oserr.strerror or _said(oserr)})",
                                  path=path)
    from datasets.exceptions import DatasetGenerationError
    if any(isinstance(x, DatasetGenerationError) for x in chain):
        shard = _unreadable(files)
        which = f"shard {os.path.basename(shard)}" if shard else "a shard of the output"
        return PacktoolInputError(f"to_hf: {which} cannot be read by datasets ({_said(root)}), though every "
                                  f"shard passed packtool's checks a moment before: another run replaced or "
                                  f"damaged the output while to_hf read it; {again}", path=shard or path)
    if kwargs:
        key = next((k for k in kwargs if repr(k) in str(root) or repr(kwargs[k]) in str(root)), None)
        named = f"{key}={short(kwargs[key])}" if key else ", ".join(f"{k}={short(v)}" for k, v in kwargs.items())
        return PacktoolConfigError(f"to_hf(load_kwargs): datasets.load_dataset refused {named} ({_said(root)}); "
                                   f"pass only its keywords, with values it takes (cache_dir, num_proc >= 1, "
                                   f"keep_in_memory, ...)", path=path, flag="load_kwargs")
    return PacktoolInputError(f"to_hf: datasets could not load the output ({_said(root)}); {again}", path=path)


__all__ = ["SET_BY_TO_HF", "check_load_kwargs", "fsspec_can_read", "in_datasets", "load_shards", "loaded_as_checked",
           "translated"]
