"""Object-store input specs as their objects: one object, a prefix, or a glob, read as the same
spec over a folder reads (S44-2: a prefix a glob matches is read whole, as a matched folder is)."""
from __future__ import annotations

from packtool.storage import Location, locate
from packtool.storage_uri import GLOB_CHARS, _glob_regex, _hidden_below


def expand(spec: str, listed: list | None = None, name: str | None = None,
           folders: list | None = None) -> list[Location]:
    """An object-store input spec as its files, sorted: one object, every object below a
    prefix, or what a glob (`*`, `**`; a `?` starts the URI's query) matches: objects,
    and prefixes read whole as a folder a local glob matches is (S44-2). Hidden names (`.`, `_`)
    below a prefix are left out, as Arrow's dataset readers do. `listed`, when given, gets
    the prefix listed (a Location) and every object path seen, hidden ones too: what else lies
    there (packtool's own outputs and caches: tokenize.own_trees) without a second listing.
    `name`: the argument that gave `spec`. `folders`, when given, gets each prefix read whole
    (the one named, or each a glob matched; a Location): what a local folder input is."""
    loc = locate(spec, name=name)
    if not any(c in loc.path for c in GLOB_CHARS):
        if loc.is_file():
            return [loc]
        seen = loc.list()
        if listed is not None:
            listed += [loc, *(i.path for i in seen)]
        if folders is not None and seen:
            folders.append(loc)
        return [_child(loc, i.path) for i in seen if not _hidden_below(i.path, loc.path)]
    cut = min(loc.path.index(c) for c in GLOB_CHARS if c in loc.path)
    base = loc.path[:cut].rsplit("/", 1)[0]
    root = Location(loc.fs, base, loc.shown[:len(loc.shown) - len(loc.path) + len(base)], False, name)
    pattern = _glob_regex(loc.path)
    seen = root.list()
    if listed is not None:
        listed += [root, *(i.path for i in seen)]
    # a wildcard passes over hidden names, as a local glob does, unless the pattern names one
    named = "/." in "/" + loc.path[len(base):].lstrip("/") or "/_" in "/" + loc.path[len(base):].lstrip("/")
    out, whole = [], {}
    for i in seen:
        m = _globbed(pattern, i.path, None if named else base)
        if m is not None:
            out.append(_child(root, i.path))
            if m:
                whole.setdefault(m, _child(root, m))
    if folders is not None:
        folders += whole.values()
    return out


def _globbed(pattern, path: str, root: str | None) -> str | None:
    """"": the object itself matches; a prefix above it that matches (a "folder" the glob
    names), with nothing hidden between that prefix and the object (nor below `root`, when
    given); None: neither."""
    if pattern.match(path):
        return "" if root is None or not _hidden_below(path, root) else None
    parts = path.split("/")
    for k in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:k])
        if pattern.match(above):
            return None if _hidden_below(path, above) else above
    return None


def _child(root: Location, path: str) -> Location:
    rel = path[len(root.path):].lstrip("/")
    return Location(root.fs, path, root.shown.rstrip("/") + "/" + rel, root.local, root.argument)


__all__ = ["expand"]
