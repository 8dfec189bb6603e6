"""stranger32 S32-12: small messages that pointed the wrong way. Each case: the message names
the fix that works and never contradicts itself."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _err(r) -> str:
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    return r.stderr


def test_a_dtype_in_support_columns_points_to_side_columns(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 2, 3], "adv": [1, 2, 3]}) + "\n")
    line = _err(runner.invoke(app, ["pack", str(data), "-C", "64", "--dry-run", "-q", "--cache-dir",
                                    str(tmp_path / "c"), "--support-columns", "adv:int32"]))
    assert "--side-columns adv:int32 --support-columns adv" in line and "not a usable" not in line, line


@pytest.mark.parametrize("value", ["-5", "0", str(2**62 + 1)])
@pytest.mark.parametrize("command", ["plan", "inspect"])
def test_a_length_out_of_range_says_the_range_held(command, value, tmp_path):
    f = tmp_path / "l.txt"
    f.write_text(f"3\n{value}\n")
    line = _err(runner.invoke(app, [command, "--lengths", str(f), "-C", "1024", *(["-q"] if command == "inspect" else [])]))
    assert "row 1" in line and "outside 1..2^62" in line and "integers from 1 to 2^62" in line, line
    assert "integers from 0" not in line and "outside 0.." not in line and "at least" not in line, line


@pytest.mark.parametrize("content, name", [('{"length": 3}\n{"length": null}\n', "null.jsonl"), ("", "empty.txt"),
                                           ("3\n0\n", "zero.txt")])
@pytest.mark.parametrize("command", ["plan", "inspect"])
def test_an_error_about_the_lengths_file_names_its_flag(command, content, name, tmp_path):
    f = tmp_path / name
    f.write_text(content)
    r = runner.invoke(app, [command, "--lengths", str(f), "-C", "1024", "--json"])
    d = json.loads(r.stdout)["error"]
    assert d["flag"] == "--lengths" and str(f) in d["message"], d


def test_a_left_lookalike_is_not_called_only_a_temporary(tmp_path, capsys):
    from packtool.output.leftovers import Sweep
    s = Sweep()
    s.left.append((str(tmp_path / ".o.packtool-tmp-1-x"), "no packtool marker in it"))
    s.report()
    err = capsys.readouterr().err
    assert "an output packed under that name" in err and "rm -r" in err, err
