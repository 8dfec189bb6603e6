"""A local glob's matches (a folder input is `DIR/**/*`), each real folder walked once.

glob.glob(recursive=True) follows a link to a folder as a folder and keeps no record of where
it has been: a link back to the folder itself or to one above it (`latest -> .`, `up -> ..`,
common in checkpoint and export trees) was walked again and again, to the kernel's 40-link limit:
2^40 paths with two such links, a `pack DIR` that never ended, and with one a refusal naming a
path 40 folders deep "given more than once" (S47A-1). `local_glob` matches what glob.glob does
(the same pattern rules: hidden names passed over, `**` zero or more folders, a link to a folder
followed), except that `**` walks each real folder (device, inode) once: the tree's own folders
first, names sorted, then the links to folders met, each walked only when it leads somewhere not
walked yet. A link to a folder already walked (a loop, or `current -> run3` beside `run3/`)
is not walked again, so its files are read once, under their own names; `passed` gets each such
link (as found) and the path its folder was walked as, for the reader's note. A folder below
a `**` that cannot be listed (EACCES, EIO) holds nothing, as in glob, and goes to `unlisted`
(path, error), for the reader to refuse: its files' rows would be lost without a word. A
pattern without `**` is glob's own: its depth is the pattern's.
"""
from __future__ import annotations

import errno
import fnmatch
import glob
import os

__all__ = ["local_glob", "outermost"]


def local_glob(pattern: str, passed: list[tuple[str, str]] | None = None,
               unlisted: list[tuple[str, OSError]] | None = None) -> list[str]:
    """glob.glob(pattern, recursive=True), each real folder walked once below a `**`; `passed`,
    when given, gets (link as found, the path its folder was walked as) for each folder not
    walked again, `unlisted` (folder, error) for each folder below a `**` that could not be listed."""
    if "**" not in pattern:
        return glob.glob(pattern, recursive=True)
    walk = (passed if passed is not None else [], unlisted if unlisted is not None else [])
    out = list(_iglob(pattern, False, walk))
    if pattern.startswith("**") and out and out[0] == "":  # glob's own: `**` at the start
        out = out[1:]
    return out


def outermost(matches: list[str]) -> list[str]:
    """A glob's matches (in order) less each one below a folder it matched as well: `DIR/**/*`
    matches `DIR/sub` and the files in it, `DIR/**` matches `DIR/` itself. A matched folder is read
    whole, as a prefix a store glob matches is (storage.globs), so what lies below it is read
    through it, once: read again by its own match it was "input given more than once" (M5)."""
    folders = {os.path.normpath(m) for m in matches if os.path.isdir(m)}

    def below(m: str) -> bool:
        here = os.path.normpath(m)
        while (up := os.path.dirname(here)) not in ("", here):
            if up in folders:
                return True
            here = up
        return False
    return [m for m in matches if not below(m)] if folders else matches


def _iglob(pattern: str, dironly: bool, walk: tuple):
    # glob._iglob's structure (3.11), root_dir and dir_fd left out, `**` by _walk
    dirname, basename = os.path.split(pattern)
    if not glob.has_magic(pattern):
        if (os.path.lexists(pattern) if basename else os.path.isdir(dirname)):
            yield pattern
        return
    if not dirname:
        yield from _in_dir("", basename, dironly, walk)
        return
    dirs = _iglob(dirname, True, walk) if dirname != pattern and glob.has_magic(dirname) else [dirname]
    for d in dirs:
        for name in _in_dir(d, basename, dironly, walk):
            yield os.path.join(d, name)


def _in_dir(folder: str, basename: str, dironly: bool, walk: tuple) -> list[str]:
    if basename == "**":
        return ["", *_walk(folder, dironly, walk)]
    if not glob.has_magic(basename):  # a literal name: it exists or not
        if basename:
            return [basename] if os.path.lexists(os.path.join(folder, basename)) else []
        return [basename] if os.path.isdir(folder) else []
    names = [e.name for e in _entries(folder) if not dironly or _is_dir(e)]
    if not _hidden(basename):
        names = [n for n in names if not _hidden(n)]
    return fnmatch.filter(names, basename)


def _walk(top: str, dironly: bool, walk: tuple) -> list[str]:
    """The names below `top` relative to it, as glob's `**` lists them (hidden ones passed over,
    only folders with `dironly`), each real folder walked once: a folder reached again (through
    a link, or a bind mount) is neither listed nor walked, and said in `passed`; one that cannot
    be listed, in `unlisted`."""
    passed, unlisted = walk
    walked: dict[tuple[int, int], str] = {}
    key = _key(top or os.curdir)
    if key is not None:
        walked[key] = top or os.curdir
    out: list[str] = []
    links: list[str] = []  # links to folders, walked after the tree's own folders

    def down(rel: str) -> None:
        stack = [rel]
        while stack:
            here = stack.pop()
            entries = sorted(_entries(os.path.join(top, here) if here else top, unlisted), key=lambda e: e.name)
            below = []
            for e in entries:
                if _hidden(e.name):
                    continue
                name = os.path.join(here, e.name) if here else e.name
                if not _is_dir(e):
                    if not dironly:
                        out.append(name)
                elif e.is_symlink():
                    links.append(name)
                elif _enter(name):
                    below.append(name)
            stack += reversed(below)

    def _enter(name: str) -> bool:
        path = os.path.join(top, name)
        k = _key(path)
        if k is None:
            return False
        if k in walked:
            passed.append((path, walked[k]))
            return False
        target = os.path.realpath(path)
        if _holds(target, os.path.realpath(os.path.dirname(path))):  # `up -> ..`: a loop
            passed.append((path, target))
            return False
        walked[k] = path
        out.append(name)
        return True

    down("")
    for link in links:  # grows while links' folders are walked
        if _enter(link):
            down(link)
    return out


def _holds(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _entries(folder: str, unlisted: list | None = None) -> list:
    try:
        with os.scandir(folder or os.curdir) as it:
            return list(it)
    except OSError as e:  # glob's rule: a folder that cannot be listed holds nothing
        if unlisted is not None and e.errno != errno.ENOENT:  # (gone meanwhile: nothing lost)
            unlisted.append((folder or os.curdir, e))
        return []


def _is_dir(entry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _hidden(name: str) -> bool:
    return name[:1] == "."
