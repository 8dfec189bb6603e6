"""Issue 23 class 6: messages a user can act on. Usage errors are the README's one `error:`
line (and JSON object under --json), not click's boxed usage text; every refused value names
its flag. Each case: exit status, one line naming the flag, no traceback, no box."""
from __future__ import annotations

import json

import pytest
from conftest import GPT2, GSM8K
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

USAGE = {
    "unknown flag": (["pack", "x.jsonl", "--bogus"], "--bogus"),
    "int flag given text": (["plan", "--lengths", "x", "--seed", "abc"], "--seed"),
    "missing argument": (["pack"], "inputs"),
    "missing flag value": (["pack", "x.jsonl", "--engine"], "--engine"),
    "unknown command": (["frob"], "frob"),
    "missing required option": (["plan"], "--lengths"),
    "bool flag given a value": (["inspect", "--lengths", "x", "--compare=3"], "--compare"),
}

LENGTHS_FLAGS = {  # value -> the flag the line must name
    "--seed -1": (["--seed", "-1"], "--seed"),
    "--seed 2^64": (["--seed", str(2**64)], "--seed"),
    "-C 2^63": (["-C", str(2**63)], "--max-tokens"),
    "-C 2^31": (["-C", str(2**31)], "--max-tokens"),
    "--fixed-length 2^31": (["-C", str(2**31 - 1), "--fixed-length", str(2**31)], "--fixed-length"),
    "--dp 0": (["--dp", "0"], "--dp"),
    "--tp 0": (["--tp", "0"], "--tp"),
    "--cp -1": (["--cp", "-1"], "--cp"),
}


README_KEYS = ["kind", "type", "message", "path", "row", "flag", "exit_code"]  # README, error contract


def one_line(r, code=2):
    text = r.stdout + r.stderr
    assert r.exit_code == code, text
    assert "Traceback" not in text and "╭" not in text and "Usage:" not in r.stderr, text
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


class TestUsageErrors:
    @pytest.mark.parametrize("case", sorted(USAGE))
    def test_one_line_naming_the_flag(self, case):
        args, needle = USAGE[case]
        line = one_line(runner.invoke(app, args))
        assert needle in line, line

    @pytest.mark.parametrize("case", sorted(USAGE))
    def test_json_object_too(self, case):
        args, _ = USAGE[case]
        r = runner.invoke(app, [*args[:1], "--json", *args[1:]])
        line = one_line(r)
        err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
        assert err["kind"] == "usage" and err["exit_code"] == 2 and err["message"] in line
        assert list(err) == README_KEYS, err
        if USAGE[case][1].startswith("-") and case != "missing required option":
            assert err["flag"] == USAGE[case][1], err

    def test_bare_command_still_shows_help(self):
        r = runner.invoke(app, [])
        assert "Usage" in r.stdout and "Traceback" not in r.stdout + r.stderr


class TestValuesNameTheirFlag:
    @pytest.mark.parametrize("case", sorted(LENGTHS_FLAGS))
    @pytest.mark.parametrize("cmd", ["plan", "inspect"])
    def test_plan_and_inspect(self, tmp_path, case, cmd):
        lengths = tmp_path / "l.txt"
        lengths.write_text("100\n200\n")
        flags, needle = LENGTHS_FLAGS[case]
        line = one_line(runner.invoke(app, [cmd, "--lengths", str(lengths), *flags]))
        assert needle in line and "internal error" not in line, line

    @pytest.mark.parametrize("case", sorted(LENGTHS_FLAGS))
    def test_json_names_the_flag(self, tmp_path, case):
        lengths = tmp_path / "l.txt"
        lengths.write_text("100\n200\n")
        flags, needle = LENGTHS_FLAGS[case]
        r = runner.invoke(app, ["plan", "--json", "--lengths", str(lengths), *flags])
        one_line(r)
        err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
        assert list(err) == README_KEYS and err["flag"] == needle, err

    @pytest.mark.parametrize("case", ["--seed -1", "-C 2^63"])
    def test_pack(self, tmp_path, case):
        flags, needle = LENGTHS_FLAGS[case]
        r = runner.invoke(app, ["pack", GSM8K, "--prompt-field", "question", "--response-field", "answer",
                                "--tokenizer", "x.json", "-o", str(tmp_path / "out"), *flags])
        line = one_line(r)
        assert needle in line, line


ROW_CASES = {  # file name, content, command, what the line must say
    "null length": ("l.jsonl", '{"length": 1}\n{"length": null}\n', "plan", ["row 1", "rows count from 0"]),
    "invalid JSON": ("d.jsonl", '{"text": "a"}\n{bad\n', "pack", ["line 2", "lines count from 1"]),
    "empty example": ("d.jsonl", '{"text": "a"}\n{"text": " "}\n', "pack", ["row 1", "rows count from 0"]),
    "mixed field types": ("d.jsonl", '{"text": "a"}\n{"text": 3}\n', "pack", ["line 2", "count from 1"]),
}


class TestRowNumbers:
    """Every row or line number says what it counts from (README, error contract): rows of
    data from 0, lines of a text file from 1."""

    @pytest.mark.parametrize("case", sorted(ROW_CASES))
    def test_said(self, tmp_path, case):
        name, text, cmd, needles = ROW_CASES[case]
        p = tmp_path / name
        p.write_text(text)
        args = (["plan", "--lengths", str(p)] if cmd == "plan" else
                ["pack", str(p), "--tokenizer", GPT2, "--cache-dir", str(tmp_path / "c"), "--dry-run", "--no-progress"])
        line = one_line(runner.invoke(app, args))
        for n in needles:
            assert n in line, line

    def test_the_library_error_says_it_too(self):
        from packtool.errors import PacktoolInputError
        assert str(PacktoolInputError("bad", path="x", row=3)) == "x, row 3: bad (rows count from 0)"
        assert "count from" not in str(PacktoolInputError("bad", path="x"))
