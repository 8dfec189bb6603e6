"""arrays.first_null: the first row holding a null at any depth, in a plain or chunked column.
A chunked column is read chunk by chunk (combining copied every column the readers check:
BENCHMARKS "Consumer checks", stop 33), so the row must count the chunks before it."""
from __future__ import annotations

import pyarrow as pa
import pytest

from packtool.arrays import first_null

LISTS = [[1, 2], [3], [], [4, 5, 6]]


def _with_null(kind: str, row: int) -> list:
    rows = [list(r) for r in LISTS]
    if kind == "row":
        rows[row] = None
    else:
        rows[row] = [7, None]
    return rows


@pytest.mark.parametrize("cut", [None, 1, 2, 3])  # one array, or two chunks cut before row `cut`
@pytest.mark.parametrize("kind", ["row", "value"])
@pytest.mark.parametrize("row", [0, 1, 3])
def test_the_first_null_row_of_every_shape(cut, kind, row):
    rows = _with_null(kind, row)
    arr = pa.array(rows, pa.list_(pa.int32()))
    col = arr if cut is None else pa.chunked_array([arr.slice(0, cut), arr.slice(cut)])
    assert first_null(col) == row


@pytest.mark.parametrize("chunks", [[], [LISTS], [LISTS[:2], [], LISTS[2:]]])
def test_no_null_is_minus_one(chunks):
    col = pa.chunked_array([pa.array(c, pa.list_(pa.int32())) for c in chunks], pa.list_(pa.int32()))
    assert first_null(col) == -1



TYPES = {"list": pa.list_(pa.int32()), "large_list": pa.large_list(pa.int32()),
         "list_of_fixed": pa.list_(pa.list_(pa.int32(), 2))}  # a K-wide side column's shape


def _rows_of(typ: str, rows: list) -> list:
    if typ != "list_of_fixed":
        return rows
    return [None if r is None else [[v, 0] for v in r] for r in rows]


@pytest.mark.parametrize("typ", sorted(TYPES))
@pytest.mark.parametrize("kind", ["row", "value"])
@pytest.mark.parametrize("row", [0, 1, 3])
@pytest.mark.parametrize("start", [0, 1])  # a slice that starts inside the values
def test_every_list_type_and_slice(typ, kind, row, start):
    rows = [[9]] + _with_null(kind, row)  # row 0 of the parent is cut off when start is 1
    arr = pa.array(_rows_of(typ, rows), TYPES[typ]).slice(start)
    assert first_null(arr) == row + 1 - start


@pytest.mark.parametrize("typ", sorted(TYPES))
def test_a_null_outside_the_slice_is_not_seen(typ):
    arr = pa.array(_rows_of(typ, [[1, None], [2], [3, 4], [None]]), TYPES[typ])
    assert first_null(arr.slice(1, 2)) == -1


def test_a_clean_column_is_checked_without_pyarrow_compute(tmp_path):
    # pyarrow.compute costs a reader's process 25 ms to import: the checks must not be the ones
    # to pull it in (BENCHMARKS.md, "Consumer checks"). Columns as a reader meets them: read
    # from Parquet (building arrays from Python lists imports it itself).
    import subprocess
    import sys

    import pyarrow.parquet as pq
    rows = [[1, 2], [3], [], [4, 5, 6]]
    pq.write_table(pa.table({t: pa.array(_rows_of(t, rows), TYPES[t]) for t in TYPES}), tmp_path / "t.parquet")
    code = ("import sys, pyarrow.parquet as pq; from packtool.arrays import first_null; "
            f"t = pq.ParquetFile({str(tmp_path / 't.parquet')!r}).read_row_group(0); "
            "assert 'pyarrow.compute' not in sys.modules; "
            "assert all(first_null(c) == first_null(c.chunk(0).slice(1)) == -1 for c in t.columns); "
            "print('pyarrow.compute' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
