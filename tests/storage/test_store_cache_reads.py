"""RB-6: 2f6128f named --cache-dir / cache_dir= for the store cache's writes (StorageCacheError,
kind cache); its reads still knew no argument. A store that stopped answering at an entry's
cache.json was CacheDamagedError ("delete the folder and re-run": a good shared entry) or, for
cache_problem, a reason the Ray engine took for damage (it then deleted the committed entry's
cache.json); TokenizedCache's own reads were StorageError, kind input, naming no flag. Every
read of a store entry (tokenize.cache_entry.entry_reads) now names the cache's argument, and
none is a problem of the entry."""
from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import GPT2, PEPS

from packtool.errors import PacktoolCacheError
from packtool.tokenize.config import TokenizeConfig

ENTRY = "s3://bkt/cache/0123abcd"


def _c(name):
    return getattr(__import__("packtool.tokenize.cache", fromlist=["x"]), name)


# the first requests of an entry (the reuse check; the Ray engine's driver and check tasks)
FIRST = {
    "read_cache_json": lambda: _c("read_cache_json")(ENTRY),
    "TokenizedCache": lambda: _c("TokenizedCache")(ENTRY, reused=True),
    "cache_problem": lambda: _c("cache_problem")(ENTRY, "f" * 64),
    "file_problem": lambda: _c("file_problem")(ENTRY, "data/part-00000.parquet", {"bytes": 1, "xxh3_128": "0"}),
}


def _one_line_naming_the_cache(e):
    msg = str(e.value)
    assert "cache_dir" in msg and "\n" not in msg and e.value.kind == "cache", (type(e.value).__name__, msg)
    assert not isinstance(e.value, _c("CacheDamagedError")), msg  # its fix deletes a good entry


@pytest.mark.parametrize("door", list(FIRST))
def test_a_store_that_does_not_answer_at_an_entry_is_the_cache_argument_never_damage(door, monkeypatch):
    from conftest import closed_store
    closed_store(monkeypatch)
    with pytest.raises(PacktoolCacheError) as e:
        FIRST[door]()
    _one_line_naming_the_cache(e)


# the later requests of an entry opened while the store answered (the plan and write tasks'
# reads, the re-hash of each file)
LATER = {
    "lengths": lambda c: c.lengths(),
    "length_batches": lambda c: list(c.length_batches()),
    "source_indices": lambda c: c.source_indices(),
    "read_rows": lambda c: c.read_rows([0]),
    "token_lists": lambda c: c.token_lists(c.parquet_files[0], [0], 0),
    "cache_pieces": lambda c: _c("cache_pieces")(c),
    "cache_shards' lengths": lambda c: _c("cache_shards")(c, 10)[0][1](),
    "file_problem": lambda c: _c("file_problem")(c.root, "data/" + os.path.basename(c.parquet_files[0]),
                                                 c.meta["checksums"]["data/" + os.path.basename(c.parquet_files[0])]),
    "cache_problem": lambda c: _c("cache_problem")(c.root, c.fingerprint),
}


def _pretokenized(tmp_path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": pa.array([list(range(1, 2 + k % 5)) for k in range(20)], pa.list_(pa.int32()))}), path, row_group_size=8)
    return path


@pytest.mark.parametrize("door", list(LATER))
@pytest.mark.parametrize("layout", ["parts", "flat"])
def test_a_store_that_stops_answering_while_an_entry_is_read_names_the_cache_argument(layout, door, s3, tmp_path,
                                                                                       monkeypatch):
    from packtool.tokenize.pipeline import tokenize_to_cache
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    store = f"{s3}/cache"
    inputs, cfg = (([PEPS], TokenizeConfig(tokenizer=GPT2)) if layout == "parts" else
                   ([_pretokenized(tmp_path)], TokenizeConfig(shape="tokens")))
    local = tokenize_to_cache(inputs, cfg, store, progress=False)
    entry = _c("TokenizedCache")(f"{store}/{os.path.basename(local.root)}")  # as the Ray engine opens it
    assert entry.flat_only == (layout == "flat")
    from conftest import closed_store
    closed_store(monkeypatch)  # the store stops answering
    with pytest.raises(PacktoolCacheError) as e:
        LATER[door](entry)
    _one_line_naming_the_cache(e)


@pytest.mark.parametrize("layout", ["parts", "flat"])
def test_rows_of_a_store_entry_read_in_place_are_the_local_entrys(layout, s3, tmp_path, monkeypatch):
    """read_rows (the cut targets' count of pack --overflow truncate/split, every engine) of an
    entry on the store: a flat/-only one was said damaged ("the flat token store is missing"),
    its flat/ read as a local folder; it reads ranges of the store's objects now."""
    import numpy as np

    from packtool.tokenize.pipeline import tokenize_to_cache
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "local"))
    inputs, cfg = (([PEPS], TokenizeConfig(tokenizer=GPT2)) if layout == "parts" else
                   ([_pretokenized(tmp_path)], TokenizeConfig(shape="tokens")))
    local = tokenize_to_cache(inputs, cfg, f"{s3}/cache", progress=False)
    entry = _c("TokenizedCache")(f"{s3}/cache/{os.path.basename(local.root)}")
    for rows in ([0], [3, 1, 3, 2, 4], [], list(range(local.num_rows))[::-1]):
        got, want = entry.read_rows(rows), local.read_rows(rows)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), rows


