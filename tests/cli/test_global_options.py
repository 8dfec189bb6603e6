"""S33-9 (1, 2): every global option in every position the README shows, with every subcommand,
behaves the same: --json and --debug before the subcommand, right after it or at the end give
the same exit status, the same one error line and (--json) the same JSON object; every
subcommand takes --json (train too, S40-5; test_global_json);
--version under --json is a JSON object."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

import packtool
from packtool.cli.app import app

runner = CliRunner()
SUBCOMMANDS = sorted(typer.main.get_command(app).commands)

# subcommand -> arguments that fail at once: a path that is not there (run time), a bad flag (parse time)
MISSING = {"plan": ["--lengths", "{t}/missing.npy"], "pack": ["{t}/missing.jsonl", "-o", "{t}/out"],
           "inspect": ["{t}/missing"], "verify": ["{t}/missing"], "train": ["{t}/missing", "--steps", "x"]}
FAILURES = {"missing path": lambda c, t: [a.format(t=t) for a in MISSING[c]],
            "unknown flag": lambda c, t: [a.format(t=t) for a in MISSING[c][:1]] + ["--no-such-flag"]}
POSITIONS = {"before the subcommand": lambda g, c, rest: [g, c, *rest],
             "after the subcommand": lambda g, c, rest: [c, g, *rest],
             "at the end": lambda g, c, rest: [c, *rest, g]}


def test_every_subcommand_has_a_failing_case():
    assert set(MISSING) == set(SUBCOMMANDS)


def _outcome(r):
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("option", ["--json", "--debug"])
@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_a_global_option_is_the_same_in_every_position(tmp_path, cmd, option, failure):
    rest = FAILURES[failure](cmd, tmp_path)
    seen = {where: _outcome(runner.invoke(app, put(option, cmd, rest), prog_name="packtool"))
            for where, put in POSITIONS.items()}
    first = seen["at the end"]
    assert all(o == first for o in seen.values()), seen
    code, out, err = first
    assert code == 2, first
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out, first
    assert "--help" not in errors[0] or f"packtool {cmd} --help" in errors[0], errors  # its own help
    if option == "--json":
        assert json.loads(out.strip().splitlines()[-1])["error"]["exit_code"] == 2


@pytest.mark.parametrize("args", [["--version"], ["--version", "--json"], ["--json", "--version"],
                                  *(a for c in SUBCOMMANDS for a in (["--version", c], ["--json", "--version", c],
                                                                     ["--version", c, "--json"]))],
                         ids=" ".join)
def test_version_is_text_or_one_json_object(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and not r.stderr, r.output
    if "--json" in args:
        assert json.loads(r.stdout) == {"packtool_version": packtool.__version__, "notes": []}
    else:
        assert r.stdout == f"packtool {packtool.__version__}\n"
