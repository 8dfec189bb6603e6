"""Object-store input specs as their objects: one object, a prefix, or a glob, read as the same
spec over a folder reads (S44-2: a prefix a glob matches is read whole, as a matched folder is),
and the glob rule itself (`**` crosses folders, `*` and `?` do not; hidden names passed over).
"""
from __future__ import annotations

import fnmatch
import re
from urllib.parse import quote, urlsplit

import pyarrow.fs as pafs

from packtool.errors import cli_flag
from packtool.storage.location import Location, locate
from packtool.storage.uri import GLOB_CHARS, store_error


def expand(spec: str, listed: list | None = None, name: str | None = None,
           folders: list | None = None, as_typed: bool = False) -> list[Location]:
    """An object-store input spec as its files, sorted: one object, every object below a
    prefix, or what a glob (`*`, `**`; a `?` starts the URI's query) matches: objects,
    and prefixes read whole as a folder a local glob matches is (S44-2); a pattern ending in `/`
    matches prefixes only, as it matches folders only locally. Hidden names (a leading `.`)
    below a prefix are left out, as a local folder's are (S45A-12). `listed`, when given, gets
    the prefix listed (a Location) and every object path seen, hidden ones too: what else lies
    there (packtool's own outputs and caches: tokenize.own_trees) without a second listing.
    `name`: the argument that gave `spec`. `folders`, when given, gets each prefix read whole
    (the one named, or each a glob matched; a Location): what a local folder input is. A name
    that exists as typed is itself, glob characters and all (`as_typed`), as a local path is."""
    loc = locate(spec, name=name)
    if as_typed or not any(c in loc.path for c in GLOB_CHARS):
        # on a store one name can be an object and a prefix at once (a single-file write, then a
        # folder of parts at the same name): a trailing / names the prefix, as `dir/` names a
        # folder; a bare name that is both is refused, never read as one of them (S45A-10)
        # (a file:// location keeps its trailing /: the object is asked for by its name alone)
        prefix = urlsplit(spec).path.endswith("/")
        is_object = loc.info_of(loc.path.rstrip("/") or loc.path).type == pafs.FileType.File
        # below the name as a prefix: nothing for an object alone; a local file (file://) is no folder
        seen = [] if is_object and loc.local else loc.list()
        if is_object and not prefix and not seen:
            return [loc]
        if is_object:
            flag = name and cli_flag(name)
            if not seen:
                raise store_error(name)("is an object, not a prefix: drop the trailing / to read the object",
                                        path=loc.shown.rstrip("/") + "/", flag=flag)
            if not prefix:
                first = seen[0].path[len(loc.path) - len(loc.path.rsplit("/", 1)[-1]):]
                raise store_error(name)(f"is both an object and a prefix holding {len(seen)} object"
                                        f"{'s' if len(seen) != 1 else ''} ({first}{', ...' if len(seen) > 1 else ''}): "
                                        f"give {loc.shown}/ to read the prefix, or rename one of them to read the object",
                                        path=loc.shown, flag=flag)
        _refuse_empty_names(loc, [i.path for i in seen if not _hidden_below(i.path, loc.path)], name)
        if listed is not None:
            listed += [loc, *(i.path for i in seen)]
        if folders is not None and seen:
            folders.append(loc)
        return [_child(loc, i.path) for i in seen if not _hidden_below(i.path, loc.path)]
    cut = min(loc.path.index(c) for c in GLOB_CHARS if c in loc.path)
    base = loc.path[:cut].rsplit("/", 1)[0]
    root = Location(loc.fs, base, _typed_root(loc, base), False, name)
    folders_only = spec.partition("?")[0].endswith("/")
    # (locate drops the `/` of a bucket's URI, a file:// one keeps it: `DIR/**/` matched no prefix there)
    pattern = _glob_regex(loc.path.rstrip("/") if folders_only else loc.path)
    seen = root.list()
    typed = loc.path.rstrip("/")
    if any(i.path == typed or i.path.startswith(typed + "/") for i in seen):
        # an object or prefix of this very name (`[1].jsonl`, a listed key's own URI read again):
        # itself, as `os.path.exists` makes a local path (S49A-4); as a glob it named other keys
        return expand(spec, listed, name, folders, as_typed=True)
    if listed is not None:
        listed += [root, *(i.path for i in seen)]
    # a wildcard passes over hidden names, as a local glob does, unless the pattern names one
    named = "/." in "/" + loc.path[len(base):].lstrip("/")
    # a key read as a local path would be (`a//b` is `a/b`): one the glob means but cannot read is refused
    _refuse_empty_names(root, [i.path for i in seen if "//" in i.path and _globbed(
        pattern, re.sub("//+", "/", i.path), None if named else base, not folders_only) is not None], name)
    out, whole = [], {}
    for i in seen:
        if _globbed(pattern, i.path, None if named else base, not folders_only) is not None:
            out.append(_child(root, i.path))
            # read whole through the outermost prefix the pattern matches, as a local glob's
            # outermost folder is, even where the object matches itself too (`DIR/**`: DIR; its
            # folder rules, a dataset repo's splits, were never asked on a store, RA-5)
            top = _outermost(pattern, i.path)
            if top:
                whole.setdefault(top, root if top == root.path else _child(root, top))
    if folders is not None:
        folders += whole.values()
    return out


