"""A push of a tokenized-cache entry to a store (store_cache.push_entry; the Ray engine's build
on a store) and the sweep that removes what a killed push left there.

An entry without cache.json is partial and never used (store_cache); a push killed before its
cache.json went up left such an entry for good. So a push first puts a marker at the cache root,
`ROOT/.packtool-push-KEY-RUN.json` (KEY: the entry's name), renewed while it runs and deleted
once its cache.json is put: its owner and renewal time (storage.lease's record, and its rule for
a dead run: `expired`), and the size and xxh3-128 of each file it puts (cache.json's record of
it). The Ray engine's tokenize tasks name their parts only as they write them: each task puts
its part's record first, beside it, `ROOT/KEY/.packtool-proof-RUN-PART.json`.

A run with a cache on a store sweeps the root (one listing: the markers sit there, not in
their entries, so that no entry is listed for the sweep). A dead push's entry that holds no
cache.json loses each file its marker or proofs name whose object is still that size and
checksum (`file_problem`, the cache check's own rule), then those proofs and the marker. Any
other object stays, and is said; a committed entry (killed after its cache.json) keeps its
files; an entry that a live push of the same key is writing is left to it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import time
import uuid

from packtool.notes import note
from packtool.storage import (RENEW_SECONDS, Location, drop_markers, expired, join_uri, locate, no_new_marker,
                              read_small, shown, sweep_probes)
from packtool.storage.lease import holder_ok
from packtool.threads import start
from packtool.tokenize.cache_entry import CACHE_ARGUMENT, file_problem

ENTRY_META = "cache.json"  # store_cache's commit (not imported: store_cache imports this module)
PUSH_PREFIX = ".packtool-push-"
PROOF_PREFIX = ".packtool-proof-"
_MARKER = re.compile(r"^\.packtool-push-([0-9a-f]{32})-([0-9a-f]{12})\.json$")
MARKER_BYTES = 256 << 20  # it lists what cache.json lists: cache.json's bound
PROOF_BYTES = 1 << 16  # one file's record
_KEYS = {"owner", "renewed", "entry", "run", "files"}


def cache_place(uri: str) -> Location:
    """A location of the store cache: every request names the argument that gave it (--cache-dir /
    cache_dir=), so a store that stops answering or loses its bucket mid-run is the cache's
    refusal (StorageCacheError, kind cache), not an input's, whichever request meets it (RA-13)."""
    return locate(uri, name=CACHE_ARGUMENT)


def _record_ok(rec) -> bool:
    return isinstance(rec, dict) and type(rec.get("bytes")) is int and isinstance(rec.get("xxh3_128"), str)


def _safe(rel) -> bool:
    return isinstance(rel, str) and rel != ENTRY_META and not rel.startswith("/") and ".." not in rel.split("/")


