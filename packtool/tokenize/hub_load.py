"""A dataset by name (the Hub, through the local cache) or a local dataset repo or save_to_disk
folder, loaded with `datasets.load_dataset` for `pack NAME` / `--split` / `--config` and the
library's `pack(NAME, split=...)`: offline at once when the Hub cannot be reached (no ~25 s of
retries), one line naming the fix when it cannot load. What is read from the loaded object is
`hf_input`'s.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from packtool.errors import PacktoolInputError, arg, cli_flag, shown
from packtool.storage import is_uri
from packtool.threads import start
from packtool.tokenize.csv_reader import CSV_EXT
from packtool.tokenize.file_kinds import ARROW_EXT, JSONL_EXT, PARQUET_EXT, UNREADABLE_EXT
from packtool.tokenize.own_trees import OwnTrees
from packtool.tokenize.readers import refuse_odd_files, resolve_inputs
from packtool.tokenize.repo_folder import generation_cause, left_out, refuse_partitioned_split, split_files
from packtool.tokenize.saved_folder import is_saved_folder

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
# a wrong path, never a name to look up on the Hub (which retries the network for ~30 s). Every
# kind file_kinds knows, read or refused (a list of its own here lacked `.jsonlines`: M5).
FILE_SUFFIXES = tuple(dict.fromkeys((*PARQUET_EXT, *JSONL_EXT, ".json", *ARROW_EXT, *CSV_EXT, *UNREADABLE_EXT,
                                     ".txt")))


def by_datasets(item) -> bool:
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
    start(t)
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
    if split and os.path.isdir(spec):  # every partition read as the split asked for: not silently
        refuse_odd_files(spec)  # a split file datasets' patterns pass over: as the folder door says it
        refuse_partitioned_split(spec, split)
    files = split_files(spec, split, config) if split and os.path.isdir(spec) else None
    if files:  # a JSON/Parquet repo's split: its files, by packtool's readers
        _refuse_own_trees(spec, split, files)
        _refuse_left_out(spec, split, config, files)
        return resolve_inputs(files)
    with _offline_unless_reachable(spec):
        return _load_dataset(spec, split, config)


def _refuse_own_trees(spec: str, split: str, files: list[str]) -> None:
    """The split's files as datasets' patterns found them, which know nothing of packtool's own
    folders: a cache entry's part or a packed output's shard inside the repo became "the split"
    (its format then chose which of the user's files were read), RA-11. Refused, not passed over:
    what datasets chose counted them."""
    own = OwnTrees(spec, spec)
    own.keep(files)  # (a table format's folder is refused there)
    if own.skipped:
        raise PacktoolInputError(f"{arg('split')} {split}: datasets' split patterns take files inside packtool's own "
                                 f"folders in the repo folder, not data: {own.trees()}; move them out of the "
                                 f"folder, or pass the split's files by name",
                                 path=spec, flag=cli_flag("split"))


def _refuse_left_out(spec: str, split: str, config: str | None, files: list[str]) -> None:
    left = OwnTrees(spec, spec).keep(left_out(spec, split, config, files))  # (packtool's own: not data)
    if left:
        kinds = sorted({os.path.splitext(f)[1] for f in files})
        names = ", ".join(os.path.relpath(f, spec) for f in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        raise PacktoolInputError(f"{arg('split')} {split}: datasets reads one file kind per split ({'/'.join(kinds)} "
                                 f"here), so it would leave out {len(left)} file(s) of the split: {names}; convert "
                                 f"them to that kind, or pass the split's files by name", path=spec,
                                 flag=cli_flag("split"))


def _saved_split(spec: str, split: str | None, config: str | None):
    """A `save_to_disk` folder given with --split/--config, which `datasets.load_dataset`
    refuses with its own fix ("use load_from_disk", a function a CLI user cannot call, blamed on
    --config): a DatasetDict folder's split is its subfolder, read as the folder; a one-split
    folder is the split itself. None: not such a folder (load_dataset's to read)."""
    if not isinstance(spec, str) or is_uri(spec) or not os.path.isdir(spec):
        return None
    if not is_saved_folder(spec):  # the one proof every door asks: a state.json alone is also other tools' (RA-2)
        return None
    dict_folder = os.path.exists(os.path.join(spec, "dataset_dict.json"))
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
    return resolve_inputs([os.path.join(spec, split)])


def _load_dataset(spec: str, split: str | None, config: str | None):
    try:
        import datasets
    except ImportError:
        raise PacktoolInputError("reading a dataset by name needs the `datasets` package: "
                                 "pip install 'packtool[hf]'", path=spec) from None
    from packtool.output.datasets_cache import check_datasets_cache
    # its Arrow conversion is written there: never inside the folder it reads
    check_datasets_cache(shown(spec), "", inputs=[spec] if os.path.isdir(spec) else ())
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
        said = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "infer the same data file format" in said:  # files of two kinds in a folder's splits
            raise PacktoolInputError(f"datasets.load_dataset failed: {said}; convert the files to one kind, or pass "
                                     f"the split's files by name", path=spec,
                                     flag=cli_flag("split") if split else None) from None
        raise PacktoolInputError(f"datasets.load_dataset failed: {said}", path=spec,
                                 flag=cli_flag("config") if config else None) from None  # given, never suggested
    if split is None and isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if len(ds) != 1:
            raise PacktoolInputError(f"dataset has splits {', '.join(ds)}; pick one with {arg('split')}", path=spec)
        ds = next(iter(ds.values()))
    return ds
