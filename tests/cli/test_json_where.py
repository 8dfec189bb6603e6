"""Stranger trial S28-15: some --json error objects had `flag` or `path` null although the
message named the flag or the path (`--workers must be >= 1`, `<folder>: no such folder`).
Every subcommand's error cases, with --json: `flag`, when set, is one the line names or the one
that gave the file at fault (S35: which flag, test_json_flag_source: never one the fix only
suggests); whenever the line names a path of the run, `path` is set (to one it names)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _lengths(t):
    np.save(t / "l.npy", np.array([10, 20]))
    return str(t / "l.npy")


def _tokens(t):
    (t / "x.jsonl").write_text('{"input_ids": [1, 2, 3]}\n')
    return str(t / "x.jsonl")


def _file(t, name="taken"):
    (t / name).write_text("mine\n")
    return str(t / name)


def _pack(t, *flags):
    return ["pack", _tokens(t), "-C", "64", "--cache-dir", str(t / "cache"), *flags]


CASES = {
    "plan: no lengths file": lambda t: ["plan", "--lengths", str(t / "none.npy")],
    "plan: lengths a folder": lambda t: ["plan", "--lengths", str(t)],
    "plan: -o exists": lambda t: ["plan", "--lengths", _lengths(t), "-o", _file(t)],
    "plan: bad --tp": lambda t: ["plan", "--lengths", _lengths(t), "--tp", "0"],
    "plan: --fixed-length over -C": lambda t: ["plan", "--lengths", _lengths(t), "-C", "64", "--fixed-length", "128"],
    "plan: column on npy": lambda t: ["plan", "--lengths", _lengths(t), "--column", "n"],
    "pack: no input": lambda t: ["pack", str(t / "none.jsonl"), "-o", str(t / "o")],
    "pack: no -o": lambda t: _pack(t),
    "pack: -o a file": lambda t: _pack(t, "-o", _file(t)),
    "pack: --workers 0": lambda t: _pack(t, "-o", str(t / "o"), "--workers", "0"),
    "pack: --engine": lambda t: _pack(t, "-o", str(t / "o"), "--engine", "spark"),
    "pack: --shard-tokens 0": lambda t: _pack(t, "-o", str(t / "o"), "--shard-tokens", "0"),
    "pack: --plan-shard-rows -1": lambda t: _pack(t, "-o", str(t / "o"), "--plan-shard-rows", "-1"),
    "pack: empty --side-columns name": lambda t: _pack(t, "-o", str(t / "o"), "--side-columns", "a,"),
    "pack: bool side column": lambda t: ["pack", _bools(t), "-C", "64", "--cache-dir", str(t / "c"), "-o",
                                         str(t / "o"), "--side-columns", "f"],
    "inspect: no output": lambda t: ["inspect", str(t / "none")],
    "inspect: two sources": lambda t: ["inspect", str(t), "--lengths", _lengths(t)],
    "inspect: --html exists": lambda t: ["inspect", "--lengths", _lengths(t), "--html", _file(t, "r.html")],
    "inspect: no plan file": lambda t: ["inspect", "--plan", str(t / "none.parquet")],
    "verify: not an output": lambda t: ["verify", str(t)],
    "verify: a file": lambda t: ["verify", _file(t)],
}


def _bools(t):
    (t / "b.jsonl").write_text('{"input_ids": [1, 2], "f": [true, false]}\n')
    return str(t / "b.jsonl")


@pytest.mark.parametrize("case", sorted(CASES))
def test_flag_and_path_are_set_when_the_message_names_them(tmp_path, case):
    args = CASES[case](tmp_path)
    r = runner.invoke(app, [args[0], "--json", *args[1:]])
    assert r.exit_code in (1, 2) and "Traceback" not in r.output, r.output
    if r.exit_code == 1:  # verify's report: problems, not an error object
        return
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    msg = err["message"]
    if err["flag"]:  # one the line names, or the flag that gave the file at fault (--plan's); which one:
        assert err["flag"] in msg or err["flag"] in args, err  # test_json_flag_source (never a fix's flag)
    if str(tmp_path) in msg:
        assert err["path"] and err["path"] in msg, err


def test_the_bool_side_column_names_the_column_and_its_flag(tmp_path):
    """S28-7: it said `pin NAME:int32 (--side-columns)`, a type the user never wrote, flag null."""
    args = CASES["pack: bool side column"](tmp_path)
    r = runner.invoke(app, [args[0], "--json", *args[1:]])
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    assert "f:int32 in --side-columns" in err["message"] and "NAME" not in err["message"], err
    assert (err["flag"], err["column"], err["path"]) == ("--side-columns", "f", str(tmp_path / "b.jsonl")), err
