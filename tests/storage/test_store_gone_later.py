"""A store that goes away after a reader's first request (issue 23, stop 38's "Left" 1): only the
manifest's request named the argument that gave the URI; a later one (a shard's stat, checksum,
footer or row group) said "the store cannot be reached" without it, called a shard the store no
longer served "truncated or corrupt" (verify) or "cannot be decoded" (the reader), or listed
every shard of a deleted bucket as missing from an output. Every consumer that reads shards from a
store (verify, inspect, the standalone reader, packtool.hf, the Megatron dataset, train), each way
the store can go (the endpoint stopped, the bucket deleted, the object deleted) after the manifest
was read, and after the open checks for the readers that hand rows out later: one line, packtool's
own error type, naming the argument and the location.

Each case has its own moto server on 127.0.0.1 (a stopped one cannot start again); a stopped
endpoint costs Arrow's SDK retries (a few seconds) per case."""
from __future__ import annotations

import logging
import os
import socket

import pytest
from conftest import GPT2, PEPS, S3_ENV

import packtool
from packtool.errors import PacktoolError

moto_server = pytest.importorskip("moto.server", reason="moto[server] not installed (pip install 'packtool[test]')")
FIX = "AWS_ENDPOINT_URL"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A small local output (several shards): its files go up to each case's bucket."""
    from packtool.align import Alignment
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    d = tmp_path_factory.mktemp("packed")
    packtool.pack([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
                  TokenizeConfig(tokenizer=GPT2), output=str(d / "out"), cache_dir=str(d / "cache"),
                  shard_tokens=20_000)
    return d / "out"


class Store:
    """A moto server of this case alone, holding the output under s3://bkt/out."""

    def __init__(self, packed, monkeypatch):
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        self.up = True
        for k, v in {**S3_ENV, "AWS_ENDPOINT_URL": self.url}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        import boto3
        self.s3 = boto3.client("s3", endpoint_url=self.url)
        self.s3.create_bucket(Bucket="bkt")
        for name in os.listdir(packed):
            self.s3.upload_file(str(packed / name), "bkt", f"out/{name}")

    def keys(self) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects(Bucket="bkt").get("Contents", [])]

    def stop(self):
        self.server.stop()
        self.up = False

    def drop_shards(self):
        for k in self.keys():
            if k.endswith(".parquet"):
                self.s3.delete_object(Bucket="bkt", Key=k)

    def drop_bucket(self):
        for k in self.keys():
            self.s3.delete_object(Bucket="bkt", Key=k)
        self.s3.delete_bucket(Bucket="bkt")


@pytest.fixture
def store(packed, monkeypatch):
    s = Store(packed, monkeypatch)
    yield s
    if s.up:
        s.stop()


URI = "s3://bkt/out"


def _reader(uri):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(uri)
    return SlabReader(m, SlabIndex.build(m))


def _megatron(uri):
    from packtool.megatron.dataset import PackedSlabDataset
    return PackedSlabDataset(uri)


def _train(uri):
    from packtool.megatron.loop import TrainConfig, train
    return train(TrainConfig(data_dir=uri, device="cpu", steps=1))


# consumer -> (the argument it names, open the output, hand out a row of what was opened)
CONSUMERS = {
    "verify": ("directory", lambda u: packtool.verify(u, workers=1), None),
    "inspect": ("directory", packtool.inspect, None),
    "reader": ("path", _reader, lambda r: r.row(len(r.index) - 1)),
    "hf.SlabDataset": ("path", lambda u: __import__("packtool.hf", fromlist=["x"]).SlabDataset(u), lambda d: d[-1]),
    "megatron": ("path", _megatron, lambda d: next(d.steps())),
    "train": ("data_dir", _train, None),
}
HOW = {  # how the store goes -> what the line says
    "stopped": "names a store that cannot be reached (no answer",
    "bucket deleted": "names an output whose bucket bkt ",  # "no longer exists", or at a 2nd manifest read "does not exist"
    "shards deleted": "listed in the manifest that {name} names but missing",
}


