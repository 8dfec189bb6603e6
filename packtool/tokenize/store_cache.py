"""The tokenized cache on an object store (`--cache-dir s3://bucket/cache`), shared by every
machine that packs the same inputs.

An entry is the local cache folder of one fingerprint (`ROOT/<fp[:32]>/`: cache.json, data/
parts, flat/ when built) uploaded object by object with `cache.json` put last: an entry
without it is a partial one (a writer died) and is never used; the next run with a cache on
the store removes what the dead push provably put (store_push). A machine works on a local
mirror of the store root (`PACKTOOL_CACHE_DIR`'s `store-<hash>/`): on a miss there it pulls
the files the entry's cache.json records into a temporary folder, renames it into place, and the local cache check
(every file re-hashed against cache.json's records) decides whether it is used; a damaged
entry is rebuilt from the inputs, as locally, unless it holds objects packtool did not write
there (named, left, the run stops: `refuse_foreign_objects`, both engines). A new entry is pushed after it is built.
Content-keyed as the local cache: the same inputs, tokenizer and options give the same key
on every machine.
"""
from __future__ import annotations

import hashlib
import os
import shutil

from packtool.output.files import share_as_mkdir
from packtool.output.leftovers import owned_temp_dir, remove_tree, unmark
from packtool.storage import Location, shown
from packtool.tokenize.store_push import Push, cache_place, upload

ENTRY_META = "cache.json"  # put last: its presence is the entry's commit
META_BYTES = 256 << 20  # as the local cache.json's bound (cache_entry.read_cache_json)


def mirror_dir(store: str, local_root: str) -> str:
    """The local folder that mirrors `store` (one per store root, inside the local cache)."""
    return os.path.join(local_root, "store-" + hashlib.sha256(shown(store).encode()).hexdigest()[:16])


def _entry(store: str, final: str) -> Location:
    return cache_place(store).join(os.path.basename(final))


def pull_entry(store: str, final: str) -> bool:
    """Download a committed entry for `final`'s key, when the store has one and `final` does
    not exist; True when it did (the caller checks it like any local cache)."""
    if os.path.lexists(final):
        return False
    entry = _entry(store, final)
    if not entry.join(ENTRY_META).is_file():
        return False
    tmp = owned_temp_dir(f".pull-{os.path.basename(final)[:12]}-{os.getpid()}-", os.path.dirname(final))
    try:
        for rel in [ENTRY_META, *recorded_files(entry)]:
            dest = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with entry.join(*rel.split("/")).open_input() as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 16 << 20)
        share_as_mkdir(tmp)  # pulled private (mkdtemp), published readable as the umask says
        os.replace(tmp, final)  # with its marker: a kill before the unmark leaves it provable
    except BaseException:
        remove_tree(tmp)
        raise
    unmark(final)  # a published entry is no leftover
    return True


def refuse_foreign_objects(entry: str, problem: str, mirror: str | None = None) -> None:
    """Before a damaged store entry (`entry`, its URI) is rebuilt over: one holding objects
    packtool did not write there is named with them and left, and the run stops, as a local
    entry is (request.reusable_cache): a rebuild puts the entry's files over it and would keep
    the user's objects inside an entry packtool replaces whole. `mirror`: this machine's pulled
    copy of it, removed then (its own, and a re-run would say it damaged first)."""
    from packtool.errors import PacktoolCacheError
    from packtool.output.entry_files import foreign_in_listing
    from packtool.tokenize.store_push import PROOF_PREFIX
    loc = cache_place(entry)
    rels = [i.path[len(loc.path.rstrip("/")) + 1:] for i in loc.list()]
    foreign = foreign_in_listing(r for r in rels if not (r.startswith(PROOF_PREFIX) and "/" not in r))
    if not foreign:
        return
    if mirror is not None:
        from packtool.tokenize.request import discard_cache
        discard_cache(mirror)
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    raise PacktoolCacheError(f"is damaged ({problem}) and holds objects packtool did not write there "
                              f"({', '.join(foreign[:3])}{more}); packtool replaces a damaged entry whole, so it "
                              f"left it: move them out of it and re-run", path=loc.shown)


def recorded_files(entry: Location) -> list[str]:
    """The files a committed entry's cache.json records (relative names): only these are
    pulled or read. Objects a dead or concurrent build left beside them are never used."""
    import json
    try:
        from packtool.storage import read_small
        sums = json.loads(read_small(entry.join(ENTRY_META), META_BYTES, "cache.json", "remove it")).get("checksums")
    except (ValueError, AttributeError, FileNotFoundError):  # past the bound (a ValueError): no entry's cache.json
        return []  # the pulled cache.json then fails the local check: rebuilt
    return sorted(n for n in sums if isinstance(n, str) and ".." not in n.split("/")) \
        if isinstance(sums, dict) else []


def commit_entry(entry: str, meta: dict) -> None:
    """Put an entry's cache.json (written as the local cache writes it) once every file it
    records is uploaded: from then on the entry is used."""
    from packtool.tokenize.cache_entry import cache_json_bytes
    cache_place(entry).join(ENTRY_META).write_bytes(cache_json_bytes(meta))


def push_entry(store: str, final: str, replace: bool = False) -> bool:
    """Upload the finished local entry `final` unless the store has it committed already
    (`replace`: it was found damaged); every file first, cache.json last, under a push marker
    (store_push: what a kill leaves is removed by the next run). True when it uploaded."""
    entry = _entry(store, final)
    committed = entry.join(ENTRY_META).is_file()
    if committed and not replace:
        return False
    rels = sorted(os.path.relpath(os.path.join(d, f), final).replace(os.sep, "/")
                  for d, _, files in os.walk(final) for f in files)
    rels = [r for r in rels if r != ENTRY_META]
    with Push(store, os.path.basename(final), _records(final, rels)):
        if committed:
            entry.join(ENTRY_META).delete()  # uncommitted first: no one pulls it half-replaced
        for rel in rels + [ENTRY_META]:
            upload(os.path.join(final, *rel.split("/")), entry.join(*rel.split("/")))
    return True


def _records(final: str, rels: list[str]) -> dict:
    """Each file's size and xxh3-128, as the local cache.json records them (hashed here where
    it does not): the push marker's proof of what it puts."""
    import json
    from packtool.storage import read_small
    from packtool.tokenize.cache_parts import file_record
    try:
        sums = json.loads(read_small(os.path.join(final, ENTRY_META), META_BYTES, "cache.json", "remove it"))
        sums = sums.get("checksums") or {}
    except (OSError, ValueError, AttributeError):
        sums = {}
    return {r: sums[r] if isinstance(sums.get(r), dict) else file_record(os.path.join(final, *r.split("/")))
            for r in rels}


__all__ = ["ENTRY_META", "commit_entry", "recorded_files", "mirror_dir", "pull_entry", "push_entry",
           "refuse_foreign_objects"]
