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
import re

import numpy as np

from packtool.errors import PacktoolError, PacktoolInputError, arg, cli_flag
from packtool.planning.core import PlanError

LENGTH_COLUMNS = ("length", "lengths", "num_tokens", "seq_len", "n_tokens")
KINDS = ".npy, .txt, .csv/.tsv, .jsonl, Parquet or Arrow IPC/Feather"


class PlanInputError(PlanError, PacktoolInputError):
    """A file the planner reads (a lengths file, a plan file's recorded settings) that cannot be
    read as one: bad input, so `--json` says kind `input` (a PlanError alone said `config`, the
    kind of a flag out of range), and still a PlanError for a caller that catches those."""

    kind = "input"


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
    except MemoryError:  # a lengths file is not small by nature: no size bound, but the file named
        from packtool.tokenize.json_depth import mib
        raise PlanInputError(f"out of memory reading lengths from this {mib(os.path.getsize(path))} file; check it "
                        f"is a lengths file, or give the lengths as a .npy of int64", path=path,
                        flag=cli_flag("lengths")) from None


_TEXT = (".txt", ".csv", ".tsv", ".jsonl", ".ndjson")


def _load(path: str, column: str | None, low: str) -> np.ndarray:
    if low.endswith(_TEXT):
        _refuse_binary(path)
        _refuse_blank(path)
    if low.endswith(".npy"):
        return _npy(path, column)
    if low.endswith(".txt"):
        return _text(path, column)
    table = _table(path, low)
    return _check(path, *_pick(path, table, column))


def _refuse_binary(path: str) -> None:
    """A NUL byte is in no text lengths file: a damaged or copied-over one (GBs of NULs, one
    'line' its parser would hold whole) is refused from its first MiB."""
    with open(path, "rb") as f:
        at = f.read(1 << 20).find(b"\0")
    if at >= 0:
        raise PlanInputError(f"byte {at} is NUL: not a text file of lengths (a damaged or copied-over file?); "
                        f"give the lengths file ({KINDS})", path=path, flag=cli_flag("lengths"))


_BLANK = re.compile(rb"(?m)^[ \t\r\f\v]*\n")
_ANY = re.compile(rb"\S")


def _refuse_blank(path: str) -> None:
    """A blank line with a length after it (blank lines at the end shift nothing): one pass of
    a regex over the mapped file, so a file of millions of lengths costs no Python loop."""
    import mmap
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            m = _BLANK.search(mm)
            if m is None or _ANY.search(mm, m.end()) is None:
                return
            line = mm[:m.start()].count(b"\n") + 1
    raise PlanInputError(f"line {line} is empty: a lengths file holds one length per line (line order is "
                         f"sequence order, and every later length would move to the wrong sequence); remove "
                         f"the line or write the sequence's length there", path=path, flag=cli_flag("lengths"))


def _line_of(path: str, row: int) -> int | None:
    """The line (from 1) of data row `row` of a text lengths file, for an error about its value
    (blank lines are refused before; a .txt's `#` comment lines are no row)."""
    low = path.lower()
    if low.endswith((".jsonl", ".ndjson")):
        return row + 1
    with open(path, "rb") as f:
        if low.endswith(".txt"):
            seen = -1
            for line, raw in enumerate(f, 1):
                if raw.split(b"#", 1)[0].strip():
                    seen += 1
                    if seen == row:
                        return line
            return None
        if low.endswith((".csv", ".tsv")):
            from packtool.tokenize.text_where import csv_record_line
            sep = "\t" if low.endswith(".tsv") else ","
            header = not all(_is_int(n) for n in f.readline().decode("utf-8", "replace").strip().split(sep))
            f.seek(0)
            return csv_record_line(f, sep, row, header)
    return None


def _at_line(path: str, row: int, detail: str) -> str:
    line = _line_of(path, row)
    return detail if line is None else f"line {line}: {detail}"


def _npy(path: str, column: str | None) -> np.ndarray:
    if column:
        raise PlanInputError(f"{path}: a .npy array has no columns; drop {arg('column')}", flag=cli_flag("column"))
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        # numpy's whole reason, one line: its messages hold "." inside (`arr.size * arr.dtype.itemsize`)
        why = " ".join(str(e).split()).rstrip(".")
        raise PlanInputError(f"cannot read lengths from this .npy ({why}); give a .npy of integer lengths "
                        f"(np.save of an int64 array)", path=path, flag=cli_flag("lengths")) from None
    return _check(path, _one_per_sequence(path, np.asarray(arr)), None)


