"""S37-5: what `--lengths` says about the column it reads. A column of text ('100', in
Parquet, Arrow, JSON Lines or a .npy of strings) was "whole numbers but not integers", the
sentence meant for 100.0; '1_000' (Python's int() takes it, no lengths parser does) passed as
a whole number in a CSV and a .txt, so the refusal named no line; a scale-0 decimal (an exact
integer) was "Decimal('100') is not an integer"; and a file holding two of the default
length names was read by the first with no word. Every column type that is no integer, in
every format that has one: the message says what the column holds and names the fix or the
line at fault; a scale-0 decimal is read; two candidate names are a note naming the one read."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from packtool import notes
from packtool.planning.lengths import LENGTH_COLUMNS, PlanInputError, load_lengths


def _table_file(tmp_path, fmt: str, col: pa.Array, name: str = "length") -> str:
    path = str(tmp_path / f"l.{fmt}")
    table = pa.table({name: col})
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    return path


def _refused(path: str) -> str:
    with pytest.raises(PlanInputError) as e:
        load_lengths(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# (what the file holds, how it is written, words the refusal must hold)
TEXT_COLUMNS = [
    ("parquet", lambda t: _table_file(t, "parquet", pa.array(["100", "7"]))),
    ("arrow", lambda t: _table_file(t, "arrow", pa.array(["100", "7"], pa.large_string()))),
    ("jsonl", lambda t: _write(t / "l.jsonl", '{"length": "100"}\n{"length": "7"}\n')),
    ("npy", lambda t: _npy(t / "l.npy", np.array(["100", "7"]))),
]


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _npy(path, arr) -> str:
    np.save(path, arr)
    return str(path)


@pytest.mark.parametrize("make", [m for _, m in TEXT_COLUMNS], ids=[k for k, _ in TEXT_COLUMNS])
def test_a_column_of_text_is_named_as_text(tmp_path, make):
    msg = _refused(make(tmp_path))
    assert "text, not integers" in msg and "integer-typed" in msg, msg
    assert "whole numbers" not in msg, msg


# A field no lengths parser reads as an integer, in the text formats that name its line.
@pytest.mark.parametrize("bad", ["1_000", "\u0663", "99999999999999999999", "1e3"])
@pytest.mark.parametrize("fmt", ["csv", "tsv", "txt"])
def test_a_field_that_is_no_integer_is_named_at_its_line(tmp_path, fmt, bad):
    head = "" if fmt == "txt" else "length\n"
    path = _write(tmp_path / f"l.{fmt}", f"{head}100\n{bad}\n")
    msg = _refused(path)
    line = "line 3" if head else "line 2"
    assert line in msg, msg
    if bad.isdigit() and bad.isascii():  # an integer beyond int64: the range (in .txt too since S39-7)
        assert "2^62" in msg, msg
    else:  # the field as written
        assert repr(bad)[:15] in msg, msg
    assert "whole numbers" not in msg, msg


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_scale_0_decimal_is_read(tmp_path, fmt):
    path = _table_file(tmp_path, fmt, pa.array([100, 7], pa.decimal128(5, 0)))
    assert load_lengths(path).tolist() == [100, 7]
    big = _table_file(tmp_path, fmt, pa.array([7, 10**30], pa.decimal256(40, 0)))
    msg = _refused(big)
    assert "row 1" in msg and "2^62" in msg, msg  # the range, at the row: never an internal error


@pytest.mark.parametrize("typ,values,said", [
    (pa.decimal128(7, 2), [100, 7], "whole numbers but not integers"),
    (pa.decimal128(7, 2), [100, 7.5], "value Decimal('7.50')"),
    (pa.float64(), [100.0, 7.0], "whole numbers but not integers"),
])
def test_other_non_integers_keep_their_words(tmp_path, typ, values, said):
    from decimal import Decimal
    col = pa.array([Decimal(str(v)) for v in values] if pa.types.is_decimal(typ) else values, typ)
    assert said in _refused(_table_file(tmp_path, "parquet", col))


@pytest.mark.parametrize("other", LENGTH_COLUMNS[1:])
def test_two_default_names_note_the_one_read(tmp_path, other):
    path = str(tmp_path / "two.parquet")
    pq.write_table(pa.table({other: [5, 5], "length": [100, 3]}), path)
    start = notes.mark()
    assert load_lengths(path).tolist() == [100, 3]
    said = notes.since(start)
    assert len(said) == 1 and f"length, {other}" in said[0] and "read length" in said[0] \
        and "pick another with column" in said[0], said  # the library's word: --column in the CLI
    start = notes.mark()
    assert load_lengths(path, other).tolist() == [5, 5]  # chosen: nothing to say
    assert notes.since(start) == []
