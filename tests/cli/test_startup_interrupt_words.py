"""S34-8: a Ctrl-C in the window after the CLI's modules load and before the flags are read
(typer building the command group) said pack's words for every command (`verify` "left any
previous output as it was"; its own: "nothing was written"). Every subcommand, found from the
app, says there what it says once its flags are read."""
from __future__ import annotations

import pytest
import typer

import packtool.cli as cli
from packtool.cli import failure
from packtool.cli.app import app

COMMANDS = sorted(typer.main.get_command(app).commands)


def _error_line(err: str) -> str:
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    return line


@pytest.mark.parametrize("command", COMMANDS)
def test_interrupted_while_the_group_is_built_says_the_commands_words(monkeypatch, capsys, command):
    def leave(code):  # the real one stops the xdist worker's pools (COMMON.md)
        raise SystemExit(code)

    def building(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_leave", leave)
    monkeypatch.setattr(typer.main, "get_command", building)
    monkeypatch.setattr("sys.argv", ["packtool", command, "x"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 130
    got = _error_line(capsys.readouterr().err)

    failure.reset(command)  # what the same Ctrl-C says once the command line is read
    failure.interrupted()
    assert got == _error_line(capsys.readouterr().err)
    assert command == "pack" or "as it was" not in got
