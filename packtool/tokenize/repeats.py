"""One file reached twice among a run's inputs (readers.resolve_inputs asks this once, over every
file it resolved): a path the user typed twice, an error naming both spellings; a second name
found inside folder inputs or globs, read once with a note (S47A-10, S48A-13)."""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.notes import note
from packtool.storage import is_uri


def origins(marks, n: int) -> list:
    """Per file of the `n` an input list resolved to, in order, its origin for `refuse_repeats`:
    (the input's index, the folder its typed path names, or None). `marks`: per input, in input
    order, (its first file's index, its index, that folder); its files lie from its mark to the
    next one's. One pass, each mark read twice: a search back from the last input per file was
    quadratic in the inputs named (8 s over 16,000 shell-expanded files: RA-6)."""
    out: list = []
    for i in range(len(marks)):
        start, k, folder = marks[i]
        end = marks[i + 1][0] if i + 1 < len(marks) else n
        out += [(k, folder)] * (end - start)
    return out


def refuse_repeats(files: list, origin: list, inputs: list[str], quiet: bool) -> list:
    """One file reached twice would be packed twice. `origin[i]`: (the index of file i's input,
    the folder that input's typed path names: the folder itself, a glob's fixed part; None for a
    file named by its path). Typed twice (the same path twice, a folder and a file or folder
    inside it, a folder and a link to it): an error naming both spellings. A second name found
    inside the folders or globs given (a link beside the file, a hard link: `cp -al` snapshots,
    rsync --link-dest; in one input or in two; beside the file typed by its path), which the user
    never typed: read once, by the file's own name (the one reached through no link below its
    input; a path typed before a name found; else the first in read order), with one note per
    input naming the names dropped (a copy with the same bytes is read twice with a note: the
    user may mean it, a second name of one file is no upsample)."""
    groups: dict = {}  # (device, inode) or a URI -> the indexes of the files reaching it
    for i, f in enumerate(files):
        key = _key(f.path)
        if key is None:  # missing: the reader names it
            continue
        for j in groups.setdefault(key, []):
            if _typed_twice(files, origin, i, j):
                first = files[j].path
                also = "" if first == f.path else f" (also given as {first})"
                raise PacktoolInputError(f"input given more than once{also}; pass each file once", path=f.path)
        groups[key].append(i)
    dropped: dict[int, str] = {}  # file index -> the name read in its place
    for group in groups.values():
        if len(group) > 1:
            # a name reached through no link below its input; of those, one typed by its path
            own = min(group, key=lambda i: (_links_below(files[i].path, origin[i][1]) > 0, origin[i][1] is not None, i))
            dropped.update((i, files[own].path) for i in group if i != own)
    if not dropped:
        return files
    if not quiet:
        said: dict[int, list] = {}
        for i in sorted(dropped):
            said.setdefault(origin[i][0], []).append(f"{files[i].path} ({_second_name(files[i].path, dropped[i])})")
        for spec, names in said.items():
            more = f", and {len(names) - 3} more" if len(names) > 3 else ""
            note(f"{inputs[spec]}: {len(names)} file(s) in it are a second name of a file read by its own name, "
                 f"read once: {', '.join(names[:3])}{more}")
    return [f for i, f in enumerate(files) if i not in dropped]


def _key(path: str):
    if is_uri(path):
        return path
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _typed_twice(files: list, origin: list, i: int, j: int) -> bool:
    """Whether files i and j (one file) come from a path the user typed twice, rather than from
    a second name found inside what was typed."""
    (spec_i, base_i), (spec_j, base_j) = origin[i], origin[j]
    a, b = files[i].path, files[j].path
    if is_uri(a) or a == b:
        return True
    if spec_i == spec_j and base_i is not None:  # inside one folder or glob: found, never typed
        return False
    if base_i is None and base_j is None:  # two paths typed to one file (the file and a link to it)
        return True
    if base_i is None or base_j is None:  # a file typed by its path, the other found in a folder or glob:
        # typed twice only where that path is the one the folder or glob reaches (`d d/a.jsonl`), not
        # a second name of it found there (`d1/a.jsonl d2`, d2/a.jsonl a hard link: RA-1)
        typed, (found, base) = (a, (b, base_j)) if base_i is None else (b, (a, base_i))
        return _typed_path(found, base) in _typed_names(typed)
    return _typed_path(a, base_i) == _typed_path(b, base_j)


def _typed_names(path: str) -> set[str]:
    """The paths a typed file's path names, every link in it typed: its folders resolved, and the
    file itself resolved too or not (`d/lnk.jsonl` typed beside `d`: d/lnk.jsonl and d/a.jsonl)."""
    return {os.path.realpath(path), os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))),
                                                 os.path.basename(path))}


def _typed_path(path: str, base: str) -> str:
    """`path` with the links in its input's typed part resolved, those found below it kept: a
    folder and a link to it typed give one path; two snapshots sharing a file give two."""
    return os.path.join(os.path.realpath(base), os.path.relpath(path, os.path.abspath(base)))


def _links_below(path: str, base: str | None) -> int:
    """How many steps of `path` below its input's typed folder are links (0 for a path typed)."""
    if base is None:
        return 0
    rel = os.path.relpath(path, os.path.abspath(base))
    steps = rel.split(os.sep)
    return sum(os.path.islink(os.path.join(base, *steps[:k])) for k in range(1, len(steps) + 1))


def _second_name(a: str, b: str) -> str:
    """What the name `a` dropped is to `b`, the name read: "a hard link" only where it is one
    (S48A-7, RA-3: a file reached through a link to its folder, or the target of a link that
    sorts first, was called one)."""
    if os.path.islink(a):
        return f"a link to {b}"
    if os.path.islink(b):
        return f"the file the link {b} points to"
    if os.path.realpath(a) == os.path.realpath(b):
        return f"reached through a link to a folder, the same file as {b}"
    return f"a hard link of {b}"
