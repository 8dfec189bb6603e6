"""Where packtool may write on an object store: the store's form of output.relations, for an
output prefix (claim_store asks before taking the lease) and for a tokenized cache root
(tokenize.cache_root.check_cache_dir asks before its write probe), the same rules as for
folders: not one of packtool's own trees nor inside one (a packed output: its readers would take
what lands there for stray shards, S32-2; a cache entry: deleted whole when found damaged,
S33-1), not holding nor inside an input prefix, and an output neither holding nor inside the
cache it packs from."""
from __future__ import annotations

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.storage import is_uri, locate


def _prefix(uri: str) -> str:
    return locate(uri).shown.rstrip("/") + "/"


def tree_around(uri: str, itself: bool = False) -> tuple[str, str] | None:
    """(the prefix, its kind: a key of output.relations.WHY) of the innermost of packtool's own
    trees on the store that `uri` lies in up to the bucket, or, with `itself`, is; None when
    there is none. Known as locally (relations.own_tree_kind): a manifest, or cache.json beside
    an entry's parts."""
    base, q, query = uri.partition("?")  # the query (endpoint, options) stays with each prefix
    parts = base.rstrip("/").split("/")  # scheme:, "", bucket, key parts
    for i in range(len(parts) - (0 if itself else 1), 2, -1):
        up = "/".join(parts[:i]) + q + query
        kind = _tree_kind(up)
        if kind:
            return up, kind
    return None


def _tree_kind(prefix: str) -> str | None:
    from packtool.manifest_name import manifest_file
    from packtool.output.relations import CACHE_PARTS
    if manifest_file(prefix) is not None:
        return "packed"
    loc = locate(prefix)
    if loc.join("cache.json").is_file() and any(loc.join(d).is_dir() for d in CACHE_PARTS):
        return "cache"
    return None


def _input_problem(uri: str, inputs) -> str | None:
    """output.relations.input_problem on a store: `uri` holds an input prefix or lies inside one."""
    here = _prefix(uri)
    for p in inputs:
        if not is_uri(p):
            continue
        inp = _prefix(p)
        if inp.startswith(here):
            return f"holds the input {locate(p).shown}"
        if here.startswith(inp):
            return f"is inside the input prefix {locate(p).shown} (a later read of it would take it for data)"
    return None


def refuse_inside(output: str, inputs, cache_dir) -> None:
    """The output prefix neither holds nor lies inside an input prefix, the cache, or one of
    packtool's own trees (relations.packed_problem's rule)."""
    shown = locate(output).shown
    problem = _input_problem(output, inputs)
    if problem:
        raise PacktoolOutputError(f"{problem}; give an {arg('output')} outside the inputs", path=shown,
                                  flag=cli_flag("output"))
    found = tree_around(output)
    if found:
        from packtool.output.relations import WHY
        what, why = WHY[found[1]]
        raise PacktoolOutputError(f"is inside {what} ({locate(found[0]).shown}), {why}; give another "
                                  f"{arg('output')}, a new prefix outside any of packtool's own trees",
                                  path=shown, flag=cli_flag("output"))
    if cache_dir and is_uri(cache_dir):
        out, cache = _prefix(output), _prefix(cache_dir)
        if cache.startswith(out) or out.startswith(cache):
            raise PacktoolOutputError(f"{'holds' if cache.startswith(out) else 'is inside'} the tokenized cache "
                                      f"{locate(cache_dir).shown}; give another {arg('output')} (or {arg('cache_dir')})",
                                      path=shown, flag=cli_flag("output"))


def cache_root_problem(cache_dir: str, inputs=()) -> str | None:
    """Why a store cache root may not be written (tokenize.cache_root.check_cache_dir's rules
    for a folder root, said the same way), or None: it is a packed output or a cache entry, or
    lies inside one; it holds or lies inside an input prefix; it is an object (as an --output
    is refused: its entries would go under `NAME/` beside the object, as no folder can be made
    under a local file)."""
    if locate(cache_dir).is_file():
        return "is an object, not a prefix"
    found = tree_around(cache_dir, itself=True)
    if found:
        from packtool.output.relations import WHY
        up, kind = found
        what, why = WHY[kind]
        if locate(up).shown.rstrip("/") == locate(cache_dir).shown.rstrip("/"):
            return f"is {what}, not a cache root"
        return f"is inside {what} ({locate(up).shown}), {why}"
    return _input_problem(cache_dir, inputs)


__all__ = ["cache_root_problem", "refuse_inside", "tree_around"]
