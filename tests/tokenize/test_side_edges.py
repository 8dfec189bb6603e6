"""Side values at the edges of what a column can hold (stranger trial, end of stop 27), each
refused in one line naming file, row, token and column (also --json's `column` and `token`),
exit 2, nothing written, no cache folder left:
  - a null value (width 1 and K-wide), a K-wide token of the wrong width, an int out of range,
    a fraction in an int column: --json names the column and the token;
  - a uint64 at or above 2^63 was told to "pin int64", which cannot hold it: the line says
    what can (int64 in the input, or float64 rounded);
  - a bool column became int32 silently: refused unless pinned (FORMAT.md), pinned it is 1/0."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

IDS = [[1, 2, 3], [4, 5]]
# case -> (column values, arrow type, --side-columns spec, the row, the token, words the line must hold)
CASES = {
    "null value": ([[0.1, None, 0.3], [1.0, 2.0]], pa.list_(pa.float32()), "v", 0, 1, ["null"]),
    "null candidate": ([[[1, 2], [3, 4], [5, 6]], [[1, 2], [3, None]]], pa.list_(pa.list_(pa.int64())), "v", 1, 1,
                       ["null"]),
    "K-wide wrong width": ([[[1, 2], [3, 4], [5, 6]], [[1, 2], [3]]], pa.list_(pa.list_(pa.int64())), "v", 1, 1,
                           ["holds 1 values, not 2"]),
    "int32 out of range": ([[1, 2, 3], [4, 2**40]], pa.list_(pa.int64()), "v:int32", 1, 1,
                           ["outside int32", "v:int64 in --side-columns"]),
    "fraction in an int column": ([[1.0, 2.5, 3.0], [4.0, 5.0]], pa.list_(pa.float64()), "v:int32", 0, 1,
                                  ["2.5", "not truncated"]),
    "uint64 above int64": ([[1, 2, 3], [4, 2**63]], pa.list_(pa.uint64()), "v", 1, 1,
                           ["9223372036854775808", "outside int64", "v:float64 in --side-columns", "int64 in the input"]),
    "K-wide uint64 above int64": ([[[1, 2], [3, 4], [5, 6]], [[1, 2], [3, 2**64 - 1]]],
                                  pa.list_(pa.list_(pa.uint64())), "v", 1, 1, ["18446744073709551615", "v:float64 in --side-columns"]),
    "bool unpinned": ([[True, False, True], [False, True]], pa.list_(pa.bool_()), "v", 0, None,
                      ["booleans", "v:int32 in --side-columns"]),
}


def _input(tmp_path, values, typ) -> str:
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"input_ids": IDS, "v": pa.array(values, typ)}), path)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_naming_column_row_and_token(tmp_path, monkeypatch, case):
    values, typ, spec, row, token, words = CASES[case]
    monkeypatch.chdir(tmp_path)
    src = _input(tmp_path, values, typ)
    r = CliRunner().invoke(app, ["pack", src, "--side-columns", spec, "-o", "out", "--cache-dir", "made/cache",
                                 "--json", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "side column v" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    if "int64" in lines[0] and "above" in case:
        assert "v:int64" not in lines[0], lines[0]  # int64 cannot hold it
    err = json.loads(r.stdout)["error"]
    assert (err["path"], err["row"], err["column"], err.get("token")) == (src, row, "v", token), err
    assert sorted(os.listdir(tmp_path)) == ["rows.parquet"]  # no output, no --cache-dir folder made


@pytest.mark.parametrize("spec,dtype,want", [("v:int32", np.int32, [[1, 0, 1], [0, 1]]),
                                             ("v:float32", np.float32, [[1.0, 0.0, 1.0], [0.0, 1.0]])])
def test_a_pinned_bool_column_is_kept_as_1_and_0(tmp_path, spec, dtype, want):
    src = _input(tmp_path, [[True, False, True], [False, True]], pa.list_(pa.bool_()))
    out = str(tmp_path / "out")
    r = CliRunner().invoke(app, ["pack", src, "--side-columns", spec, "-o", out, "--cache-dir",
                                 str(tmp_path / "c"), "-q", "--json"])
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    ids, vals = (sum(t.column(c).to_pylist(), []) for c in ("input_ids", "v"))
    assert dict(zip(ids, vals)) == dict(zip(sum(IDS, []), sum(want, [])))  # ids are distinct: id -> value
    assert t.schema.field("v").type == pa.list_(pa.from_numpy_dtype(dtype))


@pytest.mark.parametrize("face", ["cli", "library"])
def test_doubles_after_float32_rows_ask_for_a_pinned_type(tmp_path, monkeypatch, face):
    """A column read as float32 in one file and float64 in a later one: the type is the user's
    call (rounding or not), refused in one line naming the pin; this line once raised a NameError."""
    monkeypatch.chdir(tmp_path)
    srcs = []
    for i, typ in enumerate((pa.float32(), pa.float64())):
        srcs.append(str(tmp_path / f"rows{i}.parquet"))
        pq.write_table(pa.table({"input_ids": IDS, "v": pa.array([[0.5, 1.5, 2.5], [3.5, 4.5]],
                                                                 pa.list_(typ))}), srcs[-1])
    if face == "cli":
        r = CliRunner().invoke(app, ["pack", *srcs, "--side-columns", "v", "-o", "out", "--cache-dir",
                                     "made/cache", "-q"])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1, r.stderr
        line, flag = lines[0], "--side-columns"
    else:
        import packtool
        from packtool.errors import PacktoolError
        with pytest.raises(PacktoolError) as e:
            packtool.pack(srcs, output="out", tokenize=packtool.TokenizeConfig(side_columns=("v",)),
                          cache_dir="made/cache")
        line, flag = str(e.value), "side_columns"
    for w in ("side column v", srcs[1], "doubles", f"v:float32 or v:float64 in {flag}"):
        assert w in line, (w, line)
    assert sorted(os.listdir(tmp_path)) == ["rows0.parquet", "rows1.parquet"]
