"""Issue 23 class 6 (S43-11): a refused row says what is wrong in it, with the value, and the fix,
in one line naming the row (rows count from 0). Slips mended here, all of `pack` (and `verify
--source`, which reads the same way) on pre-tokenized and JSON rows: `token id out of range
0..N` named neither the value, its column and position nor what to do; `loss_mask length
differs from input_ids length` gave neither length nor the fix; `input_ids is null` and
`JSON array element is not an object` named no fix (a JSON Lines line said its type and the fix
already). And a row's message that said "(tokens count from 0)" lost "(rows count from 0)":
errors.number_base took any "count from 0" for the rows' base."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool.cli.app import app

I32 = pa.list_(pa.int32())


def _parquet(cols: dict):
    return lambda p: pq.write_table(pa.table({k: pa.array(v, I32) for k, v in cols.items()}), p)


def _text(text: str):
    return lambda p: open(p, "w").write(text)


OK = [[1, 2, 3]] * 3
CASES = {  # name -> (file, writer, extra flags, the words the line must hold)
    "negative id": ("x.parquet", _parquet({"input_ids": [[1, 2], [3, -5, 4], [6]]}), [],
                    ["x.parquet, row 1: input_ids[1] is -5, outside 0..2147483647", "fix the ids",
                     "(tokens count from 0)", "(rows count from 0)"]),
    "id past the vocabulary": ("x.parquet", _parquet({"input_ids": [[1, 2], [3], [60000, 1]]}), ["--tokenizer", GPT2],
                               ["x.parquet, row 2: input_ids[0] is 60000, outside the tokenizer's vocabulary "
                                "0..50256", "give the --tokenizer the ids were made with", "(rows count from 0)"]),
    "loss_mask length": ("x.parquet", _parquet({"input_ids": OK, "loss_mask": [[1, 1, 1], [1, 1], [1, 1, 1]]}), [],
                         ["x.parquet, row 1: loss_mask holds 2 values but input_ids 3", "give loss_mask one "
                          "value per token of the row", "(rows count from 0)"]),
    "labels length": ("x.parquet", _parquet({"input_ids": OK, "labels": [[1, 2, 3], [1, 2, 3], [1, 2, 3, 4]]}), [],
                      ["x.parquet, row 2: labels holds 4 values but input_ids 3", "give labels one value"]),
    "attention_mask length": ("x.parquet", _parquet({"input_ids": OK, "attention_mask": [[1], [1, 1, 1], [1, 1, 1]]}),
                              [], ["x.parquet, row 0: attention_mask holds 1 value but input_ids 3"]),
    "null input_ids": ("x.parquet", _parquet({"input_ids": [[1], None, [2]]}), [],
                       ["x.parquet, row 1: empty example: input_ids is null, missing or holds no tokens; fill it, "
                        "drop the row, or pass --on-empty skip", "(rows count from 0)"]),
    "null loss_mask": ("x.parquet", _parquet({"input_ids": OK, "loss_mask": [[1, 1, 1], [1, 1, 1], None]}), [],
                       ["x.parquet, row 2: loss_mask is null: give the row its list"]),
    "array element a number": ("x.json", _text(json.dumps([{"text": "a"}, 5])), ["--tokenizer", GPT2],
                               ["x.json, row 1: the array's element is a JSON number, not an object; write each "
                                "element as one {...} row object", "(rows count from 0)"]),
    "array element null": ("x.json", _text(json.dumps([{"text": "a"}, {"text": "b"}, None])), ["--tokenizer", GPT2],
                           ["x.json, row 2: the array's element is a JSON null, not an object"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_row_says_its_value_and_the_fix_in_one_line(tmp_path, case):
    name, write, flags, words = CASES[case]
    write(str(tmp_path / name))
    r = CliRunner().invoke(app, ["pack", str(tmp_path / name), *flags, "-C", "64", "-o", str(tmp_path / "out"),
                                 "--no-progress", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.output
    for w in words:
        assert w in lines[0], lines[0]
