"""S35-12: a JSON syntax error in a row file names its line AND column. The message kept only
Python's bare text: "Unterminated string starting at" ended dangling (its position was cut),
and "Expecting property name enclosed in double quotes" said no place, so a fault in a long
line (the README bounds one at 256 MiB) could not be found. Every JSON row reader says it the
same way: JSON Lines (plain, compressed) through Arrow's error path, a JSON Lines block read in
Python (json_types), the rows of a .json array."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from packtool.errors import PacktoolInputError
from packtool.tokenize.json_types import block_table
from packtool.tokenize.readers import iter_batches, resolve_inputs

GOOD = '{"text": "ok"}'
# a broken row -> the column (from 1) of the fault on its line, as json reports it
FAULTS = {
    "cut mid-string": '{"text": "abc',
    "trailing comma": '{"text": "a",}',
    "missing colon": '{"text" "a"}',
    "control character": '{"text": "a\x01"}',
    "bad escape": '{"text": "\\q"}',
    "bare word": '{"text": oops}',
    "fault past a long value": '{"long": "' + "x" * 200_000 + '", "text": nope}',
}


def _where(reader: str, row: str) -> tuple[int, int]:
    """(line, column) of the fault as Python's json finds it in what the reader parses: the
    row's own line, or the whole array (where a cut string runs on into the closing bracket)."""
    with pytest.raises(json.JSONDecodeError) as e:
        json.loads(_array_text(row) if reader == "json array" else row)
    return (e.value.lineno if reader == "json array" else 3), e.value.colno


def _read(path: str) -> None:
    for f in resolve_inputs([path]):
        for _ in iter_batches(f, 16, None):
            pass


def _jsonl(tmp_path, row, suffix=""):
    body = f"{GOOD}\n{GOOD}\n{row}\n".encode()
    p = tmp_path / f"rows.jsonl{suffix}"
    p.write_bytes(gzip.compress(body) if suffix == ".gz" else body)
    _read(str(p))


def _array_text(row: str) -> str:
    return f"[{GOOD},\n{GOOD},\n{row}]\n"


def _array(tmp_path, row):
    p = tmp_path / "rows.json"
    p.write_text(_array_text(row))
    _read(str(p))


def _block(tmp_path, row):  # the Python reader of a JSON Lines block (a block Arrow did not build)
    block_table(f"{GOOD}\n{GOOD}\n{row}".encode(), str(tmp_path / "rows.jsonl"), 0)


READERS = {"jsonl": _jsonl, "jsonl.gz": lambda t, r: _jsonl(t, r, ".gz"), "json array": _array,
           "jsonl block in Python": _block}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_json_fault_is_named_by_line_and_column(tmp_path, reader, fault):
    row = FAULTS[fault]
    with pytest.raises(PacktoolInputError) as e:
        READERS[reader](tmp_path, row)
    msg = str(e.value)
    line, column = _where(reader, row)
    assert "rows.json" in msg and f"invalid JSON at line {line}, column {column}: " in msg, msg
    what = msg.split(f"column {column}: ", 1)[1].split(";")[0]
    assert not re.search(r"\bat$", what), msg  # no position cut off its sentence
    assert "; correct it there" in msg and "\n" not in msg, msg
