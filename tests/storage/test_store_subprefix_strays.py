"""An object below a sub-prefix of a store output is what an extra file or folder in a local output
is (S44-5): `pq.read_table(prefix)` and `pyarrow.dataset` read it as data, so verify fails the output
(`shard_extra`, exit 1) and every consumer refuses it, as locally and as FORMAT.md's standalone reader
does. A sub-prefix whose name a plain reader skips (`.x/`, `_x/`) is no stray, on either kind."""
from __future__ import annotations

import os
import re
import shutil

import pytest
from conftest import GPT2, PEPS
from slab_support import run_format_reader
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import MANIFEST
from packtool.storage import locate
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

SHARD = "slabs-00000.parquet"
# where the copy of a shard goes, below the output: a sub-prefix, two deep, and a bare "folder"
# marker (the 0-byte `sub/` object some tools write for a folder)
EXTRAS = {"sub": "sub/" + SHARD, "deep": "a/b/" + SHARD, "marker": "sub/"}


def _pack(out, cache):
    pack([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=GPT2), output=out, cache_dir=cache)


def _put(out: str, key: str) -> None:
    """An object at `out/key`: a copy of the output's first shard, or a 0-byte folder marker."""
    if out.startswith("s3://"):
        import boto3
        bucket, prefix = out[5:].split("/", 1)
        body = b"" if key.endswith("/") else locate(f"{out}/{SHARD}").read_bytes()
        boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)
    elif key.endswith("/"):
        os.makedirs(os.path.join(out, key), exist_ok=True)
    else:
        os.makedirs(os.path.dirname(os.path.join(out, key)), exist_ok=True)
        shutil.copyfile(os.path.join(out, SHARD), os.path.join(out, key))


@pytest.fixture(params=["store", "local"])
def damaged(request, tmp_path, cache_dir):
    """(output, extra's first path part) for each kind: a clean pack with one extra below it."""
    def make(extra: str) -> str:
        out = f"{request.getfixturevalue('s3')}/out" if request.param == "store" else str(tmp_path / "out")
        _pack(out, cache_dir)
        _put(out, EXTRAS[extra])
        return out
    return make


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_verify_fails_an_output_with_an_object_below_it(damaged, extra):
    out = damaged(extra)
    rep = verify(out, workers=1)
    assert not rep.ok and "shard_extra" in str(rep), rep
    r = CliRunner().invoke(app, ["verify", out])
    assert r.exit_code == 1 and EXTRAS[extra].split("/")[0] in r.output, r.output


def _hf(out):
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    return SlabDataset(out)


def _reader(out):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex
    return SlabIndex.build(SlabManifest.read(out))


def _megatron(out):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset as MegatronSlabs
    return MegatronSlabs(out)


@pytest.mark.parametrize("consumer", [_hf, _reader, _megatron])
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_library_consumer_refuses_it_naming_the_extra(damaged, consumer, extra):
    out = damaged(extra)
    with pytest.raises(PacktoolError, match=re.escape(EXTRAS[extra].split("/")[0])):
        consumer(out)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_inspect_and_the_standalone_reader_refuse_it(damaged, extra, tmp_path):
    out = damaged(extra)
    r = CliRunner().invoke(app, ["inspect", out])
    assert r.exit_code == 2 and EXTRAS[extra].split("/")[0] in r.output, r.output
    p = run_format_reader(out, tmp_path, SHARD)
    assert p.returncode != 0, p.stdout


@pytest.mark.parametrize("hidden", [".notes/x.parquet", "_tmp/x.parquet"])
def test_a_sub_prefix_plain_readers_skip_is_no_stray(s3, cache_dir, hidden):
    out = f"{s3}/out"
    _pack(out, cache_dir)
    _put(out, hidden)
    assert verify(out, workers=1).ok
    assert MANIFEST in locate(out).entries() and hidden.split("/")[0] in locate(out).entries()
