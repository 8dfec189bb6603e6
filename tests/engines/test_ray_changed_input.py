"""S49A-6: under the Ray engine an input replaced whole while the run read it (a re-export renamed into
place, the same row count, other rows) gave a cache entry whose key and cache.json named one version and
whose rows were the other's, rc 0, reused by later runs of either engine: the engine checked only the
row count after its read tasks. The inputs hashed for the key are asked again once the reads are done,
and a change is refused as the local engine refuses it ("the file changed while it was being
tokenized"). The replacement lands right after the hash, before the read tasks (deterministic).
RB-9: the store doors too (a store input's object written over, its object_version asked again; a store
--cache-dir, ray_store's entry built by the tasks), beside the local file with a local cache."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import LOCAL_RAY_GROUP  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.engines import ray_cache  # noqa: E402
from packtool.engines.ray_engine import pack_ray  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402

pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]


def _table(first: int) -> pa.Table:
    ids = [list(range(first + i, first + i + 7)) for i in range(6)]
    return pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))})


def _write(path: str, first: int) -> None:
    if "://" in path:  # a store object written over whole: a new object version, as a re-upload makes
        from packtool.storage import locate
        buf = pa.BufferOutputStream()
        pq.write_table(_table(first), buf)
        locate(path).write_bytes(buf.getvalue().to_pybytes())
    else:  # the same row count, other rows, renamed into place
        pq.write_table(_table(first), path + ".new")
        os.replace(path + ".new", path)


def _entries(cache: str) -> list[str]:
    """The committed cache entries below `cache` (a store entry's commit is its cache.json)."""
    if "://" in cache:
        from packtool.storage import locate
        from packtool.tokenize.store_cache import ENTRY_META
        place = locate(cache)
        return [i.path for i in (place.list() if place.exists() else []) if i.path.endswith("/" + ENTRY_META)]
    return [d for d in os.listdir(cache) if not d.startswith(".")] if os.path.isdir(cache) else []


# where the input lies x where its cache entry is built (ray_engine's local entry, ray_store's)
PLACES = {"local file, local cache": ("local", "local"), "store object, local cache": ("store", "local"),
          "local file, store cache": ("local", "store"), "store object, store cache": ("store", "store")}


@pytest.mark.parametrize("places", PLACES)
def test_an_input_replaced_after_it_was_hashed_is_refused(places, tmp_path, monkeypatch, request):
    src_at, cache_at = PLACES[places]
    store = request.getfixturevalue("s3") if "store" in PLACES[places] else None
    src = f"{store}/in/d.parquet" if src_at == "store" else str(tmp_path / "d.parquet")
    cache = f"{store}/cache" if cache_at == "store" else str(tmp_path / "c")
    _write(src, 1)
    hash_them = ray_cache.InputHashes.__call__

    def hashed_then_replaced(self, files):
        digests = hash_them(self, files)
        _write(src, 100)
        return digests
    monkeypatch.setattr(ray_cache.InputHashes, "__call__", hashed_then_replaced)
    with pytest.raises(PacktoolInputError, match="changed while it was being tokenized") as e:
        pack_ray([src], Alignment(capacity=16), PackingConfig(), output=str(tmp_path / "o"), cache_dir=cache)
    assert e.value.path == src
    assert not os.path.exists(tmp_path / "o")
    assert not _entries(cache), _entries(cache)  # no entry committed under either version's key


def test_an_unchanged_input_packs(tmp_path):
    src = str(tmp_path / "d.parquet")
    _write(src, 1)
    res = pack_ray([src], Alignment(capacity=16), PackingConfig(), output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"))
    assert res.summary.sequences == 6
