"""K-wide side columns kept sparse in the flat store (tokenize/side_store.py): every dtype
reads back bit for bit through both readers (the writer's pread gather, the Ray engine's
dense reads), a damaged store is refused, and a cache of the dense layout is never read."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xxhash

from side_support import side_rows, write_input

from packtool.errors import PacktoolCacheError, PacktoolInputError
from packtool.side import SideColumn
from packtool.slabs.gather import gather_side
from packtool.tokenize.cache import CacheDamagedError, TokenizedCache, cache_problem, side_files
from packtool.tokenize.cache_entry import cache_json_bytes
from packtool.tokenize.flat_tokens import FlatTokens
from packtool.tokenize.side_store import BLOCK, SparseRowsWriter, read_dense, sparse_problem


def _rows(c: SideColumn, n: int, seed: int = 0) -> np.ndarray:
    """n rows: a random count of values each (0..K), then the fill; -0.0 rows for floats."""
    rng = np.random.default_rng(seed)
    d = np.full((n, c.width), c.fill, c.np_dtype)
    keep = np.arange(c.width)[None] < rng.integers(0, c.width + 1, n)[:, None]
    d[keep] = rng.integers(-5, 100, (n, c.width)).astype(c.np_dtype)[keep]
    if not c.is_int:  # -0.0 is not the fill 0.0: kept, and read back as -0.0
        d[3, :] = 0.0
        d[3, 0] = -0.0
    return d


def _store(tmp_path, c: SideColumn, d: np.ndarray, step: int = 777) -> list[str]:
    paths = [str(tmp_path / n) for n in side_files(0, c.width)]
    w = SparseRowsWriter(paths, c, xxhash.xxh3_128)
    for a in range(0, d.shape[0], step):
        w.add(d[a:a + step].reshape(-1))
    w.close()
    return paths


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"i{a.dtype.itemsize}")


@pytest.mark.parametrize("dtype,width", [("int32", 20), ("int64", 300), ("float32", 3), ("float64", 2)])
def test_sparse_rows_read_back_bit_for_bit(tmp_path, dtype, width):
    c = SideColumn("s", dtype, width)
    n = 3 * BLOCK + 17
    d = _rows(c, n)
    paths = _store(tmp_path, c, d)
    assert sparse_problem(paths, c, n) is None
    assert os.path.getsize(paths[0]) < d.nbytes  # trailing fill is not stored
    for a, e in [(0, n), (BLOCK - 1, BLOCK + 1), (5, 6), (2 * BLOCK, 3 * BLOCK + 17), (n, n)]:
        assert np.array_equal(_bits(read_dense(paths, c, a, e).reshape(-1, width)), _bits(d[a:e]))
    offsets = np.array([0, 1000, 2500, n], np.int64)  # rows; segments cut anywhere in them
    src, off, length = np.array([2, 0, 1, 1]), np.array([10, 0, 1023, 0]), np.array([30, 1000, 5, 1])
    dest = np.concatenate(([0], np.cumsum(length)[:-1]))
    out = np.full((int(length.sum()), width), 7, c.np_dtype)  # every row is written whole: fill included
    store = FlatTokens(np.zeros(0, np.int32), offsets, str(tmp_path), (c,))
    gather_side(store, 0, offsets, src, off, length, dest, out)
    want = np.concatenate([d[offsets[s] + o:offsets[s] + o + m] for s, o, m in zip(src, off, length)])
    assert np.array_equal(_bits(out), _bits(want))


def test_a_damaged_sparse_store_is_refused(tmp_path):
    c = SideColumn("s", "int32", 8)
    n = 2 * BLOCK
    paths = _store(tmp_path, c, _rows(c, n))
    store = FlatTokens(np.zeros(0, np.int32), np.array([0, n], np.int64), str(tmp_path), (c,))
    counts = np.fromfile(paths[1], np.uint8)
    counts[BLOCK + 4] = 9  # more values than the width
    counts.tofile(paths[1])
    out = c.filled(n).reshape(n, 8)
    with pytest.raises(PacktoolCacheError, match="side column s"):
        gather_side(store, 0, store.offsets, np.array([0]), np.array([0]), np.array([n]), np.array([0]), out)
    with open(paths[1], "r+b") as f:
        f.truncate(n - 1)
    with pytest.raises(CacheDamagedError, match="side column s"):
        store.check_side()


def test_every_sparse_file_is_checksummed_and_a_dense_layout_cache_is_not_read(tmp_path):
    from packtool.tokenize.config import TokenizeConfig
    from packtool.tokenize.pipeline import tokenize_to_cache
    ids, lp, sup = side_rows(n=20)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    cfg = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))
    cache = tokenize_to_cache([inp], cfg, str(tmp_path / "c"), progress=False)
    assert {f"flat/{n}" for n in side_files(1, 5)} <= set(cache.meta["checksums"])
    with open(os.path.join(cache.root, "flat", "side-001.cnt"), "r+b") as f:  # a flipped count
        f.seek(3)
        b = f.read(1)
        f.seek(3)
        f.write(bytes([b[0] ^ 1]))
    assert "side-001.cnt" in cache_problem(cache.root)
    rebuilt = tokenize_to_cache([inp], cfg, str(tmp_path / "c"), progress=False)
    assert not rebuilt.reused and cache_problem(rebuilt.root) is None
    meta_path = os.path.join(rebuilt.root, "cache.json")
    meta = json.load(open(meta_path))
    del meta["side_store"]  # what a cache of the dense layout says (sealed: refused for its layout)
    with open(meta_path, "wb") as f:
        f.write(cache_json_bytes(meta))
    with pytest.raises(PacktoolInputError, match="side column layout"):
        TokenizedCache(rebuilt.root)
    assert "side column layout" in cache_problem(rebuilt.root)
