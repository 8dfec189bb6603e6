"""`pack -o s3://...` through the commit protocol (packtool.output.store) against the in-process
S3 endpoint: the bytes of a local pack, read back by verify / inspect / the slab reader,
--overwrite under new names, one writer per prefix, a dead run cleaned, nothing secret written."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from conftest import GPT2, GSM8K, PEPS, S3_ENV
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolOutputError
from packtool.output.store import PENDING_PREFIX, StoreOutputExistsError, claim_store
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.format import SlabManifest
from packtool.slabs.names import MANIFEST
from packtool.slabs.reader import SlabIndex, SlabReader
from packtool.storage import LEASE, locate
from packtool.tokenize.checksum import file_digest
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify

ARGS = ([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))


def _pack(out, cache, **kw):
    return pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, **kw)


def _objects(uri: str) -> dict[str, bytes]:
    loc = locate(uri)
    return {n: loc.join(n).read_bytes() for n in loc.names()}


def test_a_store_output_has_the_bytes_of_a_local_one_and_reads_back(s3, tmp_path, cache_dir):
    local, remote = str(tmp_path / "local"), f"{s3}/packs/run1"
    _pack(local, cache_dir)
    res = _pack(remote, cache_dir)
    got = _objects(remote)
    assert len(res.shards) > 1 and sorted(got) == sorted(os.listdir(local))  # no lease, no intent left
    for name, data in got.items():
        assert data == open(os.path.join(local, name), "rb").read(), name
    rep = verify(remote, workers=1)
    assert rep.ok, rep
    from dataclasses import asdict

    from packtool.inspection.packed import inspect_packed
    ia, ib = (asdict(inspect_packed(p)) for p in (local, remote))
    assert ib.pop("path") == remote and ia.pop("path") == local and ia.pop("seconds") >= 0 <= ib.pop("seconds")
    assert str(ia) == str(ib)
    a, b = SlabManifest.read(local), SlabManifest.read(remote)
    ra, rb = SlabReader(a, SlabIndex.build(a)), SlabReader(b, SlabIndex.build(b))
    for i in (0, len(ra.index) - 1):
        assert np.array_equal(ra.row(i).input_ids, rb.row(i).input_ids)


def test_overwrite_swaps_the_manifest_and_deletes_only_the_old_shards(s3, tmp_path, cache_dir, monkeypatch):
    out = f"{s3}/o"
    first = _pack(out, cache_dir)
    with pytest.raises(StoreOutputExistsError, match="overwrite=True"):
        _pack(out, cache_dir)
    second = _pack(out, cache_dir, overwrite=True)
    old, new = {s.file for s in first.shards}, {s.file for s in second.shards}
    assert not old & new  # new names: a reader of the old manifest never meets a new shard
    names = set(locate(out).names())
    assert names == new | {MANIFEST}
    assert [s["file"] for s in json.loads(locate(out).join(MANIFEST).read_bytes())["shards"]] == \
        [s.file for s in second.shards]
    assert verify(out, workers=1).ok
    from packtool.slabs.check import check_output
    from packtool.slabs.format import FormatError
    stale = SlabManifest.read(out)  # a reader that read the manifest just before the next commit
    _pack(out, cache_dir, overwrite=True)
    with pytest.raises(FormatError, match="committed a new output .* open it again"):
        check_output(stale)
    import packtool.slabs.reader as reader  # a shard deleted after the open checks passed
    monkeypatch.setattr(reader, "check_output", lambda sm: None)
    with pytest.raises(FormatError, match="listed in the manifest that path names but missing; .* open it again"):
        SlabIndex.build(stale)
    locate(out).join("notes.txt").write_bytes(b"mine")  # not packtool's: the prefix is refused
    with pytest.raises(PacktoolOutputError, match="notes.txt"):
        _pack(out, cache_dir, overwrite=True)
    assert locate(out).join("notes.txt").read_bytes() == b"mine"


@pytest.mark.parametrize("conditional", [True, False], ids=["if-none-match", "write-read-back"])
def test_a_second_writer_fails_at_once(s3, monkeypatch, conditional):
    """Another process (and another claim in this one) is refused while the lease is held,
    with S3's conditional create and with the fallback for stores without it."""
    import subprocess
    import sys

    import packtool.storage.lease as sl
    if not conditional:
        monkeypatch.setattr(sl, "_s3_exclusive_put", lambda lock, body: None)
    out = f"{s3}/busy"
    with claim_store(out):
        with pytest.raises(PacktoolOutputError, match="another packtool pack"):
            sl.take_lease(locate(out))
        code = ("import sys; from packtool.storage import locate, take_lease\n"
                "try: take_lease(locate(sys.argv[1]))\nexcept Exception as e: print(e); sys.exit(7)")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True)
        assert r.returncode == 7 and "another packtool pack (pid" in r.stdout, r.stdout + r.stderr
        assert time.perf_counter() - t0 < 30
    assert not locate(out).join(LEASE).exists()  # released
    sl.take_lease(locate(out)).release()


