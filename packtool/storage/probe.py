"""The one check of a store URI an argument gives, before any work (`check_uri`): its text,
its bucket, and for a place written a probe put (a missing bucket, no write permission or
another endpoint said before the inputs are tokenized); cli.store_flags applies it to every
path flag, tokenize.cache_root to a cache on a store.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
from contextlib import nullcontext

import pyarrow.fs as pafs

from packtool.errors import arg, cli_flag
from packtool.storage.failures import _why, unreached
from packtool.storage.location import Location, locate
from packtool.storage.uri import BUCKETED, STORE_ERRORS, store_error

PROBE_TAG = ".packtool-probe"
_PROBE = re.compile(r"\.packtool-probe-\d+-[0-9a-f]{8}\Z")
_TAKES: set[str] = set()  # store prefixes this process saw take an object (check_uri's probe)


def _record() -> bytes:
    """A probe's body: its owner and time (storage.lease's record, and its rule for a dead run)."""
    return json.dumps({"owner": f"pid {os.getpid()} on {socket.gethostname()}", "renewed": time.time()}).encode()


def _put(probe: Location) -> None:
    """The probe object, its body `_record` (put at close): whose it is, so a kill's is provably packtool's."""
    with probe.fs.open_output_stream(probe.path, compression=None) as f:
        f.write(_record())


def sweep_probes(loc: Location, names: list[str]) -> list[str]:
    """Remove the probes among `names` (the listing of the prefix `loc`) that a run killed
    between its put and its delete left (SIGKILL; S46A-3): named as check_uri names them and
    holding exactly its record, whose run is dead (storage.lease.expired: not renewed for the
    lease's time, or its process on this host gone). An object of that name in any other form
    (a user's, an older packtool's empty probe) is not provably packtool's and stays. Returns
    the names removed."""
    from packtool.storage.lease import expired, holder_ok
    from packtool.storage.small_files import read_small
    gone = []
    for n in names:
        if not _PROBE.match(n):
            continue
        try:
            rec = json.loads(read_small(loc.join(n), 1 << 16, "packtool probe", "remove it"))
        except (FileNotFoundError, ValueError):  # gone since the listing, or not a record packtool writes
            continue
        if isinstance(rec, dict) and set(rec) == {"owner", "renewed"} and holder_ok(rec) and expired(rec) and \
                loc.join(n).delete():
            gone.append(n)
    return gone


def check_uri(spec: str, name: str, write: bool = False, around_probe=None) -> Location:
    """The one check of a store URI that argument `name` (its flag on the command line) gives,
    before any work: its form (locate: a known scheme, no credentials, a bucket named); a
    bucket that does not exist; and, `write`, that the prefix takes an object (a probe put and
    deleted, once per prefix and process): a missing bucket, no write permission or another
    endpoint is said here, not after the inputs are tokenized (`around_probe(loc)`: a context
    the probe runs in, conditional.no_new_marker's, given by the caller: tokenize.cache_root).
    A store that answers the bucket question with anything but "not found" (a role allowed objects, not the bucket) is
    left to the work's own requests."""
    loc = locate(spec, name=name)
    flag, bucket = cli_flag(name), loc.path.split("/", 1)[0]
    if loc.local or loc.shown in _TAKES:
        return loc
    try:  # a bucket store's first name only: on HDFS it is a folder an --output may create
        missing = bool(bucket) and spec.split("://", 1)[0].lower() in BUCKETED and \
            loc.fs.get_file_info(bucket).type == pafs.FileType.NotFound
    except OSError as e:  # a store that answers otherwise is left to the work's requests; one that does not is said
        if (err := unreached(e, spec, name)) is not None:
            raise err from None
        missing = False
    if missing:
        raise store_error(name)(f"its bucket {bucket} does not exist (or this endpoint has no such bucket); create "
                                f"it, or give {arg(name)} a prefix in an existing bucket", path=loc.shown, flag=flag)
    if write:
        probe = loc.join(f"{PROBE_TAG}-{os.getpid()}-{os.urandom(4).hex()}")
        with around_probe(loc) if around_probe else nullcontext():  # its delete's `PREFIX/` marker
            try:
                _put(probe)
            except OSError as e:
                raise unreached(e, spec, name) or store_error(name)(f"cannot be written ({_why(e)}); check the store's credentials chain and endpoint "
                                   f"(for S3: AWS_* variables, AWS_ENDPOINT_URL), or give another {arg(name)}",
                                   path=loc.shown, flag=flag) from None
            finally:  # Ctrl-C or SIGTERM between the put and its delete: gone all the same (S46A-3)
                try:
                    probe.delete()
                except STORE_ERRORS:
                    pass  # a role that may put but not delete: the prefix takes objects, which is the question
        _TAKES.add(loc.shown)
    return loc


__all__ = ["PROBE_TAG", "check_uri", "sweep_probes"]
