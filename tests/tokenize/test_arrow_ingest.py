"""Pre-tokenized rows into the cache as columnar copies (packtool/tokenize/token_rows.py):
the same packed bytes from every file format and list type, masks and labels as written,
bad rows named, and ingest memory bounded by a row group, not by the file."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import packtool.tokenize.pipeline as pipeline
from packtool.align import Alignment
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig


def rows(n: int, seed: int = 0, max_len: int = 300) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, int(k)).tolist() for k in rng.integers(1, max_len, n)]


def list_array(ids: list[list[int]], value_type=pa.int32(), large: bool = False) -> pa.Array:
    t = pa.large_list(value_type) if large else pa.list_(value_type)
    return pa.array(ids, t)


def shard_digests(out: str) -> dict[str, str]:
    return {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(out)) if f.endswith(".parquet")}


def pack_digests(inputs, tmp_path, name: str, **kw) -> dict[str, str]:
    out = str(tmp_path / f"out-{name}")
    pack(inputs, Alignment(capacity=1024), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", batch_size=kw.pop("batch_size", 1024)), out,
         cache_dir=str(tmp_path / f"cache-{name}"), **kw)
    return shard_digests(out)


def write_jsonl(path, columns: dict[str, list]) -> str:
    with open(path, "w") as f:
        for vals in zip(*columns.values()):
            f.write(json.dumps(dict(zip(columns, vals))) + "\n")
    return str(path)


def test_same_bytes_from_every_format_and_list_type(tmp_path):
    ids = rows(3000)
    ref = pack_digests([write_jsonl(tmp_path / "r.jsonl", {"input_ids": ids})], tmp_path, "jsonl")
    assert ref
    pq.write_table(pa.table({"input_ids": list_array(ids)}), tmp_path / "a.parquet", row_group_size=700)
    pq.write_table(pa.table({"input_ids": list_array(ids, pa.int64(), large=True)}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"input_ids": list_array(ids, pa.uint16())}), tmp_path / "c.parquet")
    feather.write_feather(pa.table({"input_ids": list_array(ids)}), str(tmp_path / "d.arrow"))
    for name in ("a.parquet", "b.parquet", "c.parquet", "d.arrow"):
        assert pack_digests([str(tmp_path / name)], tmp_path, name) == ref, name
    # batch size changes record batches, never bytes
    assert pack_digests([str(tmp_path / "a.parquet")], tmp_path, "bs7", batch_size=7) == ref


def test_loss_mask_and_labels_columns(tmp_path, cache_dir):
    ids = [r if len(r) > 1 else r * 2 for r in rows(200, seed=1, max_len=40)]
    rng = np.random.default_rng(2)
    masks = [[1] + rng.integers(0, 2, len(r) - 1).tolist() for r in ids]
    for mk in masks:  # a target past the first token: one there alone is all masked (S45A-7)
        mk[-1] = 1
    masks[3] = [0] * len(ids[3])  # all masked: refused by default, skipped on request
    labels = [[t if m else -100 for t, m in zip(r, mk)] for r, mk in zip(ids, masks)]
    for col, vals in (("loss_mask", masks), ("labels", labels)):
        path = tmp_path / f"{col}.parquet"
        pq.write_table(pa.table({"input_ids": list_array(ids), col: pa.array(vals)}), path)
        with pytest.raises(PacktoolInputError, match=r"row 3: example with no loss tokens"):
            tokenize_to_cache([str(path)], TokenizeConfig(shape="tokens"), cache_dir, progress=False)
        c = tokenize_to_cache([str(path)], TokenizeConfig(shape="tokens", on_empty="skip"),
                              cache_dir, progress=False)
        r = c.read_rows(np.arange(c.num_rows))
        keep = [i for i in range(len(ids)) if i != 3]
        assert r.input_ids.tolist() == [t for i in keep for t in ids[i]]
        assert r.loss_mask.tolist() == [m for i in keep for m in masks[i]]
        assert c.num_loss_tokens == sum(map(sum, masks))


@pytest.mark.parametrize("table, match", [
    (lambda: pa.table({"input_ids": pa.array([[1, 2], [3, -1], [4]], pa.list_(pa.int64()))}),
     r"bad\.parquet, row 1: input_ids\[1\] is -1, outside 0\.\.2147483647 \(a token id is a non-negative int32\): fix the ids"),
    (lambda: pa.table({"input_ids": pa.array([[1], [2], [3, 2**31]], pa.list_(pa.int64()))}),
     r"bad\.parquet, row 2: input_ids\[1\] is 2147483648, outside 0\.\.2147483647"),
    (lambda: pa.table({"input_ids": pa.array([[1], None, [3]], pa.list_(pa.int32()))}),
     r"bad\.parquet, row 1: empty example: input_ids is null, missing or holds no tokens"),
    (lambda: pa.table({"input_ids": pa.array([[1], [2, None]], pa.list_(pa.int32()))}),
     r"bad\.parquet, row 1: input_ids holds a null value inside a row"),
    (lambda: pa.table({"input_ids": pa.array([[1, 2], [3, 4]]), "loss_mask": pa.array([[1, 1], [1]])}),
     r"bad\.parquet, row 1: loss_mask holds 1 value but input_ids 2: give loss_mask one value per token"),
    (lambda: pa.table({"input_ids": pa.array(["a", "b"])}),
     r"bad\.parquet, row 0: input_ids holds string, not a list of integers"),
])
def test_bad_rows_are_named(tmp_path, cache_dir, table, match):
    path = tmp_path / "bad.parquet"
    pq.write_table(table(), path)
    with pytest.raises(PacktoolInputError, match=match):
        tokenize_to_cache([str(path)], TokenizeConfig(shape="tokens"), cache_dir, progress=False)


def test_ingest_memory_is_bounded_by_a_row_group(tmp_path, cache_dir, monkeypatch):
    """Batches never exceed the configured size, and Arrow's allocations while ingesting stay
    near one row group's worth: a reader over the whole file held every decoded group."""
    groups, per_group = 40, 2000
    rng = np.random.default_rng(3)
    lens = rng.integers(50, 150, groups * per_group)
    off = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    vals = rng.integers(0, 50_000, int(off[-1]), dtype=np.int32)
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(off, vals)}), path,
                   row_group_size=per_group, compression="none")
    seen, peak = [], [0]
    inner = pipeline._tokens_batch

    def spy(batch, *a, **k):
        seen.append(batch.num_rows)
        peak[0] = max(peak[0], pa.total_allocated_bytes())
        return inner(batch, *a, **k)

    monkeypatch.setattr(pipeline, "_tokens_batch", spy)
    c = tokenize_to_cache([str(path)], TokenizeConfig(shape="tokens", batch_size=512), cache_dir,
                          progress=False)
    assert c.num_tokens == int(off[-1]) and sum(seen) == lens.size
    assert max(seen) <= 512
    decoded = vals.nbytes + off.nbytes  # the whole file, decoded
    assert peak[0] < decoded / 3, (peak[0], decoded)
