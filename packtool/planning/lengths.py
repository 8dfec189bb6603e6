"""Sequence lengths from a file (`plan --lengths`, `inspect --lengths`): which files, which
column, and one-line errors naming the file and what was found there.

The rule for the column: `--column NAME` when given; else the one column named
`length`, `lengths`, `num_tokens`, `seq_len` or `n_tokens` (LENGTH_COLUMNS, in that order);
else a file with a single column (a headerless list, .npy, .txt). Another integer column
(an `id`) is never taken for lengths on its own: the error names the columns found; a file
holding two of the default names is read by the first, said in a note.

The column holds integers (a scale-0 decimal is read: exact). Text is no length whatever it
spells (`"100"`: the type is named, with the cast); a CSV/TSV's column is typed by Arrow, so
its text is read and the first field that is no integer named at its line.

Files: .npy; .txt (one integer per line); .csv/.tsv (with a header, or one headerless
column); .jsonl/.ndjson (one object per line); Parquet; Arrow IPC/Feather (.arrow, .feather,
.ipc, or any other name). A text file's leading UTF-8 BOM is skipped by every text kind; an
integer beyond a length (10^20, which JSON's reader holds as a double) is the range at its
row and line, not a type error; a file of no lengths says so with the fix.

A text lengths file is positional (row i is sequence i; a plan's source_index points at it): a
blank line before the last length is refused, naming its line, since each parser skips it and
every later length would move to the wrong sequence in silence. A row's error names its line."""
from __future__ import annotations

import os

import numpy as np

from packtool.errors import arg, cli_flag
from packtool.free_memory import DecodeOutOfMemory
from packtool.integers import short
from packtool.planning.length_files import (
    HEADERLESS,
    KINDS,
    LENGTH_COLUMNS,
    PlanInputError,
    at_line,
    csv_integers,
    file_kind,
    line_of,
    read_npy,
    read_table,
    read_txt,
    refuse_binary,
    refuse_blank,
)


def load_lengths(path: str, column: str | None = None) -> np.ndarray:
    """Integer lengths (int64) from `path` by the module's rule for the column."""
    from packtool.output.files import refuse_special_input, refuse_uri
    refuse_uri(path, "lengths", reads=True, error=PlanInputError)  # a local file: an object was "no such file"
    if not os.path.exists(path):
        raise PlanInputError(f"{path}: no such file", flag=cli_flag("lengths"))
    if os.path.isdir(path):
        raise PlanInputError(f"{path}: a folder; give one file ({KINDS})", flag=cli_flag("lengths"))
    refuse_special_input(path, "lengths", PlanInputError)
    low = path.lower()
    try:
        return _load(path, column, low)
    except DecodeOutOfMemory:  # the file mapped: its line says the file is not at fault
        raise
    except MemoryError:  # a lengths file is not small by nature: no size bound, but the file named
        from packtool.tokenize.json_depth import mib
        raise PlanInputError(f"out of memory reading lengths from this {mib(os.path.getsize(path))} file; check it "
                        f"is a lengths file, or give the lengths as a .npy of int64", path=path,
                        flag=cli_flag("lengths")) from None


_TEXT = (".txt", ".csv", ".tsv", ".jsonl", ".ndjson")


def _load(path: str, column: str | None, low: str) -> np.ndarray:
    if low.endswith(_TEXT):
        refuse_binary(path)
        refuse_blank(path)
    if low.endswith(".npy"):
        return _check(path, _one_per_sequence(path, read_npy(path, column)), None)
    if low.endswith(".txt"):
        return _check(path, read_txt(path, column), None)
    table = read_table(path, low)
    return _check(path, *_pick(path, table, column))


_NPY_FIX = "lengths are whole token counts, saved as integers: np.save(FILE, lengths.astype(np.int64))"
_NPY_SHAPE_FIX = "save one length per sequence as a 1-D int64 array (lengths.reshape(-1) if each entry is one)"


def _one_per_sequence(path: str, arr: np.ndarray, fix: str = _NPY_FIX) -> np.ndarray:
    """`arr` when it is a 1-D array of integers. Another shape is never flattened (a (N, 2) table
    of lengths and ids would plan the ids as sequences) and a dtype that only casts to integers
    is never cast (floats truncate, booleans read as 1, timedelta64 passes numpy's integer test):
    one line naming the file, the dtype and shape found, and the fix."""
    if arr.ndim == 1 and arr.dtype.kind in "iu":
        return arr
    held = f"lengths hold {arr.dtype} of shape {arr.shape}"
    if arr.ndim != 1:
        what = "a single number, not a list" if arr.ndim == 0 else f"{arr.ndim}-D, not one length per sequence"
        raise PlanInputError(f"{held}: {what}; {_NPY_SHAPE_FIX}", path=path, flag=cli_flag("lengths"))
    if arr.size and arr.dtype.kind in "fcbUSO":  # values to look at: the first that is no length, by row
        raise _not_int(path, arr, held, fix)
    raise PlanInputError(f"{held}: not integers; {fix}", path=path, flag=cli_flag("lengths"))


