"""Per-token side columns through pack (issue 21): a scalar float32 and a K-wide int32 column
placed position for position like input_ids at layouts with pads between and after segments,
split chunks carrying their slice, truncate too, in every write path (global plan, spilled
plan, Ray); a row whose side column length is not its input_ids' is refused in one line."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from side_support import K, check_output, side_rows, write_input
from slab_support import format_reader

from packtool.cli.app import app
from packtool.slabs.format import SlabManifest

def _pack(tmp_path, inp: str, name: str, *flags: str):
    out = str(tmp_path / name)
    res = CliRunner().invoke(app, ["pack", inp, "--shape", "tokens", "--side-columns", "lp",
                                   "--support-columns", "sup", "--output", out, "--cache-dir",
                                   str(tmp_path / "cache"), "--no-progress", "--json", *flags])
    return out, res


SETTINGS = {
    "tp2-cp2": ["--tp", "2", "--cp", "2", "--max-tokens", "256"],
    "cp4-fp8": ["--cp", "4", "--fp8", "blockwise", "--max-tokens", "512"],
    "fixed-length": ["--tp", "4", "--max-tokens", "256", "--fixed-length", "256"],
}


@pytest.mark.parametrize("plan_rows", ["0", "64"], ids=["global-plan", "spilled-plan"])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_round_trip_with_pads_and_split_chunks(tmp_path, setting, plan_rows):
    ids, lp, sup = side_rows()
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup, fixed=setting == "cp4-fp8")
    out, res = _pack(tmp_path, inp, "out", "--overflow", "split", "--plan-shard-rows", plan_rows,
                     "--shard-tokens", "4096", *SETTINGS[setting])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["overflow"]["chunks"] > 0  # split chunks carry their slice
    assert check_output(out, ids, lp, sup) > 0  # pads between and after segments hold the fill


def test_truncate_keeps_the_kept_slice(tmp_path):
    ids, lp, sup = side_rows(n=60, seed=1)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    out, res = _pack(tmp_path, inp, "out", "--overflow", "truncate", "--max-tokens", "128", "--tp", "2")
    assert res.exit_code == 0, res.output
    assert check_output(out, ids, lp, sup) > 0


def test_cache_key_changes_with_the_side_column_list(tmp_path):
    from packtool.tokenize.config import TokenizeConfig
    from packtool.tokenize.pipeline import tokenize_to_cache
    ids, lp, sup = side_rows(n=20)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    caches = [tokenize_to_cache([inp], TokenizeConfig(shape="tokens", side_columns=cols), str(tmp_path / "c"),
                                progress=False) for cols in ((), ("lp",), ("lp", "sup"), ("lp", "sup:int64"))]
    assert len({c.fingerprint for c in caches}) == 4
    assert [c.name for c in caches[2].side_columns] == ["lp", "sup"] and caches[3].side_columns[1].dtype == "int64"
    sums = caches[2].meta["checksums"]
    assert {"flat/side-000.bin", "flat/side-001.bin"} <= set(sums)  # checksummed like the tokens
    again = tokenize_to_cache([inp], TokenizeConfig(shape="tokens", side_columns=("lp", "sup")),
                              str(tmp_path / "c"), progress=False)
    assert again.reused and again.fingerprint == caches[2].fingerprint
    with open(os.path.join(caches[2].root, "flat", "side-001.bin"), "r+b") as f:  # a flipped byte
        f.seek(7)
        b = f.read(1)
        f.seek(7)
        f.write(bytes([b[0] ^ 1]))
    rebuilt = tokenize_to_cache([inp], TokenizeConfig(shape="tokens", side_columns=("lp", "sup")),
                                str(tmp_path / "c"), progress=False)
    assert not rebuilt.reused


def _mismatch(kind: str, ids, lp, sup):
    if kind == "scalar-short":
        lp[7] = lp[7][:-1]
    elif kind == "scalar-long":
        lp[7] = np.append(lp[7], np.float32(1))
    elif kind == "rows-short":
        sup[7] = sup[7][:-1]
    return 7


@pytest.mark.parametrize("kind", ["scalar-short", "scalar-long", "rows-short", "width"])
def test_a_length_mismatch_is_one_line_and_writes_nothing(tmp_path, kind):
    ids, lp, sup = side_rows(n=20)
    row = _mismatch(kind, ids, lp, sup)
    if kind == "width":  # one token of row 7 holds K+1 candidates
        t = pa.table({"input_ids": pa.array([r.tolist() for r in ids], pa.list_(pa.int32())),
                      "lp": pa.array([r.tolist() for r in lp], pa.list_(pa.float32())),
                      "sup": pa.array([s.tolist() if i != 7 else s.tolist()[:1] + [s.tolist()[1] + [3]] + s.tolist()[2:]
                                       for i, s in enumerate(sup)], pa.list_(pa.list_(pa.int32())))})
        inp = str(tmp_path / "in.parquet")
        pq.write_table(t, inp)
    else:
        inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    out, res = _pack(tmp_path, inp, "out", "--max-tokens", "512")
    assert res.exit_code == 2, res.output
    err = json.loads([ln for ln in res.output.splitlines() if ln.startswith("{")][-1])["error"]
    msg = err["message"]
    assert "\n" not in msg and "Traceback" not in res.output
    assert [ln for ln in res.output.splitlines() if ln.startswith("error:")] == [f"error: {msg}"]
    assert inp in msg and f"row {row}" in msg and ("side column lp" in msg or "side column sup" in msg), msg
    assert not os.path.exists(out)
    cache = tmp_path / "cache"
    assert not cache.exists() or not [n for n in os.listdir(cache) if not n.startswith(".")]


def test_side_columns_need_pretokenized_rows(tmp_path):
    inp = str(tmp_path / "in.jsonl")
    with open(inp, "w") as f:
        f.write('{"text": "hello"}\n')
    res = CliRunner().invoke(app, ["pack", inp, "--tokenizer", "x", "--side-columns", "lp", "-o",
                                   str(tmp_path / "o"), "--json"])
    assert res.exit_code == 2


@pytest.mark.parametrize("flags", [["--side-columns", "input_ids"], ["--side-columns", "a:float16"],
                                   ["--side-columns", "a,a"], ["--support-columns", "lp"]])
def test_bad_side_column_flags_are_refused(tmp_path, flags):
    ids, lp, sup = side_rows(n=5)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    res = CliRunner().invoke(app, ["pack", inp, "--shape", "tokens", *flags, "-o", str(tmp_path / "o"),
                                   "--cache-dir", str(tmp_path / "c"), "--json"])
    assert res.exit_code == 2, res.output
    assert not os.path.exists(tmp_path / "o")


def test_the_standalone_reader_and_plain_readers_see_the_side_columns(tmp_path):
    """FORMAT.md's reader (pyarrow + numpy only) slices side columns like input_ids for every
    CP rank; pyarrow, datasets, DuckDB and polars open the output with them."""
    from packtool.layout import cp_rank_index
    ids, lp, sup = side_rows(n=60)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    out, res = _pack(tmp_path, inp, "out", "--cp", "2", "--tp", "2", "--max-tokens", "256", "--overflow", "split")
    assert res.exit_code == 0, res.output
    mod = format_reader()
    m = SlabManifest.read(out)
    t = pq.read_table(m.shard_path(0))
    for row in range(min(t.num_rows, 4)):
        slab = t.slice(row, 1).to_pylist()[0]
        cu = np.asarray(slab["cu_seqlens_padded"], np.int64)
        for r in range(2):
            _, _, _, side = mod.read_slab_for_cp_rank(out, m.shards[0], row, r)
            idx = cp_rank_index(cu[:-1], np.diff(cu), 2, r)
            assert np.array_equal(side["lp"], np.asarray(slab["lp"], np.float32)[idx])
            assert np.array_equal(side["sup"], np.asarray(slab["sup"], np.int32)[idx])
            assert side["sup"].shape == (idx.size, K)
    whole = pq.read_table(out)
    n_tok = sum(len(x) for x in whole.column("input_ids").to_pylist())
    assert sum(len(x) for x in whole.column("lp").to_pylist()) == n_tok
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_dir=out, cache_dir=str(tmp_path / "hf"))["train"]
    assert ds.num_rows == whole.num_rows and set(ds.column_names) >= {"lp", "sup"}
    assert sorted(map(len, ds["sup"])) == sorted(map(len, whole.column("input_ids").to_pylist()))
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.connect().execute(f"SELECT sum(len(lp)), sum(len(sup)), min(len(sup[1])) "
                                   f"FROM read_parquet('{out}/*.parquet')").fetchall()[0]
    assert got == (n_tok, n_tok, K)
    pl = pytest.importorskip("polars")
    df = pl.read_parquet(f"{out}/*.parquet")
    assert df["lp"].list.len().sum() == n_tok and df["sup"].list.len().sum() == n_tok
