"""A manifest shard name that leaves the output folder is refused by every reader, through
the one check in packtool.slabs.format.shard_names: verify, inspect, the slab reader, the
Megatron dataset class and `train`. The file outside is never opened."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2, PEPS
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolFormatError
from packtool.slabs.format import SlabManifest, shard_names
from packtool.slabs.names import MANIFEST

runner = CliRunner()
BAD_NAMES = ["../secret/x.parquet", "/etc/passwd", "sub/slabs-00000.parquet", "..", ".", "", "a\\b.parquet", 7]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp")
    r = runner.invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "-o", str(root / "out"), "-C", "4096",
                            "--overflow", "split", "--no-progress", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.stderr
    return root / "out"


@pytest.fixture(params=BAD_NAMES, ids=repr)
def escaped(request, packed, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(packed, d)
    secret = tmp_path / "secret"
    secret.mkdir()
    first = json.loads((d / MANIFEST).read_text())["shards"][0]["file"]
    shutil.copy(d / first, secret / "x.parquet")  # a readable shard outside: must not be read
    m = json.loads((d / MANIFEST).read_text())
    m["shards"][0]["file"] = request.param
    (d / MANIFEST).write_text(json.dumps(m))
    return d


def test_shard_names_refuses(escaped):
    m = json.loads((escaped / MANIFEST).read_text())
    with pytest.raises(PacktoolFormatError, match="not a plain file name"):
        shard_names(m)
    with pytest.raises(PacktoolFormatError, match="not a plain file name"):
        SlabManifest.read(str(escaped))


def test_verify_inspect_train_refuse(escaped):
    r = runner.invoke(app, ["verify", str(escaped), "--json"])
    assert r.exit_code == 1 and "not a plain file name" in json.loads(r.stdout)["problems"][0]["message"]
    for args in (["inspect", str(escaped)], ["train", str(escaped), "--device", "cpu", "--steps", "1"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "not a plain file name" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_reader_and_dataset_refuse(escaped):
    from packtool.slabs.reader import SlabIndex
    with pytest.raises(PacktoolFormatError, match="not a plain file name"):
        SlabIndex.build(SlabManifest.read(str(escaped)))
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    with pytest.raises(PacktoolFormatError, match="not a plain file name"):
        PackedSlabDataset(str(escaped))


def test_plain_names_read(packed):
    sm = SlabManifest.read(str(packed))
    assert all(os.path.dirname(sm.shard_path(i)) == str(packed) for i in range(len(sm.shards)))
