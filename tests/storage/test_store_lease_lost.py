"""A `pack -o s3://...` paused (SIGSTOP, a stalled VM) past its lease while another run takes
the prefix over and commits (S43-5): when the first resumes, the other's output stays whole and
byte for byte what it committed. The paused run stops with one line (it lost the lease), puts
no manifest and deletes nothing but objects only it can have written. Every moment of the
protocol it may be paused at, into an empty prefix (plain shard names, which the other run
uses too) and over a previous output (names with the run's id).

The pause is simulated without waiting out LEASE_SECONDS: the paused run's renewal is stopped
and its lease object is made to look last renewed long ago, which is what the store shows
after a pause."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GPT2, PEPS

import packtool.output.store as store
import packtool.storage.lease as sl
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import MANIFEST
from packtool.storage import LEASE, LeaseLostError, locate
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

ARGS = ([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))
CLI = [PEPS, "--tokenizer", GPT2, "--max-tokens", "1024", "--overflow", "split", "--shard-tokens", "20000",
       "--no-progress"]


def _objects(uri: str) -> dict[str, bytes]:
    loc = locate(uri)
    return {n: loc.join(n).read_bytes() for n in loc.names()}


def _other_run_takes_over(out: str, cache: str, overwrite: bool) -> dict[str, bytes]:
    """The paused run's lease looks expired; another process packs the prefix to the end."""
    lock = locate(out).join(LEASE)
    rec = json.loads(lock.read_bytes())
    lock.write_bytes(json.dumps(dict(rec, renewed=0)).encode())
    r = subprocess.run([sys.executable, "-m", "packtool", "pack", *CLI, "-o", out, "--cache-dir", cache,
                        *(["--overwrite"] if overwrite else [])], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0 and "taking over" in r.stderr, r.stderr
    return _objects(out)


def _pause_at(monkeypatch, moment: str, takeover):
    """Run `takeover` at `moment` of the paused run's commit protocol (the local engine's)."""
    ran = []

    def once():
        if not ran:
            ran.append(takeover())

    if moment == "claimed":
        real_init = store.StoreCommit.__init__
        monkeypatch.setattr(store.StoreCommit, "__init__", lambda self, *a, **k: (once(), real_init(self, *a, **k))[1])
    elif moment == "intent put":
        real_begin = store.StoreCommit.begin
        monkeypatch.setattr(store.StoreCommit, "begin", lambda self, *a, **k: (real_begin(self, *a, **k), once())[0])
    elif moment == "shards up":
        real_finish = store.StoreCommit.finish
        monkeypatch.setattr(store.StoreCommit, "finish", lambda self, *a, **k: (once(), real_finish(self, *a, **k))[1])
    elif moment == "lease checked":  # between the commit's lease check and its manifest put
        real_check = sl.Lease.check
        monkeypatch.setattr(sl.Lease, "check", lambda self: (real_check(self), once())[0])
    return ran


MOMENTS = ["claimed", "intent put", "shards up", "lease checked"]
# without S3's conditional requests (another store, or no botocore) the lease is read before each
# step instead: the one window left is a pause between that read and the manifest put
CASES = [(m, True) for m in MOMENTS] + [(m, False) for m in MOMENTS if m != "lease checked"]


@pytest.mark.parametrize("previous", [False, True], ids=["empty prefix", "over an output"])
@pytest.mark.parametrize("moment,conditional", CASES, ids=[f"{m}-{'if-match' if c else 'read-first'}" for m, c in CASES])
def test_a_run_paused_past_its_lease_leaves_the_new_holders_output_whole(s3, tmp_path, cache_dir, monkeypatch,
                                                                       moment, conditional, previous):
    out = f"{s3}/paused"
    if not conditional:
        import packtool.storage.conditional as sc
        monkeypatch.setattr(sc, "client_for", lambda loc: None)
    kw = dict(output=out, cache_dir=cache_dir, shard_tokens=20_000)
    if previous:
        pack(*ARGS, **kw)
    monkeypatch.setattr(sl, "RENEW_SECONDS", 3600.0)  # paused: it renews nothing
    ran = _pause_at(monkeypatch, moment, lambda: _other_run_takes_over(out, cache_dir, previous))
    with pytest.raises(LeaseLostError) as e:
        pack(*ARGS, overwrite=previous, **kw)
    assert ran, "the takeover never ran"
    assert "\n" not in str(e.value) and "lease" in str(e.value), e.value
    committed = ran[0]
    now = _objects(out)
    assert now[MANIFEST] == committed[MANIFEST]
    listed = [s["file"] for s in json.loads(now[MANIFEST])["shards"]]
    for name in listed:
        assert now.get(name) == committed[name], f"{name} of the new holder's output was changed or deleted"
    assert verify(out, workers=1).ok
    assert LEASE not in now  # neither run's lease is left behind


def _expired(lock) -> None:
    rec = json.loads(lock.read_bytes())
    lock.write_bytes(json.dumps(dict(rec, renewed=0)).encode())


def test_a_lease_taken_over_is_neither_renewed_nor_released_by_the_run_that_lost_it(s3, monkeypatch):
    """The paused run's renewal thread and its release (its `finally`) act on its own lease
    object only: the new holder's stays, and the renewal says the lease is lost."""
    monkeypatch.setattr(sl, "RENEW_SECONDS", 3600.0)
    prefix = locate(f"{s3}/renew")
    paused = sl.take_lease(prefix)
    lock = prefix.join(LEASE)
    _expired(lock)
    taker = sl.take_lease(prefix)
    theirs = lock.read_bytes()
    paused.renew()
    assert paused.lost and lock.read_bytes() == theirs
    with pytest.raises(LeaseLostError):
        paused.check()
    paused.release()
    assert lock.read_bytes() == theirs and taker.held()
    taker.release()
    assert not lock.exists()


def test_the_fence_reaches_the_store_the_uri_names(s3, s3_endpoint, cache_dir, monkeypatch):
    """The conditional requests (lease, manifest) go to the endpoint the URI's
    `?endpoint_override=` names, not to AWS_ENDPOINT_URL's (unset here: AWS itself, unreachable;
    set to another store, the lease and manifest would be written there)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    host = s3_endpoint.split("://", 1)[1]
    out = f"{s3}/named?endpoint_override={host}&scheme=http&region=us-east-1"
    pack(*ARGS, output=out, cache_dir=cache_dir, shard_tokens=20_000)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    assert verify(f"{s3}/named", workers=1).ok
    assert LEASE not in locate(f"{s3}/named").names()
