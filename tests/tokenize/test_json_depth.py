"""S31-19: every JSON packtool parses from a user's input is bounded in nesting before its
parser (Arrow's JSON reader segfaulted on a deep row, Python's json raised RecursionError):
a row nested just within the bound reads, one level deeper is one error naming file and line."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolError
from packtool.tokenize.json_depth import MAX_JSON_DEPTH

GPT2 = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "tokenizers", "gpt2")
ROW = '{"text": "a [[{ \\" bracket", "n": 1}'


def _nested(depth: int) -> str:
    """A JSON object nested `depth` levels (the object itself is one)."""
    return '{"text": "hi ]]", "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _jsonl(tmp, depth, name="rows.jsonl", opener=open):
    p = tmp / name
    with opener(p, "wt") as f:
        f.write(f"{ROW}\n{ROW}\n{_nested(depth)}\n")
    from packtool.tokenize.text_readers import jsonl_batches
    return lambda: list(jsonl_batches(str(p), 100, ["text"]))


def _json_array(tmp, depth):
    p = tmp / "rows.json"
    p.write_text(f"[{ROW},\n{ROW},\n{_nested(depth - 1)}]\n")  # the array is one level
    from packtool.tokenize.text_readers import json_array_batches
    return lambda: list(json_array_batches(str(p), 100, ["text"]))


def _lengths(tmp, depth):
    p = tmp / "lengths.jsonl"
    p.write_text(f'{{"length": 3}}\n{{"length": 4}}\n{{"length": 5, "x": {_nested(depth - 1)}}}\n')
    from packtool.planning.lengths import load_lengths
    return lambda: load_lengths(str(p))


def _tokenizer_config(tmp, depth):
    d = tmp / "tok"
    d.mkdir()
    shutil.copy(os.path.join(GPT2, "tokenizer.json"), d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text('{"a": 1,\n"b": 2,\n"x": ' + _nested(depth - 1) + "}")
    from packtool.tokenize.config import TokenizeConfig
    from packtool.tokenize.encode import load_tokenizer
    return lambda: load_tokenizer(str(d), TokenizeConfig())


def _hf_state(tmp, depth):
    d = tmp / "hf"
    d.mkdir()
    (d / "state.json").write_text('{"a": 1,\n"b": 2,\n"x": ' + _nested(depth - 1) + "}")
    from packtool.tokenize.saved_folder import saved_files
    return lambda: saved_files(str(d))


def _plan_metadata(tmp, depth):
    p = tmp / "plan.parquet"
    from packtool.planning.plan_file import META_KEY, read_plan_config
    meta = ('{"a": 1,\n"b": 2,\n"x": ' + _nested(depth - 1) + "}").encode()
    pq.write_table(pa.table({"slab": [0]}).replace_schema_metadata({META_KEY: meta}), p)
    return lambda: read_plan_config(str(p))


READERS = {
    "jsonl": _jsonl,
    "jsonl.gz": lambda tmp, d: _jsonl(tmp, d, "rows.jsonl.gz", gzip.open),
    "json array": _json_array,
    "plan --lengths jsonl": _lengths,
    "tokenizer_config.json": _tokenizer_config,
    "hf state.json": _hf_state,
    "plan file metadata": _plan_metadata,
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("over", [False, True], ids=["at the bound", "one deeper"])
def test_json_nesting_is_bounded_before_the_parser(tmp_path, reader, over):
    read = READERS[reader](tmp_path, MAX_JSON_DEPTH + over)
    if over:
        with pytest.raises(PacktoolError, match=rf"line 3: nested deeper than {MAX_JSON_DEPTH} levels"):
            read()
        return
    try:
        read()
    except PacktoolError as e:  # a plan file's made-up settings may be refused, never for nesting
        assert "nested" not in str(e), e


def test_a_row_that_crashed_arrow_is_one_line_exit_2(tmp_path):
    """The process boundary is the thing tested: Arrow's parser ended it with SIGSEGV."""
    p = tmp_path / "deep.jsonl"
    p.write_text(f"{ROW}\n{_nested(30000)}\n")
    r = subprocess.run([sys.executable, "-m", "packtool", "plan", "--lengths", str(p), "-C", "512"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "deep.jsonl" in lines[0] and "line 2: nested deeper" in lines[0], r.stderr
