"""`--overwrite` decides "is this old output packtool's" by one rule on every location kind
(output.owned.shard_is_ours): a local folder and an object-store prefix alike refuse a previous
output whose shard is not the one its manifest records, whether it was damaged before the run
(the check before any work) or while the run wrote (the check before the swap or the commit),
and leave it exactly as it was (S35-15: a store once checked the size alone, and deleted it)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import GPT2, PEPS

import packtool.packing as packing_mod
from packtool.align import Alignment
from packtool.errors import PacktoolOutputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST
from packtool.storage import join_uri, locate
from packtool.tokenize.config import TokenizeConfig

ARGS = ([PEPS], Alignment(cp=2, capacity=1024), PackingConfig("bfd", overflow="split"), TokenizeConfig(tokenizer=GPT2))
SHARD = "slabs-00000.parquet"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One local pack and its cache: each case copies it to its location (a store output holds
    the bytes of a local one) instead of packing again."""
    root = tmp_path_factory.mktemp("owned")
    out, cache = str(root / "out"), str(root / "cache")
    res = pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000)
    assert len(res.shards) > 1
    return out, cache


def _place(kind: str, template: str, tmp_path, s3) -> str:
    if kind == "folder":
        out = str(tmp_path / "o")
        shutil.copytree(template, out)
        return out
    out = f"{s3}/o"
    for name in os.listdir(template):
        with open(os.path.join(template, name), "rb") as f:
            locate(join_uri(out, name)).write_bytes(f.read())
    return out


def _snapshot(out: str) -> dict[str, bytes]:
    """Every file or object below `out`, by its name there, with its bytes."""
    base = len(locate(out).path.rstrip("/")) + 1
    names = [i.path[base:] for i in locate(out).list(recursive=True)]
    return {n: locate(join_uri(out, n)).read_bytes() for n in names}


def _flip_a_byte(out: str) -> None:  # same size, other bytes
    obj = locate(join_uri(out, SHARD))
    b = bytearray(obj.read_bytes())
    b[len(b) // 2] ^= 1
    obj.write_bytes(bytes(b))


def _grow(out: str) -> None:
    obj = locate(join_uri(out, SHARD))
    obj.write_bytes(obj.read_bytes() + b"\0")


def _no_checksum(out: str) -> None:  # a hand-edited manifest: not readable as packtool's
    obj = locate(join_uri(out, MANIFEST))
    m = json.loads(obj.read_bytes())
    m["shards"][0] = {k: v for k, v in m["shards"][0].items() if k not in ("xxh3_128", "sha256")}
    obj.write_bytes(json.dumps(m).encode())


def _not_a_file(out: str) -> None:  # a folder (a sub-prefix on a store) under the shard's name
    locate(join_uri(out, SHARD)).delete()
    locate(join_uri(out, SHARD, "x")).write_bytes(b"mine")


def _unlisted(out: str) -> None:
    locate(join_uri(out, "slabs-00099.parquet")).write_bytes(b"mine")


DAMAGE = {"same size, other bytes": _flip_a_byte, "other size": _grow, "manifest without its checksum": _no_checksum,
          "not a plain file": _not_a_file, "unlisted shard name": _unlisted}


# while the run writes: one damage of each check (a record not met, a manifest not readable, a
# name not listed); each case is a whole pack, the rest are refused before any work
CASES = [(d, "before the run") for d in sorted(DAMAGE)] + [(d, "while the run writes") for d in (
    "same size, other bytes", "manifest without its checksum", "unlisted shard name")]


@pytest.mark.parametrize("damage,when", CASES)
@pytest.mark.parametrize("kind", ["folder", "store"])
def test_a_damaged_previous_output_is_refused_and_kept_on_every_location(kind, damage, when, template, tmp_path,
                                                                         request, monkeypatch):
    s3 = request.getfixturevalue("s3") if kind == "store" else None
    src, cache = template
    out = _place(kind, src, tmp_path, s3)
    if when == "before the run":
        DAMAGE[damage](out)
    else:  # after the check before any work passed: the shards are written, nothing is replaced yet
        orig = packing_mod._manifest_of

        def damaged_then(*a, **k):
            DAMAGE[damage](out)
            return orig(*a, **k)
        monkeypatch.setattr(packing_mod, "_manifest_of", damaged_then)
    before = None if when != "before the run" else _snapshot(out)
    with pytest.raises(PacktoolOutputError) as e:
        pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, overwrite=True)
    text = str(e.value)
    assert "not packtool's" in text and ("slabs-00099" if damage == "unlisted shard name" else SHARD) in text, text
    if before is not None:
        assert _snapshot(out) == before
    else:  # the previous output as damaged, and nothing of the refused run left there
        names = set(_snapshot(out))
        assert names == {n for n in os.listdir(src) if n != SHARD} | (
            {f"{SHARD}/x"} if damage == "not a plain file" else {SHARD}) | (
            {"slabs-00099.parquet"} if damage == "unlisted shard name" else set()), names


