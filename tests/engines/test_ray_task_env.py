"""L1 (stop 46), the Ray engine's half: a Ray task packtool submits runs under the driver's
environment as it is when the task is submitted (packtool.engines.ray_env). The local node
packtool starts keeps the environment of its start, and the job's runtime_env is fixed at
ray.init: a library user who set AWS_ENDPOINT_URL after a first `pack_ray` got tasks without it.

The class: every kind of change after the node started (a variable set, changed, removed) on
a task submitted through the owner, and `pack_ray` itself against a store whose endpoint only
the new environment names (its tokenize, plan, cache-check and write tasks all reach it)."""
from __future__ import annotations

import os
import uuid

import pytest
from conftest import GPT2, LOCAL_RAY_GROUP, PEPS, S3_ENV

from packtool.align import Alignment
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

pytestmark = [LOCAL_RAY_GROUP]
MARK = "PACKTOOL_TEST_RAY_TASK_ENV"
OTHER = "AWS_TEST_RAY_TASK_ENV"  # read from the driver on a local node only (a cluster's nodes keep theirs)


CHANGES = {"set after": (None, "value", "value"), "changed": ("before", "after", "after"),
           "removed": ("before", None, "")}


@pytest.mark.parametrize("name", [MARK, OTHER])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_task_sees_the_drivers_environment_as_submitted(local_ray, monkeypatch, change, name):
    from packtool.engines.ray_env import remote
    ray = local_ray
    seen = lambda name: os.environ.get(name)  # noqa: E731 (by value: a Ray worker cannot import tests/)
    old, new, got = CHANGES[change]
    tag = uuid.uuid4().hex  # a value the node's start could not hold
    old, new, got = (old and f"{old}-{tag}"), (new and f"{new}-{tag}"), (got and f"{got}-{tag}")
    if old is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, old)
    assert ray.get(remote(seen).remote(name)) == old
    if new is None:
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, new)
    assert ray.get(remote(seen).remote(name)) in ((got, None) if new is None else (got,))


def test_pack_ray_reaches_the_store_the_environment_names_now(local_ray, monkeypatch, fresh_endpoint):
    import boto3

    from packtool.engines.ray_engine import pack_ray
    from packtool.verification.run import verify
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": fresh_endpoint}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"ray-env-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=fresh_endpoint).create_bucket(Bucket=bucket)
    out = f"s3://{bucket}/out"
    pack_ray([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
             TokenizeConfig(tokenizer=GPT2), output=out, cache_dir=f"s3://{bucket}/cache", shard_tokens=20_000)
    assert verify(out, workers=1).ok
