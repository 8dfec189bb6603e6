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

