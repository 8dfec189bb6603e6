"""S33-2: the words after a repeatable option (`verify --source a b DIR`) are given their roles by
position alone (cli/variadic.py), for every repeatable option of every subcommand: the folder
that is an input is never taken for the output, nor the output for an input; more words than
the command takes are refused in one line that says how to write them."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.cli.failure import click_exceptions

GROUP = typer.main.get_command(app)
# every repeatable option of every subcommand, found, not listed: a new one joins the test
REPEATABLE = [(name, max(p.opts, key=len)) for name, cmd in sorted(GROUP.commands.items())
              for p in cmd.params if p.param_type_name == "option" and p.multiple and not p.is_flag]


def _slot(cmd):
    (arg,) = [p for p in cmd.params if p.param_type_name == "argument"]
    return arg.name


def _flag(cmd):
    """A flag of the command that takes no value (ends a run of words)."""
    return next(o for p in cmd.params if p.param_type_name == "option" and p.is_flag
                for o in p.opts if o.startswith("--") and o != "--help")


ORDERS = {
    "output first": lambda o, f: ["OUT", o, "A", "B"],
    "output last": lambda o, f: [o, "A", "B", "OUT"],
    "option repeated, output last": lambda o, f: [o, "A", o, "B", "OUT"],
    "a flag before the output": lambda o, f: [o, "A", "B", f, "OUT"],
    "attached value": lambda o, f: [f"{o}=A", "B", "OUT"],
    "output after --": lambda o, f: [o, "A", "B", "--", "OUT"],
}


def test_every_repeatable_option_is_found():
    assert ("verify", "--source") in REPEATABLE


@pytest.mark.parametrize("kinds", ["files", "folders", "input folder, output file"])
@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("command,option", REPEATABLE)
def test_words_after_a_repeatable_option_keep_their_roles(tmp_path, command, option, order, kinds):
    cmd = GROUP.commands[command]
    paths = {w: tmp_path / w for w in ("A", "B", "OUT")}
    for w, p in paths.items():  # the rule is by position: what a word names on disk changes nothing
        folder = kinds == "folders" or (kinds == "input folder, output file" and w != "OUT")
        p.mkdir() if folder else p.write_text("x")
    args = [str(paths[a]) if a in paths else a.replace("=A", f"={paths['A']}")
            for a in ORDERS[order](option, _flag(cmd))]
    ctx = cmd.make_context(command, args)
    name = next(p.name for p in cmd.params if option in getattr(p, "opts", ()))
    assert ctx.params[_slot(cmd)] == str(paths["OUT"])
    assert list(ctx.params[name]) == [str(paths["A"]), str(paths["B"])]


@pytest.mark.parametrize("json_out", [False, True])
@pytest.mark.parametrize("where", ["before the option", "after another flag"])
@pytest.mark.parametrize("command,option", REPEATABLE)
def test_more_words_than_the_command_takes_are_one_line(command, option, where, json_out):
    cmd = GROUP.commands[command]
    args = (["OUT", "STRAY", option, "A"] if where == "before the option"
            else ["OUT", option, "A", _flag(cmd), "STRAY"])
    with pytest.raises(click_exceptions.UsageError):  # refused while parsing, before any work
        cmd.make_context(command, list(args))
    r = CliRunner().invoke(app, [command, *args, *(["--json"] if json_out else [])], prog_name="packtool")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "STRAY" in lines[0] and f"{option} a {option} b" in lines[0], lines
    if json_out:
        err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
        assert err["kind"] == "usage" and "STRAY" in err["message"]


def test_verify_source_folder_before_the_output(tmp_path, monkeypatch):
    """The finding: `verify --source FILE FOLDER OUT` verified FOLDER as the output."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for f, n in (("a.jsonl", 9), ("d/b.jsonl", 5)):
        (tmp_path / f).write_text("".join(json.dumps({"input_ids": list(range(1, 4 + i % 3))}) + "\n"
                                          for i in range(n)))
    runner = CliRunner()
    r = runner.invoke(app, ["pack", "a.jsonl", "d", "-o", "out", "-C", "64", "--cache-dir", "c", "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["verify", "--source", "a.jsonl", "d", "out", "--cache-dir", "c", "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["verify", "d", "--source", "a.jsonl", "--cache-dir", "c", "-q"])
    assert r.exit_code == 1  # a data folder: it has no manifest, nothing in it is damaged
    assert "d: it has no manifest, so --source was not compared" in r.stderr, r.stderr
