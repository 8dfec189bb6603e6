"""Every consumer decodes each column of a row group once over its whole read (open, checks,
rows, report), side columns included: the checks read nothing a second time (issue 23 class 2:
a cost a user never notices). Before: inspect read the side columns, seq_lens and
cu_seqlens_padded again for its side figures, and every reader decoded tail_pad and fill_pad
at open and again with each row group. That the checks still refuse what they refused:
tests/slabs/test_consumers_refuse.py."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from read_counts import count_decodes
from side_support import K, side_rows, write_input

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.format import SlabManifest
from packtool.tokenize.config import TokenizeConfig


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("once")
    ids, lp, sup = side_rows(n=60, seed=5)
    for s in sup[::3]:  # tokens without support: all -1, like prompt tokens
        s[: s.shape[0] // 2] = -1
    lp[1][-1], lp[4][0] = np.nan, np.inf
    inp = write_input(str(root / "in.parquet"), ids, lp, sup, loss_from_support=True)
    out = str(root / "packed")
    pack([inp], Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",)), output=out,
         cache_dir=str(root / "cache"), shard_tokens=2048)
    return out


def _megatron(out, groups):
    from packtool.megatron.dataset import PackedSlabDataset
    ds = PackedSlabDataset(out, grad_accum=2, row_group_cache=groups)  # every group stays decoded
    return sum(st.real_tokens for st in ds.steps(max_steps=ds.steps_per_epoch()))


def _hf(out, groups):
    from packtool.hf import SlabDataset
    ds = SlabDataset(out, row_group_cache=groups)
    return sum(int(ds[i]["input_ids"].size) for i in range(len(ds)))


def _inspect(out, groups):
    from packtool.inspection.packed import inspect_packed
    return inspect_packed(out, what_if=False)


CONSUMERS = {"megatron-dataset": _megatron, "hf": _hf, "inspect": _inspect}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_each_column_is_decoded_once_per_row_group(packed, consumer, monkeypatch):
    sm = SlabManifest.read(packed)
    files = [pq.ParquetFile(sm.shard_path(i)) for i in range(len(sm.shards))]
    groups = sum(f.num_row_groups for f in files)
    columns = files[0].schema_arrow.names
    assert groups >= 3 and {"lp", "sup"} <= set(columns)
    seen = count_decodes(monkeypatch)
    CONSUMERS[consumer](packed, groups)
    assert dict(seen) == {c: groups for c in columns}


def _direct(out: str):
    """The side figures counted straight from the whole table, row by row."""
    t = pq.read_table(out)
    n = real_n = 0
    fill, on_real, odd = {"lp": 0, "sup": 0}, {"lp": 0, "sup": 0}, [0, 0]
    for row in t.to_pylist():
        T = len(row["input_ids"])
        real = np.zeros(T, bool)
        for a, m in zip(row["cu_seqlens_padded"][:-1], row["seq_lens"]):
            real[a:a + m] = True
        lp = np.asarray(row["lp"], np.float32)
        odd[0] += int(np.isnan(lp).sum())
        odd[1] += int(np.isinf(lp).sum())
        for k, f in (("lp", lp == 0.0), ("sup", (np.asarray(row["sup"]).reshape(T, K) == -1).all(axis=1))):
            fill[k] += int(f.sum())
            on_real[k] += int((f & real).sum())
        n, real_n = n + T, real_n + int(real.sum())
    return n, real_n, fill, on_real, odd


def test_inspect_side_figures_from_the_checked_groups(packed):
    """The figures inspect now takes from the groups the checks decoded are the whole table's."""
    r = _inspect(packed, 0)
    n, real_n, fill, on_real, odd = _direct(packed)
    got = {c.name: c for c in r.side_columns}
    assert set(got) == {"lp", "sup"}
    for name, c in got.items():
        assert (c.positions, c.real_tokens, c.fill_positions, c.fill_on_real) == (n, real_n, fill[name], on_real[name])
    assert (got["lp"].nan, got["lp"].inf, got["sup"].nan, got["sup"].inf) == (odd[0], odd[1], 0, 0) == (1, 1, 0, 0)

