"""RA-13: e0b5186 named --cache-dir / cache_dir= (StorageCacheError, kind cache) for a store cache's
first request only; its later requests (pull, commit, push, sweep, a foreign-object check) made
Locations that knew no argument: a bucket deleted mid-run was StorageError, kind input, naming no
flag, and a library caller's `except PacktoolCacheError` missed it. Every request of the store
cache modules (tokenize.store_cache, tokenize.store_push) now names the cache's argument."""
from __future__ import annotations

import os

import pytest

from packtool.errors import PacktoolCacheError


def _entry(final="0123abcd"):
    return f"/tmp/mirror/{final}"


# each later request of a store cache, as the run makes it (the store root, a local mirror path)
REQUESTS = {
    "pull_entry": lambda root: __import__("packtool.tokenize.store_cache", fromlist=["x"]).pull_entry(root, _entry("not-pulled-yet")),
    "commit_entry": lambda root: __import__("packtool.tokenize.store_cache", fromlist=["x"]).commit_entry(
        f"{root}/0123abcd", {"format": "x"}),
    "push_entry": lambda root: __import__("packtool.tokenize.store_cache", fromlist=["x"]).push_entry(root, _entry()),
    "sweep_pushes": lambda root: __import__("packtool.tokenize.store_push", fromlist=["x"]).sweep_pushes(root),
    "refuse_foreign_objects": lambda root: __import__("packtool.tokenize.store_cache", fromlist=["x"])
    .refuse_foreign_objects(f"{root}/0123abcd", "damaged"),
}


@pytest.fixture
def no_store(monkeypatch):
    """AWS's standard chain pointing at a port nothing listens on (the store stopped mid-run)."""
    from conftest import closed_store
    closed_store(monkeypatch)


@pytest.mark.parametrize("request_", list(REQUESTS))
@pytest.mark.parametrize("how", ["bucket deleted", "store stopped"])
def test_a_store_cache_gone_mid_run_names_the_cache_argument(how, request_, request):
    os.makedirs(_entry(), exist_ok=True)
    if how == "bucket deleted":
        import boto3
        s3 = request.getfixturevalue("s3")
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).delete_bucket(Bucket=s3[len("s3://"):])
        if request_ in ("pull_entry", "sweep_pushes", "refuse_foreign_objects"):  # a read of nothing: no entry
            REQUESTS[request_](f"{s3}/cache")  # no push, no foreign object; a later write says it
            return
    else:
        request.getfixturevalue("no_store")
        s3 = "s3://bkt"
    with pytest.raises(PacktoolCacheError) as e:
        REQUESTS[request_](f"{s3}/cache")
    msg = str(e.value)
    assert "cache_dir" in msg and "\n" not in msg and e.value.kind == "cache", (type(e.value).__name__, msg)
