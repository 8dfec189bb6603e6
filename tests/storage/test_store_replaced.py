"""verify and inspect of an object-store output that a later pack replaces while they read it
(S45A-13, the store side of S41-2/S45B-3): its shards deleted and a new manifest committed
between the manifest's read and the shards'. One line saying the output changed while the command
read it and to run it again (packtool.output.unchanged: on a store, the manifest's bytes), never
pyarrow's bare "Path does not exist 'bkt/out/slabs-00000.parquet'" nor a problem list; an
untouched store output verifies as before (no extra claim)."""
from __future__ import annotations

import os

import pytest
from replaced_support import smaller, two_outputs
from typer.testing import CliRunner

import packtool.slabs.reader as reader
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.verification import run as verify_run

# command -> (the module and function that reads the shards, the library call)
COMMANDS = {"verify": (verify_run, "_run", lambda uri: verify_run.verify(uri, workers=1)),
            "inspect": (reader, "check_rows", lambda uri: __import__("packtool").inspect(uri))}


def _client():
    import boto3
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def _put(folder, uri):
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    for name in os.listdir(folder):
        _client().upload_file(os.path.join(folder, name), bucket, f"{prefix}/{name}")


def _replace(uri, folder):
    """A later pack's commit as the store sees it: the old shards gone, the new output's in place."""
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    for o in _client().list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", []):
        _client().delete_object(Bucket=bucket, Key=o["Key"])
    _put(folder, uri)


@pytest.fixture
def armed(s3, tmp_path, monkeypatch):
    a, b = two_outputs(tmp_path)
    uri = f"{s3}/out"
    _put(a, uri)

    def arm(command):
        module, name, _ = COMMANDS[command]
        real = getattr(module, name)

        def reads(*args, **kw):
            _replace(uri, smaller(b))
            return real(*args, **kw)
        monkeypatch.setattr(module, name, reads)
        return uri
    return arm


@pytest.mark.parametrize("command", list(COMMANDS))
def test_library_says_replaced(armed, command):
    uri = armed(command)
    with pytest.raises(PacktoolInputError) as e:
        COMMANDS[command][2](uri)
    msg = str(e.value)
    assert "\n" not in msg and f"changed while {command} read it" in msg and f"run {command} again" in msg, msg
    assert e.value.path == uri and msg.count(uri) == 1, msg


@pytest.mark.parametrize("command", list(COMMANDS))
def test_cli_one_line_exit_2(armed, command):
    uri = armed(command)
    r = CliRunner().invoke(app, [command, uri] + (["--workers", "1"] if command == "verify" else []))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    assert f"changed while {command} read it" in errors[0] and "does not exist" not in errors[0], errors


def test_an_untouched_store_output_verifies(s3, tmp_path):
    a, _ = two_outputs(tmp_path)
    _put(a, f"{s3}/out")
    assert verify_run.verify(f"{s3}/out", workers=1).ok
