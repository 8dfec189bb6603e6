"""Issue 23 class 5 (nothing silent in content), S35 edges2: a lengths file holds one integer
length per sequence. A .npy of another shape (0-D, (N, 1), (N, 2), 3-D) was flattened into one
list of lengths, `1 2 3` on one .txt line read as three lengths, and a timedelta64 array passed
numpy's integer test: every shape and dtype but a 1-D list of integers is one line naming the
file, what it holds and the fix; in every format the planner reads."""
from __future__ import annotations

import ast
import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.planning.lengths import PlanInputError, load_lengths

SHAPES = [(), (3,), (3, 1), (1, 3), (2, 2), (2, 2, 2), (0, 3), (0,)]
DTYPES = ["int64", "int32", "uint16", ">i8", "bool", "float64", "float64 fractions", "float32", "complex128",
          "timedelta64[s]", "datetime64[s]", "<U3", "structured"]


def _array(shape, dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    base = np.arange(1, n + 1).reshape(shape)
    if dtype == "float64 fractions":
        return base + 0.5
    if dtype == "structured":
        out = np.zeros(shape, dtype=[("length", "i8")])
        out["length"] = base
        return out
    return base.astype(dtype)


def _refusal(path) -> str:
    """load_lengths' refusal of `path`: one line that opens with the file's name."""
    with pytest.raises(PlanInputError) as e:
        load_lengths(str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}"), msg
    return msg


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_npy_is_one_integer_length_per_sequence(tmp_path, shape, dtype):
    arr = _array(shape, dtype)
    p = tmp_path / "l.npy"
    np.save(p, arr)
    if shape == (3,) and arr.dtype.kind in "iu":
        assert load_lengths(str(p)).tolist() == [1, 2, 3]
        return
    msg = _refusal(p)
    if arr.size == 0 and arr.ndim == 1 and arr.dtype.kind in "iu":
        assert msg == f"{p}: holds no lengths (0 entries): give lengths a file of one length per sequence", msg
    else:  # what it holds and the fix, whatever is wrong with it
        assert f"{arr.dtype} of shape {arr.shape}" in msg and ("np.save" in msg or "1-D" in msg), msg


TXT_VALUES = {"int": "{}", "float": "{}.0", "fractions": "{}.5", "bool": "true", "exponent": "{}e1"}


@pytest.mark.parametrize("value", sorted(TXT_VALUES))
@pytest.mark.parametrize("shape", [(3, 1), (1, 3), (2, 2), (3, 2)], ids=str)
def test_a_txt_is_one_integer_length_per_line(tmp_path, shape, value):
    rows, cols = shape
    numbers = np.arange(1, rows * cols + 1).reshape(shape)
    p = tmp_path / "l.txt"
    p.write_text("".join(" ".join(TXT_VALUES[value].format(n) for n in line) + "\n" for line in numbers))
    if cols == 1 and value == "int":
        assert load_lengths(str(p)).tolist() == [1, 2, 3]
        return
    msg = _refusal(p)
    assert "line 1 holds" in msg and "one integer length per line" in msg, msg


TABLE_VALUES = {
    "int": [5, 6, 7], "whole floats": [5.0, 6.0, 7.0], "fractions": [5.5, 6.0, 7.0], "bool": [True, False, True],
    "lists (2-D)": [[5, 6], [7], [8]], "objects": [{"n": 5}, {"n": 6}, {"n": 7}], "strings": ["5", "6", "7"],
    "durations": pa.array([5, 6, 7], pa.duration("s")),
}


def _table_file(tmp_path, fmt: str, values):
    t = pa.table({"length": values if isinstance(values, pa.Array) else pa.array(values)})
    p = tmp_path / f"l.{fmt}"
    if fmt == "parquet":
        pq.write_table(t, p)
    elif fmt == "arrow":
        feather.write_feather(t, p)
    else:
        if isinstance(values, pa.Array):
            pytest.skip("JSON has no duration type")
        p.write_text("".join(json.dumps({"length": v}) + "\n" for v in values))
    return p


@pytest.mark.parametrize("value", sorted(TABLE_VALUES))
@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "arrow"])
def test_a_table_column_is_one_integer_length_per_row(tmp_path, fmt, value):
    p = _table_file(tmp_path, fmt, TABLE_VALUES[value])
    if value == "int":
        assert load_lengths(str(p)).tolist() == [5, 6, 7]
        return
    msg = _refusal(p)
    assert "column length holds" in msg and "must be integer" in msg, msg
    assert "1.0 is not" not in msg and "5.0 is not" not in msg, msg  # a whole number is not called no integer


runner = CliRunner()


@pytest.mark.parametrize("cmd", ["plan", "inspect"])
@pytest.mark.parametrize("case", ["(3, 1) int64", "() int64", "(2, 2) float64", "(3,) timedelta64[s]", "txt 1 2 3"])
def test_the_command_line_says_it_in_one_line_with_the_flag(tmp_path, cmd, case):
    if case.startswith("txt"):
        p = tmp_path / "l.txt"
        p.write_text("1 2 3\n")
    else:
        shape, dtype = case.rsplit(" ", 1)
        p = tmp_path / "l.npy"
        np.save(p, _array(ast.literal_eval(shape), dtype))
    r = runner.invoke(app, ["--json", cmd, "--lengths", str(p), "-C", "64"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1, r.stderr
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert err["kind"] == "input" and err["flag"] == "--lengths" and str(p) in err["message"], err