# RA-7: read_rows of a flat/-only store entry made one request per run of consecutive rows (the rows
# cut targets asks, those over U, are scattered: ~one GET per row) and read all of offsets.npy (and
# its header) again on every call. Its requests are bounded by the bytes spanned now, not the rows.
SCATTERED = {"every other row": lambda n: np.arange(0, n, 2), "every 97th": lambda n: np.arange(5, n, 97),
             "reversed, twice over": lambda n: np.r_[np.arange(n)[::-3], np.arange(n)[::-3]],
             "first and last": lambda n: np.array([n - 1, 0])}


@pytest.fixture(scope="module")
def flat_entry(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packtool.tokenize.pipeline import tokenize_to_cache
    t = tmp_path_factory.mktemp("flat")
    src = str(t / "tok.parquet")
    n = 3000
    pq.write_table(pa.table({"input_ids": pa.array([list(range(1, 3 + k % 7)) for k in range(n)], pa.list_(pa.int32())),
                             "loss_mask": pa.array([[0] + [1] * (k % 7 + 1) for k in range(n)], pa.list_(pa.int8()))}),
                   src)
    store = f"file://{t}/store"  # a store's ranged reads (storage.read_range), without moto's server
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PACKTOOL_CACHE_DIR", str(t / "local"))
        local = tokenize_to_cache([src], TokenizeConfig(shape="tokens"), store, progress=False)
    return local, f"{store}/{os.path.basename(local.root)}"


def _counted(monkeypatch):
    import collections
    cache, seen = __import__("packtool.tokenize.cache", fromlist=["x"]), collections.Counter()
    real = cache.read_range
    monkeypatch.setattr(cache, "read_range", lambda p, off, size: (seen.update([os.path.basename(p)]),
                                                                   real(p, off, size))[1])
    return seen


@pytest.mark.parametrize("rows", list(SCATTERED))
def test_scattered_rows_of_a_flat_store_entry_take_few_requests(flat_entry, rows, monkeypatch):
    local, uri = flat_entry
    entry = _c("TokenizedCache")(uri)
    assert entry.flat_only
    idx = SCATTERED[rows](local.num_rows)
    seen = _counted(monkeypatch)
    for call in range(2):  # the offsets' header once per entry opened, not once per call
        got, want = entry.read_rows(idx), local.read_rows(idx)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), rows
        assert seen["tokens.i32"] == call + 1 and seen["offsets.npy"] == call + 2, (rows, seen)


@pytest.mark.parametrize("rows", list(SCATTERED))
def test_rows_read_in_many_small_requests_are_the_same_rows(flat_entry, rows, monkeypatch):
    """Gaps and request bounds far below a row (every row its own request, rows longer than one)."""
    import packtool.tokenize.flat_ranges as fr
    monkeypatch.setattr(fr, "COALESCE", 4)
    monkeypatch.setattr(fr, "READ_BLOCK", 12)
    local, uri = flat_entry
    idx = SCATTERED[rows](local.num_rows)
    got, want = _c("TokenizedCache")(uri).read_rows(idx), local.read_rows(idx)
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), rows
