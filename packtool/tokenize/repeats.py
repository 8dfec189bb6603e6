"""One file reached twice among a run's inputs (readers.resolve_inputs asks this once, over every
file it resolved): named twice by the user, an error naming both spellings; a second name inside
one folder input or glob, read once with a note (S47A-10)."""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.notes import note
from packtool.storage import is_uri


def refuse_repeats(files: list, origin: list, inputs: list[str], quiet: bool) -> list:
    """One file reached twice would be packed twice. Named twice (twice, by a glob and by name,
    two inputs holding it): an error, naming both spellings. Reached twice inside one folder
    input or one glob (a link to a file beside it, a hard link: `cp -al`, rsync --link-dest),
    which the user named once: read once, by its first name in path order, with one note naming
    both (a copy with the same bytes is read twice with a note: the user may mean it, a second
    name of one file is no upsample) (S47A-10)."""
    seen: dict = {}
    kept: list = []
    twice: dict[int, list] = {}
    for f, (spec, expanded) in zip(files, origin):
        try:
            st = None if is_uri(f.path) else os.stat(f.path)
        except OSError:  # missing: the reader names it
            st = None
        if st is not None:
            key = (st.st_dev, st.st_ino)
            first = seen.setdefault(key, (f.path, spec, expanded))
            if first[0] != f.path and expanded and first[1:] == (spec, True):
                twice.setdefault(spec, []).append((f.path, first[0]))
                continue
        kept.append(f)
    if not quiet:
        for spec, pairs in twice.items():
            more = f", and {len(pairs) - 3} more" if len(pairs) > 3 else ""
            said = ", ".join(f"{a} ({_second_name(a, b)})" for a, b in pairs[:3])
            note(f"{inputs[spec]}: {len(pairs)} file(s) in it are a second name of a file read already, read "
                 f"once: {said}{more}")
    _refuse_named_twice(kept)
    return kept


def _second_name(a: str, b: str) -> str:
    """What the name `a` dropped is to `b`, the name read: "a hard link" only where it is one
    (S48A-7, RA-3: a file reached through a link to its folder, or the target of a link that
    sorts first, was called one)."""
    if os.path.islink(a):
        return f"a link to {b}"
    if os.path.islink(b):
        return f"the file the link {b} points to"
    if os.path.realpath(a) == os.path.realpath(b):
        return f"the same file as {b}, one of them reached through a link to a folder"
    return f"a hard link of {b}"


def _refuse_named_twice(files: list) -> None:
    seen: dict = {}
    for f in files:
        if is_uri(f.path):
            key = f.path
            if key in seen:
                raise PacktoolInputError("input given more than once; pass each file once", path=f.path)
            seen[key] = f.path
            continue
        try:
            st = os.stat(f.path)
        except OSError:  # missing: the reader names it
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            first = seen[key]
            also = "" if first == f.path else f" (also given as {first})"
            raise PacktoolInputError(f"input given more than once{also}; pass each file once",
                                     path=f.path)
        seen[key] = f.path
