"""S33-2 follow-up (cli/variadic.py): placing the words after a repeatable option must not turn
an unknown flag into "extra arguments". A flag the command does not know leaves the words as
given, so click names that flag (and its suggestion) for every subcommand, wherever it stands and
with a value after it (`verify out --tp 2` said `unexpected extra argument(s) 2`); and the
extra-argument line says what the command takes grammatically for none, one or several
positionals (`plan ... stray` said `takes one no argument`)."""
from __future__ import annotations

import click
import pytest
import typer

from packtool.cli.app import app
from packtool.cli.failure import click_exceptions
from packtool.cli.variadic import in_place

GROUP = typer.main.get_command(app)
SUBCOMMANDS = sorted(GROUP.commands)


def _positionals(cmd) -> list[str]:
    return [f"P{i}" for i, p in enumerate(p for p in cmd.params if p.param_type_name == "argument")]


def _misspelt(cmd) -> str:
    """A real flag of the command that takes a value, with one letter more: click suggests it."""
    return next(o for p in cmd.params if p.param_type_name == "option" and not p.is_flag
                for o in p.opts if o.startswith("--")) + "x"


UNKNOWN = {"long, value after": lambda c: ["--bogus", "2"], "long, attached value": lambda c: ["--bogus=2"],
           "short, value after": lambda c: ["-Z", "2"], "misspelt, value after": lambda c: [_misspelt(c), "2"]}
WHERE = {  # where the unknown flag stands among the command's own words
    "after the positionals": lambda c, bad: [*_positionals(c), *bad],
    "before the positionals": lambda c, bad: [*bad, *_positionals(c)],
    "after a repeatable option's run": lambda c, bad: [*_positionals(c), *_run(c), *bad],
}


def _run(cmd) -> list[str]:
    opt = next((max(p.opts, key=len) for p in cmd.params if p.param_type_name == "option"
                and p.multiple and not p.is_flag), None)
    return [opt, "a", "b"] if opt else []


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("unknown", list(UNKNOWN))
@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_an_unknown_flag_is_named_as_unknown(command, unknown, where):
    cmd = GROUP.commands[command]
    bad = UNKNOWN[unknown](cmd)
    with pytest.raises(click_exceptions.NoSuchOption) as e:
        cmd.make_context(command, WHERE[where](cmd, bad))
    assert e.value.option_name == bad[0].partition("=")[0], e.value.format_message()
    if unknown.startswith("misspelt"):
        assert bad[0][:-1] in e.value.possibilities, e.value.possibilities


@pytest.mark.parametrize("command", [c for c in SUBCOMMANDS  # pack's INPUTS... takes any number
                                     if all(p.nargs == 1 for p in GROUP.commands[c].params
                                            if p.param_type_name == "argument")])
def test_extra_words_say_what_each_subcommand_takes(command):
    cmd = GROUP.commands[command]
    slots = [p for p in cmd.params if p.param_type_name == "argument"]
    with pytest.raises(click_exceptions.UsageError) as e:
        cmd.make_context(command, [*_positionals(cmd), "STRAY"])
    takes = f"one {(slots[0].metavar or slots[0].name.upper())}" if slots else "no positional argument"
    assert f"{command} takes {takes}" in e.value.format_message(), e.value.format_message()


@pytest.mark.parametrize("slots,takes,hint", [
    ([], "no positional argument", "`c --many a b` or `c --many a --many b`"),
    (["src"], "one SRC", "`c SRC --many a b` or `c --many a --many b SRC`"),
    (["src", "dst"], "2 arguments: SRC DST", "`c SRC DST --many a b` or `c --many a --many b SRC DST`"),
])
def test_extra_words_are_grammatical_for_any_number_of_positionals(slots, takes, hint):
    """No subcommand takes two positionals today: a command built here stands for a future one."""
    cmd = click.Command("c", params=[*(click.Argument([s]) for s in slots),
                                     click.Option(["--many"], multiple=True), click.Option(["-q"], is_flag=True)])
    ctx = click.Context(cmd, info_name="c")
    with pytest.raises(click_exceptions.UsageError) as e:
        in_place(ctx, cmd.get_params(ctx), [*(s.upper() for s in slots), "--many", "a", "-q", "STRAY"])
    assert e.value.format_message() == (f"unexpected extra argument(s) STRAY: c takes {takes}; "
                                        f"the values of --many go right after it: {hint}")
