"""Pre-tokenized rows with per-token side columns, and the check that a packed output holds
them position for position (tests/slabs/test_side_columns.py, tests/engines, tests/verification)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.slabs.format import SlabManifest

K = 5


def side_rows(n: int = 160, seed: int = 0, long: int = 700):
    """Pre-tokenized rows with `lp` (float32 per token) and `sup` (K int32 per token: the token
    first, -1 padded at the end); some rows longer than the capacity, so split cuts them."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 90, n)
    lens[::23] = long
    ids = [rng.integers(0, 5000, m).astype(np.int32) for m in lens]
    lp = [rng.standard_normal(m).astype(np.float32) for m in lens]
    sup = []
    for r in ids:
        s = np.full((r.size, K), -1, np.int32)
        s[:, 0] = r
        extra = rng.integers(0, K, r.size)
        for j in range(1, K):
            s[:, j] = np.where(extra >= j, r + 5000 + j, -1)
        sup.append(s)
    return ids, lp, sup


def write_input(path: str, ids, lp, sup, fixed: bool = False, loss_from_support: bool = False) -> str:
    """`loss_from_support`: a loss_mask column, 0 on the tokens without support (the rule)."""
    inner = pa.list_(pa.int32(), K) if fixed else pa.list_(pa.int32())
    cols = {"input_ids": pa.array([r.tolist() for r in ids], pa.list_(pa.int32()))}
    if loss_from_support:
        cols["loss_mask"] = pa.array([(np.asarray(s) != -1).any(axis=1).astype(np.uint8).tolist() for s in sup],
                                     pa.list_(pa.uint8()))
    t = pa.table({**cols, "lp": pa.array([r.tolist() for r in lp], pa.list_(pa.float32())),
                  "sup": pa.array([s.tolist() for s in sup], pa.list_(inner))})
    pq.write_table(t, path, row_group_size=50)
    return path


def check_output(out: str, ids, lp, sup) -> int:
    """Every slab: each segment's side values are its source's slice, every other position
    (layout gaps, tail pad, fill) holds the fill. Returns the pad positions seen."""
    m = SlabManifest.read(out)
    assert [c.to_dict() for c in m.side_columns] == [
        {"name": "lp", "dtype": "float32", "width": 1, "fill": 0.0, "kind": "values"},
        {"name": "sup", "dtype": "int32", "width": K, "fill": -1, "kind": "support"}]
    pads = 0
    for i in range(len(m.shards)):
        t = pq.read_table(m.shard_path(i))
        assert t.schema.field("sup").type == pa.list_(pa.list_(pa.int32(), K))
        for row in t.to_pylist():
            T = len(row["input_ids"])
            got_lp = np.asarray(row["lp"], np.float32)
            got_sup = np.asarray(row["sup"], np.int32).reshape(T, K)
            assert got_lp.size == T
            real = np.zeros(T, bool)
            cu = row["cu_seqlens_padded"]
            for j, (src, off, n) in enumerate(zip(row["source_index"], row["source_offset"], row["seq_lens"])):
                if src < 0:
                    continue
                a = cu[j]
                real[a:a + n] = True
                assert np.array_equal(got_lp[a:a + n], lp[src][off:off + n])
                assert np.array_equal(got_sup[a:a + n], sup[src][off:off + n])
                assert np.array_equal(row["input_ids"][a:a + n], ids[src][off:off + n])
            assert (got_lp[~real] == 0).all() and (got_sup[~real] == -1).all()
            pads += int((~real).sum())
    return pads
