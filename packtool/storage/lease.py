"""One writer per object-store prefix: a lease object `PREFIX/.packtool.lock`.

Taking it: an exclusive create, i.e. an S3 `PutObject` with `If-None-Match: *` (through
botocore, when it is installed: pyarrow.fs has no conditional put), so of two writers exactly
one gets it and the other fails at once. Without botocore, or on another store, the lease is
written and read back after `SETTLE_SECONDS`: two writers that both looked before either
wrote (a window of one request plus the settle time) can both think they hold it; the
holder re-reads it before its commit (`Lease.check`), which narrows the harm to two runs
that commit within that window. FORMAT.md and docs/SCALING.md say so.

The holder renews it every `RENEW_SECONDS`; a lease not renewed for `LEASE_SECONDS`, or
one whose holder ran on this host and whose process is gone, is a dead run's and the next
run takes it over (and cleans what the dead run left). The record
holds a random token, "pid N on HOST" and the renewal time: nothing secret.

A holder paused past `LEASE_SECONDS` (SIGSTOP, a stalled host) resumes believing it holds the
lease: output.store checks it (`Lease.check`) before each put and delete, and on S3 the
renewal, the release and a takeover act only on the lease object as last seen (If-Match on
its ETag, storage.conditional), so the paused run never overwrites or deletes the new holder's.
"""
from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.pids import pid_in_text
from packtool.storage.conditional import ABSENT, delete_if, etag, put_if
from packtool.storage.location import Location, bucket_gone, locate
from packtool.storage.small_files import read_small
from packtool.storage.uri import is_uri
from packtool.threads import start

LEASE = ".packtool.lock"
LEASE_SECONDS = 120.0
RENEW_SECONDS = 20.0
SETTLE_SECONDS = 0.5


class LeaseLostError(PacktoolOutputError):
    """Another run took the prefix's lease while this one was writing: nothing was committed."""


LEASE_BYTES = 1 << 16  # a lease record is ~150 bytes; the object sits at a user's prefix


def _read(lock: Location) -> dict | None:
    """The lease record at `lock`; None when there is none; {} when the object there is not a
    record packtool writes (`Lease.record`: exactly token, owner and renewal time)."""
    try:
        rec = json.loads(read_small(lock, LEASE_BYTES, "packtool lease", "remove it"))
    except FileNotFoundError:
        return None
    except ValueError:  # not JSON, or over the bound (a PacktoolInputError): not a lease packtool wrote
        return {}
    ok = isinstance(rec, dict) and set(rec) == {"token", "owner", "renewed"} and \
        isinstance(rec["token"], str) and holder_ok(rec)
    return rec if ok else {}


def holder_ok(rec: dict) -> bool:
    """The holder half of a record packtool writes (a lease, a store cache push, a write probe):
    an owner text whose pid, where it names one, a process can have, and a finite renewal time.
    Anything else (NaN, Infinity, 1e400, a 20-digit pid) comes from damage or another writer:
    read as a live run's, it would never expire (S49A-7)."""
    owner, renewed = rec.get("owner"), rec.get("renewed")
    if not isinstance(owner, str) or type(renewed) not in (int, float) or not math.isfinite(renewed):
        return False
    pid, on, _ = owner.removeprefix("pid ").partition(" on ")
    # an owner naming a pid names one a process can have; one naming none (another writer's words) stands
    return not (owner.startswith("pid ") and on and pid.isdigit()) or pid_in_text(pid) is not None


def _foreign(prefix: Location, lock: Location) -> PacktoolOutputError:
    return PacktoolOutputError(f"holds {lock.name}, which is not a packtool lease (packtool puts its one-writer "
                               f"lease at that name and never replaces or deletes an object it did not write); "
                               f"move that object, or pick another {arg('output')}", path=prefix.shown,
                               flag=cli_flag("output"))


def _holds(lock: Location, token: str) -> bool:
    """The one rule of "still this run's": the lease object now holds this run's token."""
    rec = _read(lock)
    return bool(rec) and rec.get("token") == token


def _lost(lock: Location, prefix: str):
    gone = bucket_gone(lock.shown, later=False, name=lock.argument)
    if gone is not None:  # not another run: the bucket was deleted under this one
        raise gone
    raise LeaseLostError(f"another packtool run took this output's lease while this one was "
                         f"writing (this one was stopped or cut off for over {LEASE_SECONDS:.0f} s); "
                         f"this run committed nothing and left the other's objects alone: re-run "
                         f"when it is done", path=prefix)


@dataclass(frozen=True)
class LeaseTicket:
    """A lease as a process that does not hold it sees it (picklable: URIs and the token): its
    `check` is the holder's, read from the store, so a write task that outlives the run's lease
    puts nothing more at the prefix."""
    lock_uri: str
    token: str
    prefix: str
    argument: str | None = None  # the one that gave the place (-o): a task's refusal is its kind, names it

    def check(self) -> None:
        lock = locate(self.lock_uri, name=self.argument)
        if not _holds(lock, self.token):
            _lost(lock, self.prefix)


