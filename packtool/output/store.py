"""`pack -o s3://bucket/prefix` (any object store): the commit protocol for stores without
rename, the object-store side of packtool.output (which owns local folders).

A store has no rename and no folder, so the manifest is the commit (FORMAT.md, "Object
storage"):

1. claim: a lease object `PREFIX/.packtool.lock` (exclusive create where the store offers
   it; else write + read back, see `lease`), renewed while the run lives; a second writer
   fails at once. The prefix must be empty or a previous packtool output with only its own
   objects, by the folders' rule (output.owned.shard_is_ours: each listed shard's name, size
   and checksum: the previous output is read back, once where an S3 ETag shows it unchanged).
2. intent: `PREFIX/.packtool-pending-RUN.json` lists the shard names this run will write and
   the previous manifest's shards it will delete, before any of them is touched, so whatever
   a killed run leaves is named for the next run to delete.
3. shards go up (multipart for large ones) under names the current manifest does not list:
   the plain `slabs-NNNNN.parquet` into an empty prefix (the bytes of a local pack), else
   `slabs-RUN-NNNNN.parquet`. No reader opens a shard its manifest does not list.
4. commit: the lease is checked to still be ours, then `PREFIX/.manifest.json` is put in one
   request: readers see the old manifest or the new one, never a mix.
5. clean: the previous manifest's shards (those still packtool's by that rule, checked again
   just before the commit) are deleted, then the intent, then the lease.

The local engine writes the shards to a local staging folder first (the same writer as a
folder output), so the machine running pack needs room for one output; under Ray the write
tasks put them from their own nodes (`StoreCommit`: the driver holds the lease and puts the
intent and the manifest). Requests are O(shards), never O(rows).
"""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.notes import note
from packtool.output.leftovers import owned_temp_dir, remove_tree
from packtool.output import store_intents
from packtool.output.owned import refuse_foreign, shard_is_ours
from packtool.output.store_intents import pending, proofs_of, shard_proof
from packtool.output.store_relations import refuse_inside
from packtool.slabs.format import FormatError, ShardInfo, shard_names
from packtool.slabs.names import (
    LEGACY_MANIFEST,
    MANIFEST,
    PENDING_PREFIX,
    intent_file,
    new_run_id,
    proof_file,
    proof_target,
    run_shard_file,
)
from packtool.storage import (LEASE, Lease, LeaseLostError, LeaseTicket, Location, check_uri, etag, join_uri, locate,
                              put_if, take_lease)
from packtool.workers import thread_pool

class StoreOutputExistsError(PacktoolOutputError, FileExistsError):
    """A previous packtool output is at the prefix and --overwrite was not given."""


def say(line: str) -> None:
    note(line)  # packtool.notes: stderr, and --json's notes


def read_store_manifest(loc: Location) -> tuple[dict | None, str | None]:
    """(manifest, its name) of a prefix, or (None, None) when it holds none."""
    from packtool.slabs.format import parse_manifest, store_manifest_bytes
    for name in (MANIFEST, LEGACY_MANIFEST):
        try:
            data = store_manifest_bytes(loc.join(name))  # bounded: a prefix is the user's
        except FileNotFoundError:
            continue
        return parse_manifest(data, loc.join(name).shown, replacing=True), name  # a version 1 output too
    return None, None


def owned_objects(output: str) -> tuple[dict | None, list[str]]:
    """(previous manifest or None, every object name at the prefix `output` that is packtool's:
    the manifest, the lease, what a dead run's intent names, and each shard the manifest lists
    that is the one it records, output.owned.shard_is_ours, the rule of a folder). Any other
    object makes the prefix not packtool's to write: refused, naming a few."""
    loc = locate(output, name="output")
    names = loc.names()
    if any(i.path.count("/") > loc.path.count("/") + 1 for i in loc.list()):
        sub = sorted({i.path[len(loc.path) + 1:].split("/")[0] for i in loc.list()
                      if i.path.count("/") > loc.path.count("/") + 1})
        refuse_foreign(loc.shown, [s + "/" for s in sub], "it holds sub-prefixes", "prefix")
    try:
        m, mname = read_store_manifest(loc)
        records = dict(zip(shard_names(m, loc.join(mname).shown), m["shards"])) if m else {}
    except FormatError:
        refuse_foreign(loc.shown, names, "it is not a packtool output (no readable manifest)", "prefix")
    named = {MANIFEST, LEGACY_MANIFEST, LEASE}
    intents = pending(loc)
    for pname, rec in intents.items():
        named |= {pname, *rec["new"], *rec["old"]}
    named |= set(proofs_of(names, intents))
    # a listed shard is judged by its record even when an intent names it too
    ours = {n for n in names if (shard_is_ours(output, n, records[n]) if n in records else n in named)}
    foreign = [n for n in names if n not in ours]
    if foreign:
        refuse_foreign(loc.shown, foreign, "a packtool output, but it also holds" if m else
                       "it is not empty and not a packtool output", "prefix")
    return m, [n for n in names if n in ours]


