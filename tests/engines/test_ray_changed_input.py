"""S49A-6: under the Ray engine an input replaced whole while the run read it (a re-export renamed into
place, the same row count, other rows) gave a cache entry whose key and cache.json named one version and
whose rows were the other's, rc 0, reused by later runs of either engine: the engine checked only the
row count after its read tasks. The inputs hashed for the key are asked again once the reads are done,
and a change is refused as the local engine refuses it ("the file changed while it was being
tokenized"). The replacement lands right after the hash, before the read tasks (deterministic)."""
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


def _write(path: str, first: int) -> None:
    ids = [list(range(first + i, first + i + 7)) for i in range(6)]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), path)


def test_an_input_replaced_after_it_was_hashed_is_refused(tmp_path, monkeypatch):
    src = str(tmp_path / "d.parquet")
    _write(src, 1)
    hash_them = ray_cache.InputHashes.__call__

    def hashed_then_replaced(self, files):
        digests = hash_them(self, files)
        _write(src + ".new", 100)  # the same row count, other rows, renamed into place
        os.replace(src + ".new", src)
        return digests
    monkeypatch.setattr(ray_cache.InputHashes, "__call__", hashed_then_replaced)
    with pytest.raises(PacktoolInputError, match="changed while it was being tokenized") as e:
        pack_ray([src], Alignment(capacity=16), PackingConfig(), output=str(tmp_path / "o"),
                 cache_dir=str(tmp_path / "c"))
    assert e.value.path == src
    assert not os.path.exists(tmp_path / "o")
    assert not [d for d in os.listdir(tmp_path / "c") if not d.startswith(".")] if os.path.isdir(tmp_path / "c") else True


def test_an_unchanged_input_packs(tmp_path):
    src = str(tmp_path / "d.parquet")
    _write(src, 1)
    res = pack_ray([src], Alignment(capacity=16), PackingConfig(), output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"))
    assert res.summary.sequences == 6
