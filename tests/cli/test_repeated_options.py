"""S34-7: an option that takes one value, given twice, is refused in one line naming it, for
every such option of every subcommand (found from the Typer app, not listed); click's default
kept the last silently (`--side-columns a --side-columns b` packed only b). Repeatable options
(`verify --source`) and plain switches (`-q -q`) stay as they were."""
from __future__ import annotations

import pytest
import typer

from packtool.cli.app import app
from packtool.cli.failure import click_exceptions
from packtool.cli.flags import LIST_FLAGS
from packtool.cli.variadic import _once

GROUP = typer.main.get_command(app)
ONCE = [(name, p) for name, cmd in sorted(GROUP.commands.items()) for p in cmd.params if _once(p)]


def _words(p, value: str) -> list[str]:
    return [p.opts[0]] if p.is_flag else [p.opts[0], value]


def _spellings(p, first: str, second: str) -> dict[str, list[str]]:
    """The ways one option can be given twice: long and short spellings, `=` and attached values."""
    if p.is_flag:  # an on/off pair: both sides, either order
        return {"on then off": [p.opts[0], p.secondary_opts[0]], "off then on": [p.secondary_opts[0], p.opts[0]]}
    short = [o for o in p.opts if not o.startswith("--")]
    long_ = max(p.opts, key=len)
    ways = {"separate": [long_, first, long_, second], "attached =": [f"{long_}={first}", f"{long_}={second}"]}
    if short:
        ways["short then long"] = [f"{short[0]}{first}", long_, second]
    return ways


def test_the_class_is_found():
    found = {(n, max(p.opts, key=len)) for n, p in ONCE}
    assert {("pack", "--side-columns"), ("plan", "--lengths"), ("pack", "--tokenizer"), ("plan", "--tp"),
            ("pack", "--eos")} <= found
    assert not any(n == "verify" and "--source" in p.opts for n, p in ONCE)


@pytest.mark.parametrize("command,param", ONCE, ids=[f"{n} {max(p.opts, key=len)}" for n, p in ONCE])
def test_a_one_value_option_given_twice_is_refused(command, param):
    cmd = GROUP.commands[command]
    for how, words in _spellings(param, "11", "22").items():
        with pytest.raises(click_exceptions.BadOptionUsage) as e:
            cmd.make_context(command, ["IN"] + words)
        msg = e.value.format_message()
        assert "\n" not in msg and "given twice" in msg, how
        assert any(o in msg for o in (*param.opts, *param.secondary_opts)), how
        if not param.is_flag:
            assert "11" in msg and "22" in msg, how
        if max(param.opts, key=len) in LIST_FLAGS:
            assert "11,22" in msg


@pytest.mark.parametrize("command,param", ONCE, ids=[f"{n} {max(p.opts, key=len)}" for n, p in ONCE])
def test_given_once_it_is_not_refused_for_it(command, param):
    cmd = GROUP.commands[command]
    try:
        cmd.make_context(command, ["IN"] + _words(param, "11"))
    except click_exceptions.UsageError as e:  # a missing or bad other argument: not this rule
        assert "given twice" not in e.format_message()
    except click_exceptions.BadParameter:
        pass


def test_repeatable_and_switches_stay():
    cmd = GROUP.commands["verify"]
    ctx = cmd.make_context("verify", ["--source", "a", "--source", "b", "-q", "-q", "OUT"])
    assert list(ctx.params["source"]) == ["a", "b"]


@pytest.mark.parametrize("command,param", [(n, p) for n, p in ONCE if p.is_flag],
                         ids=[f"{n} {p.opts[0]}" for n, p in ONCE if p.is_flag])
def test_an_on_off_pairs_same_side_twice_stays(command, param):
    """`pack -q --no-progress`: both spellings of the one side, no clash."""
    cmd = GROUP.commands[command]
    for side in (param.opts, param.secondary_opts):
        try:
            cmd.make_context(command, ["IN", side[0], side[-1]])
        except click_exceptions.UsageError as e:  # another argument missing: not this rule
            assert "given twice" not in e.format_message()


def test_the_cli_says_it_in_one_line(capsys):
    from packtool.cli.parsing import Commands  # noqa: F401  (GROUP is one)
    code = GROUP.main(["plan", "--lengths", "a.txt", "--lengths", "b.txt", "-C", "1024"], standalone_mode=False)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --lengths given twice (a.txt, then b.txt)")