def _pick(path: str, table, column: str | None):
    names = table.column_names
    if not names and not table.num_rows:  # an empty .jsonl: no column either
        raise _empty(path)
    if (table.schema.metadata or {}).get(HEADERLESS):
        if column is not None:
            raise PlanInputError(f"{path}: has no header row (its first line is a length), so no column is named "
                                 f"{column!r}; drop {arg('column')}, or add a header line naming the column",
                                 flag=cli_flag("column"))
        return table.column(0), None
    if column is not None:
        if column not in names:
            raise PlanInputError(f"{path}: no column {arg('column', column)}; columns: {', '.join(names)}",
                            flag=cli_flag("column"))
        return table.column(column), column
    named = [c for c in LENGTH_COLUMNS if c in names]
    if len(named) > 1:  # each a name the rule takes: the one read must not be a silent choice
        from packtool.notes import note
        note(f"{path}: columns {', '.join(named)} each name lengths; read {named[0]} (the first in the order "
             f"{', '.join(LENGTH_COLUMNS)}); pick another with {arg('column')}")
    if named:
        return table.column(named[0]), named[0]
    if len(names) == 1:
        return table.column(0), names[0]
    raise PlanInputError(f"{path}: no lengths column (named {', '.join(LENGTH_COLUMNS)}) among "
                    f"{', '.join(f'{n} ({table.schema.field(n).type})' for n in names)}: "
                    f"pick it with {arg('column')}", flag=cli_flag("column"))


def _check(path: str, col, name: str | None) -> np.ndarray:
    import pyarrow as pa
    where = f"column {name}" if name else "lengths"
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        if col.null_count:
            first = int(np.flatnonzero(~col.is_valid().to_numpy(zero_copy_only=False))[0])
            raise PlanInputError(at_line(path, first, f"{where} is null; every row needs a length"), path=path,
                                 row=first)
        if file_kind(path) == "csv" and not pa.types.is_integer(col.type):
            col = csv_integers(path, name)
        elif file_kind(path) == "jsonl" and pa.types.is_floating(col.type) and name is not None:
            col = _jsonl_integers(path, col, name)  # JSON's 10^20 (an integer) reached Arrow as a double
        elif pa.types.is_decimal(col.type) and col.type.scale == 0:
            col = _whole_decimals(col)  # exact integers: no digit after the point to lose
        elif not pa.types.is_integer(col.type):
            raise _not_int(path, col, f"{where} holds {col.type}")
        else:
            col = col.to_numpy()
    if not isinstance(col, list):  # a list: decimals beyond int64, for int_array to name
        col = _one_per_sequence(path, col, "lengths must be integers")
    if len(col) == 0:
        raise _empty(path)
    from packtool.integers import int_array  # a uint64 above 2^63-1 is not a negative length
    return int_array(col, "lengths", PlanInputError, minimum=1,
                     at=lambda i, detail: PlanInputError(at_line(path, i, detail), path=path, row=i))


def _jsonl_integers(path: str, col, name: str) -> list[int]:
    """A JSON Lines column Arrow typed double, from the JSON written: when every value was
    written as an integer, one beyond int64 (10^20) made the column double, and int_array names
    it at its row and line as out of range; a number written with a point (5.0, 1.5) is the
    type's fault, said as before (an error path either way: a loop is fine)."""
    import json

    from packtool.json_text import loads
    values = []
    with open(path, encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            try:  # json_text's: an integer longer than Python converts named as JSON (S48B-1)
                values += [loads(line).get(name)] if line.strip() else []
            except json.JSONDecodeError as e:
                raise PlanInputError(f"line {n}: {e.msg}", path=path, row=len(values),
                                     flag=cli_flag("lengths")) from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise _not_int(path, col, f"column {name} holds {col.type}")
    return values


def _empty(path: str) -> PlanInputError:
    return PlanInputError(f"holds no lengths (0 entries): give {arg('lengths')} a file of one length per sequence",
                          path=path, flag=cli_flag("lengths"))


def _whole_decimals(col):
    """A scale-0 decimal column as int64; one beyond int64 as Python ints, so that int_array
    names its row and the range (Arrow's cast error names neither)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    try:
        return pc.cast(col, pa.int64()).to_numpy()
    except pa.ArrowInvalid:
        return [int(v) for v in col.to_pylist()]


def _is_length(v) -> bool:
    from decimal import Decimal
    if isinstance(v, Decimal):
        return v.is_finite() and v == v.to_integral_value()
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def _not_int(path: str, col, what: str, fix: str = "lengths must be integers") -> PlanInputError:
    """`what` (a column of another type) named at its first value that is no integer length, so
    the user finds it: its row, and in a CSV/TSV its line. When every value is a whole number
    (1.0) the type is at fault, not a row: said so, never "1.0 is not an integer". Text is
    never a length, whatever it spells: a column of strings is the type's fault too (a CSV's
    column is typed by Arrow, not by its writer: csv_integers reads its text)."""
    import pyarrow as pa
    if isinstance(col, np.ndarray):
        strings = col.dtype.kind in "US"
    else:
        strings = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    if strings:
        return PlanInputError(f"{what}: text, not integers; lengths must be integer-typed: {_STRINGS_FIX[file_kind(path)]}",
                              path=path, flag=cli_flag("lengths"))
    values = col.tolist() if isinstance(col, np.ndarray) else col.to_pylist()
    row = next((i for i, v in enumerate(values) if not _is_length(v)), None)
    if row is None:
        held = "whole numbers but not integers" if values else "no values"
        return PlanInputError(f"{what}, {held}; {fix}", path=path, flag=cli_flag("lengths"))
    line = line_of(path, row)
    at = f" at line {line}" if line is not None else ""
    return PlanInputError(f"{what}: value {short(values[row])}{at} is not an integer; {fix}", path=path, row=row)


_STRINGS_FIX = {"npy": "np.save(FILE, lengths.astype(np.int64))",
                "jsonl": 'write each length as a JSON number (100, not "100")',
                "table": "cast the column to int64 (pyarrow.compute.cast(column, 'int64')) and write the file again"}


__all__ = ["KINDS", "LENGTH_COLUMNS", "PlanInputError", "load_lengths"]
