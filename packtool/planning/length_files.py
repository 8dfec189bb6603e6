"""The lengths files by format (planning.lengths' readers): .npy, .txt, .csv/.tsv, .jsonl,
Parquet, Arrow IPC/Feather, each read as written (a text file's BOM skipped, a CSV's header row
told from data, a NUL byte or a blank line before the last length refused), and where a row of
a text file lies (its line, for every error about its value). What the values must be (the
column, integers, one per sequence, each >= 1) is lengths.py's; the error type is here, below
both (`PlanInputError`)."""
from __future__ import annotations

import os
import re

import numpy as np

from packtool.errors import PacktoolError, PacktoolInputError, arg, cli_flag
from packtool.free_memory import mapped
from packtool.planning.core import PlanError

LENGTH_COLUMNS = ("length", "lengths", "num_tokens", "seq_len", "n_tokens")
KINDS = ".npy, .txt, .csv/.tsv, .jsonl, Parquet or Arrow IPC/Feather"


class PlanInputError(PlanError, PacktoolInputError):
    """A file the planner reads (a lengths file, a plan file's recorded settings) that cannot be
    read as one: bad input, so `--json` says kind `input` (a PlanError alone said `config`, the
    kind of a flag out of range), and still a PlanError for a caller that catches those."""

    kind = "input"


def refuse_binary(path: str) -> None:
    """A NUL byte is in no text lengths file: a damaged or copied-over one (GBs of NULs, one
    'line' its parser would hold whole) is refused from its first MiB."""
    with open(path, "rb") as f:
        at = f.read(1 << 20).find(b"\0")
    if at >= 0:
        raise PlanInputError(f"byte {at} is NUL: not a text file of lengths (a damaged or copied-over file?); "
                        f"give the lengths file ({KINDS})", path=path, flag=cli_flag("lengths"))


_BLANK = re.compile(rb"(?m)^[ \t\r\f\v]*\n")
_ANY = re.compile(rb"\S")


def refuse_blank(path: str) -> None:
    """A blank line with a length after it (blank lines at the end shift nothing): one pass of
    a regex over the mapped file, so a file of millions of lengths costs no Python loop."""
    import mmap
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mapped(path, "the lengths file"), mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            m = _BLANK.search(mm)
            if m is None or _ANY.search(mm, m.end()) is None:
                return
            line = mm[:m.start()].count(b"\n") + 1
    raise PlanInputError(f"line {line} is empty: a lengths file holds one length per line (line order is "
                         f"sequence order, and every later length would move to the wrong sequence); remove "
                         f"the line or write the sequence's length there", path=path, flag=cli_flag("lengths"))


def line_of(path: str, row: int) -> int | None:
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
            header = not all(is_int(n) for n in f.readline().decode("utf-8", "replace").strip().split(sep))
            f.seek(0)
            return csv_record_line(f, sep, row, header)
    return None


def at_line(path: str, row: int, detail: str) -> str:
    line = line_of(path, row)
    return detail if line is None else f"line {line}: {detail}"


_NPY_MAGIC = b"\x93NUMPY"


def _refuse_not_npy(path: str) -> None:
    """A .npy opens with numpy's magic (np.save writes it); numpy reads any other bytes as a
    pickle and says to load it "unsafely" (advice to unpickle a file that is none), or, for no
    bytes, raises EOFError: refused here, naming the file, before numpy sees it."""
    with open(path, "rb") as f:
        head = f.read(len(_NPY_MAGIC))
    if not head:
        raise PlanInputError("holds no data (0 bytes), so it is no .npy file (np.save writes a header): write it "
                             "again", path=path, flag=cli_flag("lengths"))
    if head != _NPY_MAGIC[:len(head)]:
        raise PlanInputError("is not a .npy file (it does not open with numpy's \\x93NUMPY header, which np.save "
                             "writes); give a .npy of integer lengths (np.save of an int64 array), or name the file "
                             f"by its kind ({KINDS})", path=path, flag=cli_flag("lengths"))


