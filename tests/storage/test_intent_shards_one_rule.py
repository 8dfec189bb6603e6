"""S45B-7: the shards an object-store run's intent names (a pack in flight, or one killed before
it cleaned up) are one rule for every reader of the prefix. Every consumer reads through the
manifest and takes them for a run's, not strays: packtool's readers, inspect and FORMAT.md's
standalone reader alike. `verify` notes them while a run holds the lease, and fails them as
`shard_extra` (exit 1) once none does: plain readers of the prefix read them as slabs until a
pack removes them (for good when the intent holds no proof). Parametrized over what the intent
names (a new shard with and without its proof, a replaced one) and the lease (live, dead, none)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import GPT2, PEPS, ROOT
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import PENDING_PREFIX
from packtool.storage import LEASE, locate
from packtool.tokenize.checksum import SHARD_CHECKSUM, file_digest
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

RUN = "aaaaaaaaaaaa"
SHARDS = {"new_proved": f"slabs-{RUN}-00000.parquet", "new_unproved": f"slabs-{RUN}-00000.parquet",
          "old_replaced": "slabs-00007.parquet"}
LEASES = {"live": lambda: time.time(), "dead": lambda: 0, "none": None}


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("intent")
    out = str(root / "out")
    pack([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(tokenizer=GPT2), output=out, cache_dir=str(root / "cache"), shard_tokens=20_000)
    return out


def _output(s3, local, named, lease) -> tuple[str, str]:
    """The store output, with a run's intent naming one shard (a copy of shard 0) and the lease."""
    out, loc = f"{s3}/out", locate(f"{s3}/out")
    for n in os.listdir(local):
        loc.join(n).write_bytes(open(os.path.join(local, n), "rb").read())
    shard = SHARDS[named]
    loc.join(shard).write_bytes(loc.join("slabs-00000.parquet").read_bytes())
    proof = {"bytes": len(loc.join(shard).read_bytes()), SHARD_CHECKSUM: file_digest(f"{out}/{shard}", SHARD_CHECKSUM)}
    rec = ({"new": [], "old": [shard], "proofs": {shard: proof}} if named == "old_replaced" else
           {"new": [shard], "old": [], "proofs": {shard: proof} if named == "new_proved" else {}})
    loc.join(f"{PENDING_PREFIX}{RUN}.json").write_bytes(json.dumps(rec).encode())
    if LEASES[lease] is not None:
        loc.join(LEASE).write_bytes(json.dumps({"token": "t", "owner": "pid 1 on another-host",
                                                "renewed": LEASES[lease]()}).encode())
    return out, shard


def _standalone(out, tmp_path):
    from slab_support import run_format_reader
    return run_format_reader(out, tmp_path)


@pytest.mark.parametrize("lease", sorted(LEASES))
@pytest.mark.parametrize("named", sorted(SHARDS))
def test_every_reader_takes_a_runs_shards_and_verify_fails_a_dead_runs(s3, local, tmp_path, named, lease):
    out, shard = _output(s3, local, named, lease)
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    from packtool.megatron.dataset import PackedSlabDataset
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex
    n = len(SlabIndex.build(SlabManifest.read(local)))
    assert len(SlabIndex.build(SlabManifest.read(out))) == n
    assert len(SlabDataset(out)) == n and PackedSlabDataset(out).steps_per_epoch() > 0
    r = CliRunner().invoke(app, ["inspect", out])
    assert r.exit_code == 0, r.output
    p = _standalone(out, tmp_path)
    assert p.returncode == 0, p.stderr[-600:]
    rep = verify(out, workers=1)
    # in-process: a pool of workers kept from an earlier test of this process holds the environment of
    # its start, without this test's AWS_ENDPOINT_URL (the closing note of stop 45: workers and env)
    v = CliRunner().invoke(app, ["verify", out, "--workers", "1"])
    if lease == "live":  # a run in flight: its shards are no part of the output, said
        assert rep.ok and any("packtool run writing to" in x for x in rep.notes), rep
        assert v.exit_code == 0, v.output
    else:  # a dead run's: plain readers read them as slabs, for good without a proof
        assert [(p.check, p.shard) for p in rep.problems] == [("shard_extra", shard)], rep.problems
        assert "no longer running" in str(rep.problems[0])
        assert v.exit_code == 1 and shard in v.output, v.output


@pytest.mark.parametrize("form", ["not_json", "extra_key", "foreign_run", "bad_proof", "not_a_shard_name"])
def test_an_object_at_an_intents_name_in_another_form_excepts_nothing(s3, local, tmp_path, form):
    """Not packtool's intent (slabs.names.parse_intent): the shard it names is a stray for every
    reader, the standalone one included (its transcription of the rule)."""
    out, shard = _output(s3, local, "new_proved", "live")
    bodies = {"not_json": b"{", "extra_key": json.dumps({"new": [shard], "old": [], "x": 1}).encode(),
              "foreign_run": json.dumps({"new": ["slabs-bbbbbbbbbbbb-00000.parquet", shard], "old": []}).encode(),
              "bad_proof": json.dumps({"new": [shard], "old": [], "proofs": {shard: {"bytes": -1, "x": "y"}}}).encode(),
              "not_a_shard_name": json.dumps({"new": [shard, "x.parquet"], "old": []}).encode()}
    locate(out).join(f"{PENDING_PREFIX}{RUN}.json").write_bytes(bodies[form])
    assert [p.check for p in verify(out, workers=1).problems] == ["shard_extra"]
    from packtool.errors import PacktoolError
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex
    with pytest.raises(PacktoolError, match=re.escape(shard)):
        SlabIndex.build(SlabManifest.read(out))
    p = _standalone(out, tmp_path)
    assert p.returncode != 0 and shard in p.stderr, p.stderr[-600:]


def test_a_local_folder_mirroring_such_a_prefix_has_strays(local, tmp_path):
    """A local folder has no lease and no run in flight: an intent there excepts nothing."""
    out = str(tmp_path / "mirror")
    shutil.copytree(local, out)
    shard = SHARDS["new_unproved"]
    shutil.copyfile(os.path.join(out, "slabs-00000.parquet"), os.path.join(out, shard))
    with open(os.path.join(out, f"{PENDING_PREFIX}{RUN}.json"), "w") as f:
        json.dump({"new": [shard], "old": [], "proofs": {}}, f)
    assert [p.check for p in verify(out, workers=1).problems] == ["shard_extra"]
    assert _standalone(out, tmp_path).returncode != 0