def _text(path: str, column: str | None) -> np.ndarray:
    if column:
        raise PlanInputError(f"{path}: a .txt file is one length per line, no columns; drop {arg('column')}",
                        flag=cli_flag("column"))
    import warnings
    try:
        with warnings.catch_warnings():  # an empty file is _check's one line, not numpy's warning first
            warnings.simplefilter("ignore", UserWarning)
            # ndmin=2: `1 2 3` on one line reads as shape (1, 3), not as three lengths
            # utf-8-sig: a leading BOM (Notepad) is skipped, as Arrow's CSV and JSON readers skip it
            arr = np.loadtxt(path, dtype=np.int64, ndmin=2, encoding="utf-8-sig")
    except ValueError as e:
        from packtool.tokenize.text_where import first_bad_int_line
        with open(path, "rb") as f:
            where = first_bad_int_line(f)
        if where is None:
            raise PlanInputError(f"{path}: a .txt file holds one integer length per line ({e}); "
                            f"for columns use .csv with a header") from None
        row, line, text = where
        if _is_int(text.strip("'")):  # an integer numpy's int64 cannot hold: the range, not the type
            from packtool.integers import int_array  # int_array's words, at this file's row and line
            int_array([int(text.strip("'"))], "lengths", PlanInputError, minimum=1,
                      at=lambda i, detail: PlanInputError(f"line {line}: {detail}", path=path, row=row))
        raise PlanInputError(f"line {line} holds {text}: a .txt file holds one integer length per line; "
                        f"for columns use .csv with a header", path=path, row=row) from None
    if arr.size and arr.shape[1] != 1:
        raise PlanInputError(f"line 1 holds {arr.shape[1]} numbers (shape {arr.shape}): {_TXT_FIX}",
                             path=path, flag=cli_flag("lengths"))
    return _check(path, arr.reshape(-1), None)


_NPY_FIX = "lengths are whole token counts, saved as integers: np.save(FILE, lengths.astype(np.int64))"
_NPY_SHAPE_FIX = "save one length per sequence as a 1-D int64 array (lengths.reshape(-1) if each entry is one)"
_TXT_FIX = "a .txt file holds one integer length per line; for columns use .csv with a header"


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


def _table(path: str, low: str):
    import pyarrow as pa
    try:
        if low.endswith((".csv", ".tsv")):
            return _csv(path, "\t" if low.endswith(".tsv") else ",")
        if low.endswith((".jsonl", ".ndjson")):  # the input reader's parser: its errors name the line
            from packtool.tokenize.readers import read_json_lines
            return read_json_lines(path)
        if low.endswith(".json"):
            raise PlanInputError(f"{path}: a .json file; lengths are read from JSON Lines (.jsonl: one "
                            f"object per line) or {KINDS}", flag=cli_flag("lengths"))
        if low.endswith(".parquet"):
            import pyarrow.parquet as pq
            return pq.read_table(path)
        import pyarrow.feather as feather
        return feather.read_table(path)
    except (OSError, ValueError, pa.ArrowInvalid) as e:
        if isinstance(e, PacktoolError):  # said already, with its line
            raise
        if low.endswith((".csv", ".tsv")) and isinstance(e, pa.ArrowInvalid):
            _csv_failed(path, "\t" if low.endswith(".tsv") else ",")
        raise PlanInputError(f"{path}: cannot read lengths ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                        f"lengths are read from {KINDS}", flag=cli_flag("lengths")) from None


def _csv(path: str, sep: str, text: str | None = None):
    """The table of a CSV/TSV; column `text`, when given, read as the text written."""
    import pyarrow as pa
    import pyarrow.csv as pc
    convert = pc.ConvertOptions(column_types={text: pa.string()} if text else None)
    table = pc.read_csv(path, parse_options=pc.ParseOptions(delimiter=sep), convert_options=convert)
    names = table.column_names
    if all(_is_int(n) for n in names):  # no header: the first row was data
        table = pc.read_csv(path, parse_options=pc.ParseOptions(delimiter=sep), convert_options=convert,
                            read_options=pc.ReadOptions(autogenerate_column_names=True))
        if table.num_columns != 1:
            raise PlanInputError(f"{path}: {table.num_columns} columns and no header; add a header "
                            f"with a column named {' or '.join(LENGTH_COLUMNS[:3])}")
        # its one column is Arrow's f0, a name the user never wrote: said as "the lengths" (_pick)
        return table.replace_schema_metadata({_HEADERLESS: b"1"})
    if any(_is_int(n) for n in names):  # a number where a name goes: the first row was data, now lost
        raise PlanInputError(f"{path}: its first line ({sep.join(names)}) holds a number where a column name goes: "
                             f"a CSV/TSV's first line is its header row; add a header line naming the columns, "
                             f"the lengths one {' or '.join(LENGTH_COLUMNS[:3])}", flag=cli_flag("lengths"))
    return table


_HEADERLESS = b"packtool.headerless"  # a CSV/TSV read without a header row (one column of lengths)


def _csv_failed(path: str, sep: str) -> None:
    """Arrow's CSV error names no line: find the record at fault (None found: the caller's line)."""
    from packtool.tokenize.text_where import csv_bad_record
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", "replace").strip().split(sep)
        f.seek(0)
        where = csv_bad_record(f, sep, header=not all(_is_int(n) for n in first))
    if where is not None:
        row, line, what = where
        raise PlanInputError(f"cannot read lengths at line {line}: {what}", path=path, row=row)


_INT = re.compile(r"[+-]?[0-9]+")


def _is_int(name: str) -> bool:
    """Text numpy and Arrow read as an integer: Python's int() also takes '1_000' and other
    scripts' digits, which no lengths parser reads, so a message built on it said the wrong thing."""
    return _INT.fullmatch(name.strip()) is not None


def _pick(path: str, table, column: str | None):
    names = table.column_names
    if not names and not table.num_rows:  # an empty .jsonl: no column either
        raise _empty(path)
    if (table.schema.metadata or {}).get(_HEADERLESS):
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
            raise PlanInputError(_at_line(path, first, f"{where} is null; every row needs a length"), path=path,
                                 row=first)
        if _kind(path) == "csv" and not pa.types.is_integer(col.type):
            col = _csv_integers(path, name)
        elif _kind(path) == "jsonl" and pa.types.is_floating(col.type) and name is not None:
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
                     at=lambda i, detail: PlanInputError(_at_line(path, i, detail), path=path, row=i))


