"""RA-8 (s49): what holds nothing in a row (null, "" and []) was written twice: late_columns.has_value
over Arrow columns, and again in Python (`obj[k] in (None, "", [])`) where the JSON array reader
judges a late key; a change to one would not reach the other door. One owner, tokenize.nothing:
both forms there, agreeing on every kind of value, and the reader asks it."""
from __future__ import annotations

import pyarrow as pa
import pytest

from packtool.tokenize import nothing, text_readers

VALUES = [None, "", [], " ", "x", 0, 0.0, -1, False, True, [None], [1], [""], {}, {"a": 1}]


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_parsed_value_and_its_arrow_column_are_judged_alike(v):
    has = nothing.has_value(pa.array([v]))
    assert nothing.is_nothing(v) == (has is None or not has[0].as_py()), v


def test_the_json_array_reader_asks_the_owner():
    assert text_readers.is_nothing is nothing.is_nothing