class Push:
    """`with Push(root, key, files)`: the marker is up for the block (renewed), and deleted at its
    end when the entry's cache.json was put; a push that fails in this process removes what it
    put at once, by the sweep's rule."""

    def __init__(self, root: str, key: str, files: dict | None = None):
        self.root, self.key = root, key
        self.run = uuid.uuid4().hex[:12]
        self.entry = join_uri(root, key)
        self.files = dict(files or {})
        self.marker = cache_place(root).join(f"{PUSH_PREFIX}{key}-{self.run}.json")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self) -> bytes:
        return json.dumps({"owner": f"pid {os.getpid()} on {socket.gethostname()}", "renewed": time.time(),
                           "entry": self.key, "run": self.run, "files": self.files}).encode()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                self.marker.write_bytes(self.record())
            except Exception:  # a transient store error: the next renewal tries again
                continue

    def __enter__(self) -> "Push":
        self.marker.write_bytes(self.record())  # before the first byte of the entry is touched
        self._thread = threading.Thread(target=self._renew, name="packtool-push", daemon=True)
        start(self._thread)
        return self

    def __exit__(self, kind, value, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            if kind is None:
                _forget(cache_place(self.entry), self.run, self.marker)
            else:  # the entry is not committed: what this push put goes now, not after LEASE_SECONDS
                _clean(self.root, self.key, self.run, self.files, self.marker)
        except Exception:  # the marker stays: the next run's sweep removes what it names
            if kind is None:
                raise

    def proof_uri(self, rel: str) -> str:
        return proof_uri(self.entry, self.run, rel)


def proof_uri(entry: str, run: str, rel: str) -> str:
    return join_uri(entry, f"{PROOF_PREFIX}{run}-{rel.replace('/', '~')}.json")


def upload(src: str, dst: Location) -> None:
    """One local file of an entry put as one object (multipart when large)."""
    with open(src, "rb") as f, dst.open_output() as out:
        shutil.copyfileobj(f, out, 16 << 20)


def put_proven(src: str, entry: str, run: str, rel: str, rec: dict) -> None:
    """A task's upload of one file of a push's entry (`run`: Push.run): its record goes first, so
    whatever a kill leaves of the file is provably the push's or not. A refusal names --cache-dir
    (`cache_dir`), the argument every push's entry lies under."""
    cache_place(proof_uri(entry, run, rel)).write_bytes(json.dumps(dict(rec, file=rel)).encode())
    upload(src, cache_place(join_uri(entry, *rel.split("/"))))


def _read_json(loc: Location, limit: int):
    try:
        return json.loads(read_small(loc, limit, "packtool push record", "remove it"))
    except FileNotFoundError:
        return None
    except ValueError:  # not JSON, or past the bound: not a record packtool writes
        return {}


def _proofs(entry: Location, run: str) -> dict[str, tuple[str, dict]]:
    """rel -> (proof object name, record) of the run's tasks' proofs in `entry`."""
    got = {}
    for name in entry.names():
        if name.startswith(f"{PROOF_PREFIX}{run}-") and name.endswith(".json"):
            rec = _read_json(entry.join(name), PROOF_BYTES)
            if isinstance(rec, dict) and _safe(rec.get("file")) and _record_ok(rec):
                got[rec["file"]] = (name, {k: rec[k] for k in ("bytes", "xxh3_128")})
    return got


def _forget(entry: Location, run: str, marker: Location) -> None:
    """The push's own bookkeeping (its proofs, then its marker): named with its run id."""
    for name in entry.names():
        if name.startswith(f"{PROOF_PREFIX}{run}-"):
            entry.join(name).delete()
    marker.delete()


def _named(entry: Location, run: str, files: dict) -> dict[str, dict]:
    """The files of a push's entry that the push provably put: its marker's `files`, its tasks'
    proofs (rel -> size and checksum)."""
    named = {rel: rec for rel, rec in files.items() if _safe(rel) and _record_ok(rec)}
    named.update({rel: rec for rel, (_, rec) in _proofs(entry, run).items()})
    return named


def _clean(root: str, key: str, run: str, files: dict, marker: Location) -> int:
    """Remove the files the push provably put, where the entry holds no cache.json (committed:
    its files are the entry's now), each still that size and checksum, then its proofs and
    marker: how many files were removed. pyarrow's delete leaves an empty `PREFIX/` object for
    the folder of each object it deletes: those inside the entry (packtool's own tree) go, and
    the root's where this removal made it (S3, storage.drop_markers / no_new_marker)."""
    entry_uri = join_uri(root, key)
    entry = cache_place(entry_uri)
    named = {} if entry.join(ENTRY_META).is_file() else _named(entry, run, files)
    with no_new_marker(cache_place(root)):
        n = sum(entry.join(*rel.split("/")).delete() for rel, rec in sorted(named.items())
                if file_problem(entry_uri, rel, rec) is None)
        _forget(entry, run, marker)
        drop_markers(entry)
    return n


def sweep_pushes(root: str) -> int:
    """Remove what dead pushes left at the store cache `root` (see the module's text); says what
    it removed and what it kept. Returns the number of files removed."""
    loc = cache_place(root)
    names = loc.names()
    with no_new_marker(loc):
        probes = sweep_probes(loc, names)  # a run killed between its write probe's put and delete (S46A-3)
    if probes:
        note(f"removed {len(probes)} write probe object(s) at {shown(root)} that a killed packtool run left "
             f"({', '.join(probes[:3])}{', ...' if len(probes) > 3 else ''})")
    found = [(m.group(1), m.group(2), n) for n in names for m in [_MARKER.match(n)] if m]
    if not found:
        return 0
    records = [(key, run, name, _read_json(loc.join(name), MARKER_BYTES)) for key, run, name in found]
    foreign = [n for k, r, n, rec in records if rec is not None and not (
        isinstance(rec, dict) and set(rec) == _KEYS and rec["entry"] == k and rec["run"] == r
        and isinstance(rec["files"], dict) and holder_ok(rec))]
    ours = [(k, r, n, rec) for k, r, n, rec in records if rec is not None and n not in foreign]
    live = {k for k, _, _, rec in ours if not expired(rec)}
    dead = [(k, r, n, rec) for k, r, n, rec in ours if k not in live]  # an entry being pushed is its pusher's
    removed, kept, entries = 0, [], 0
    for key in sorted({k for k, _, _, _ in dead}):
        runs = [(r, n, rec) for k, r, n, rec in dead if k == key]
        removed += sum(_clean(root, key, r, rec["files"], loc.join(n)) for r, n, rec in runs)
        entry = cache_place(join_uri(root, key))
        if not entry.join(ENTRY_META).is_file():  # (a committed one lost its marker only)
            entries += 1
            kept += [f"{key}/{i.path[len(entry.path) + 1:]}" for i in entry.list()]
    if entries:
        note(f"removed {removed} file(s) of {entries} partial tokenized-cache entr{'y' if entries == 1 else 'ies'} "
             f"at {shown(root)} that a killed push left (no cache.json: never used)")
    if kept or foreign:
        names = foreign + kept
        note(f"kept {len(names)} object(s) at {shown(root)} not provably written by a dead packtool push "
             f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}); remove them yourself if they are not needed")
    return removed


__all__ = ["PROOF_PREFIX", "PUSH_PREFIX", "Push", "proof_uri", "put_proven", "sweep_pushes", "upload"]