def _typed_root(loc: Location, base: str) -> str:
    """The URI of the glob's root folder as the user typed it: `loc.shown` cut as `base` cuts
    `loc.path`, counted in names (the typed URI holds escapes, `%20` for a space, that make it
    longer than Arrow's decoded path: cut by characters, it lost or kept the wrong ones)."""
    head, sep, typed = loc.shown.partition("://")
    if not sep:  # a file:// location is shown as its path: cut it the same way, names for names
        parts = loc.shown.split("/")
        return "/".join(parts[:len(base.split("/")) - len(loc.path.split("/")) + len(parts)]) or "/"
    host, _, rest = typed.partition("/")
    below = len(base.split("/")) - len(loc.path.split("/")) + len(rest.split("/"))
    return f"{head}{sep}{host}/" + "/".join(rest.split("/")[:below]) if below > 0 else f"{head}{sep}{host}"


def _globbed(pattern, path: str, root: str | None, itself: bool = True) -> str | None:
    """"": the object itself matches (counted only when `itself`: a pattern ending in `/` names
    folders only, and an object below one it matches is read through that folder); a prefix above
    it that matches (a "folder" the glob names), with nothing hidden between that prefix and the
    object (nor below `root`, when given); None: neither."""
    if root is not None and _hidden_below(path, root):  # a wildcard matches no hidden name either
        return None
    if itself and pattern.match(path):
        return ""
    parts = path.split("/")
    for k in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:k])
        if pattern.match(above):
            return None if _hidden_below(path, above) else above
    return None


def _outermost(pattern, path: str) -> str:
    """The outermost prefix above `path` the pattern matches with no hidden name between them
    ("": none): the "folder" a local glob's outermost() reads the object through."""
    parts = path.split("/")
    for k in range(1, len(parts)):
        above = "/".join(parts[:k])
        if pattern.match(above) and not _hidden_below(path, above):
            return above
    return ""


# what a listed key's names keep unescaped in its URI: a URI's path characters but `%` (a key's
# own `%41` must not read back as `A`, S45A-6) and the glob characters (`*` names no pattern there)
_KEY_SAFE = "-._~!$&'()+,;=:@"


def _child(root: Location, path: str) -> Location:
    """A listed object: its key (`path`, Arrow's) as it is, and in `shown`, the URI packtool
    records and later locates again (a reader, a Ray task, the manifest), its names
    percent-encoded, as storage.location.locate decodes them: `#`, `?`, `%` or a space in a key read
    like any other character, as in a local file name."""
    rel = path[len(root.path):].lstrip("/")
    said = "/".join(quote(n, safe=_KEY_SAFE) for n in rel.split("/"))
    return Location(root.fs, path, root.shown.rstrip("/") + "/" + said, root.local, root.argument)


