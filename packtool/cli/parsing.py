"""How a `packtool` command line is parsed and how its parsing ends: the command group and the
command class every subcommand uses. A usage error (unknown flag, bad value, a flag taken as
another's value) is failure.py's one `error:` line; `--json` goes to the subcommand wherever
it was typed; the library's checks name the flags the user typed (`flags.FLAG_OF`).
"""
from __future__ import annotations

import sys

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from packtool.cli.failure import EXIT_INTERRUPTED, click_exceptions, interrupted, release, report, reset, usage_error
from packtool.cli.stdout import ReaderLeft, StdoutConsole, StdoutFailed, guard, reader_left, unguard
from packtool.cli.flags import FLAG_OF, LIST_FLAGS
from packtool.cli.variadic import in_place, repeated
from packtool.errors import shown, spelled_as, taking_only


class _ParsedHere:
    """click raises some usage errors without the context that names the command (a flag missing
    its value: `pack data.jsonl -C`), so they lacked the `--help` hint the others carry; and it
    takes the next flag as a missing value (`-C --json`): both end as the one usage error here."""

    def parse_args(self, ctx, args):
        self._refuse_flag_as_value(ctx, args)
        try:
            if not isinstance(self, TyperGroup):  # a subcommand's words (the group's: its command's)
                self._refuse_json_it_lacks(ctx, args)
                self._refuse_repeated(ctx, args)
                args = in_place(ctx, self.get_params(ctx), args)
            return super().parse_args(ctx, args)
        except click_exceptions.UsageError as e:
            e.ctx = e.ctx or ctx
            raise

    def _refuse_json_it_lacks(self, ctx, args: list[str]) -> None:
        """--json is global (README: either side of the subcommand): a subcommand without it is
        refused for it wherever it stands, not for whichever unknown flag click meets first."""
        if "--json" in (args[:args.index("--")] if "--" in args else args):  # after --: a word
            opts = [o for p in self.get_params(ctx) for o in getattr(p, "opts", ())]
            if "--json" not in opts:
                import difflib
                raise click_exceptions.NoSuchOption("--json", possibilities=difflib.get_close_matches(
                    "--json", [o for o in opts if o.startswith("--")]), ctx=ctx)

    def _refuse_repeated(self, ctx, args: list[str]) -> None:
        """A one-value option given twice: click keeps the last without a word, so the first
        (`--side-columns old_logprobs --side-columns advantages`) would vanish (S34-7)."""
        if any(o in args for o in ctx.help_option_names):
            return  # --help is shown whatever else is there
        found = repeated(self.get_params(ctx), args)
        if found is None:
            return
        p, spelled, first, second = found
        flag = "/".join(p.opts[:1] + p.secondary_opts[:1]) if p.secondary_opts else max(p.opts, key=len)
        fix = (f"give every name in one: {flag} {first},{second}" if flag in LIST_FLAGS
               else f"give one of {p.opts[0]} or {p.secondary_opts[0]}" if p.secondary_opts
               else f"give {flag} once, with the value you mean")
        raise click_exceptions.BadOptionUsage(spelled, f"{flag} given twice ({shown(first)}, then {shown(second)}): "
                                              f"it takes one value and the last would silently replace the first; {fix}",
                                              ctx=ctx)

    def _refuse_flag_as_value(self, ctx, args: list[str]) -> None:
        opts = {o: p for p in self.get_params(ctx) if p.param_type_name == "option"
                for o in (*p.opts, *p.secondary_opts)}
        for i, a in enumerate(args[:-1]):
            if a == "--":
                return
            p = opts.get(a)
            if p is not None and not p.is_flag and not p.count and args[i + 1] in opts:
                raise click_exceptions.BadOptionUsage(a, f"Option {a!r} requires an argument.", ctx=ctx)


class Command(_ParsedHere, TyperCommand):
    """A subcommand: its path parameters are checked and `~`-expanded where its failures are
    reported (cli.path_flags, from cli.failure.guarded), not here: an error raised before the
    command runs would escape the one `error:` line. It runs knowing which library arguments
    it has no flag for (errors.takes): a fix names only flags of the command that raised it."""

    def invoke(self, ctx):
        own = {p.name for p in self.params} | {o for p in self.params for o in (*p.opts, *p.secondary_opts)}
        with taking_only({k for k, v in FLAG_OF.items() if k not in own and v not in own}):
            return super().invoke(ctx)


class Commands(_ParsedHere, TyperGroup):
    """Every way a command line can end goes through failure.py: a usage error (unknown flag,
    bad value) is the README's one `error:` line (a JSON object too under --json), not click's
    boxed usage text; Ctrl-C while the flags are parsed says so, as it does in a command."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        given = list(sys.argv[1:] if args is None else args)
        json_out = self.json_out = "--json" in given  # --version's callback asks (app._say_version)
        reset(next((a for a in given if a in self.commands), None))
        # typer prints --help through consoles of its own: they end a closed pipe as ours do
        Console.on_broken_pipe = StdoutConsole.on_broken_pipe
        stdout = guard()  # every write to stdout fails one way (cli.stdout), here and in the commands
        try:
            try:
                argv = self._json_after_command(given, prog_name)
                with spelled_as(FLAG_OF):  # the library's checks name the flags the user typed
                    rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
                code = rv if isinstance(rv, int) else 0
            except getattr(click_exceptions, "NoArgsIsHelpError", ()) as e:  # bare `packtool`: the help
                print(e.ctx.get_help())
                code = e.exit_code
            except click_exceptions.ClickException as e:
                code = usage_error(e, json_out)
            except (getattr(click_exceptions, "Abort", typer.Abort), typer.Abort, KeyboardInterrupt):
                code = EXIT_INTERRUPTED
        # --help, --version and usage errors are printed outside any command's own handling
        except ReaderLeft:  # `packtool pack --help | head`: the reader left; SIGPIPE's status
            code = reader_left()
        except StdoutFailed as e:  # `packtool --version > /dev/full`
            code = report(e, json_out)
        finally:
            release()
            unguard(stdout)
        if code == EXIT_INTERRUPTED:  # typer ends a Ctrl-C outside a command in silence
            code = interrupted(json_out)  # 143 when it was SIGTERM
        if not standalone_mode:
            return code
        sys.exit(code)


    def _json_after_command(self, argv: list[str], prog_name: str | None = None) -> list[str]:
        """`packtool --json pack ...` as `packtool pack --json ...` (as --debug goes either
        side): --json belongs to the subcommand, which takes it wherever the user put it."""
        at = next((i for i, a in enumerate(argv) if a in self.commands), None)
        if at is None and "--json" in argv:  # no command: the error is about what is there instead
            rest = [a for a in argv if a != "--json"]
            if not rest:
                import importlib  # the click typer runs on (failure.click_exceptions): its own errors' name
                utils = importlib.import_module(click_exceptions.__name__.rpartition(".")[0] + ".utils")
                name = prog_name or utils._detect_program_name()
                raise click_exceptions.UsageError("Missing command.", ctx=self.context_class(self, info_name=name))
            return rest
        if at is None or "--json" not in argv[:at]:
            return argv
        # moved for every subcommand: one without --json (none now; train took it in S40-5) refuses it as
        # after its name, naming its own --help and options, not the group's (`Possible options: --version`)
        return [a for a in argv[:at] if a != "--json"] + [argv[at], "--json"] + argv[at + 1:]
