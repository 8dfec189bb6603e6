"""A user's own object at the name of packtool's store lease (`PREFIX/.packtool.lock`, S43-9):
packtool never took it for a dead run's lease and deleted or overwrote it. Every kind of object
that is not a lease packtool wrote (not JSON, JSON of another shape, a lease-like record with a
key more or fewer, too large) is refused in one line naming it (exit 2), and
kept byte for byte; into an empty prefix and over a previous output, through the CLI and the
library."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import GPT2, PEPS

from packtool.errors import PacktoolOutputError
from packtool.storage import LEASE, locate, take_lease

CLI = [PEPS, "--tokenizer", GPT2, "--max-tokens", "1024", "--overflow", "split", "--shard-tokens", "20000",
       "--no-progress"]

FOREIGN = {
    "text": b"my notes\n",
    "empty": b"",
    "json list": b"[1, 2]",
    "json of another shape": json.dumps({"owner": "me", "renewed": 0}).encode(),
    "a key more": json.dumps({"token": "x", "owner": "pid 1 on h", "renewed": 0, "mine": True}).encode(),
    "token not text": json.dumps({"token": 7, "owner": "pid 1 on h", "renewed": 0}).encode(),
    "too large": b"{" + b" " * (1 << 17) + b"}",
    # S49A-7: never written by packtool, and read as a live run's they never expired (or raised OverflowError)
    "renewed NaN": b'{"token": "x", "owner": "pid 1 on h", "renewed": NaN}',
    "renewed Infinity": b'{"token": "x", "owner": "pid 1 on h", "renewed": Infinity}',
    "renewed 1e400": b'{"token": "x", "owner": "pid 1 on h", "renewed": 1e400}',
    "renewed -Infinity": b'{"token": "x", "owner": "pid 1 on h", "renewed": -Infinity}',
    **{f"pid {pid} on this host": json.dumps({"token": "x", "owner": f"pid {pid} on {socket.gethostname()}",
                                              "renewed": time.time()}).encode()
       for pid in (10**20, 2**22 + 1, 0, '9' * 5001)},
}


def _pack(out, cache, *extra):
    return subprocess.run([sys.executable, "-m", "packtool", "pack", *CLI, "-o", out, "--cache-dir", cache, *extra],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_a_foreign_object_at_the_lease_name_is_refused_and_kept(s3, kind):
    prefix = locate(f"{s3}/lib")
    prefix.join(LEASE).write_bytes(FOREIGN[kind])
    with pytest.raises(PacktoolOutputError) as e:
        take_lease(prefix)
    assert "\n" not in str(e.value) and LEASE in str(e.value) and "not a packtool lease" in str(e.value), e.value
    assert prefix.join(LEASE).read_bytes() == FOREIGN[kind]


@pytest.mark.parametrize("previous", [False, True], ids=["empty prefix", "over an output"])
def test_pack_refuses_a_prefix_whose_lease_name_holds_a_users_object(s3, cache_dir, previous):
    out = f"{s3}/cli"
    if previous:
        assert _pack(out, cache_dir).returncode == 0
    before = {n: locate(out).join(n).read_bytes() for n in locate(out).names()}
    locate(out).join(LEASE).write_bytes(b"my notes\n")
    r = _pack(out, cache_dir, *(["--overwrite"] if previous else []))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and LEASE in r.stderr and "not a packtool lease" in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if "error" in ln.lower()]) == 1, r.stderr
    assert locate(out).join(LEASE).read_bytes() == b"my notes\n"
    assert {n: locate(out).join(n).read_bytes() for n in locate(out).names() if n != LEASE} == before
