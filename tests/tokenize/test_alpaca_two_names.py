"""Stranger trial S35-2: an alpaca file whose rows carry the response under either documented name
(`output`, `response`: two exports joined) read only `output`, called the `response` rows "output
is null" and, with --on-empty skip (which that message offered), dropped them as empty. Each row
is read from the name that holds it; a row holding both is refused, naming the row."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import GPT2
from rows_support import write_rows

from packtool.errors import PacktoolInputError
from packtool.tokenize import tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig

ROWS = [{"instruction": "say hi", "response": "hi"}, {"instruction": "count", "input": "1 2", "output": "3"},
        {"instruction": "name one", "output": "", "response": "x"}, {"instruction": "q", "output": "a"}]
# Parquet's: the two names may differ in Arrow type (string / large_string) across exports
SCHEMA = pa.schema([("instruction", pa.string()), ("input", pa.string()), ("output", pa.string()),
                    ("response", pa.large_string())])


def _tokens(path: str, cache_dir: str, **kw) -> list[tuple[list, list]]:
    cache = tokenize_to_cache([path], TokenizeConfig(tokenizer=GPT2, **kw), cache_dir, progress=False)
    r = cache.read_rows(np.arange(cache.num_rows))
    return [(r.input_ids[a:b].tolist(), r.loss_mask[a:b].tolist()) for a, b in zip(r.offsets[:-1], r.offsets[1:])]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("template", [None, "chatml"])
@pytest.mark.parametrize("on_empty", ["error", "skip"])
@pytest.mark.parametrize("shape", ["auto", "alpaca"])
def test_rows_under_either_name_are_read_as_their_response(tmp_path, fmt, template, on_empty, shape):
    mixed = write_rows(tmp_path, ROWS, fmt, name="mixed", schema=SCHEMA)
    one = [{k: v for k, v in r.items() if k != "response"} | {"output": r.get("response") or r.get("output")}
           for r in ROWS]
    want = _tokens(write_rows(tmp_path, one, fmt, name="one", schema=SCHEMA), str(tmp_path / "c1"),
                   chat_template=template)
    got = _tokens(mixed, str(tmp_path / "c2"), chat_template=template, on_empty=on_empty, shape=shape)
    assert got == want and len(got) == len(ROWS)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_row_with_both_names_is_refused_naming_the_row(tmp_path, fmt, cache_dir):
    rows = ROWS[:1] + [{"instruction": "i", "output": "a", "response": "b"}]
    path = write_rows(tmp_path, rows, fmt, name="both", schema=SCHEMA)
    with pytest.raises(PacktoolInputError, match=r"row 1: row holds both output and response.*keep the one") as e:
        _tokens(path, cache_dir, on_empty="skip")
    assert "\n" not in str(e.value)


def test_a_row_with_neither_names_both(tmp_path, cache_dir):
    path = write_rows(tmp_path, ROWS[:1] + [{"instruction": "i", "output": None}], "jsonl", name="neither")
    with pytest.raises(PacktoolInputError, match=r"row 1: empty example: output \(or response\) is null"):
        _tokens(path, cache_dir)