def _csv_integers(path: str, name: str | None) -> list[int]:
    """A CSV column Arrow typed otherwise, from its text: Arrow reads `+7` and 10^20 as floats
    and `1_000` as text, so the type says nothing a user wrote; a field that is no integer is
    named at its line, and integers beyond int64 go to int_array as Python ints (it names them)."""
    read = name or "f0"  # None: a file without a header row, whose one column Arrow names f0
    values = _csv(path, "\t" if path.lower().endswith(".tsv") else ",", text=read).column(read).to_pylist()
    bad = next((i for i, v in enumerate(values) if not _is_int(v)), None)
    if bad is not None:
        held = f"column {name} holds {values[bad]!r}: not" if name else f"{values[bad]!r} is not"
        raise PlanInputError(_at_line(path, bad, f"{held} an integer; a length is a whole token count "
                                                 f"written in digits (100)"),
                             path=path, row=bad)
    return [int(v) for v in values]


def _jsonl_integers(path: str, col, name: str) -> list[int]:
    """A JSON Lines column Arrow typed double, from the JSON written: when every value was
    written as an integer, one beyond int64 (10^20) made the column double, and int_array names
    it at its row and line as out of range; a number written with a point (5.0, 1.5) is the
    type's fault, said as before (an error path either way: a loop is fine)."""
    import json
    with open(path, encoding="utf-8-sig") as f:
        values = [json.loads(line).get(name) for line in f if line.strip()]
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
    column is typed by Arrow, not by its writer: _csv_integers reads its text)."""
    import pyarrow as pa
    if isinstance(col, np.ndarray):
        strings = col.dtype.kind in "US"
    else:
        strings = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    if strings:
        return PlanInputError(f"{what}: text, not integers; lengths must be integer-typed: {_STRINGS_FIX[_kind(path)]}",
                              path=path, flag=cli_flag("lengths"))
    values = col.tolist() if isinstance(col, np.ndarray) else col.to_pylist()
    row = next((i for i, v in enumerate(values) if not _is_length(v)), None)
    if row is None:
        held = "whole numbers but not integers" if values else "no values"
        return PlanInputError(f"{what}, {held}; {fix}", path=path, flag=cli_flag("lengths"))
    line = _line_of(path, row)
    at = f" at line {line}" if line is not None else ""
    return PlanInputError(f"{what}: value {values[row]!r}{at} is not an integer; {fix}", path=path, row=row)


_STRINGS_FIX = {"npy": "np.save(FILE, lengths.astype(np.int64))",
                "jsonl": 'write each length as a JSON number (100, not "100")',
                "table": "cast the column to int64 (pyarrow.compute.cast(column, 'int64')) and write the file again"}


def _kind(path: str) -> str:
    low = path.lower()
    if low.endswith((".csv", ".tsv")):
        return "csv"
    return "npy" if low.endswith(".npy") else "jsonl" if low.endswith((".jsonl", ".ndjson")) else "table"


__all__ = ["KINDS", "LENGTH_COLUMNS", "PlanInputError", "load_lengths"]
