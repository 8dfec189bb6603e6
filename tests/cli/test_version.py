"""stranger32 S32-21: `packtool --version` says the version a manifest records (packtool_version),
exits 0, and --help lists it."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("args", [["--version"], ["--version", "pack"], ["--debug", "--version"]])
def test_version_is_printed_and_exits_0(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"packtool {packtool.__version__}" and not r.stderr


def test_help_lists_version():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0 and "--version" in r.stdout
