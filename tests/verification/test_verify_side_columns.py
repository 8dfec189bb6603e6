"""verify on side columns (issue 21): a clean pack with a float32 and a K-wide int32 support
column verifies; each planted corruption (re-signed, so the checksum is not what catches it)
trips its own check, named in one line."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from side_support import K, plant_side, row_with_pad, set_column, side_rows, write_input
from slab_support import read_manifest, resign, save_manifest

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import verify


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("side")
    ids, lp, sup = side_rows(n=80, seed=3)
    inp = write_input(str(root / "in.parquet"), ids, lp, sup)
    out = str(root / "packed")
    pack([inp], Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
         TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",)), output=out,
         cache_dir=str(root / "cache"))
    return out


def test_the_clean_output_verifies(clean):
    r = verify(clean, workers=1)
    assert r.ok, r.problems


SIDE_CFG = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))


def _against(clean, tmp_path, name="in.parquet", cfg=SIDE_CFG):
    from packtool.verification.run import source_store
    src, _ = source_store([os.path.join(os.path.dirname(clean), name)], cfg, cache_dir=str(tmp_path / "c"))
    return verify(clean, source_dir=src, workers=1)


def test_against_the_source_compares_the_side_values(clean, tmp_path):
    r = _against(clean, tmp_path)
    assert r.ok and r.source_checked, r.problems
    assert not any("not compared" in n for n in r.notes), r.notes


def test_a_source_without_the_side_columns_says_they_were_not_compared(clean, tmp_path):
    r = _against(clean, tmp_path, cfg=TokenizeConfig(shape="tokens"))
    assert r.ok, r.problems
    assert any("lp, sup" in n and "not compared" in n for n in r.notes), r.notes


# one value of source row 5, token 2 changed: (column, the new value); -0.0 for 0.0 is a change
# of bits only, NaN is one that no float comparison sees
PLANTED = {"float": ("lp", 0.25), "negative_zero": ("lp", -0.0), "nan": ("lp", float("nan")),
           "support_row": ("sup", 12345)}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_side_value_in_the_source_fails_naming_column_slab_and_position(clean, tmp_path, case):
    col, value = PLANTED[case]
    ids, lp, sup = side_rows(n=80, seed=3)
    if case == "negative_zero":
        lp[5][2] = 0.0  # the output holds +0.0 there; the source says -0.0
        write_input(str(tmp_path / "zero.parquet"), ids, lp, sup)
        out = str(tmp_path / "packed")
        pack([str(tmp_path / "zero.parquet")], Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split"),
             SIDE_CFG, output=out, cache_dir=str(tmp_path / "cache"))
        clean = out
    if col == "lp":
        lp[5][2] = value
    else:
        sup[5][2][1] = value  # another candidate: the support rule still holds
    write_input(str(tmp_path / "changed.parquet"), ids, lp, sup)
    from packtool.verification.run import source_store
    src, _ = source_store([str(tmp_path / "changed.parquet")], SIDE_CFG, cache_dir=str(tmp_path / "c"))
    r = verify(clean, source_dir=src, workers=1)
    assert not r.ok and set(r.counts) == {"source_side"}, r.counts
    (p,) = [p for p in r.problems if p.check == "source_side"]
    shard, t = _table(clean)
    row, seg, pos = _where(t, 5, 2)
    assert (p.shard, p.row, p.segment) == (shard, row, seg), p
    assert f"side column '{col}'" in p.message and f"position {pos} " in p.message, p.message
    assert "changed.parquet row 5, source_index 5, token 2" in p.message and "\n" not in p.message, p.message
    assert (p.source_file, p.source_row) == (str(tmp_path / "changed.parquet"), 5)


def _where(t: pa.Table, src: int, tok: int) -> tuple[int, int, int]:
    """(slab, segment, position) of source row `src`'s token `tok`."""
    for r in range(t.num_rows):
        cu = t.column("cu_seqlens_padded")[r].as_py()
        for j, (s, o, n) in enumerate(zip(t.column("source_index")[r].as_py(), t.column("source_offset")[r].as_py(),
                                          t.column("seq_lens")[r].as_py())):
            if s == src and o <= tok < o + n:
                return r, j, cu[j] + tok - o
    raise AssertionError("not packed")


def _table(out):
    shard = read_manifest(out)["shards"][0]["file"]
    return shard, pq.read_table(os.path.join(out, shard))


CASES = {"side_dtype": "side_dtype", "side_width": "side_width", "side_length": "side_length",
         "side_null": "side_null", "side_fill_float": "side_fill", "side_fill_negative_zero": "side_fill",
         "side_fill_rows": "side_fill",
         "support_order": "side_support", "support_absent": "side_support", "support_twice": "side_support",
         "support_negative": "side_support", "support_empty_on_loss": "side_support",
         "support_repeated": "side_support",
         "side_nonfinite": "side_nonfinite", "missing": "schema",
         "undeclared": "schema", "side_null_row": "side_null", "side_null_support_row": "side_null",
         "side_null_support_value": "side_null"}


@pytest.mark.parametrize("case", list(CASES))
def test_each_planted_corruption_trips_its_check(clean, tmp_path, case):
    out = str(tmp_path / "p")
    shutil.copytree(clean, out)
    shard, t = _table(out)
    pq.write_table(plant_side(t, case), os.path.join(out, shard), compression="zstd")
    resign(out, shard)
    r = verify(out, workers=1)
    assert not r.ok and CASES[case] in r.counts, (case, r.counts)
    assert set(r.counts) <= {CASES[case], "schema", "shard_unreadable"}, r.counts
    msgs = [p.message for p in r.problems if p.check == CASES[case]]
    assert msgs and all("\n" not in m for m in msgs)
    if CASES[case] != "schema":
        assert ("'lp'" in msgs[0]) or ("'sup'" in msgs[0]), msgs


def test_an_empty_support_row_where_the_loss_skips_the_token_is_clean(clean, tmp_path):
    """A token the loss skips (a prompt token, a segment's first) may have no support."""
    out = str(tmp_path / "p")
    shutil.copytree(clean, out)
    shard, t = _table(out)
    sup, lm = t.column("sup").to_pylist(), t.column("loss_mask").to_pylist()
    r = row_with_pad(t)
    p = next(p for p in range(len(lm[r])) if not lm[r][p] and any(v != -1 for v in sup[r][p]))
    sup[r][p] = [-1] * K
    pq.write_table(set_column(t, "sup", sup), os.path.join(out, shard), compression="zstd")
    resign(out, shard)
    assert verify(out, workers=1).ok


@pytest.mark.parametrize("entry", [{"name": "lp", "dtype": "float16", "width": 1, "fill": 0.0},
                                   {"name": "lp", "dtype": "float32", "width": 1, "fill": 0.0, "kind": "support"},
                                   "lp"])
def test_a_damaged_side_columns_entry_is_a_manifest_problem(clean, tmp_path, entry):
    out = str(tmp_path / "p")
    shutil.copytree(clean, out)
    man = read_manifest(out)
    man["side_columns"][0] = entry
    save_manifest(out, man)
    r = verify(out, workers=1)
    assert set(r.counts) == {"manifest"}, r.counts
