"""Where an object-store output may not go: the store's form of output.relations (claim_store
asks before taking the lease)."""
from __future__ import annotations

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.storage import is_uri, locate


def refuse_inside(output: str, inputs, cache_dir) -> None:
    """The store's form of output.relations: the prefix neither holds nor lies inside an input
    prefix or the cache (a later pack of the input prefix would read the slabs as data)."""
    out = locate(output).shown.rstrip("/") + "/"
    shown = locate(output).shown
    for p in inputs:
        if not is_uri(p):
            continue
        inp = locate(p).shown.rstrip("/") + "/"
        if inp.startswith(out):
            raise PacktoolOutputError(f"holds the input {locate(p).shown}; give an {arg('output')} outside "
                                      f"the inputs", path=shown, flag=cli_flag("output"))
        if out.startswith(inp):
            raise PacktoolOutputError(f"is inside the input prefix {locate(p).shown} (a later pack of it "
                                      f"would read the slabs as data); give an {arg('output')} outside it", path=shown,
                                      flag=cli_flag("output"))
    _refuse_in_packed_prefix(output, shown)
    if cache_dir and is_uri(cache_dir):
        cache = locate(cache_dir).shown.rstrip("/") + "/"
        if cache.startswith(out) or out.startswith(cache):
            raise PacktoolOutputError(f"{'holds' if cache.startswith(out) else 'is inside'} the tokenized cache "
                                      f"{locate(cache_dir).shown}; give another {arg('output')} (or {arg('cache_dir')})",
                                      path=shown, flag=cli_flag("output"))


def _refuse_in_packed_prefix(output: str, shown: str) -> None:
    """output.relations.packed_problem on a store: no prefix above the output (up to the
    bucket) is one of packtool's own trees a store holds, a packed output (its readers would
    take the new slabs for stray shards, S32-2) or a tokenized cache entry (deleted whole when
    found damaged, S33-1), each known as locally (relations.own_tree_kind)."""
    from packtool.output.relations import WHY
    base, q, query = output.partition("?")  # the query (endpoint, options) stays with each prefix
    parts = base.rstrip("/").split("/")  # scheme:, "", bucket, key parts
    for i in range(len(parts) - 1, 2, -1):
        up = "/".join(parts[:i]) + q + query
        kind = _store_tree_kind(up)
        if kind:
            what, why = WHY[kind]
            raise PacktoolOutputError(f"is inside {what} ({locate(up).shown}), {why}; give another "
                                      f"{arg('output')}, a new prefix outside any of packtool's own trees",
                                      path=shown, flag=cli_flag("output"))


def _store_tree_kind(prefix: str) -> str | None:
    from packtool.manifest_name import manifest_file
    from packtool.output.relations import CACHE_PARTS
    if manifest_file(prefix) is not None:
        return "packed"
    loc = locate(prefix)
    if loc.join("cache.json").is_file() and any(loc.join(d).is_dir() for d in CACHE_PARTS):
        return "cache"
    return None


__all__ = ["refuse_inside"]