def check_store_output(output: str, overwrite: bool) -> dict | None:
    """Refuse, before any work, a prefix packtool must not write; the previous manifest."""
    loc = locate(output, name="output")
    if loc.is_file():
        raise PacktoolOutputError(f"is an object, not a prefix; pick another {arg('output')}", path=loc.shown,
                                  flag=cli_flag("output"))
    m, _ = owned_objects(output)
    if m is not None and not overwrite:
        raise StoreOutputExistsError(f"exists (a previous packtool output): pass {arg('overwrite', True)} "
                                     f"to replace it", path=loc.shown, flag=cli_flag("output"))
    return m


def check_store(output: str, overwrite: bool = False, inputs=(), cache_dir: str | None = None) -> dict | None:
    """Everything claim_store refuses before its lease, in its order: a dry run asks this alone
    (it previews the real run's refusals and takes no lease)."""
    check_uri(output, "output")  # a store not reached is named with the argument, before the checks'
    refuse_inside(output, inputs, cache_dir)
    return check_store_output(output, overwrite)


_HELD: dict[str, list] = {}


@contextmanager
def claim_store(output: str, overwrite: bool = False, inputs=(), cache_dir: str | None = None) -> Iterator[Lease]:
    """Check the prefix, take its lease for the block, remove what dead runs left (their
    intents say what). Re-entrant within a process (pack -> pack_cache)."""
    key = locate(output, name="output").shown
    if key in _HELD:
        refuse_inside(output, inputs, cache_dir)
        _HELD[key][1] += 1
        try:
            yield _HELD[key][0]
        finally:
            _HELD[key][1] -= 1
        return
    check_store(output, overwrite, inputs, cache_dir)
    lease = take_lease(locate(output, name="output"))
    _HELD[key] = [lease, 1]
    try:
        clean_dead_runs(locate(output, name="output"), output)
        check_store_output(output, overwrite)  # a run may have just ended
        yield lease
    finally:
        _HELD.pop(key, None)
        lease.release()


def clean_dead_runs(loc: Location, uri: str | None = None) -> int:
    """With the lease held, every intent is a dead run's: delete what it names that the
    current manifest does not list, on proof (output.store_intents), then the intent.
    `uri`: the prefix as given (its query reaches the store); else `loc.shown`."""
    m, mname = read_store_manifest(loc)
    n = store_intents.clean_dead_runs(loc, set(shard_names(m, mname)) if m else set(), uri or loc.shown)
    from packtool.output.stale import clean_system_temp
    clean_system_temp()  # says what it removed and what it left
    return n


def staging_dir(output: str, tag: str) -> str:
    """A local folder for a store output's shards or spill, in the system's temp folder
    (TMPDIR); removed by the caller."""
    return owned_temp_dir(f"packtool-{tag}-{os.getpid()}-")


@contextmanager
def scratch(tag: str) -> Iterator[str]:
    """A folder on this machine's own disk (TMPDIR) for one task's temporary files (a shard or
    cache part before its upload), removed when the block ends: read by this process only,
    never by another node."""
    d = owned_temp_dir(f"packtool-{tag}-{os.getpid()}-")
    try:
        yield d
    finally:
        remove_tree(d)  # its marker last: a kill mid-removal leaves it provable (output.leftovers)


def commit_to_store(staged: str, output: str, shards: list[ShardInfo], manifest: dict) -> list[ShardInfo]:
    """Steps 2-5 of the protocol for a finished local staging folder; returns the shards under
    the names they have in the store."""
    commit = StoreCommit(output)
    dests = commit.begin([s.file for s in shards], [shard_proof(s) for s in shards])
    try:
        with thread_pool(UPLOADS, "packtool-upload") as pool:
            for _ in pool.map(lambda pair: commit.upload(os.path.join(staged, pair[0].file), pair[1]),
                              zip(shards, dests)):
                pass
        return commit.finish([replace(s, file=d.name) for s, d in zip(shards, dests)], manifest)
    except BaseException:  # Ctrl-C, SIGTERM, a store error: nothing committed, our uploads go
        commit.abort()
        raise


