"""The shard writer: threads and the gather-ahead helper never change a byte; the provenance
columns are the plan's; a failure in any thread reaches the caller."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
from slab_support import PAD, write_source

from packtool.align import Alignment
from packtool.errors import PacktoolCacheError
from packtool.planning.core import PackingConfig, plan
from packtool.slabs import shard_sizes, writer
from packtool.slabs.writer import SlabWriter, write_shard_file, write_shards
from packtool.tokenize.flat_tokens import TOKENS_FILE, FlatTokens

LENGTHS = np.random.default_rng(7).integers(1, 700, 3000)
ALIGN = Alignment(tp=2, cp=2, sp=True, capacity=2048)


def _files(d: str) -> dict[str, bytes]:
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_source(str(tmp_path_factory.mktemp("src")), LENGTHS, seed=3)


@pytest.fixture(scope="module")
def packed():
    return plan(LENGTHS, ALIGN, PackingConfig("bfd", overflow="split", seed=5))


def test_thread_count_does_not_change_bytes(tmp_path, store, packed):
    outs = []
    for workers in (1, 2, 3):
        d = str(tmp_path / f"w{workers}")
        os.makedirs(d)
        infos = write_shards(packed, store, d, PAD, shard_tokens=40_000, group_tokens=5_000,
                             workers=workers)
        assert len(infos) >= 4
        outs.append((_files(d), infos))
    assert outs[0] == outs[1] == outs[2]


def test_gather_ahead_and_in_memory_store_give_the_same_bytes(tmp_path, store, packed):
    """The pread gather (file store) and the numba copy (in-memory store, as the Ray engine
    uses), each with and without the helper thread, write one and the same file."""
    mem = FlatTokens(np.array(store.tokens), store.offsets)
    sl = packed.layout.slab_len
    n = min(sl.size, 40)
    got = []
    for tokens in (store, mem):
        for ahead in (False, True):
            path = str(tmp_path / f"{tokens.directory is None}-{ahead}.parquet")
            info = write_shard_file(SlabWriter(packed, tokens, PAD), sl[3:3 + n], 3, path, 6_000,
                                    ahead=ahead)
            assert pq.ParquetFile(path).metadata.num_row_groups > 2
            got.append((open(path, "rb").read(), info.rows, info.tokens, info.loss_tokens))
    assert all(g == got[0] for g in got[1:])


def test_provenance_columns_are_the_plans(store):
    lengths = LENGTHS[:400]
    p = plan(lengths, Alignment(cp=2, capacity=2048, fixed_length=2048), PackingConfig("bfd"))
    assert p.layout.is_fill.any()  # fill segments carry -1 / 0
    t = SlabWriter(p, store, PAD).batch(0, p.num_slabs)
    src, chunk, off = (t.column(c).values.to_numpy() for c in ("source_index", "chunk_index", "source_offset"))
    real = ~p.layout.is_fill
    assert np.array_equal(src[real], p.segments.source) and (src[~real] == -1).all()
    assert np.array_equal(chunk[real], p.segments.chunk) and (chunk[~real] == -1).all()
    assert np.array_equal(off[real], p.segments.offset) and (off[~real] == 0).all()
    assert len(t.column("input_ids").values) == int(p.layout.slab_len.sum())
    mask = t.column("loss_mask")
    assert np.array_equal(t.column("num_loss_tokens").to_numpy(),
                          [int(np.asarray(mask[i].values).sum()) for i in range(len(mask))])


def test_a_failing_shard_reaches_the_caller_and_leaves_no_thread(tmp_path, store, packed):
    bad = str(tmp_path / "short")
    os.makedirs(bad)
    data = open(os.path.join(store.directory, TOKENS_FILE), "rb").read()
    open(os.path.join(bad, TOKENS_FILE), "wb").write(data[: len(data) // 2])  # loses its last rows
    tokens = FlatTokens(store.tokens, store.offsets, bad)
    before = threading.active_count()
    for workers in (1, 2):
        out = str(tmp_path / f"o{workers}")
        os.makedirs(out)
        with pytest.raises(PacktoolCacheError, match="truncated"):
            write_shards(packed, tokens, out, PAD, shard_tokens=40_000, group_tokens=5_000,
                         workers=workers)
    with pytest.raises(PacktoolCacheError, match="truncated"):  # raised in the gather-ahead thread
        write_shard_file(SlabWriter(packed, tokens, PAD), packed.layout.slab_len, 0,
                         str(tmp_path / "x.parquet"), 5_000, ahead=True)
    assert threading.active_count() == before


def test_release_memory_is_safe_to_call_anywhere():
    writer.release_memory()  # no-op off glibc; must not raise on it


def test_a_failing_shard_stops_the_others_at_their_next_row_group(tmp_path, store, packed, monkeypatch):
    calls = []
    real_batch = SlabWriter.batch

    def batch(self, b0, b1):
        calls.append(b0)
        if b0 == 0:
            raise RuntimeError("shard 0 breaks")
        return real_batch(self, b0, b1)

    monkeypatch.setattr(SlabWriter, "batch", batch)
    sl = packed.layout.slab_len
    shards = shard_sizes.shard_ranges(sl, 400_000)
    assert len(shards) >= 2
    second = len(shard_sizes.group_ranges(sl[shards[1][0]:shards[1][1]], 2_000))  # ~200 row groups
    with pytest.raises(RuntimeError, match="shard 0 breaks"):
        write_shards(packed, store, str(tmp_path), PAD, shard_tokens=400_000, group_tokens=2_000,
                     workers=2)
    # the second shard (written alongside the first) stopped early, and no later shard started
    assert len(calls) < 1 + second // 2


def test_flat_store_rebuild_in_threads_matches_one_thread_and_checks_lengths(tmp_path):
    import pyarrow as pa

    from packtool.tokenize.flat_tokens import build_flat_tokens
    rng = np.random.default_rng(0)
    files = []
    for k in range(2):  # two files of several row groups
        lens = rng.integers(0, 50, 300)
        off = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
        t = pa.table({"input_ids": pa.ListArray.from_arrays(off, pa.array(rng.integers(0, 9, off[-1]), pa.int32())),
                      "loss_mask": pa.ListArray.from_arrays(off, pa.array(rng.integers(0, 2, off[-1]), pa.uint8())),
                      "length": pa.array(lens, pa.int32())})
        files.append(str(tmp_path / f"p{k}.parquet"))
        pq.write_table(t, files[-1], row_group_size=64)
    stores = [build_flat_tokens(files, str(tmp_path / f"s{n}"), threads=n) for n in (1, 3)]
    for f in (TOKENS_FILE, "offsets.npy"):
        assert open(os.path.join(stores[0].directory, f), "rb").read() == \
            open(os.path.join(stores[1].directory, f), "rb").read()
    whole = pq.read_table(files[0]).column("input_ids").combine_chunks()
    ids, mask = stores[0].decoded(0, len(whole.values))
    assert np.array_equal(ids, whole.values.to_numpy())
    assert np.array_equal(mask, pq.read_table(files[0]).column("loss_mask").combine_chunks().values.to_numpy())
    t = pq.read_table(files[1])
    bad = t.set_column(2, "length", pa.array(np.asarray(t.column("length")) + 1, pa.int32()))
    pq.write_table(bad, files[1], row_group_size=64)
    with pytest.raises(ValueError, match="disagree with the `length` column"):
        build_flat_tokens(files, str(tmp_path / "bad"), threads=2)
    assert not any(n.startswith("bad") for n in os.listdir(tmp_path))  # no half-built store


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="packtool asks for jemalloc on Linux only")
def test_pack_asks_arrow_for_jemalloc_unless_told_otherwise():
    code = "import packtool.packing, pyarrow as pa; print(pa.default_memory_pool().backend_name)"
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "jemalloc", got.stderr
    env["ARROW_DEFAULT_MEMORY_POOL"] = "system"  # the user's choice wins
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "system", got.stderr


def test_token_columns_are_byte_stream_split_and_read_back_unchanged(tmp_path, store, packed):
    """The two token columns carry the encoding FORMAT.md names (an option that names a
    column wrongly is ignored by pyarrow without a word), and a plain pyarrow read gives the
    gathered values back."""
    path = str(tmp_path / "s.parquet")
    w = SlabWriter(packed, store, PAD)
    n = min(packed.layout.slab_len.size, 30)
    write_shard_file(w, packed.layout.slab_len[:n], 0, path, group_tokens=8_000)
    md = pq.ParquetFile(path).metadata
    cols = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i)
            for i in range(md.num_columns)}
    for name in ("input_ids", "loss_mask"):
        assert "BYTE_STREAM_SPLIT" in cols[f"{name}.list.element"].encodings, name
        assert cols[f"{name}.list.element"].compression == "ZSTD"
    assert "BYTE_STREAM_SPLIT" not in cols["seq_lens.list.element"].encodings
    back = pq.read_table(path)
    want = w.batch(0, n)
    for name in ("input_ids", "loss_mask"):
        assert back.column(name).combine_chunks().equals(want.column(name)), name


def test_shard_ranges_are_balanced_in_multiples_of_four_and_cover_every_slab():
    rng = np.random.default_rng(1)
    sl = rng.integers(4000, 8193, 40_000)  # ~245M tokens
    r = shard_sizes.shard_ranges(sl, 64 << 20)
    assert len(r) % shard_sizes.SHARD_MULTIPLE == 0 and len(r) >= 4
    assert r[0][0] == 0 and r[-1][1] == sl.size and all(a[1] == b[0] for a, b in zip(r, r[1:]))
    sizes = np.array([sl[a:b].sum() for a, b in r])
    assert sizes.max() - sizes.min() <= 2 * sl.max()  # equal but for a slab at each cut
    assert sizes.max() <= (64 << 20) + sl.max()
    small = sl[:100]  # under MIN_SPLIT_TOKENS: one shard, however the budget falls
    assert shard_sizes.shard_ranges(small, 64 << 20) == [(0, 100)]
    assert len(shard_sizes.shard_ranges(small, -(-int(small.sum()) // 3))) == 3
    assert shard_sizes.shard_ranges(sl[:0], 100) == []


@pytest.mark.parametrize("pad", [0, 5, 999, 5000])  # below, inside and above the ids [3, 1000)
@pytest.mark.parametrize("kind", ["file", "memory"])
@pytest.mark.parametrize("ahead", [False, True])
def test_recorded_max_token_id_is_the_largest_id_written_pads_included(tmp_path, store, packed, pad, kind, ahead):
    """The gather takes each row group's largest id while it copies (no second pass over the
    group): over both gathers, with and without the helper, pads below/inside/above the ids
    and a shard of one full slab, the shard's max_token_id is the written ids' max."""
    tokens = store if kind == "file" else FlatTokens(np.array(store.tokens), store.offsets)
    sl = packed.layout.slab_len
    n = min(sl.size, 40)
    w = SlabWriter(packed, tokens, pad)
    path = str(tmp_path / "s.parquet")
    info = write_shard_file(w, sl[3:3 + n], 3, path, 6_000, ahead=ahead)
    ids = pq.read_table(path, columns=["input_ids"]).column(0).combine_chunks().values.to_numpy()
    assert (ids == pad).any() and info.max_token_id == int(ids.max())
    assert w.tops == {}  # every group's entry taken by the shard that wrote it
    one = str(tmp_path / "one.parquet")  # one full slab, one row group
    full = np.flatnonzero(packed.layout.slab_len == packed.layout.slab_len.max())
    info1 = write_shard_file(w, sl[full[0]:full[0] + 1], int(full[0]), one, 6_000, ahead=ahead)
    ids1 = pq.read_table(one, columns=["input_ids"]).column(0).combine_chunks().values.to_numpy()
    assert info1.max_token_id == int(ids1.max())
