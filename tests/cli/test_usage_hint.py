"""Stranger trial S29-10: a flag missing its value (`packtool pack data.jsonl -C`) ended without
the `(see `packtool pack --help`)` the other usage errors carry (click raised it without the
command's context), and `-C --json` took `--json` as -C's value. Every kind of usage error, in
every subcommand, is the README's one `error:` line naming the command's --help, `kind` usage
and exit 2, and the same as a JSON object with --json."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

# kind -> subcommand -> the arguments after it (no file is read: each fails while parsing flags)
CASES = {
    "missing value": {"pack": ["d.jsonl", "-C"], "plan": ["--lengths", "x.npy", "-C"], "inspect": ["-C"],
                      "verify": ["out", "--workers"], "train": ["out", "--layers"]},
    "flag as value": {"pack": ["d.jsonl", "-C", "--overwrite"], "plan": ["--lengths", "--tp", "2"],
                      "inspect": ["out", "--tp", "--compare"], "verify": ["out", "--source", "--quiet"],
                      "train": ["out", "--steps", "--overwrite"]},
    "unknown option": {c: ["x", "--bogus"] for c in ("pack", "plan", "inspect", "verify", "train")},
    "bad choice": {"pack": ["d.jsonl", "--fp8", "fp4"], "plan": ["--lengths", "x.npy", "--algorithm", "nf"],
                   "inspect": ["--lengths", "x.npy", "--overflow", "drop"],
                   "train": ["out", "--device", "tpu"]},
    "bad int": {"pack": ["d.jsonl", "-C", "4k"], "plan": ["--lengths", "x.npy", "--tp", "two"],
                "inspect": ["out", "--cp", "1.5"], "verify": ["out", "--workers", "all"],
                "train": ["out", "--layers", "many"]},
    "extra argument": {"plan": ["--lengths", "x.npy", "extra"], "inspect": ["out", "extra"],
                       "verify": ["out", "extra"], "train": ["out", "extra"]},
    "missing argument": {c: [] for c in ("pack", "plan", "inspect", "verify", "train")},
}
PARAMS = [pytest.param(cmd, args, id=f"{kind}-{cmd}") for kind, by in CASES.items() for cmd, args in by.items()]


def _line(r, cmd: str) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert lines[0].endswith(f"(see `packtool {cmd} --help`)"), lines[0]
    return lines[0]


@pytest.mark.parametrize("cmd,args", PARAMS)
def test_usage_error_is_one_line_naming_the_commands_help(cmd, args):
    _line(runner.invoke(app, [cmd, *args], prog_name="packtool"), cmd)


@pytest.mark.parametrize("cmd,args", [p for p in PARAMS if p.values[0] != "train"])  # train has no --json
def test_usage_error_with_json_is_the_same_object(cmd, args):
    r = runner.invoke(app, ["--json", cmd, *args], prog_name="packtool")
    line = _line(r, cmd)
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "usage" and err["exit_code"] == 2 and f"error: {err['message']}" == line
    assert err["flag"] != "--help", err  # the hint names --help; the flag at fault is another (or none)
