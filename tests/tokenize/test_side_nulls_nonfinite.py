"""Side values that pack must not pass silently (stranger F7): a null anywhere in a side column
(a null row, a null value, a null token list, a null candidate) is refused in one line naming
the file, the row, the token and the column, exit 2, no output, no cache entry; a row that
`--on-empty skip` drops may be null. NaN / +-inf floats are kept as read and counted: pack's
warning, `--json`, the manifest's stats, and `verify` / `inspect` counting them again."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
IDS = [[5, 6, 7], [1, 2, 3], [8, 9]]
LP = [[0.0, -1.0, -2.0], [0.0, -0.5, -0.25], [0.0, -3.0]]
SUP = [[[5, -1], [6, 9], [7, -1]], [[1, -1], [2, -1], [3, 4]], [[8, -1], [9, -1]]]
NULLS = {  # case -> (lp, sup, the row, the token or None, words of the message)
    "row": ([LP[0], None, LP[2]], SUP, 1, None, ("side column lp", "the row is null")),
    "value": ([LP[0], [0.0, None, -0.25], LP[2]], SUP, 1, 1, ("side column lp", "the value of token 1 is null")),
    "token_list": (LP, [SUP[0], [[1, -1], None, [3, 4]], SUP[2]], 1, 1, ("side column sup", "value list of token 1")),
    "candidate": (LP, [SUP[0], [[1, -1], [2, -1], [3, None]], SUP[2]], 1, 2, ("side column sup", "a value of token 2")),
    "all_null_column": ([[None] * 3, [None] * 3, [None] * 2], SUP, 0, 0, ("side column lp", "the value of token 0")),
}


def _write(path, lp, sup, ids=IDS, lp_type=pa.list_(pa.float32())):
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "lp": pa.array(lp, lp_type),
                             "sup": pa.array(sup, pa.list_(pa.list_(pa.int32())))}), path)
    return str(path)


def _pack(tmp_path, src, *extra, out="out"):
    return runner.invoke(app, ["pack", src, "-o", str(tmp_path / out), "--cache-dir", str(tmp_path / "cache"),
                               "-C", "64", "-q", "--side-columns", "lp", "--support-columns", "sup", *extra])


@pytest.mark.parametrize("case", sorted(NULLS))
def test_a_null_side_value_is_refused_naming_file_row_token_and_column(tmp_path, case):
    lp, sup, row, token, words = NULLS[case]
    typ = pa.list_(pa.null()) if case == "all_null_column" else pa.list_(pa.float32())
    src = _write(tmp_path / "in.parquet", lp, sup, lp_type=typ)
    r = _pack(tmp_path, src)
    assert r.exit_code == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(w in lines[0] for w in ("in.parquet", f"row {row}", "does not fill nulls", *words)), lines[0]
    assert not os.path.exists(tmp_path / "out")
    assert not [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs if f == "cache.json"]


def test_a_row_that_on_empty_skip_drops_may_be_null(tmp_path):
    src = _write(tmp_path / "in.parquet", [LP[0], None, LP[2]], [SUP[0], None, SUP[2]], ids=[IDS[0], [], IDS[2]])
    r = _pack(tmp_path, src, "--on-empty", "skip")
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def nonfinite(tmp_path_factory):
    """Row 1 token 1 NaN, row 2 token 1 -inf, row 0 token 2 +inf: packed with --json."""
    root = tmp_path_factory.mktemp("nonfinite")
    lp = [[0.0, -1.0, float("inf")], [0.0, float("nan"), -0.25], [0.0, float("-inf")]]
    src = _write(root / "in.parquet", lp, SUP)
    r = runner.invoke(app, ["pack", src, "-o", str(root / "out"), "--cache-dir", str(root / "cache"), "-C", "64",
                            "--no-progress", "--json", "--side-columns", "lp", "--support-columns", "sup"])
    return root, r


def test_nonfinite_values_are_kept_and_counted_where_the_user_looks(nonfinite):
    root, r = nonfinite
    assert r.exit_code == 0, r.stdout + r.stderr
    d = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    assert d["side_nonfinite"]["lp"]["nan"] == 1 and d["side_nonfinite"]["lp"]["inf"] == 2, d["side_nonfinite"]
    assert d["side_nonfinite"]["lp"]["first"]["row"] == 0 and d["side_nonfinite"]["lp"]["first"]["token"] == 2
    stats = json.load(open(root / "out" / ".manifest.json"))["stats"]
    assert stats["side_nan"] == {"lp": 1} and stats["side_inf"] == {"lp": 2}
    text = runner.invoke(app, ["pack", str(root / "in.parquet"), "-o", str(root / "out2"), "--cache-dir",
                               str(root / "cache"), "-C", "64", "--no-progress", "--side-columns", "lp"])
    assert text.exit_code == 0, text.stdout + text.stderr
    warn = " ".join(text.stderr.split())  # a warning is said on stderr, beside the notes
    assert "warning: side column lp holds 1 NaN and 2 +-inf value(s)" in warn and "row 0 token 2" in warn, warn


def test_a_clean_float_column_records_zero(tmp_path):
    src = _write(tmp_path / "in.parquet", LP, SUP)
    r = _pack(tmp_path, src)
    assert r.exit_code == 0, r.stdout + r.stderr
    stats = json.load(open(tmp_path / "out" / ".manifest.json"))["stats"]
    assert stats["side_nan"] == {"lp": 0} and stats["side_inf"] == {"lp": 0}


@pytest.mark.parametrize("flag,value", [("--side-columns", ""), ("--side-columns", "lp,"),
                                        ("--support-columns", ",sup"), ("--support-columns", "sup,,x")])
def test_an_empty_side_column_name_is_refused_naming_the_flag(tmp_path, flag, value):
    # an unset shell variable or a stray comma used to pack without the column, exit 0
    src = _write(tmp_path / "in.parquet", LP, SUP)
    r = runner.invoke(app, ["pack", src, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
                            "-C", "64", "-q", flag, value])
    assert r.exit_code == 2, r.stdout + r.stderr
    err = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
    assert len(err) == 1 and flag in err[0] and "empty name" in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("values", [[float("nan"), 1.0], [float("inf"), -float("inf")], [3e38, 3e38]])
def test_counting_nonfinite_values_warns_nothing(values):
    # NaN, inf - inf and an overflowing float32 sum: numpy's RuntimeWarning reached the user's
    # stderr (and failed the run under -W error)
    import warnings

    import numpy as np

    from packtool.side import nonfinite
    v = np.asarray(values, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = nonfinite(v)
    assert got == (int(np.isnan(v).sum()), int(np.isinf(v).sum()))
