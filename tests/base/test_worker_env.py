"""L1 (stop 46): a pooled call runs under the caller's environment as it is when the call is
submitted. The process pools are kept for the process's life and their forkserver holds the
environment of its start: a library user who set AWS_ENDPOINT_URL (or AWS_*, PACKTOOL_*, HF_*)
after a first `packtool.verify` got workers without it, which reached real AWS.

The class: every kind of change after the pool started (a variable set, changed, removed), at
the owner (packtool.workers), and every entry point that runs on the pool (verify: library, CLI,
CLI --json) against a store whose endpoint only the new environment names."""
from __future__ import annotations

import json
import os
import pathlib
import re
import uuid

import pytest
from slab_support import write_pack
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.workers import process_pool, submit_all

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARK = "PACKTOOL_TEST_WORKER_ENV"


def seen(name: str) -> str | None:  # run in a worker process: importable by name
    return os.environ.get(name)


def _started_pool():
    """The pool verify uses, its workers launched before the change below."""
    pool = process_pool(2)
    assert [f.result() for f in submit_all(pool, seen, ["HOME", "HOME"])]
    return pool


CHANGES = {"set after": (None, "value"), "changed": ("before", "after"), "removed": ("before", None)}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_pooled_call_sees_the_environment_as_submitted(monkeypatch, change):
    old, new = CHANGES[change]
    tag = uuid.uuid4().hex  # a value no earlier start of this process's pool could hold
    old, new = (old and f"{old}-{tag}"), (new and f"{new}-{tag}")
    if old is None:
        monkeypatch.delenv(MARK, raising=False)
    else:
        monkeypatch.setenv(MARK, old)
    pool = _started_pool()
    assert [f.result() for f in submit_all(pool, seen, [MARK] * 4)] == [old] * 4
    if new is None:
        monkeypatch.delenv(MARK)
    else:
        monkeypatch.setenv(MARK, new)
    assert [f.result() for f in submit_all(pool, seen, [MARK] * 4)] == [new] * 4


def test_verify_is_the_pools_only_user():
    """The entry points below are every user of the pool: a new one joins ENTRIES."""
    users = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packtool").rglob("*.py")
                   if p.name != "workers.py" and re.search(r"\bprocess_pool\(", p.read_text()))
    assert users == ["packtool/verification/run.py"], users


def _library(out):
    rep = packtool.verify(out, workers=2)
    return rep.ok, str(rep.problems)


def _cli(out):
    r = CliRunner().invoke(app, ["verify", out, "--workers", "2"])
    return r.exit_code == 0, r.output


def _cli_json(out):
    r = CliRunner().invoke(app, ["verify", out, "--workers", "2", "--json"])
    return r.exit_code == 0 and json.loads(r.stdout)["ok"], r.output


ENTRIES = {"library": _library, "cli": _cli, "cli --json": _cli_json}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_verify_on_the_pool_reaches_the_store_the_environment_names_now(tmp_path, monkeypatch, fresh_endpoint,
                                                                         entry):
    import boto3
    from conftest import S3_ENV
    local, _ = write_pack(str(tmp_path), [40, 70, 33, 90, 61, 17] * 20, Alignment(capacity=128),
                          shard_tokens=512, group_tokens=128)
    assert len([n for n in os.listdir(local) if n.endswith(".parquet")]) >= 2  # more than one piece: the pool
    assert packtool.verify(local, workers=2).ok  # a first call: the pool is up, without the endpoint
    for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": fresh_endpoint}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"worker-env-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=fresh_endpoint)
    client.create_bucket(Bucket=bucket)
    for n in os.listdir(local):
        client.upload_file(os.path.join(local, n), bucket, f"out/{n}")
    ok, said = ENTRIES[entry](f"s3://{bucket}/out")
    assert ok, said
