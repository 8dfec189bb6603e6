"""RA-6 (s49): S48B-1's class at the row-value doors. A JSON text inside a row (a ShareGPT
function_call turn's value, a chat row's `tools` or `documents` given as JSON text) was decoded with
Python's json: an integer past 4,300 digits was its bare ValueError (no file, no row, --json type
ValueError), and a key given twice was read with the last one winning in silence, the rule
packtool.json_text exists to refuse. Each now goes through json_text, one line naming the file, the
row and the turn or key, with the reason, at every door (JSON Lines, a JSON array, Parquet). So is a
number beyond float64 there (RA-4, s50), as every file-level JSON door refuses it."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2
from rows_support import write_rows
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
BIG = "1" * 5000
CHAT = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
BAD = {  # the JSON text's fault -> what the line says of it
    "a long integer": ('{"name": "f", "x": ' + BIG + '}', "an integer of 5000 digits"),
    "a key twice": ('{"name": "f", "name": "g"}', "key 'name' appears twice"),
    # (RA-4, s50) Python's json made it inf, and the template's tojson wrote `Infinity` into the trained text
    "a float beyond float64": ('{"name": "f", "x": 1e400}', "1e400, a number beyond the float64 range"),
    "an integer beyond float64": ('{"name": "f", "x": -' + "9" * 309 + '}', "a number beyond the float64 range"),
    # R2B-4: spellings of 1e310 that carry no 3-digit exponent and no 309-digit run
    "a long mantissa under a 2-digit exponent": ('{"name": "f", "x": 1' + "0" * 300 + 'e10}',
                                                 "a number beyond the float64 range"),
    "a long mantissa with a fraction": ('{"name": "f", "x": 1' + "0" * 250 + '.5e60}',
                                        "a number beyond the float64 range"),
}


def _row(door: str, text: str) -> tuple[dict, str]:
    """(the row, how the line names where the text is)."""
    if door == "function_call":
        return {"conversations": [{"from": "human", "value": "Q"}, {"from": "function_call", "value": text},
                                  {"from": "observation", "value": "R"}, {"from": "gpt", "value": "A"}]}, \
            "conversations[1]"
    return {"messages": CHAT, door: f"[{text}]"}, door


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("fault", BAD)
@pytest.mark.parametrize("door", ["function_call", "tools", "documents"])
def test_a_json_text_in_a_row_is_read_by_packtools_rule(tmp_path, door, fault, fmt):
    text, said = BAD[fault]
    row, where = _row(door, text)
    path = write_rows(tmp_path, [row], fmt)
    r = runner.invoke(app, ["--json", "pack", path, "--tokenizer", GPT2, "--chat-template", "chatml", "-C", "256",
                            "--dry-run", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "PacktoolInputError" and err["path"] == path and err["row"] == 0, err
    assert where in err["message"] and said in err["message"] and "\n" not in err["message"], err