def prefix_of(loc: Location, prefix: str) -> Location:
    """The prefix `prefix` (an Arrow path above `loc.path`) of the listed object `loc`, its URI
    spelled as `_child` spells the object's: the object's URI less its percent-encoded tail
    (cut by the raw key's length, a name that encodes longer was cut mid-name)."""
    tail = loc.path[len(prefix):].lstrip("/")
    said = "/".join(quote(n, safe=_KEY_SAFE) for n in tail.split("/"))
    cut = len(said) if loc.shown.endswith("/" + said) else len(tail)  # one object given as typed
    return Location(loc.fs, prefix, loc.shown[:len(loc.shown) - cut].rstrip("/"), loc.local, loc.argument)


def _refuse_empty_names(root: Location, paths: list[str], name: str | None) -> None:
    """A listed key holding an empty name (`in//b.jsonl`: what `f"{prefix}/{name}"` writes for a
    prefix ending in `/`) is no path pyarrow reads: a URI's `//` is refused (storage.uri) and the
    key without it is another object. Named as listed, with a fix that works (S47A-2): it was
    read as `in/b.jsonl`, "does not exist", or a glob left its rows out without a word."""
    bad = next((p for p in paths if "//" in p), None)
    if bad is None:
        return
    rel = bad[len(root.path.rstrip("/")):].split("/")
    said = lambda names: root.shown.rstrip("/") + "/".join(quote(n, safe=_KEY_SAFE) for n in names)  # noqa: E731
    fixed = said(["", *(n for n in rel if n)])
    raise store_error(name)(f"its key holds an empty path component (//), which no URI can address (a URI's // "
                            f"names no folder, and the key without it is another object); move it to a key without "
                            f"one ({fixed}), or pass the other objects by name", path=said(rel),
                            flag=name and cli_flag(name))


def _hidden_below(path: str, base: str) -> bool:
    """A name below `base` that a local folder input or glob passes over: one starting with `.`
    (a `_` name is read locally, so it is on a store too: S45A-12)."""
    return any(p.startswith(".") for p in path[len(base):].strip("/").split("/"))


def _class_end(pattern: str, i: int) -> int:
    """Where the class opening at `i` closes, fnmatch's rule (a `]` first, or after a leading `!`, is
    a member), or 0: no `]` before the name ends (a local glob splits at `/` first), `[` itself."""
    j = i + 1
    j += pattern.startswith("!", j)
    j += pattern.startswith("]", j)
    while j < len(pattern) and pattern[j] not in "]/":
        j += 1
    return j if j < len(pattern) and pattern[j] == "]" else 0


def _glob_regex(pattern: str) -> re.Pattern:
    """`**` crosses folders, `*` and `?` do not (glob.glob(recursive=True)'s rule: `**` only as a
    whole name; within one, `in**.jsonl`, it is `*`, as a local glob reads it)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        whole = pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/")
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            # `DIR/**` matches DIR itself too, as glob.glob does (`DIR/`): `DIR/**/` read its
            # top-level objects through no prefix, and so not at all
            out.append("(?:/.*)?")
            break
        if whole and pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if whole and i + 2 == len(pattern):
            out.append(".*")
            break
        if c == "*":
            out.append("[^/]*")
            while pattern.startswith("*", i + 1):  # `**` within a name: one `*` (no regex of n nested stars)
                i += 1
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (j := _class_end(pattern, i)):
            # the class as Python's glob reads it locally (fnmatch's own translation: `[^a]` is `^` or
            # `a`, `[!a]` not `a`, ranges), never the `/` between names: a local glob matches name by
            # name (S49A-4: `[^a]` was a negation here, the same pattern another file set)
            out.append("(?!/)" + re.sub(r"\\[Zz]$", "", fnmatch.translate(pattern[i:j + 1])))
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


__all__ = ["expand", "prefix_of"]
