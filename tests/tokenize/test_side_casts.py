"""Every narrowing cast pack makes of a side value (S31-21): into the column's dtype (pinned as
NAME:DTYPE, or the natural one of a wider input type), each value is kept exactly or refused.

  - a finite float that the cast would make +-inf (1e300 into float32) is refused: one line
    naming the file, row, token, column, the value and the pin that holds it; it once became
    inf silently, and the NaN/inf warning then said the input held it;
  - an integer the float dtype holds only rounded (16777217 into float32, 2^53+1 into float64)
    is refused the same way; one it holds exactly (2^25) is kept;
  - a float at an int dtype's top (2^63 into int64, 2^31 into int32 from float32) is refused:
    numpy compared it with iinfo.max rounded to 2^63 and the cast wrapped it to -2^63;
  - NaN / +-inf genuinely in the input are kept in a float column and reported as the input's
    (--json `side_nonfinite`, first one at its row and token), refused in an int column;
  - a double rounded to float32 is what pinning float32 means: kept, rounded, no word;
  - and no raw numpy RuntimeWarning ("overflow encountered in cast") reaches the user.
"""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

IDS = [[1, 2, 3], [4, 5]]
INF, NAN = float("inf"), float("nan")
# cast -> (input arrow type, --side-columns spec, the column's dtype, width)
CASTS = {
    "float64->float32": (pa.float64(), "v:float32", np.float32, 1),
    "float64->float32 K-wide": (pa.float64(), "v:float32", np.float32, 2),
    "float16->float32": (pa.float16(), "v", np.float32, 1),
    "int64->float32": (pa.int64(), "v:float32", np.float32, 1),
    "int32->float32": (pa.int32(), "v:float32", np.float32, 1),
    "uint64->float32": (pa.uint64(), "v:float32", np.float32, 1),
    "int64->float64": (pa.int64(), "v:float64", np.float64, 1),
    "uint64->float64": (pa.uint64(), "v:float64", np.float64, 1),
    "float64->int32": (pa.float64(), "v:int32", np.int32, 1),
    "float32->int32": (pa.float32(), "v:int32", np.int32, 1),
    "float64->int64": (pa.float64(), "v:int64", np.int64, 1),
    "float32->int64": (pa.float32(), "v:int64", np.int64, 1),
    "int64->int32": (pa.int64(), "v:int32", np.int32, 1),
    "int64->int32 K-wide": (pa.int64(), "v:int32", np.int32, 2),
    "uint64->int64": (pa.uint64(), "v", np.int64, 1),
}
# (cast, what) -> (the value at row 1 token 1, "kept" or the words of the refusal)
CASES = {
    ("float64->float32", "exact"): (0.5, "kept"),
    ("float64->float32", "rounded"): (0.1, "kept"),
    ("float64->float32", "overflow"): (1e300, ["1e+300", "inf", "v:float64 in --side-columns"]),
    ("float64->float32", "input inf"): (-INF, "kept"),
    ("float64->float32", "input nan"): (NAN, "kept"),
    ("float64->float32 K-wide", "exact"): (0.25, "kept"),
    ("float64->float32 K-wide", "overflow"): (-1e39, ["-1e+39", "inf", "v:float64 in --side-columns"]),
    ("float64->float32 K-wide", "input nan"): (NAN, "kept"),
    ("float16->float32", "exact"): (65504.0, "kept"),
    ("float16->float32", "input inf"): (INF, "kept"),
    ("int64->float32", "exact"): (2**25, "kept"),
    ("int64->float32", "inexact integer"): (16777217, ["16777217", "2^24", "v:float64 or v:int64 in --side-columns"]),
    ("int32->float32", "exact"): (-2**24, "kept"),
    ("int32->float32", "inexact integer"): (-16777217, ["-16777217", "2^24", "v:float64 or v:int64"]),
    ("uint64->float32", "exact"): (2**63, "kept"),
    ("uint64->float32", "inexact integer"): (2**64 - 1, ["18446744073709551615", "2^24"]),
    ("int64->float64", "exact"): (-2**63, "kept"),
    ("int64->float64", "inexact integer"): (2**53 + 1, ["9007199254740993", "2^53", "v:int64 in --side-columns"]),
    ("int64->float64", "inexact integer at the top"): (2**63 - 1, ["9223372036854775807", "2^53"]),
    ("uint64->float64", "exact"): (2**63 + 2**11, "kept"),
    ("uint64->float64", "inexact integer"): (2**64 - 1, ["18446744073709551615", "2^53"]),
    ("float64->int32", "exact"): (-2.0**31, "kept"),
    ("float64->int32", "overflow"): (2.0**31, ["outside int32", "v:int64 in --side-columns"]),
    ("float64->int32", "input nan"): (NAN, ["nan", "not truncated"]),
    ("float32->int32", "exact"): (2.0**30, "kept"),
    ("float32->int32", "overflow"): (2.0**31, ["outside int32", "v:int64 in --side-columns"]),
    ("float32->int32", "input inf"): (INF, ["inf", "not truncated"]),
    ("float64->int64", "exact"): (-2.0**63, "kept"),
    ("float64->int64", "overflow"): (2.0**63, ["9223372036854775808", "outside int64", "v:float64 in --side-columns"]),
    ("float32->int64", "overflow"): (2.0**63, ["9223372036854775808", "outside int64"]),
    ("int64->int32", "exact"): (2**31 - 1, "kept"),
    ("int64->int32", "overflow"): (-2**31 - 1, ["-2147483649", "outside int32", "v:int64 in --side-columns"]),
    ("int64->int32 K-wide", "overflow"): (2**40, ["1099511627776", "outside int32"]),
    ("uint64->int64", "exact"): (2**63 - 1, "kept"),
    ("uint64->int64", "overflow"): (2**63, ["9223372036854775808", "outside int64"]),
}