class StoreCommit:
    """Steps 2-5 of the protocol, for writers that put the shards themselves (the Ray engine's
    workers upload each shard where it is written). Held by the process that holds the lease
    (inside `claim_store`): `begin` names the shards and writes the intent, the shards go up
    under those names (anyone may put them), `finish` checks the lease and puts the manifest
    (the commit), then deletes the replaced shards; `abort` removes what this run put."""

    def __init__(self, output: str):
        self.output = output  # as given: tasks locate `join_uri(output, name)` again
        self.loc = locate(output, name="output")
        self.lease = _HELD.get(self.loc.shown, [None])[0]
        if self.lease is None:
            raise PacktoolOutputError("a store commit outside claim_store (a packtool bug)", path=self.loc.shown)
        owned_objects(output)  # a manifest or shard changed since the claim's check: as a folder's swap
        # the fencing token of the commit: the manifest is put only over the one read here
        self.manifest_etag = etag(self.loc.join(MANIFEST))
        self.old, self.oname = read_store_manifest(self.loc)
        self.old_names = shard_names(self.old, self.oname) if self.old else []
        self.run = new_run_id()
        self.new: list[str] = []
        self.renamed = False  # the new shards carry this run's id: no other run can have put them
        self.committed = False
        self.intent = self.loc.join(intent_file(self.run))

    def begin(self, names: list[str], proofs: list[dict] | None = None) -> list[Location]:
        """Where each shard (by its plain name) goes: the plain name into an empty prefix,
        else a name with this run's id. The intent is put before this returns, with the size
        and checksum of each shard where known (`proofs`, one per name: the local engine's
        staged shards; a Ray task puts its own, `upload_proven`)."""
        self.lease.check()
        rename = bool(self.old_names) or any(self.loc.join(n).exists() for n in names)
        self.renamed = rename
        self.new = [run_shard_file(n, self.run) if rename else n for n in names]
        clash = set(self.old_names) & set(self.new)
        if clash:
            raise PacktoolOutputError(f"shard name {sorted(clash)[0]} is listed by the previous manifest; "
                                      f"re-run (a new run id is drawn)", path=self.loc.shown)
        records = dict(zip(self.old_names, (self.old or {}).get("shards", [])))
        known = {n: shard_proof(records[n]) for n in self.old_names}
        known.update(zip(self.new, proofs or []))
        self.intent.write_bytes(json.dumps({"new": self.new, "old": self.old_names,
                                            "proofs": {n: p for n, p in known.items() if p}}).encode())
        return [self.loc.join(n) for n in self.new]

    def task_dests(self, names: list[str]) -> list[tuple[str, str]]:
        """`begin` for write tasks in other processes: per name, the URIs of the shard and of
        its proof (`upload_proven`)."""
        return [(join_uri(self.output, d.name), join_uri(self.output, proof_file(self.run, d.name)))
                for d in self.begin(names)]

    def upload(self, src: str, dst: Location) -> None:
        """One shard's put from this process (the local engine's upload threads)."""
        upload_leased(src, dst, self.lease)

    def ticket(self) -> LeaseTicket:
        """The lease as write tasks in other processes ask it (`upload_proven`)."""
        return self.lease.ticket(join_uri(self.output, LEASE))

    def finish(self, shards: list[ShardInfo], manifest: dict) -> list[ShardInfo]:
        """Commit `shards` (under the names `begin` gave); on failure nothing is committed."""
        if sorted(s.file for s in shards) != sorted(self.new):
            raise PacktoolOutputError("the shards written are not the ones this run named (a packtool bug)",
                                      path=self.loc.shown)
        manifest = dict(manifest, shards=[_as_dict(s) for s in shards])
        try:
            self.lease.check()  # lost: what the prefix holds now is the other run's, not "foreign"
            owned_objects(self.output)  # as a folder's swap: what changed at the prefix since the start stops it
            self.lease.check()  # the last moment another writer could have taken the prefix
            self._put_manifest((json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        except BaseException:
            self.abort()
            raise
        self.committed = True  # from here on the new shards are the output: never removed
        try:
            self._clean_replaced()
        except LeaseLostError:  # committed; the run holding the lease now removes them (the intent names them)
            say(f"committed {self.loc.shown}, but another packtool run took its lease before this one "
                f"deleted the replaced shards; that run removes them")
            return shards
        _forget(self.loc, self._proofs(), self.intent)
        return shards

    def _put_manifest(self, data: bytes) -> None:
        """The commit: over the manifest this run read only (S3's If-Match / If-None-Match), so a
        run paused between its lease check and this put never replaces another run's commit."""
        made = None if self.manifest_etag is None else put_if(self.loc.join(MANIFEST), data, self.manifest_etag)
        if made is False:
            self.lease.lost = True
            self.lease.check()
        if made is None:
            self.loc.join(MANIFEST).write_bytes(data)

    def _clean_replaced(self) -> None:
        """Step 5: the previous manifest's shards, each while the lease is still this run's."""
        if self.oname == LEGACY_MANIFEST:
            self.lease.check()
            self.loc.join(LEGACY_MANIFEST).delete()
        records = dict(zip(self.old_names, (self.old or {}).get("shards", [])))
        keep, kept, present = set(self.new), [], set(self.loc.names())
        for name in self.old_names:
            if name in keep or name not in present:
                continue
            if _is_ours(self.output, name, records[name]):
                self.lease.check()
                self.loc.join(name).delete()
            else:
                kept.append(name)
        if kept:  # changed between the check above and here: the user's now, never deleted
            say(f"kept {', '.join(kept[:3])} at {self.loc.shown}: not the size and checksum its "
                f"manifest recorded, so not packtool's to delete")

    def _proofs(self) -> list[str] | None:
        """The proof objects this run's write tasks put (only a Ray run's have any); None when
        the prefix cannot be listed (then the intent stays, and the next run removes them)."""
        try:
            return [n for n in self.loc.names() if (proof_target(n) or ("",))[0] == self.run]
        except OSError:
            return None

    def abort(self) -> None:
        """Remove what this run put. A plain shard name goes only while the lease is still this
        run's (checked before each delete): once another run holds the prefix, an object there may
        be its shard; names with this run's id (its renamed shards, proofs and intent) are its own."""
        if self.committed:
            return
        proofs = self._proofs()
        if proofs is None:
            return
        own = (self.new if self.renamed else []) + proofs
        try:
            for n in [] if self.renamed else self.new:
                self.lease.check()
                self.loc.join(n).delete()
        except LeaseLostError:  # the intent stays: the run holding the lease cleans by it
            _forget(self.loc, own, None)
            return
        _forget(self.loc, own, self.intent)


def _forget(loc: Location, names: list[str] | None, intent: Location | None) -> None:
    """Delete `names` and then the intent (if given)."""
    if names is None:
        return
    try:
        for n in names:
            loc.join(n).delete()
        if intent is not None:
            intent.delete()
    except Exception:  # the intent stays: the next run removes what it names
        pass


def _as_dict(s: ShardInfo) -> dict:
    from dataclasses import asdict
    return asdict(s)


def _is_ours(output: str, name: str, record: dict) -> bool:
    """A replaced shard is deleted only while it is what its manifest recorded (a folder's rule:
    its shards were checked just before the commit, so unchanged ones are not read again)."""
    return shard_is_ours(output, name, record)


UPLOAD_BUFFER = 16 << 20
UPLOADS = 4  # shards uploaded at once (each also sends its multipart parts in the background)


def upload_leased(src: str, dst: Location, lease: Lease | LeaseTicket) -> None:
    """Every shard's put, from whichever process: only while the run's lease is still its own
    (asked of the store, storage.lease), since a plain name may be another run's shard by now."""
    lease.check()
    upload_file(src, dst)


def upload_proven(src: str, dest: str, proof: str, info: ShardInfo, lease: LeaseTicket) -> None:
    """A write task's upload of shard `info` to `dest` (a `task_dests` pair): the shard's size
    and checksum go first, so whatever a kill leaves at `dest` is provably the run's or not;
    each put only while the run still holds `lease` (`StoreCommit.ticket`)."""
    lease.check()
    locate(proof, name=lease.argument).write_bytes(json.dumps(shard_proof(info)).encode())
    upload_leased(src, locate(dest, name=lease.argument), lease)


def upload_file(src: str, dst: Location) -> None:
    """Put a local file (a shard or a cache part) as one object: multipart when large."""
    with open(src, "rb") as f, dst.open_output() as out:
        shutil.copyfileobj(f, out, UPLOAD_BUFFER)


__all__ = ["PENDING_PREFIX", "StoreCommit", "StoreOutputExistsError", "check_store", "check_store_output", "claim_store", "clean_dead_runs",
           "commit_to_store", "owned_objects", "read_store_manifest", "scratch", "staging_dir", "upload_file",
           "upload_leased", "upload_proven"]
