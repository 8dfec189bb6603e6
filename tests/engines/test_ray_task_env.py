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


AT_START = "_AT_START"  # the name's twin the driver holds from before any Ray node starts (tests/conftest.py)
CHANGES = {"set after": (None, "value", "value"), "changed": ("before", "after", "after"),
           "removed": ("at-start", None, None)}  # removed after the node started with it


def _by_remote(ray, name):
    from packtool.engines.ray_env import remote
    seen = lambda name: os.environ.get(name)  # noqa: E731 (by value: a Ray worker cannot import tests/)
    return ray.get(remote(seen).remote(name))


def _by_read_task(ray, name):
    """A Ray Data read task (the caches' and the writer's datasources), given `task_options()`."""
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    from packtool.engines.ray_env import task_options

    class One(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, **kw):
            import pyarrow as pa
            meta = BlockMetadata(num_rows=1, size_bytes=None, input_files=None, exec_stats=None)
            return [ReadTask(lambda: [pa.table({"v": [os.environ.get(name)]})], meta)]

    ds = ray.data.read_datasource(One(), override_num_blocks=1, ray_remote_args=task_options())
    return ds.take_all()[0]["v"]


def _by_map_batches(ray, name):
    """A Ray Data map task (tokenize, write a part, route, write a shard), given `task_options()`."""
    import pyarrow as pa
    import ray.data

    from packtool.engines.ray_env import task_options
    seen = lambda b: pa.table({"v": [os.environ.get(name)] * b.num_rows})  # noqa: E731
    ds = ray.data.from_items([{"x": 0}]).map_batches(seen, batch_format="pyarrow", **task_options())
    return ds.take_all()[0]["v"]


SUBMITS = {"ray_env.remote": _by_remote, "read task": _by_read_task, "map_batches": _by_map_batches}


@pytest.mark.parametrize("submit", sorted(SUBMITS))
@pytest.mark.parametrize("name", [MARK, OTHER])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_task_sees_the_drivers_environment_as_submitted(local_ray, monkeypatch, change, name, submit):
    """A removed variable is absent in the task, as in the driver (not "", which an SDK reads as
    a value: an empty endpoint, region or token)."""
    ray, ask = local_ray, SUBMITS[submit]
    old, new, got = CHANGES[change]
    tag = uuid.uuid4().hex  # a value the node's start could not hold
    old, new, got = (old and f"{old}-{tag}"), (new and f"{new}-{tag}"), (got and f"{got}-{tag}")
    if change == "removed":
        name, old = name + AT_START, os.environ[name + AT_START]
    if old is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, old)
    assert ask(ray, name) == old
    if new is None:
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, new)
    assert ask(ray, name) == got
    monkeypatch.undo()  # and back: the next task sees the node's start again
    assert ask(ray, name) == os.environ.get(name)


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