def _column(cast: str, value) -> pa.Array:
    """Row 1 token 1 holds `value` (every value of that token, K-wide), the rest small."""
    typ, _, _, width = CASTS[cast]
    flat = [[1, 2, 3], [4, value]]
    flat = [[[x] * width for x in row] if width > 1 else row for row in flat]
    np_t = typ.to_pandas_dtype()
    leaves = np.array([x for row in flat for x in (sum(row, []) if width > 1 else row)], dtype=object)
    with np.errstate(all="ignore"):  # the test's own float16 input
        values = pa.array(leaves.astype(np_t) if np_t == np.float16 else leaves.tolist(), typ)
    if width > 1:
        values = pa.FixedSizeListArray.from_arrays(values, width)
    return pa.ListArray.from_arrays(pa.array([0, 3, 5], pa.int32()), values)


def _pack(tmp_path, cast: str, value):
    src = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"input_ids": IDS, "v": _column(cast, value)}), src)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = CliRunner().invoke(app, ["pack", src, "--side-columns", CASTS[cast][1], "-o", "out", "--cache-dir",
                                     "made/cache", "-C", "64", "--json", "-q"])
    raw = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert not raw and "RuntimeWarning" not in r.output and "encountered" not in r.output, (raw, r.output)
    return src, r


@pytest.mark.parametrize("cast,what", sorted(CASES))
def test_a_side_value_is_kept_exactly_or_refused(tmp_path, monkeypatch, cast, what):
    value, outcome = CASES[cast, what]
    monkeypatch.chdir(tmp_path)
    src, r = _pack(tmp_path, cast, value)
    _, _, dtype, width = CASTS[cast]
    if outcome == "kept":
        assert r.exit_code == 0, r.output
        got = pq.read_table("out").column("v").to_pylist()
        by_id = dict(zip(sum(IDS, []), sum(got, [])))
        want = np.array(value, dtype)  # the value as the column's dtype: a double rounded to float32
        assert np.array(by_id[5], dtype).tobytes() == (np.tile(want, width) if width > 1 else want).tobytes()
        if what == "exact":
            assert want.item() == value, (want, value)  # the test's own check: the dtype holds it
        odd = json.loads(r.stdout).get("side_nonfinite", {})
        if np.isfinite(value):
            assert odd == {}, odd  # nothing blamed on the input
        else:
            e = odd["v"]
            assert (e["nan"], e["inf"]) == ((width, 0) if np.isnan(value) else (0, width)), e
            assert (e["first"]["file"], e["first"]["row"], e["first"]["token"]) == (src, 1, 1), e
        return
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "side column v" in lines[0] and src in lines[0], r.stderr
    assert "warning:" not in r.stderr, r.stderr  # no "the input holds inf" for an inf the cast made
    for w in outcome:
        assert w in lines[0], (w, lines[0])
    err = json.loads(r.stdout)["error"]
    assert (err["path"], err["row"], err["column"], err.get("token")) == (src, 1, "v", 1), err
    assert sorted(os.listdir(tmp_path)) == ["rows.parquet"]  # no output, no cache folder made