def _after_manifest(monkeypatch, act):
    """`act` once, right after a reader's first manifest request returned."""
    import packtool.slabs.format as fmt
    orig, done = fmt.store_manifest_bytes, []

    def read(loc):
        data = orig(loc)
        if not done:
            done.append(act())
        return data
    monkeypatch.setattr(fmt, "store_manifest_bytes", read)


def _said(e: PacktoolError, name: str, how: str) -> None:
    msg = str(e)
    assert HOW[how].format(name=name) in msg and "\n" not in msg, msg
    assert msg.startswith(URI + "/") or f"{name} names" in msg, msg  # the location, and the argument
    if how == "stopped":
        assert f"{name} names a store" in msg and FIX in msg, msg
    assert getattr(e, "flag", None) is None  # a library call: no flag


CASES = [(c, h) for c in CONSUMERS for h in HOW if not (c == "verify" and h == "shards deleted")]


@pytest.mark.parametrize("consumer,how", CASES, ids=[f"{c}-{h}" for c, h in CASES])
def test_a_store_gone_after_the_manifest_is_one_line_naming_the_argument(store, monkeypatch, consumer, how):
    name, open_, _ = CONSUMERS[consumer]
    _after_manifest(monkeypatch, {"stopped": store.stop, "bucket deleted": store.drop_bucket,
                                  "shards deleted": store.drop_shards}[how])
    with pytest.raises(PacktoolError) as e:
        open_(URI)
    _said(e.value, name, how)


def test_verify_reports_shards_deleted_after_its_manifest_as_missing_from_the_directory(store, monkeypatch):
    """verify's answer to a deleted shard is a finding of its report, naming the directory."""
    _after_manifest(monkeypatch, store.drop_shards)
    rep = packtool.verify(URI, workers=1)
    assert not rep.ok and set(rep.counts) == {"shard_missing"}, rep
    assert all(f"missing from {URI}" in p.message for p in rep.problems)


LATER = [c for c, (_, _, row) in CONSUMERS.items() if row is not None]


@pytest.mark.parametrize("consumer", LATER)
@pytest.mark.parametrize("how", ["stopped", "bucket deleted"])
def test_a_store_gone_after_the_open_checks_is_one_line_naming_the_argument_at_the_row(store, consumer, how):
    """The readers that hand rows out later read (and hash) a shard at its first row: the store
    gone by then, mid-read of an Arrow file already opened for the open checks."""
    name, open_, row = CONSUMERS[consumer]
    opened = open_(URI)
    {"stopped": store.stop, "bucket deleted": store.drop_bucket}[how]()
    with pytest.raises(PacktoolError) as e:
        row(opened)
    _said(e.value, name, how)


CLI = {"verify": ("DIR", ["verify", URI]), "inspect": ("DIR", ["inspect", URI]),
       "train": ("DATA_DIR", ["train", URI, "--device", "cpu", "--steps", "1"])}


@pytest.mark.parametrize("command", CLI)
def test_the_command_line_names_its_argument_for_a_bucket_deleted_after_the_manifest(store, monkeypatch, capsys,
                                                                                     command):
    """The library's argument is spelled as the command line's (DIR, DATA_DIR): one error line."""
    from cli_main import run_main
    said, argv = CLI[command]
    _after_manifest(monkeypatch, store.drop_bucket)
    assert run_main(monkeypatch, argv) == [2]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and f"{said} names an output whose bucket bkt " in err[0], err


def test_verify_workers_name_dir_for_a_store_stopped_after_the_open_checks(store, monkeypatch, capsys):
    """verify's worker processes read the shards: the store stopped by then is the command line's
    line (DIR), as in the parent, not the library's spelling the worker would have on its own."""
    from cli_main import run_main

    import packtool.verification.run as run
    pieces = run._pieces

    def then_stop(*a):
        out = pieces(*a)
        store.stop()
        return out
    monkeypatch.setattr(run, "_pieces", then_stop)
    assert run_main(monkeypatch, ["verify", URI, "--workers", "2"]) == [2]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "DIR names a store that cannot be reached (no answer" in err[0], err
