"""Where the tokenized cache lives: the default root (PACKTOOL_CACHE_DIR, else
~/.cache/packtool/tokenized) and the check every entry that takes a cache root runs before any
work (`check_cache_dir`: pack on both engines, `verify --source`, and `tokenize_to_cache`
itself through `request.resolve_cache`). It sits in the tokenize stage, not beside --output's
checks in output.folder (which re-exports it), because `tokenize_to_cache` is a library entry
of its own and a stage imports only the stages before it.
"""
from __future__ import annotations

import os
from typing import Iterable

from packtool.env import env_path, no_home
from packtool.errors import PacktoolCacheError, PacktoolError, arg, cli_flag
from packtool.output.files import describe_kind, nearest_existing, refuse_stdout, resolve
from packtool.output.relations import input_problem, packed_problem


def default_cache_dir() -> str:
    env = env_path("PACKTOOL_CACHE_DIR")
    from packtool.storage import is_uri
    if env and is_uri(env):  # resolved as a local path it would be a folder named `s3:` here
        raise PacktoolCacheError(f"PACKTOOL_CACHE_DIR={env} is a URI: it names the local cache folder, which also "
                                  f"holds the local mirror of a cache on a store; set it to a local folder and "
                                  f"pass the store as {arg('cache_dir')}", flag="PACKTOOL_CACHE_DIR")
    return env or os.path.join(_home(), ".cache", "packtool", "tokenized")


def _home() -> str:
    """The home folder the default root lies under, refused unless it is an existing folder:
    Python's expanduser turns HOME='' into '/' (a cache at the file system's root) and keeps a
    relative or missing HOME as it is (a tree made from / down, a cache relative to the working
    directory). HOME itself is never created. Unset HOME: the password database's, as expanduser."""
    raw = os.environ.get("HOME")
    if no_home():  # expanduser keeps `~`: the cache would be a folder named `~` here
        raise PacktoolCacheError(f"{no_home()}, so the default tokenized cache folder ~/.cache/packtool/tokenized "
                                  f"has no place; set HOME to your home folder, PACKTOOL_CACHE_DIR to a cache "
                                  f"folder, or pass {arg('cache_dir')}", flag=cli_flag("cache_dir"))
    home = os.path.expanduser("~") if raw is None else raw
    why = ("is empty" if not home.strip() else "is not an absolute path" if not os.path.isabs(home)
           else None if os.path.isdir(home) else "is not an existing folder")
    if why:
        said = f"HOME={home!r}" if raw is not None else f"HOME (unset; the user's entry gives {home!r})"
        raise PacktoolCacheError(f"{said} {why}, so the default tokenized cache folder ~/.cache/packtool/tokenized "
                                  f"has no place; set HOME to your home folder, PACKTOOL_CACHE_DIR to a cache "
                                  f"folder, or pass {arg('cache_dir')}", flag=cli_flag("cache_dir"))
    return home


def _cannot_make(base: str) -> str | None:
    """Why no folder can be made in the existing folder `base` (None: one can): tried, since
    permission bits do not say it for root, nor for /proc or /sys."""
    import tempfile
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".packtool-probe-", dir=base))
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def check_cache_dir(cache_dir, inputs: Iterable = ()) -> str | None:
    """Refuse, before any work, a tokenized cache root packtool must not write into, as an
    --output is refused: a file, special file or dangling link; a packed output or a folder
    inside one (its entries would be stray shards: verify and every reader refuse it); a folder
    that holds an input or lies inside an input folder (the next run would read the cache as
    data). `cache_dir` None: the default root (PACKTOOL_CACHE_DIR, named so; never a URI), checked and
    still None; a URI: storage.check_uri's (a bucket named, existing, written), then the default root,
    which holds its local mirror. Returns `cache_dir` resolved (`~`, links in its
    parents; a URI as given). Inputs that are not paths are skipped."""
    from packtool.params import checked  # numpy and pyarrow.fs: not for importing output.folder
    from packtool.output.leftovers import made_here
    from packtool.storage import is_uri, utf8_path
    cache_dir = checked("cache_dir", cache_dir)
    inputs = [os.fspath(i) for i in inputs if isinstance(i, (str, os.PathLike))]
    if cache_dir and is_uri(cache_dir):
        from packtool.output.store_relations import cache_root_problem
        from packtool.storage import check_uri, shown as shown_uri
        check_cache_dir(None, inputs)  # its local mirror is made under the default root (store_cache)
        check_uri(cache_dir, "cache_dir")  # the bucket, said so, before the reads below
        problem = cache_root_problem(cache_dir, inputs)  # a folder root's rules, before anything is put
        if problem:
            raise PacktoolCacheError(f"{arg('cache_dir')} {problem}; give another {arg('cache_dir')}",
                                      path=shown_uri(cache_dir), flag=cli_flag("cache_dir"))
        from packtool.storage import no_new_marker  # a run that then fails leaves no `PREFIX/` marker
        check_uri(cache_dir, "cache_dir", write=True, around_probe=no_new_marker)  # now: not after tokenizing
        return cache_dir
    shown, said, flag, fix = _cache_named(cache_dir)

    def refuse(why: str) -> None:
        raise PacktoolCacheError(f"{said} {why}; {fix}", path=shown, flag=flag)
    refuse_stdout(shown, "cache_dir" if cache_dir else "PACKTOOL_CACHE_DIR", "folder")
    if not utf8_path(shown):  # S44-4: before tokenizing, not at the first part written
        refuse("is not valid UTF-8 (a name in another locale's bytes), under which the cache's Parquet parts "
               "cannot be written")
    root = resolve(shown)
    if os.path.islink(root):  # followed once, as --output's is; one to nothing is refused
        if not os.path.exists(root):
            refuse("is a symbolic link to nothing, not a folder")
        root = os.path.realpath(root)
    base = nearest_existing(root)
    if not os.path.isdir(base):
        what = "is" if base == root else f"cannot be created: {base} is"
        refuse(f"{what} {describe_kind(base)}, not a folder")
    if base != root:  # to be made: a base that takes no new folder failed later, naming no flag
        why = _cannot_make(base)
        if why:
            refuse(f"cannot be created: {base} takes no new folder ({why})")
    # output.relations' rules, as for --output: entries written among the data (a root that
    # holds an input: `--cache-dir data` for data/x.jsonl) or inside an input folder are read as
    # data by the next `pack data/`; inside a packed output they are stray shards
    # a temporary as the root itself only when this process made it (verify --source's own cache,
    # source_store): one given by the user is removed by its run or the next sweep, entries and all
    mine = "temporary" if made_here(root) else None
    problem = packed_problem(root, itself=True, mine=mine, role="a cache root") or input_problem(root, inputs)
    if problem:
        refuse(problem)
    return root if cache_dir else None


