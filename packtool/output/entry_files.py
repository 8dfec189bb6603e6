"""What packtool writes in a tokenized cache entry (packtool.output's base half): the names a
sweep of a dead run's entry build may remove (`entry_names`, output.stale) and what a damaged
entry may hold for packtool to delete it whole (`foreign_in_entry`, tokenize.request): anything
else is a user's, named and never deleted. Base, so that the tokenize stage can ask it."""
from __future__ import annotations

import os
import re
import stat

from packtool.output.leftovers import MARKER
from packtool.output.paths import temp_target

# each recognizer ends in \Z: `$` also matches before a final newline ("data\n" is no entry)
_ENTRY = re.compile(r"^(?:cache\.json|data|flat|side|\.?stage-\d+)\Z")
FLAT_NAMES = re.compile(r"^(?:tokens\.i32|offsets\.npy)\Z").match
FLAT_TMP = re.compile(r"^flat\.tmp-\d+")  # tokenize.flat_tokens.build_flat_tokens


def entry_names(name: str) -> bool:
    """A tokenized cache entry's files, or a `write_file` temporary of one (its cache.json)."""
    return bool(_ENTRY.match(name) or _ENTRY.match(temp_target(name) or ""))


_PART = re.compile(r"^part-\d{5,}\.parquet\Z").match  # tokenize.cache_parts' part names
_SIDE = re.compile(r"^side-\d{3,}\.(?:bin|cnt|idx)\Z").match  # tokenize.cache_entry.side_files
# what packtool writes one level down in an entry: each folder's names (None: any plain file)
_LEGACY_FLAT = ("ids.i32", "mask.u8")  # the two-file store before tokens.i32: rebuilt, so packtool's
_ENTRY_INSIDE = {"data": _PART, "flat": lambda n: FLAT_NAMES(n) or _SIDE(n) or n in _LEGACY_FLAT}


def foreign_in_entry(entry: str) -> list[str]:
    """What in a tokenized cache entry packtool did not write there (relative paths): a name
    outside the entry's layout at its top or in data/ and flat/ (a plan, a report, a user's
    checkpoint folder), a link or a special file anywhere. A damaged entry is deleted whole, so
    one holding any of these is not discarded (tokenize.request)."""
    out = []
    for d, dirs, files in os.walk(entry):
        rel = os.path.relpath(d, entry)
        for n in sorted(dirs + files):
            name = os.path.normpath(os.path.join(rel, n))
            if not _entry_file(rel, n, os.lstat(os.path.join(d, n)).st_mode):
                out.append(name)
        dirs[:] = [x for x in dirs if os.path.normpath(os.path.join(rel, x)) not in out]
    return out


def foreign_in_listing(rels) -> list[str]:
    """`foreign_in_entry` for an entry on a store, from its objects' names relative to it (a
    store holds no links nor special files; its folders are the names' parts)."""
    out = []
    for rel in rels:
        parts = rel.split("/")
        ok = all(_entry_file("/".join(parts[:i]) or ".", parts[i], stat.S_IFDIR) for i in range(len(parts) - 1))
        if not (ok and _entry_file("/".join(parts[:-1]) or ".", parts[-1], stat.S_IFREG)):
            out.append(rel)
    return out


def foreign_in_flat(flat: str) -> list[str]:
    """`foreign_in_entry` for an entry's flat/ store alone (rebuilt whole: tokenize.flat_tokens)."""
    try:
        names = sorted(os.listdir(flat))
    except OSError:
        return []
    return [n for n in names if not _entry_file("flat", n, os.lstat(os.path.join(flat, n)).st_mode)]


def _entry_file(rel: str, n: str, mode: int) -> bool:
    """Whether `n` in the entry's folder `rel` ("." its top) is a name packtool writes there."""
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return False
    if n == MARKER or temp_target(n) == "cache.json":
        return True
    if rel == ".":
        return bool(entry_names(n) or FLAT_TMP.match(n))
    inside = _ENTRY_INSIDE.get(rel.split(os.sep)[0])
    return inside is None or bool(inside(n))  # a build folder's (flat.tmp-N, stage-N) contents: its own


__all__ = ["FLAT_NAMES", "FLAT_TMP", "entry_names", "foreign_in_entry", "foreign_in_flat", "foreign_in_listing"]