@pytest.mark.parametrize("kind", ["folder", "store"])
def test_an_undamaged_previous_output_is_replaced_on_every_location(kind, template, tmp_path, request):
    s3 = request.getfixturevalue("s3") if kind == "store" else None
    src, cache = template
    out = _place(kind, src, tmp_path, s3)
    res = pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, overwrite=True)
    assert set(_snapshot(out)) == {MANIFEST, *(s.file for s in res.shards)}


def test_a_store_shard_changed_after_the_last_check_is_kept_and_said(template, tmp_path, s3, monkeypatch, capsys):
    """A store has no rename: between the check before the commit and the deletes a shard can
    still change. It is read again (its ETag moved) and kept, said, never deleted."""
    from packtool.output.store import StoreCommit
    src, cache = template
    out = _place("store", src, tmp_path, s3)
    orig = StoreCommit._put_manifest  # after the last check, the commit itself

    def damaged_then(self, data):
        _flip_a_byte(out)
        return orig(self, data)
    monkeypatch.setattr(StoreCommit, "_put_manifest", damaged_then)
    res = pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, overwrite=True)
    assert set(_snapshot(out)) == {MANIFEST, SHARD, *(s.file for s in res.shards)}
    assert f"kept {SHARD} at" in capsys.readouterr().err


def _version_1(out: str, name: str) -> None:
    """The manifest as a packtool before 2026-12-01 wrote it (schema_version 1: no side columns,
    no side counts), under `name` (manifest.json was its name before .manifest.json)."""
    obj = locate(join_uri(out, MANIFEST))
    m = json.loads(obj.read_bytes())
    m["schema_version"] = 1
    del m["side_columns"], m["stats"]["side_nan"], m["stats"]["side_inf"]
    obj.delete()
    locate(join_uri(out, name)).write_bytes(json.dumps(m).encode())


@pytest.mark.parametrize("damage", [None, "same size, other bytes", "unlisted shard name"])
@pytest.mark.parametrize("name", [MANIFEST, LEGACY_MANIFEST])
@pytest.mark.parametrize("kind", ["folder", "store"])
def test_a_version_1_output_is_packtools_to_replace_on_every_location(kind, name, damage, template, tmp_path, request):
    """RB-2: every reader refuses a version 1 output saying "pack the data again with this
    packtool", and --overwrite to it was refused as "not a packtool output": the writers read the
    manifest with the readers' parse. Its shards' records prove it packtool's as a version 2's do."""
    s3 = request.getfixturevalue("s3") if kind == "store" else None
    src, cache = template
    out = _place(kind, src, tmp_path, s3)
    _version_1(out, name)
    if damage:
        DAMAGE[damage](out)
        before = _snapshot(out)
        with pytest.raises(PacktoolOutputError, match="not packtool's"):
            pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, overwrite=True)
        assert _snapshot(out) == before
        return
    res = pack(*ARGS, output=out, cache_dir=cache, shard_tokens=20_000, overwrite=True)
    assert set(_snapshot(out)) == {MANIFEST, *(s.file for s in res.shards)}