def refuse_unwritable_root(cache_dir: str | None, need: str) -> None:
    """Refuse, before any work, a cache root that takes no new folder (a shared cache mounted
    read-only) where an entry must be written there: `need` says why. Only then: a read-only
    root serves the entries it holds. Else the first write failed later as a bare `Read-only file
    system` naming packtool's own temporary, or a damaged entry was announced as rebuilt first."""
    shown, said, flag, fix = _cache_named(cache_dir)
    base = nearest_existing(resolve(shown))  # a root not made yet: where it will be made
    why = _cannot_make(base) if os.path.isdir(base) else None
    if why:
        where = "" if base == resolve(shown) else f" ({base} takes no new folder)"
        raise PacktoolCacheError(f"{said} cannot be written{where} ({why}), and {need}; {fix}", path=shown, flag=flag)


def refuse_unwritable_entry(entry: str, need: str) -> None:
    """Refuse an entry that must gain a folder (`need`: why) in a root that takes none (a shared
    cache mounted read-only): the flat store a Ray-built entry lacks failed as a bare `Read-only
    file system` naming packtool's own temporary (S50A-2)."""
    why = _cannot_make(entry) if os.path.isdir(entry) else None
    if why:
        flag = cli_flag("cache_dir")
        raise PacktoolCacheError(f"{arg('cache_dir')} cannot be written ({why}), and its entry {need}; give "
                                 f"another {arg('cache_dir')}, one that can be written", path=entry, flag=flag)


def is_cache_entry(folder: str) -> bool:
    """Whether `folder` is a tokenized cache entry packtool wrote (cache.py's layout: `cache.json`
    beside its `data/` parts or `flat/` store), complete, damaged or set aside: how a folder input
    knows packtool's cache among the data (tokenize.own_trees). The structure (output.relations',
    by which every writer refuses a path inside an entry) and proof that it is packtool's
    (cache_entry.packtool_entry): a downloader's cache.json beside its data/ is the user's data."""
    from packtool.output.relations import is_cache_entry as entry
    if not entry(folder):
        return False
    from packtool.tokenize.cache_entry import packtool_entry
    names = {d: _names(os.path.join(folder, d)) for d in ("data", "flat")}
    return packtool_entry(os.path.join(folder, "cache.json"), names["data"], names["flat"])


def is_store_entry(loc, prefix: str, shown: str) -> bool:
    """is_cache_entry of a store prefix (`loc`: a Location on its store; `shown`: the prefix's
    URI): its cache.json asked, the rest only where one is there (tokenize.own_trees)."""
    from dataclasses import replace

    from pyarrow.fs import FileType

    from packtool.tokenize.cache_entry import packtool_entry
    at = lambda n: replace(loc, path=f"{prefix}/{n}", shown=f"{shown}/{n}")  # noqa: E731
    return loc.info_of(f"{prefix}/cache.json").type == FileType.File and packtool_entry(
        at("cache.json"), _listed(at("data")), _listed(at("flat")))


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _listed(loc) -> list[str]:
    try:
        return loc.names()
    except (PacktoolError, OSError):
        return []


def _cache_named(cache_dir: str | None) -> tuple[str, str, str | None, str]:
    """The cache root as the user gave it (the argument, PACKTOOL_CACHE_DIR or the default):
    (path shown, how the message names it, its flag, the fix)."""
    if cache_dir:
        return cache_dir, arg("cache_dir"), cli_flag("cache_dir"), f"give another {arg('cache_dir')}"
    env = os.environ.get("PACKTOOL_CACHE_DIR", "").strip()
    fix = f"set PACKTOOL_CACHE_DIR to another folder (or pass {arg('cache_dir')})"
    if env:
        return default_cache_dir(), "PACKTOOL_CACHE_DIR", "PACKTOOL_CACHE_DIR", fix
    return (default_cache_dir(), f"the default tokenized cache folder (under HOME={_home()})",
            cli_flag("cache_dir"), fix)


__all__ = ["check_cache_dir", "default_cache_dir", "is_cache_entry", "is_store_entry", "refuse_unwritable_root"]
