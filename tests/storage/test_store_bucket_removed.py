"""A bucket deleted while packtool writes to it (S41-8): it was checked before any work, so
every later request that meets NoSuchBucket says the bucket no longer exists and to create it
or give another location, never "check the store's credentials chain and endpoint" (the
credentials were fine). Every kind of store request on the write path (the output's lease, an
object written), and `pack -o s3://` with the bucket deleted
before and after the lease: one line, exit 2, no traceback, nothing left."""
from __future__ import annotations

import pytest
from conftest import GPT2, PEPS
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolError

pytest.importorskip("moto.server", reason="moto[server] not installed (pip install 'packtool[test]')")


def _drop(uri: str) -> None:
    import boto3
    b = boto3.resource("s3").Bucket(uri.split("://", 1)[1])
    b.objects.all().delete()
    b.delete()


def _lease(uri):
    from packtool.storage import locate, take_lease
    take_lease(locate(uri + "/packed", name="output"))


def _write(uri):
    from packtool.storage import locate
    locate(uri + "/packed/.packtool-pending-x.json", name="output").write_bytes(b"{}")


REQUESTS = {"lease": _lease, "write an object": _write}


@pytest.mark.parametrize("what", sorted(REQUESTS))
def test_each_request_says_the_bucket_is_gone(s3, what):
    _drop(s3)
    with pytest.raises(PacktoolError) as e:
        REQUESTS[what](s3)
    msg = str(e.value)
    bucket = s3.split("://", 1)[1]
    assert f"bucket {bucket} does not exist" in msg and "credentials" not in msg and "\n" not in msg, msg
    assert "output" in msg, msg


@pytest.mark.parametrize("moment", ["before the lease", "after the lease"])
def test_pack_to_a_bucket_deleted_during_the_run(s3, monkeypatch, tmp_path, moment):
    import packtool.output.store as store
    real = store.take_lease

    def take(prefix):
        if moment == "before the lease":
            _drop(s3)
            return real(prefix)
        lease = real(prefix)
        lease.release()
        _drop(s3)
        return lease
    monkeypatch.setattr(store, "take_lease", take)
    r = CliRunner().invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "-C", "1024", "--overflow", "split", "--no-progress", "-o",
                                 s3 + "/packed", "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2, r.output
    assert "does not exist" in r.output and "credentials" not in r.output and "Traceback" not in r.output, r.output
