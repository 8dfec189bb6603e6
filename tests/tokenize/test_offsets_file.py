"""The flat store's offsets are kept on disk while rows come (issue 23 class 8): the cache's
writers hold nothing per row, and offsets.npy is the file `np.save` would write."""
from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

import packtool.tokenize.offsets_file as offsets_file
from packtool.tokenize.cache import CacheWriter
from packtool.tokenize.flat_builder import FlatTokensBuilder
from packtool.tokenize.offsets_file import OffsetsFile


@pytest.mark.parametrize("rows", [0, 1, 7, 5000])
def test_offsets_are_the_bytes_np_save_writes(tmp_path, monkeypatch, rows):
    monkeypatch.setattr(offsets_file, "_BLOCK", 64)  # many blocks, and a carry across each
    lengths = np.random.default_rng(rows).integers(0, 3000, rows)
    f = OffsetsFile(str(tmp_path))
    for part in np.array_split(lengths, max(1, rows // 37)):
        f.add(part.astype(np.int32))  # the encoders' int32 lengths
    got = f.finish("offsets.npy")
    want = tmp_path / "want.npy"
    np.save(want, np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
    assert open(got, "rb").read() == want.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["offsets.npy", "want.npy"]  # no scratch left


def _flat(d):
    return FlatTokensBuilder(str(d))


def _parts(d):
    return CacheWriter(str(d), token_lists=True)


def _retained(make, tmp_path, rows: int, per_add: int = 50) -> int:
    """Traced memory a writer still holds after `rows` rows added, over what it held after
    the first add (buffers of bounded size are full by then)."""
    w = make(tmp_path / str(rows))
    ids = np.arange(per_add * 4, dtype=np.int32)
    tracemalloc.start()
    try:
        base = None
        for i in range(rows // per_add):
            src = np.arange(i * per_add, (i + 1) * per_add, dtype=np.int64)
            lens = np.full(per_add, 4, np.int64)  # each chunk's own array, as the encoders give
            if isinstance(w, CacheWriter):
                w.add(ids, None, lens.astype(np.int32), src, 0)
            else:
                w.add(ids, None, lens)
            if base is None:
                base = tracemalloc.get_traced_memory()[0]
        return tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        w.close()


@pytest.mark.parametrize("make", [_flat, _parts], ids=["flat store", "cache parts"])
def test_cache_writers_hold_nothing_per_row(tmp_path, monkeypatch, make):
    """Each writer of the cache (tokenize/sink.py) holds what one row group needs, whatever
    the rows that went by: 4x the rows, no more memory (before, the flat store kept each
    chunk's lengths to the end, 8 bytes a row and a list entry a chunk)."""
    monkeypatch.setattr(CacheWriter, "ROWS_PER_GROUP", 200)  # full after a few adds
    small = _retained(make, tmp_path, 5_000)
    large = _retained(make, tmp_path, 20_000)
    assert large - small < 8 * 1000, f"{large - small:,} B more held after 15,000 more rows"
