"""A manifest may list only shard names packtool writes (packtool.slabs.names: slabs-NNNNN.parquet,
or an object-store run's slabs-RUN-NNNNN.parquet). A shard renamed to a name plain Parquet readers
skip (`.x`, `_x`) or the documented `*.parquet` globs miss, with the manifest edited to match, is
refused by every consumer through the one check in slabs.format.shard_names: verify exit 1 (a
manifest problem), the others exit 2 / PacktoolFormatError, one line."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2, PEPS
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolFormatError
from packtool.slabs.names import MANIFEST, is_output_shard_name

runner = CliRunner()
BAD = [".slabs-00000.parquet", "_slabs-00000.parquet", "slabs-00000", "data.txt", ".manifest.json.parquet",
       "slabs-0.parquet", "slabs-00000.parquet.bak", "Slabs-00000.parquet", "slabs-XYZ-00000.parquet"]
WHY = "not a shard name packtool writes"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("sn")
    r = runner.invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "-o", str(root / "out"), "-C", "4096",
                            "--overflow", "split", "--no-progress", "--cache-dir", str(root / "cache")])
    assert r.exit_code == 0, r.stderr
    return root / "out"


@pytest.fixture(params=BAD)
def renamed(request, packed, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(packed, d)
    m = json.loads((d / MANIFEST).read_text())
    os.rename(d / m["shards"][0]["file"], d / request.param)  # the bytes and checksum stay: no re-sign needed
    m["shards"][0]["file"] = request.param
    (d / MANIFEST).write_text(json.dumps(m))
    return d


def _cli(args):
    r = runner.invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def _lib(fn):
    try:
        fn()
    except PacktoolFormatError as e:
        return 2, "", f"error: {e}\n"
    return 0, "", ""


def _slab_dataset(d):
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    return _lib(lambda: SlabDataset(str(d)))


def _megatron(d):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    return _lib(lambda: PackedSlabDataset(str(d)))


def _slab_index(d):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex
    return _lib(lambda: SlabIndex.build(SlabManifest.read(str(d))))


CONSUMERS = {
    "inspect": lambda d: _cli(["inspect", str(d)]),
    "train": lambda d: _cli(["train", str(d), "--device", "cpu", "--steps", "1"]),
    "SlabIndex": _slab_index,
    "SlabDataset": _slab_dataset,
    "PackedSlabDataset": _megatron,
}


def test_verify_refuses(renamed):
    r = runner.invoke(app, ["verify", str(renamed), "--json"])
    assert r.exit_code == 1, r.stdout
    assert WHY in json.loads(r.stdout)["problems"][0]["message"]


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_consumers_refuse(renamed, consumer):
    code, _, err = CONSUMERS[consumer](renamed)
    assert code == 2 and WHY in err, (consumer, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_written_names_follow_the_rule(packed):
    from packtool.slabs.format import SlabManifest
    sm = SlabManifest.read(str(packed))
    assert sm.shards and all(is_output_shard_name(n) for n in sm.shards)
    assert is_output_shard_name("slabs-0123456789ab-00003.parquet")  # an object-store run's name
