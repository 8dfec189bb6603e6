"""S48B-1, RB-5: an integer longer than Python converts (4,300 digits) in a --lengths file (.jsonl,
.csv, .tsv, .txt) or in a JSON file given as --chat-template was Python's bare "Exceeds the limit"
ValueError (no file, no line; --json type ValueError), or a jinja syntax error for the template.
Each door names the file and the line."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import GPT2
from packtool.cli.app import app

BIG = "9" * 5001


def _lengths(tmp_path, ext):
    p = tmp_path / f"big.{ext}"
    if ext in ("jsonl", "ndjson"):
        p.write_text('{"length": 5}\n{"length": %s}\n' % BIG)
    elif ext in ("csv", "tsv"):
        p.write_text(f"length\n5\n{BIG}\n")
    else:
        p.write_text(f"5\n{BIG}\n")
    return ["--json", "plan", "--lengths", str(p), "-C", "64"], "line 3" if ext in ("csv", "tsv") else "line 2"


def _template(tmp_path, _):
    p = tmp_path / "cfg.json"
    p.write_text('{"chat_template": "{{ x }}",\n "n": %s}\n' % BIG)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": [{"role": "user", "content": "a"},
                                             {"role": "assistant", "content": "b"}]}) + "\n")
    return ["--json", "pack", str(rows), "--tokenizer", GPT2, "--chat-template", str(p), "-C", "64",
            "--dry-run", "--cache-dir", str(tmp_path / "c")], "line 2"


DOORS = {**{f"--lengths .{e}": (_lengths, e) for e in ("jsonl", "ndjson", "csv", "tsv", "txt")},
         "--chat-template JSON": (_template, None)}


@pytest.mark.parametrize("door", DOORS)
def test_a_5001_digit_integer_is_named_at_its_file_and_line(tmp_path, door):
    make, ext = DOORS[door]
    args, line = make(tmp_path, ext)
    r = CliRunner().invoke(app, args)
    out = r.output.strip().splitlines()[-1]
    err = json.loads(out[out.index("{"):])["error"]
    assert r.exit_code == 2 and err["type"] != "ValueError" and err["path"], err
    assert line in err["message"] and "5001 digits" in err["message"], err["message"][:300]