class Lease:
    def __init__(self, lock: Location, prefix: str):
        self.lock, self.prefix = lock, prefix
        self.token = uuid.uuid4().hex
        self.lost = False
        # the ETag of the lease object as this run last put it, where the store offers
        # conditional requests: renewal and release then act only on that very object
        self.etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self) -> bytes:
        return json.dumps({"token": self.token, "owner": f"pid {os.getpid()} on {socket.gethostname()}",
                           "renewed": time.time()}).encode()

    def held(self) -> bool:
        return _holds(self.lock, self.token)

    def check(self) -> None:
        """Raise unless the lease is still this run's (read from the store, not remembered): before
        every put and delete of the commit protocol, since a run paused past LEASE_SECONDS (SIGSTOP,
        a stalled host) resumes mid-step while another run may hold the prefix."""
        if self.lost or not self.held():
            self.lost = True
            _lost(self.lock, self.prefix)

    def ticket(self, lock_uri: str) -> "LeaseTicket":
        """What a process other than the holder (a Ray write task on another node) asks before
        each of its puts; `lock_uri`: the lease object's URI as the output was given (its query
        reaches the store), located again where the task runs."""
        return LeaseTicket(lock_uri, self.token, self.prefix, self.lock.argument)

    def renew(self) -> None:
        if self.etag is not None:  # only while the object is still the one this run put
            made = put_if(self.lock, self.record(), self.etag)
            if made is False:
                self.lost = True
            elif made:
                self.etag = made
            return
        if not self.held():
            self.lost = True
            return
        self.lock.write_bytes(self.record())

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS) and not self.lost:
            try:
                self.renew()
            except Exception:  # a transient store error: the next renewal or check() says more
                continue

    def start(self) -> "Lease":
        self._thread = threading.Thread(target=self._renew, name="packtool-lease", daemon=True)
        start(self._thread)
        return self

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            if self.etag is not None:
                delete_if(self.lock, self.etag)  # never another run's lease
            elif self.held():
                self.lock.delete()
        except Exception:  # the lease then expires on its own
            pass


def _busy(prefix: str, rec: dict) -> PacktoolOutputError:
    age = time.time() - float(rec.get("renewed") or 0)
    return PacktoolOutputError(f"another packtool pack ({rec.get('owner', '?')}, renewed {age:.0f} s ago) "
                               f"is writing this output; wait for it to finish or pick another {arg('output')} "
                               f"(a dead run's lease expires {LEASE_SECONDS:.0f} s after its last renewal)",
                               path=prefix, flag=cli_flag("output"))


def _s3_exclusive_put(lock: Location, body: bytes) -> str | bool | None:
    """The new ETag: created; False: it exists; None: no conditional put here (not S3 or no botocore)."""
    return put_if(lock, body, ABSENT)


def _dead_here(rec: dict) -> bool:
    """The holder ran on this host and its process is gone (killed): no need to wait out
    the lease."""
    owner = str(rec.get("owner", ""))
    pid, _, host = owner.removeprefix("pid ").partition(" on ")
    if host != socket.gethostname() or pid_in_text(pid) in (None, os.getpid()):
        return False
    try:
        os.kill(pid_in_text(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def expired(rec: dict) -> bool:
    """A record with an owner and a renewal time (a lease; a store cache push, tokenize.store_push)
    is a dead run's: not renewed for LEASE_SECONDS, or its holder ran on this host and is gone."""
    return time.time() - float(rec.get("renewed") or 0) >= LEASE_SECONDS or _dead_here(rec)


def run_holds(prefix: str) -> bool:
    """A packtool run holds object-store prefix `prefix` now: its lease is a record packtool
    wrote and not a dead run's (`expired`, the rule a takeover goes by). What `verify` asks of the
    shards a run's intent names: a run in flight, or a dead run's left for plain readers."""
    if not is_uri(prefix):
        return False
    rec = _read(locate(prefix).join(LEASE))
    return bool(rec) and not expired(rec)


def take_lease(prefix: Location) -> Lease:
    lock = prefix.join(LEASE)
    lease = Lease(lock, prefix.shown)
    seen = etag(lock)  # before the read: a lease renewed after it is not deleted below
    rec = _read(lock)
    if rec == {}:
        raise _foreign(prefix, lock)
    if rec is not None:
        if not expired(rec):
            raise _busy(prefix.shown, rec)
        from packtool.notes import note
        note(f"taking over {lock.shown}: the run that held it ({rec.get('owner', '?')}) "
             f"stopped renewing it")
        if seen is None:
            lock.delete()
        elif seen == ABSENT or not delete_if(lock, seen):  # renewed, or taken over by a third run
            raise _busy(prefix.shown, _read(lock) or {})
    made = _s3_exclusive_put(lock, lease.record())
    if made is False:
        raise _busy(prefix.shown, _read(lock) or {})  # a foreign object put since the read: not ours either
    if made is None:
        lock.write_bytes(lease.record())
        time.sleep(SETTLE_SECONDS)
        if not lease.held():
            raise _busy(prefix.shown, _read(lock) or {})
    else:
        lease.etag = made
    return lease.start()


__all__ = ["LEASE", "LEASE_SECONDS", "Lease", "LeaseLostError", "LeaseTicket", "expired", "RENEW_SECONDS", "run_holds",
           "take_lease"]