def read_npy(path: str, column: str | None) -> np.ndarray:
    if column:
        raise PlanInputError(f"{path}: a .npy array has no columns; drop {arg('column')}", flag=cli_flag("column"))
    _refuse_not_npy(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        # numpy's whole reason, one line: its messages hold "." inside (`arr.size * arr.dtype.itemsize`)
        why = " ".join(str(e).split()).rstrip(".")
        if "allow_pickle" in why:  # an object array: a pickle inside, never loaded (numpy's words say how to)
            why = "it holds an object array, pickled Python objects, which packtool never loads"
        raise PlanInputError(f"cannot read lengths from this .npy ({why}); give a .npy of integer lengths "
                        f"(np.save of an int64 array)", path=path, flag=cli_flag("lengths")) from None
    return np.asarray(arr)  # checked by the caller (lengths._check)


def read_txt(path: str, column: str | None) -> np.ndarray:
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
        if is_int(text.strip("'")):  # an integer numpy's int64 cannot hold: the range, not the type
            from packtool.integers import int_array  # int_array's words, at this file's row and line
            int_array([text_int(text.strip("'"), path, row)], "lengths", PlanInputError, minimum=1,
                      at=lambda i, detail: PlanInputError(f"line {line}: {detail}", path=path, row=row))
        raise PlanInputError(f"line {line} holds {text}: a .txt file holds one integer length per line; "
                        f"for columns use .csv with a header", path=path, row=row) from None
    if arr.size and arr.shape[1] != 1:
        raise PlanInputError(f"line 1 holds {arr.shape[1]} numbers (shape {arr.shape}): {_TXT_FIX}",
                             path=path, flag=cli_flag("lengths"))
    return arr.reshape(-1)  # checked by the caller (lengths._check)


_TXT_FIX = "a .txt file holds one integer length per line; for columns use .csv with a header"


def read_table(path: str, low: str):
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
        from packtool.storage import arrow_file  # a name that is not UTF-8 through Python's open (S44-4)
        if low.endswith(".parquet"):
            import pyarrow.parquet as pq
            return pq.read_table(arrow_file(path))
        import pyarrow.feather as feather
        return feather.read_table(arrow_file(path))
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
    if all(is_int(n) for n in names):  # no header: the first row was data
        table = pc.read_csv(path, parse_options=pc.ParseOptions(delimiter=sep), convert_options=convert,
                            read_options=pc.ReadOptions(autogenerate_column_names=True))
        if table.num_columns != 1:
            raise PlanInputError(f"{path}: {table.num_columns} columns and no header; add a header "
                            f"with a column named {' or '.join(LENGTH_COLUMNS[:3])}")
        # its one column is Arrow's f0, a name the user never wrote: said as "the lengths" (_pick)
        return table.replace_schema_metadata({HEADERLESS: b"1"})
    if any(is_int(n) for n in names):  # a number where a name goes: the first row was data, now lost
        raise PlanInputError(f"{path}: its first line ({sep.join(names)}) holds a number where a column name goes: "
                             f"a CSV/TSV's first line is its header row; add a header line naming the columns, "
                             f"the lengths one {' or '.join(LENGTH_COLUMNS[:3])}", flag=cli_flag("lengths"))
    return table


HEADERLESS = b"packtool.headerless"  # a CSV/TSV read without a header row (one column of lengths)


def _csv_failed(path: str, sep: str) -> None:
    """Arrow's CSV error names no line: find the record at fault (None found: the caller's line)."""
    from packtool.tokenize.text_where import csv_bad_record
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", "replace").strip().split(sep)
        f.seek(0)
        where = csv_bad_record(f, sep, header=not all(is_int(n) for n in first))
    if where is not None:
        row, line, what = where
        raise PlanInputError(f"cannot read lengths at line {line}: {what}", path=path, row=row)


_INT = re.compile(r"[+-]?[0-9]+")


def text_int(text: str, path: str, row: int) -> int:
    """int(text) of a field is_int took, named at its row and line where it is longer than Python
    converts (4,300 digits: its bare ValueError named no file, S48B-1): no length is that long."""
    import sys
    digits = len(text.strip().lstrip("+-"))
    if digits > sys.get_int_max_str_digits():
        raise PlanInputError(at_line(path, row, f"an integer of {digits} digits, not a length in 1..2^62; a "
                                                f"length is a whole token count"), path=path, row=row)
    return int(text)


def is_int(name: str) -> bool:
    """Text numpy and Arrow read as an integer: Python's int() also takes '1_000' and other
    scripts' digits, which no lengths parser reads, so a message built on it said the wrong thing."""
    return _INT.fullmatch(name.strip()) is not None


def csv_integers(path: str, name: str | None) -> list[int]:
    """A CSV column Arrow typed otherwise, from its text: Arrow reads `+7` and 10^20 as floats
    and `1_000` as text, so the type says nothing a user wrote; a field that is no integer is
    named at its line, and integers beyond int64 go to int_array as Python ints (it names them)."""
    read = name or "f0"  # None: a file without a header row, whose one column Arrow names f0
    values = _csv(path, "\t" if path.lower().endswith(".tsv") else ",", text=read).column(read).to_pylist()
    bad = next((i for i, v in enumerate(values) if not is_int(v)), None)
    if bad is not None:
        held = f"column {name} holds {values[bad]!r}: not" if name else f"{values[bad]!r} is not"
        raise PlanInputError(at_line(path, bad, f"{held} an integer; a length is a whole token count "
                                                 f"written in digits (100)"),
                             path=path, row=bad)
    return [text_int(v, path, i) for i, v in enumerate(values)]


def file_kind(path: str) -> str:
    low = path.lower()
    if low.endswith((".csv", ".tsv")):
        return "csv"
    return "npy" if low.endswith(".npy") else "jsonl" if low.endswith((".jsonl", ".ndjson")) else "table"


__all__ = ["HEADERLESS", "KINDS", "LENGTH_COLUMNS", "PlanInputError", "at_line", "csv_integers", "file_kind", "is_int",
           "line_of", "read_npy", "read_table", "read_txt", "refuse_binary", "refuse_blank"]
