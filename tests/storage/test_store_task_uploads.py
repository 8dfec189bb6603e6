"""The puts a Ray task makes on another node (a write task's shard and its proof under -o, a
tokenize task's cache part and its proof under --cache-dir) locate their URIs again from text:
they named no argument, so a store refusing them (here: not reached) was StorageError, kind
`input`, "the store cannot be reached", where the same refusal in the driver names -o / output
(StorageOutputError) or --cache-dir / cache_dir (StorageCacheError). Each task-side door is
called here as its task calls it, under the caller's spelling (the task carries it: errors.arg)."""
from __future__ import annotations


import pytest

from packtool.errors import PacktoolCacheError, PacktoolOutputError, spelled_as
from packtool.slabs.format import ShardInfo
from packtool.storage import StorageCacheError, StorageOutputError, join_uri, locate
from packtool.storage.lease import LEASE, Lease


@pytest.fixture
def no_store(monkeypatch):
    from conftest import closed_store
    closed_store(monkeypatch)


def _shard(src: str) -> None:
    """engines.ray_write.write_group's upload: the shard's proof, then the shard, under the run's lease."""
    from packtool.output.store import upload_proven
    out = "s3://bkt/out"
    lock = join_uri(out, LEASE)
    ticket = Lease(locate(lock, name="output"), out).ticket(lock)  # StoreCommit.ticket, the driver's
    upload_proven(src, join_uri(out, "slabs-00000.parquet"), join_uri(out, ".packtool-proof-x.json"),
                  ShardInfo("slabs-00000.parquet", 1, 2, 1, 3, "0" * 32, 5), ticket)


def _cache_part(src: str) -> None:
    """engines.ray_cache._write_part's upload: the part's proof, then the part, under the entry."""
    from packtool.tokenize.store_push import put_proven
    put_proven(src, "s3://bkt/c/" + "a" * 32, "b" * 12, "data/part-000000000000.parquet",
               {"bytes": 3, "xxh3_128": "0" * 32})


# every put a Ray task makes -> (the call, the argument that gave its place, its CLI flag, the class)
DOORS = {"shard (-o)": (_shard, "output", "--output", StorageOutputError, PacktoolOutputError),
         "cache part (--cache-dir)": (_cache_part, "cache_dir", "--cache-dir", StorageCacheError, PacktoolCacheError)}


@pytest.mark.parametrize("caller", ["library", "command line"])
@pytest.mark.parametrize("door", DOORS)
def test_a_task_put_refused_is_the_kind_of_the_argument_that_named_its_place(no_store, tmp_path, door, caller):
    call, name, flag, cls, base = DOORS[door]
    src = tmp_path / "f"
    src.write_bytes(b"abc")
    said = name if caller == "library" else flag
    with spelled_as({} if caller == "library" else {name: flag}), pytest.raises(cls) as e:
        call(str(src))
    msg = str(e.value)
    assert isinstance(e.value, base) and e.value.kind == base.kind, type(e.value).__mro__
    assert f": {said} names a store that cannot be reached (no answer" in msg, msg
    assert "\n" not in msg