def test_what_a_dead_run_left_is_cleaned_and_never_read(s3, cache_dir, monkeypatch):
    out = f"{s3}/dead"
    _pack(out, cache_dir)
    loc = locate(out)
    # a run killed mid-upload: its intent (with the size and checksum it staged) and one orphan
    # shard, and a lease nobody renews
    orphan = loc.join("slabs-0123456789ab-00000.parquet")
    orphan.write_bytes(b"a staged shard")
    proof = {"bytes": 14, "xxh3_128": file_digest(out + "/" + orphan.name, "xxh3_128")}
    loc.join(f"{PENDING_PREFIX}0123456789ab.json").write_bytes(json.dumps(
        {"new": [orphan.name], "old": [], "proofs": {orphan.name: proof}}).encode())
    loc.join(LEASE).write_bytes(json.dumps({"token": "x", "owner": "pid 1 on elsewhere", "renewed": 0}).encode())
    man = SlabManifest.read(out)  # a reader trusts the manifest only
    assert "slabs-0123456789ab-00000.parquet" not in man.shards and len(SlabIndex.build(man)) > 0
    rep = verify(out, workers=1)  # whole; a dead run's shard, which a plain Parquet reader of the prefix meets
    assert [(p.check, p.shard) for p in rep.problems] == [("shard_extra", orphan.name)], rep
    _pack(out, cache_dir, overwrite=True)
    names = loc.names()
    assert "slabs-0123456789ab-00000.parquet" not in names and not any(n.startswith(PENDING_PREFIX) for n in names)
    assert LEASE not in names and verify(out, workers=1).ok


def test_cli_to_and_from_the_store_prints_and_writes_no_secret(s3, tmp_path, cache_dir):
    out = f"{s3}/cli"
    r = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "--prompt-field", "question",
                                 "--response-field", "answer", "-o", out, "--cache-dir", cache_dir,
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    v = CliRunner().invoke(app, ["verify", out])
    i = CliRunner().invoke(app, ["inspect", out])
    assert v.exit_code == 0 and i.exit_code == 0, v.output + i.output
    assert not os.path.exists("s3:")  # the old bug: a local folder named `s3:`
    everything = r.output + v.output + i.output + "".join(d.decode(errors="replace") for d in _objects(out).values())
    for secret in (S3_ENV["AWS_SECRET_ACCESS_KEY"], S3_ENV["AWS_ACCESS_KEY_ID"]):
        assert secret not in everything


def _ray_up() -> bool:
    import sys
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


