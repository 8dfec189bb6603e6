"""Pre-tokenized rows with per-token side columns, and the check that a packed output holds
them position for position (tests/slabs/test_side_columns.py, tests/engines, tests/verification)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


@pytest.fixture(scope="module")
def side_output(tmp_path_factory) -> str:
    """A packed output with both kinds of side column, `lp` and `sup` (support), over several
    shards and row groups: some tokens without support (all -1, like prompt tokens; no loss on
    them), a NaN and a +inf log-prob kept as read. Read, never changed, by the tests that count
    what a consumer reads (tests/slabs/test_reader_reads.py) and what inspect reports of side
    columns (tests/inspection/test_inspect_side.py); a module imports it under its own name."""
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    from packtool.tokenize.config import TokenizeConfig
    root = tmp_path_factory.mktemp("side_output")
    ids, lp, sup = side_rows(n=60, seed=5)
    # a row of one token with a loss_mask trains nothing: refused as all masked (S45A-7)
    ids, lp, sup = (list(c) for c in zip(*[(i, v, s) for i, v, s in zip(ids, lp, sup) if i.size > 1]))
    for s in sup[::3]:
        s[: s.shape[0] // 2] = -1
    lp[1][-1], lp[4][0] = np.nan, np.inf
    inp = write_input(str(root / "in.parquet"), ids, lp, sup, loss_from_support=True)
    out = str(root / "packed")
    pack([inp], Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",)), output=out,
         cache_dir=str(root / "cache"), shard_tokens=2048)
    return out


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


def set_column(t: pa.Table, name: str, values: list, typ=None) -> pa.Table:
    i = t.schema.get_field_index(name)
    return t.set_column(i, name, pa.array(values, typ or t.schema.field(i).type))


def pad_and_real(t: pa.Table, row: int) -> tuple[int, int]:
    """(a pad position, a real token position) of slab `row`."""
    cu, sl = t.column("cu_seqlens_padded")[row].as_py(), t.column("seq_lens")[row].as_py()
    real = np.zeros(cu[-1], bool)
    for a, n in zip(cu[:-1], sl):
        real[a:a + n] = True
    return int(np.flatnonzero(~real)[0]), int(np.flatnonzero(real)[1])


def row_with_pad(t: pa.Table) -> int:
    for r in range(t.num_rows):
        if sum(t.column("seq_lens")[r].as_py()) < len(t.column("input_ids")[r]):
            return r
    raise AssertionError("no slab with a pad")


def plant_side(t: pa.Table, case: str, vocab: int = 2**31 - 1) -> pa.Table:
    """Shard table `t` of a side-column pack (`lp`, `sup`) with one damage `case` planted (the
    cases of tests/verification/test_verify_side_columns.py; tests/slabs/test_consumers_refuse.py)."""
    r = row_with_pad(t)
    pad, tok = pad_and_real(t, r)
    lp, sup, ids = t.column("lp").to_pylist(), t.column("sup").to_pylist(), t.column("input_ids").to_pylist()
    if case == "side_dtype":
        return set_column(t, "lp", lp, pa.list_(pa.float64()))
    if case == "side_width":
        return set_column(t, "sup", [[row[:-1] for row in s] for s in sup], pa.list_(pa.list_(pa.int32(), K - 1)))
    if case == "side_length":
        lp[r] = lp[r][:-1]
        return set_column(t, "lp", lp)
    if case == "side_null":
        lp[r][tok] = None
        return set_column(t, "lp", lp)
    if case == "side_null_row":  # the whole list: no value for any of the slab's tokens
        lp[r] = None
        return set_column(t, "lp", lp)
    if case == "side_null_support_row":  # one token's K-wide row
        sup[r][tok] = None
        return set_column(t, "sup", sup)
    if case == "side_null_support_value":  # one of a token's K candidates
        sup[r][tok][1] = None
        return set_column(t, "sup", sup)
    if case == "side_fill_float":
        lp[r][pad] = 0.5
        return set_column(t, "lp", lp)
    if case == "side_fill_negative_zero":  # equal to the fill 0.0, not its bits
        lp[r][pad] = -0.0
        return set_column(t, "lp", lp)
    if case == "side_fill_rows":
        sup[r][pad] = [3] + [-1] * (K - 1)
        return set_column(t, "sup", sup)
    token = ids[r][tok]
    if case == "support_order":
        sup[r][tok] = [-1, token] + [-1] * (K - 2)
    elif case == "support_absent":
        sup[r][tok] = [token + 1] + [-1] * (K - 1)
    elif case == "support_twice":
        sup[r][tok] = [token, token] + [-1] * (K - 2)
    elif case == "support_negative":
        sup[r][tok] = [token, -7] + [-1] * (K - 2)
    elif case == "support_repeated":  # a candidate other than the token twice: the scorer refuses it (S42-1)
        sup[r][tok] = [token, token + 1, token + 1] + [-1] * (K - 3)
    elif case == "support_outside":  # an id at the manifest's vocab_size (`vocab` below): the scorer's bound
        sup[r][tok] = [token, vocab] + [-1] * (K - 2)
    elif case == "support_empty_on_loss":
        lm = t.column("loss_mask")[r].as_py()
        sup[r][next(p for p in range(len(lm)) if lm[p])] = [-1] * K
    elif case == "side_nonfinite":  # a NaN the input did not hold (the manifest counts 0)
        lp[r][tok] = float("nan")
        return set_column(t, "lp", lp)
    elif case == "missing":
        return t.drop_columns(["sup"])
    elif case == "undeclared":
        return t.append_column("extra", pa.array(lp, pa.list_(pa.float32())))
    return set_column(t, "sup", sup)
