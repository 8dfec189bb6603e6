"""`--lengths FILE` (stranger-test R6): the column rule (a column named length/lengths/
num_tokens/..., --column, or a file's only column; never an `id` because it is the only integer
column), JSON Lines and CSV read, and one-line errors naming the file and what it holds."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.planning.core import PlanError
from packtool.planning.lengths import load_lengths


def test_parquet_with_only_an_id_integer_column_is_refused(tmp_path):
    p = tmp_path / "gsm_extra.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "question": ["a", "b", "c"]}), p)
    with pytest.raises(PlanError) as e:
        load_lengths(str(p))
    text = str(e.value)
    assert str(p) in text and "no lengths column" in text and "id (int64)" in text and "pick it with column" in text
    assert load_lengths(str(p), "id").tolist() == [1, 2, 3]  # asked for: taken (a length is at least 1)


@pytest.mark.parametrize("name", ["length", "lengths", "num_tokens"])
def test_a_named_length_column_wins_over_other_integers(tmp_path, name):
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"id": [7, 8], name: [5, 6]}), p)
    assert load_lengths(str(p)).tolist() == [5, 6]


def test_jsonl_is_read_by_the_same_rule(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("".join(json.dumps({"id": i, "num_tokens": 10 + i}) + "\n" for i in range(3)))
    assert load_lengths(str(p)).tolist() == [10, 11, 12]


def test_csv_with_header_and_headerless(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("id,length\n0,5\n1,7\n")
    assert load_lengths(str(a)).tolist() == [5, 7]
    b = tmp_path / "b.csv"
    b.write_text("5\n7\n9\n")
    assert load_lengths(str(b)).tolist() == [5, 7, 9]
    c = tmp_path / "c.csv"
    c.write_text("5,1\n7,2\n")
    with pytest.raises(PlanError, match=r"c\.csv: 2 columns and no header"):
        load_lengths(str(c))


@pytest.mark.parametrize("name,body,needle", [
    ("x.json", "[1, 2]", "read from JSON Lines"),
    ("x.bin", "not arrow", "cannot read lengths"),
    ("x.txt", "5,6\n", "one integer length per line"),
    ("x.jsonl", '{"length": 1.5}\n', "column length holds double"),
    ("x.jsonl", '{"length": 1}\n{"length": null}\n', "row 1: line 2: column length is null"),
])
def test_unreadable_files_are_one_line_naming_the_file(tmp_path, name, body, needle):
    p = tmp_path / name
    p.write_text(body)
    with pytest.raises(PlanError) as e:
        load_lengths(str(p))
    text = str(e.value)
    assert "\n" not in text and str(p) in text and needle in text, text


def test_npy_still_reads(tmp_path):
    np.save(tmp_path / "l.npy", np.arange(1, 4))
    assert load_lengths(str(tmp_path / "l.npy")).tolist() == [1, 2, 3]


def test_an_empty_text_file_is_one_line(tmp_path):
    """numpy warns about an empty file: that warning must not print before packtool's line."""
    import subprocess
    import sys
    (tmp_path / "empty.txt").write_text("")
    p = subprocess.run([sys.executable, "-m", "packtool", "plan", "--lengths", str(tmp_path / "empty.txt")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.splitlines() == [f"error: {tmp_path / 'empty.txt'}: holds no lengths (0 entries): give "
                                                      f"--lengths a file of one length per sequence"], p.stderr


def _npy_header(shape: str) -> bytes:
    import io
    b = io.BytesIO()
    np.save(b, np.arange(1, 50))
    h = b.getvalue()
    new = ("{'descr': '<i8', 'fortran_order': False, 'shape': " + shape + ", }").encode()
    return h[:10] + new + b" " * (117 - len(new)) + b"\n" + h[128:]


_DAMAGED_NPY = {"too big": lambda: _npy_header("(9223372036854775807,)"),
                "header cut": lambda: b"\x93NUMPY\x01\x00\x76\x00{'descr': '<i8'",
                "data cut": lambda: _npy_header("(4000,)")[:200]}


@pytest.mark.parametrize("case", sorted(_DAMAGED_NPY))
def test_a_damaged_npy_says_numpys_whole_reason(tmp_path, case):
    """S34-8: numpy's reason in full (its messages hold '.' inside), naming the file."""
    p = tmp_path / "l.npy"
    p.write_bytes(_DAMAGED_NPY[case]())
    with pytest.raises((OSError, ValueError, EOFError)) as numpy_says:
        np.load(p, allow_pickle=False)
    with pytest.raises(PlanError) as e:
        load_lengths(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and "\n" not in msg, msg
    assert " ".join(str(numpy_says.value).split()).rstrip(".") in msg, msg