@pytest.mark.parametrize("args,pattern", [
    (["-o", "ftp://host/out"], "ftp:// is not supported"),
    (["-o", "s3://KEYID:hunter2@bucket/out"], "user:password@ is refused"),
    (["--engine", "ray", "-o", "s3://KEYID:hunter2@bucket/out"], "user:password@ is refused"),
    (["--engine", "ray", "--cache-dir", "s3://KEYID:hunter2@bucket/c", "-o", "OUT"], "user:password@ is refused"),
])
def test_what_is_not_supported_is_one_line(tmp_path, args, pattern):
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    ray_up = _ray_up()
    r = CliRunner().invoke(app, ["pack", PEPS, "--tokenizer", GPT2, "--no-progress", *args])
    assert r.exit_code == 2, r.output
    assert ray_up or not _ray_up(), "Ray was started for a run refused by its arguments"
    import re
    assert re.search(pattern, " ".join(r.output.split())), r.output
    assert "hunter2" not in r.output and not os.path.exists("s3:") and not os.path.exists("ftp:")


def test_format_md_reader_and_hf_dataset_read_a_store_output(s3, tmp_path, cache_dir):
    """FORMAT.md's standalone reader (pyarrow + numpy only) and packtool.hf take the URI."""
    from slab_support import run_format_reader
    out = f"{s3}/fmt"
    _pack(out, cache_dir)
    first = SlabManifest.read(out).shards[0]
    r = run_format_reader(out, tmp_path, first)
    assert r.returncode == 0, r.stderr
    n, loss, _ = r.stdout.split(" ", 2)
    assert int(n) > 0 and int(loss) >= 0
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    local = str(tmp_path / "local")
    _pack(local, cache_dir)
    a, b = SlabDataset(local), SlabDataset(out)
    assert len(a) == len(b) > 0
    assert all(np.array_equal(a[i]["input_ids"], b[i]["input_ids"]) for i in (0, len(a) - 1))


def test_to_hf_of_a_store_output_without_its_fsspec_package_is_one_line(s3, cache_dir, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("datasets")
    import fsspec

    from packtool.errors import PacktoolInputError
    from packtool.hf import SlabDataset
    out = f"{s3}/hf"
    _pack(out, cache_dir)
    ds = SlabDataset(out)

    def missing(scheme):
        raise ImportError(f"Install s3fs to access {scheme}")
    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(PacktoolInputError, match="streaming=True"):
        ds.to_hf()
    assert sum(1 for _ in ds.to_hf(streaming=True)) == len(ds)


@pytest.mark.parametrize("engine", ["local", "ray"])  # refused before Ray starts
@pytest.mark.parametrize("out,needle", [("raw/sub", "inside the input prefix"), ("", "holds the input"),
                                        ("cache/out", "inside the tokenized cache"), ("c", "holds the tokenized cache")])
def test_a_store_output_is_never_inside_an_input_prefix_or_the_cache(s3, tmp_path, out, needle, engine):
    """As for local folders (output.relations): a later pack of the input prefix would read
    the slabs as data; the cache's clean-up would meet them."""
    locate(f"{s3}/raw/gsm.jsonl").write_bytes(open(GSM8K, "rb").read())
    cache = f"{s3}/c/ache" if out == "c" else f"{s3}/cache"
    r = CliRunner().invoke(app, ["pack", f"{s3}/raw/", "--tokenizer", GPT2, "--prompt-field", "question",
                                 "--response-field", "answer", "-q", "-o", f"{s3}/{out}".rstrip("/"), "--cache-dir", cache,
                                 "--engine", engine])
    assert r.exit_code == 2 and needle in r.output, r.output
    assert locate(f"{s3}/raw").names() == ["gsm.jsonl"]


@pytest.mark.parametrize("depth", ["sub", "x/y"])
def test_a_store_output_inside_a_packed_prefix_is_refused(s3, cache_dir, depth):
    """S32-2 on a store: `pack -o s3://b/packed/x/y` left the packed output above it with stray
    shards; refused before any work, as a local folder is (output.relations.packed_problem)."""
    _pack(f"{s3}/packed", cache_dir)
    before = _objects(f"{s3}/packed")
    with pytest.raises(PacktoolOutputError, match="inside a packed output folder"):
        _pack(f"{s3}/packed/{depth}", cache_dir)
    assert _objects(f"{s3}/packed") == before
