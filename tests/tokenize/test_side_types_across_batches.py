"""A side column's dtype is fixed by the first batch that holds it (or its pin); later rows it
cannot hold are refused (S45B-2). Such rows are often another file (one JSON Lines file per
rollout worker, +1/0 advantages written as integers by one of them) or a later JSON block of
the same file: the user never saw the dtype, so the one line names where it was inferred and
the pin that holds both (--json `flag` --side-columns), and that pin packs the files in either
order to the same values. A fraction after integers once said only "in an int64 column (not
truncated)", with no fix and no flag, while the files in the other order packed."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

IDS = [[1, 2, 3], [4, 5]]
# case -> (the earlier file's values and type, the later file's, the pin the line must name)
CASES = {
    "json integers, then fractions": ([[0, 1, 1], [1, 0]], "json", [[0, 0.5, 0.5], [1, 0.25]], "json", "v:float64"),
    "int32, then float32 fractions": ([[0, 1, 1], [1, 0]], pa.int32(), [[0, 0.5, 0.5], [1, 0.25]], pa.float32(),
                                      "v:float32"),
    "int64, then float64 fractions": ([[0, 1, 1], [1, 0]], pa.int64(), [[0, 0.5, 0.5], [1, 0.25]], pa.float64(),
                                      "v:float64"),
    "int32, then a float32 NaN": ([[0, 1, 1], [1, 0]], pa.int32(), [[0, float("nan"), 1], [1, 0]], pa.float32(),
                                  "v:float32"),
    "float32, then doubles": ([[0, 0.5, 1], [1, 0]], pa.float32(), [[0, 0.5, 0.5], [1, 0.25]], pa.float64(),
                              "v:float32"),
    "int32, then int64 beyond int32": ([[0, 1, 1], [1, 0]], pa.int32(), [[0, 2**40, 1], [1, 0]], pa.int64(),
                                       "v:int64"),
}


def _write(path, values, typ):
    if typ == "json":
        with open(path + ".jsonl", "w") as f:
            f.writelines(json.dumps({"input_ids": i, "v": v}) + "\n" for i, v in zip(IDS, values))
        return path + ".jsonl"
    pq.write_table(pa.table({"input_ids": IDS, "v": pa.array(values, pa.list_(typ))}), path + ".parquet")
    return path + ".parquet"


def _pack(srcs, spec, out):
    return CliRunner().invoke(app, ["pack", *srcs, "--side-columns", spec, "-o", out, "--cache-dir",
                                    out + "-cache", "--json", "-q"])


def _values(out):
    v = np.concatenate([np.asarray(x, np.float64) for x in pq.read_table(out).column("v").to_pylist()])
    return sorted(v[~np.isnan(v)].tolist()), int(np.isnan(v).sum())


@pytest.mark.parametrize("case", list(CASES))
def test_rows_the_earlier_dtype_cannot_hold_name_where_it_was_inferred_and_the_pin(tmp_path, case):
    first, first_t, later, later_t, pin = CASES[case]
    srcs = [_write(str(tmp_path / "a"), first, first_t), _write(str(tmp_path / "b"), later, later_t)]
    r = _pack(srcs, "v", str(tmp_path / "out"))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["path"] == srcs[1] and err["flag"] == "--side-columns" and err["column"] == "v", err
    assert srcs[0] in lines[0] and f"{pin} " in lines[0] + " ", lines[0]  # where, and the fix
    assert not os.path.exists(tmp_path / "out")
    got = []
    for k, order in enumerate((srcs, srcs[::-1])):  # the pin holds both files, in either order
        r = _pack(order, pin, str(tmp_path / f"pinned{k}"))
        assert r.exit_code == 0, r.output
        got.append(_values(str(tmp_path / f"pinned{k}")))
    assert got[0] == got[1]


def test_a_later_json_block_of_one_file_is_refused_the_same_way(tmp_path, monkeypatch):
    """One file whose integers fill the first JSON block and whose fractions come in a later one:
    the block that typed the column is named by its rows."""
    import packtool.tokenize.text_readers as text_readers
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 256)  # a few lines a block
    src = str(tmp_path / "rows.jsonl")
    with open(src, "w") as f:
        f.writelines(json.dumps({"input_ids": [1, 2, 3], "v": [0, 1, 1]}) + "\n" for _ in range(20))
        f.write(json.dumps({"input_ids": [1, 2, 3], "v": [0, 0.5, 0.5]}) + "\n")
    r = _pack([src], "v", str(tmp_path / "out"))
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)["error"]
    assert (err["row"], err["flag"]) == (20, "--side-columns"), err
    assert re.search(rf"v:float64 in --side-columns \(its dtype was inferred from {re.escape(src)}, rows from 0\)",
                     err["message"]), err
    assert _pack([src], "v:float64", str(tmp_path / "pinned")).exit_code == 0
