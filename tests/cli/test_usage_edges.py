"""Usage edges every command shares (S41-12): `-q`/`--no-progress` is taken by every command
(plan and train refused it: one wrapper script passes it to all), and inspect's "exactly one of"
usage error carries `type` and the clashing `flag` in --json, as click's usage errors do."""
from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()
COMMANDS = sorted(typer.main.get_command(app).commands)


@pytest.mark.parametrize("flag", ["-q", "--no-progress"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_quiet_flags(command, flag):
    cmd = typer.main.get_command(app).commands[command]
    opts = {o for p in cmd.params for o in [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]}
    assert flag in opts, f"{command} refuses {flag}"


@pytest.mark.parametrize("flag", ["-q", "--no-progress"])
def test_plan_and_train_run_with_the_quiet_flags(tmp_path, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    np.save("len.npy", np.arange(1, 50, dtype=np.int64))
    r = runner.invoke(app, ["plan", "--lengths", "len.npy", flag, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout), r.stdout + r.stderr
    r = runner.invoke(app, ["train", "nowhere", flag, "--steps", "1"])  # parsed; the folder is what fails
    assert "No such option" not in r.stderr and "nowhere" in r.stderr, r.stderr


@pytest.mark.parametrize("given, flag", [
    ((), None), (("DIR", "--lengths"), "--lengths"), (("DIR", "--plan"), "--plan"),
    (("--lengths", "--plan"), "--lengths"), (("DIR", "--lengths", "--plan"), "--lengths")])
def test_inspect_exactly_one_source_names_the_flags(tmp_path, monkeypatch, given, flag):
    monkeypatch.chdir(tmp_path)
    args = {"DIR": ["packed"], "--lengths": ["--lengths", "len.npy"], "--plan": ["--plan", "plan.parquet"]}
    r = runner.invoke(app, ["inspect", *[a for g in given for a in args[g]], "--json"])
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["kind"] == "usage" and err["type"] == "UsageError", err
    assert err["flag"] == flag and "exactly one of" in err["message"], err
    if given:
        assert f"(given: {', '.join(given)})" in err["message"], err
    assert list(tmp_path.iterdir()) == []
