"""Every path that uploads an object-store output's shards asks the lease before each put (L1):
a run that lost its lease after naming its shards (paused past LEASE_SECONDS while another run
took the prefix) puts nothing more there, whichever engine uploads: the local engine's upload
threads (from its staging folder) or the Ray engine's write tasks (from their own nodes).

What the paused run puts is read from the store itself: the bucket keeps every version, so an
object put and then deleted again (an abort's cleanup) still shows. The takeover is simulated
as in test_store_lease_lost.py: the lease object is replaced by another run's record just after
the paused run put its intent."""
from __future__ import annotations

import json
import socket
import time
import uuid

import pytest
from conftest import GPT2, LOCAL_RAY_GROUP, PEPS

import packtool.output.store as store
import packtool.storage.lease as sl
from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.storage import LEASE, LeaseLostError, locate
from packtool.tokenize.config import TokenizeConfig

ARGS = ([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))


def _pack_ray(*a, **k):
    from packtool.engines.ray_engine import pack_ray
    return pack_ray(*a, **k)


ENGINES = [pytest.param(pack, id="local"), pytest.param(_pack_ray, id="ray", marks=LOCAL_RAY_GROUP)]


def _client(s3_endpoint):
    import boto3
    return boto3.client("s3", endpoint_url=s3_endpoint)


def _puts(client, bucket: str) -> set[tuple[str, str]]:
    """Every (key, version) ever put in the bucket (deleted ones too)."""
    got = set()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        got |= {(v["Key"], v["VersionId"]) for v in page.get("Versions", [])}
    return got


@pytest.fixture
def ray_reaches_s3(request, s3):
    """The process's local Ray, up or started now: pack_ray's tasks run under the driver's
    environment as it is when submitted (packtool.engines.ray_env), the endpoint's included,
    whichever environment the node was started under (an earlier test's, in a whole run)."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
    return request.getfixturevalue("local_ray")


@pytest.mark.parametrize("previous", [False, True], ids=["empty prefix", "over an output"])
@pytest.mark.parametrize("engine", ENGINES)
def test_no_shard_is_put_after_the_lease_is_lost(request, s3, s3_endpoint, cache_dir, monkeypatch, engine, previous):
    if engine is _pack_ray:
        request.getfixturevalue("ray_reaches_s3")
    bucket = s3.split("://", 1)[1]
    client = _client(s3_endpoint)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    out = f"{s3}/out"
    kw = dict(output=out, cache_dir=cache_dir, shard_tokens=20_000)
    if previous:
        pack(*ARGS, **kw)
    monkeypatch.setattr(sl, "RENEW_SECONDS", 3600.0)  # paused: it renews nothing
    seen: list = []
    real_begin = store.StoreCommit.begin

    def begin_then_lose(self, *a, **k):
        dests = real_begin(self, *a, **k)
        other = {"token": uuid.uuid4().hex, "owner": f"pid 1 on {socket.gethostname()}-other", "renewed": time.time()}
        locate(out).join(LEASE).write_bytes(json.dumps(other).encode())  # another run holds the prefix now
        seen.append(_puts(client, bucket))
        return dests

    monkeypatch.setattr(store.StoreCommit, "begin", begin_then_lose)
    with pytest.raises(LeaseLostError) as e:
        engine(*ARGS, overwrite=previous, **kw)
    assert seen, "the run never named its shards"
    assert "\n" not in str(e.value) and "lease" in str(e.value), e.value
    # (Arrow puts an empty "out/" marker when a delete of the run's own objects empties the prefix)
    after = {k for k, _ in _puts(client, bucket) - seen[0] if not k.endswith("/")}
    assert not after, f"put after its lease was lost: {sorted(after)}"
