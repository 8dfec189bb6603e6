"""S48B-2: a JSON number beyond the float64 range had two verdicts by door: `1e400` was refused in
JSON Lines (Arrow refuses it) and read as +inf from a .json array (Python's json makes it inf); an
integer past 1.8e308 was +inf in JSON Lines (Arrow reads it as a double) and refused in a .json
array only past Python's 4,300 digits, and in a column packtool does not read it passed. The input
held no infinity: pack kept the parser's +inf "as read", and a +inf log-prob made the loss inf.

One rule now at every JSON door (JSON Lines plain or compressed, a .json array, a .json holding JSON
Lines, a block Python reads, a lengths file), in every column, read or not: such a number is
refused naming the file, the line (a JSON array's row too), the field and the number; an
`Infinity` literal (the file's own), float64's largest value and an underflow to 0 are read."""
from __future__ import annotations

import bz2
import gzip
import json
import os

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.planning.lengths import load_lengths
from packtool.tokenize.readers import iter_batches, resolve_inputs

runner = CliRunner()
ROW = {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 1, 1, 1], "lp": [0.0, -1.0, -1.0, -1.0], "n": 1,
       "meta": {"s": "9" * 400, "x": [0.5]}}


def _zstd(b: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as f:
        f.write(b)
    return sink.getvalue().to_pybytes()


def _lines(rows: list[str]) -> bytes:
    return ("\n".join(rows) + "\n").encode()


def _array(rows: list[str]) -> bytes:
    return ("[\n" + ",\n".join(rows) + "\n]").encode()


# every JSON door: file name, its bytes from the rows' texts, the row's place as the error says it
DOORS = {
    "jsonl": ("d.jsonl", _lines, "at line 3"),
    "jsonl.gz": ("d.jsonl.gz", lambda r: gzip.compress(_lines(r)), "at line 3"),
    "jsonl.zst": ("d.jsonl.zst", lambda r: _zstd(_lines(r)), "at line 3"),
    "jsonl.bz2": ("d.jsonl.bz2", lambda r: bz2.compress(_lines(r)), "at line 3"),
    "json array": ("d.json", _array, "row 2: at line 4"),
    "json of lines": ("d.json", _lines, "at line 3"),
    # a block Arrow refuses for a field of two types (then read in Python)
    "jsonl, a field of two types": ("d.jsonl", lambda r: _lines([r[0].replace('"n": 1', '"n": "one"'), *r[1:]]),
                                    "at line 3"),
}
# the number written -> what the error shows of it
NUMBERS = {"1e400": "1e400", "-1E+309": "-1E+309", "1.7976931348623159e308": "1.7976931348623159e308",
           "int 309 digits": "2" + "0" * 308, "int 5001 digits": "7" * 5001, "decimal": "-" + "9" * 320 + ".5",
           "mantissa times exponent": "1" + "0" * 210 + "e99"}
# where the number is: the row's text with it -> the field named
PLACES = {
    "side column": (lambda v: json.dumps(ROW).replace('"lp": [0.0', '"lp": [' + v), "lp[0]"),
    "unread column": (lambda v: json.dumps(ROW).replace('"n": 1', '"n": ' + v), "n"),
    "nested unread": (lambda v: json.dumps(ROW).replace('"x": [0.5]', '"x": [0.5, ' + v + "]"), "meta.x[1]"),
}


def _write(tmp_path, door: str, third: str):
    name, make, _ = DOORS[door]
    p = tmp_path / name
    p.write_bytes(make([json.dumps(ROW), json.dumps(ROW), third]))
    return str(p)


def _read(path: str) -> int:
    return sum(b.num_rows for f in resolve_inputs([path]) for b in iter_batches(f, 64, ["input_ids", "lp"]))


def _said(number: str) -> str:
    size = f"{len(number)} digits" if number.isdigit() else f"{len(number)} characters"
    return number if len(number) <= 24 else f"{number[:12]}…{number[-6:]} ({size})"


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("number", sorted(NUMBERS))
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_number_beyond_float64_is_refused_at_every_door(tmp_path, door, number, place):
    row, field = PLACES[place]
    path = _write(tmp_path, door, row(NUMBERS[number]))
    with pytest.raises(PacktoolInputError) as e:
        _read(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}, " if door == "json array" else f"{path}: "), msg
    assert f"{DOORS[door][2]}: field {field} is {_said(NUMBERS[number])}, a number beyond the float64 range" in msg, msg


# read as written: the input's own values (an Infinity literal, float64's largest, an underflow)
KEPT = {"Infinity": ("Infinity", float("inf")), "-Infinity": ("-Infinity", float("-inf")),
        "largest": ("1.7976931348623157e308", 1.7976931348623157e308), "underflow": ("1e-400", 0.0),
        "long fraction": ("0." + "0" * 400 + "1", 0.0)}


@pytest.mark.parametrize("case", sorted(KEPT))
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_number_float64_holds_is_read(tmp_path, door, case):
    written, value = KEPT[case]
    path = _write(tmp_path, door, PLACES["side column"][0](written))
    rows = [r for f in resolve_inputs([path]) for b in iter_batches(f, 64, ["lp"]) for r in b.to_pylist()]
    assert len(rows) == 3 and rows[2]["lp"][0] == value, rows[2]


@pytest.mark.parametrize("door", ["jsonl", "json array"])
@pytest.mark.parametrize("number", ["1e400", "int 5001 digits"])
def test_pack_refuses_it_in_one_line_and_writes_nothing(tmp_path, door, number):
    path = _write(tmp_path, door, PLACES["side column"][0](NUMBERS[number]))
    r = runner.invoke(app, ["pack", path, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), "-C", "64",
                            "-q", "--side-columns", "lp"])
    assert r.exit_code == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "float64 range" in lines[0], r.stderr
    assert "field lp[0]" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "out")


def test_a_lengths_file_says_it_the_same_way(tmp_path):
    p = tmp_path / "lengths.jsonl"
    p.write_text('{"length": 3}\n{"length": 4, "w": ' + "7" * 400 + "}\n")
    with pytest.raises(PacktoolInputError) as e:
        load_lengths(str(p))
    assert "at line 2: field w is 777777777777…777777 (400 digits), a number beyond the float64 range" in str(e.value)
