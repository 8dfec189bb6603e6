"""Stranger trial S28-8: `packtool --json pack ...` was refused while `packtool --debug pack ...`
worked. --json goes either side of the subcommand, for every subcommand that has it; the error
and the result are the same as with --json after the subcommand."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()

# subcommand -> arguments that fail with a one-line error (a file that is not there)
FAILING = {
    "plan": lambda t: ["plan", "--lengths", str(t / "missing.npy")],
    "pack": lambda t: ["pack", str(t / "missing.jsonl"), "-o", str(t / "out")],
    "inspect": lambda t: ["inspect", str(t / "missing")],
    "verify": lambda t: ["verify", str(t / "missing")],
    "train": lambda t: ["train", str(t / "missing"), "--device", "cpu"],
}


def test_every_subcommand_with_json_is_listed():
    from typer.main import get_command
    has = {name for name, cmd in get_command(app).commands.items()
           if any("--json" in getattr(p, "opts", ()) for p in cmd.params)}
    assert has == set(FAILING)


@pytest.mark.parametrize("cmd", sorted(FAILING))
def test_json_before_the_subcommand_is_the_same_as_after(tmp_path, cmd):
    args = FAILING[cmd](tmp_path)
    after = runner.invoke(app, [args[0], "--json", *args[1:]])
    before = runner.invoke(app, ["--json", *args])
    both = runner.invoke(app, ["--debug", "--json", *args])
    for r in (after, before):
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.stderr.count("error:") == 1, r.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert json.loads(both.stdout.strip().splitlines()[-1])["error"]["exit_code"] == 2


def test_every_subcommand_takes_json():
    """README: `--json` goes before or after the subcommand, for every command: train was refused
    as "No such option: --json" (S40-5); a subcommand added without it is caught here."""
    import typer
    group = typer.main.get_command(app)
    lacking = [c for c, cmd in group.commands.items()
               if "--json" not in [o for p in cmd.params for o in getattr(p, "opts", ())]]
    assert not lacking, lacking
