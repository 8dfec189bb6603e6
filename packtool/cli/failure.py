"""How a failed command ends: one escaped `error:` line on stderr (user text is never read as
rich markup), the same as a JSON object on stdout under `--json`, and the exit status.

    0  done (verify: every invariant holds)
    1  verify ran and found problems
    2  bad usage, input, config, cache, format or output path (every PacktoolError; also a
       file that cannot be read or written)
    3  a packtool bug: the line says so; the traceback shows with --debug or PACKTOOL_DEBUG=1
  130  interrupted (Ctrl-C): one line says so. Once a command's result is decided and being
       printed (`committed`), Ctrl-C no longer changes the outcome: the rest of the run ignores
       it, so a complete output that `--json` called a success is never reported as 130
  143  terminated (SIGTERM, what batch schedulers send): the same path and line as Ctrl-C's
  141  stdout closed by its reader (`packtool ... | head`): nothing more is printed; stdout
       failing otherwise (`> /dev/full`, `>&-`) is a 2 (cli/stdout.py owns both)
A traceback is printed only in debug mode.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import traceback

import typer
from rich.console import Console
from rich.text import Text
from typer.exceptions import TyperException

try:  # typer >= 0.20 carries its own copy of click, and raises its exceptions
    from typer._click import exceptions as click_exceptions
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_exceptions

from packtool import notes
from packtool.cli import places, written
from packtool.cli.error_subject import named_path, subject_flag
from packtool.cli.stdout import ReaderLeft, StdoutFailed, reader_left, stdout_gone
from packtool.cli.stdout import stdout_console  # noqa: F401  (app.py asks it here, with the rest of a command's end)
from packtool.cli.stdout import failed as stdout_failed
from packtool.errors import EXIT_INTERNAL, EXIT_USAGE, PacktoolError, arg, bounded, one_line, shown

_STATE: dict = {}
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def reset(command: str | None = None) -> None:
    """A new command line (the CLI's tests run many in one process); `command`: the
    subcommand it runs, so that a Ctrl-C says what that command leaves."""
    _STATE["interrupted"] = False
    _STATE["command"] = command
    _STATE["source_copy"] = False
    _STATE["notes_from"] = notes.mark()
    folder = sys.modules.get("packtool.output.folder")  # not loaded yet: nothing swapped so far
    _STATE["swapped_before"] = len(folder.swapped_outputs()) if folder else 0
    writes = sys.modules.get("packtool.output.writes")
    _STATE["written_before"] = len(writes.written_files()) if writes else 0


def _completed() -> tuple[str, str] | None:
    """("output", folder) or ("file", path): the last thing this command line put in place; a
    stop after it must name it as new, never as "nothing was written"."""
    folder, writes = sys.modules.get("packtool.output.folder"), sys.modules.get("packtool.output.writes")
    done = folder.swapped_outputs()[_STATE.get("swapped_before", 0):] if folder else []
    if done:
        return "output", done[-1]
    files = writes.written_files()[_STATE.get("written_before", 0):] if writes else []
    return ("file", files[-1]) if files else None


def command_notes() -> list[str]:
    """The notes (packtool.notes) this command line said on stderr so far."""
    return notes.since(_STATE.get("notes_from", notes.mark()))


def with_notes(d: dict) -> dict:
    """A command's --json object with the notes it said on stderr, under `notes` (verify's report
    has its own notes: the stderr ones follow them)."""
    said = [n for n in command_notes() if n not in d.get("notes", ())]
    return {**d, "notes": [*d.get("notes", ()), *said]}


def making_source_copy() -> None:
    """verify --source starts its temporary tokenized copy of the source (removed when the
    process ends): a Ctrl-C from here on says so."""
    _STATE["source_copy"] = True


def committed() -> None:
    """The command's outcome is decided (its result or its error is about to be printed): from
    here to the process's end (printing, atexit handlers, the interpreter's teardown: 0.3-0.5 s)
    Ctrl-C and SIGTERM are ignored, so the exit status is the one the printed result stands for."""
    if "sigint" in _STATE or threading.current_thread() is not threading.main_thread():
        return
    _STATE["sigint"] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STATE["sigterm"] = signal.signal(signal.SIGTERM, signal.SIG_IGN)


def release() -> None:
    """Give Ctrl-C and SIGTERM back after a command line run in-process (a library or test
    caller goes on living); the console script keeps ignoring them to its end (`keep_committed`)."""
    if "sigint" in _STATE and not _STATE.get("process"):
        signal.signal(signal.SIGINT, _STATE.pop("sigint"))
        signal.signal(signal.SIGTERM, _STATE.pop("sigterm"))


def keep_committed() -> None:
    """Called by the console script: this process ends with the command."""
    _STATE["process"] = True


from packtool.env import debug_on, set_debug  # noqa: E402  (the switch lives in the base: train reads it)


def describe(e: BaseException) -> tuple[str, str, int]:
    """(kind, one-line message, exit status) for any exception a command let out."""
    from packtool.threads import thread_refused
    if thread_refused(e):  # the system's limit, not a bug (the library's ThreadRefused too): said with the command's place
        from packtool.cli.memory import threads_refused
        return "resources", threads_refused(e, _STATE.get("running"), _STATE.get("args") or {}), EXIT_USAGE
    if isinstance(e, PacktoolError):
        return e.kind, one_line(e), e.exit_code
    from packtool.free_memory import mapping_refused
    memory = isinstance(e, MemoryError) or mapping_refused(e)  # a file mapped (np.memmap, mmap) past ulimit -v too
    if isinstance(e, OSError) and not memory:
        where = written.failed_file(e)
        # the role of the argument it is about (an input read, an --output written); a file that is
        # none of them (a temporary) is the README's `io`
        place = _place(where)
        kind = place[1] if place else "io"
        if (line := written.no_temp_folder(e)) is not None:  # the system's temp folder: TMPDIR's
            return "io", line, EXIT_USAGE
        if written.no_room(e) is not None:
            return kind, written.no_room_line(e, where, place), EXIT_USAGE
        why = e.strerror or str(e)
        return kind, one_line(f"{shown(where)}: {why}" if where else why), EXIT_USAGE
    if isinstance(e, (ValueError, UnicodeError)):
        return "input", one_line(e), EXIT_USAGE
    if memory:  # the command, stage, input and the flags that help there
        from packtool.cli.memory import out_of_memory
        line = out_of_memory(e, _STATE.get("running"), _STATE.get("args") or {})
        said = one_line(e) if str(e) else ""  # what a refusal before the allocation knew (the row, the limit)
        line = f"{line}; here: {said}" if said else line
        if getattr(e, "row", None) is not None:  # a row refused by name (tokenize.long_rows): the contract's form
            line = one_line(PacktoolError(line, path=e.path, row=getattr(e, "row", None)))
        return "resources", line, EXIT_USAGE
    msg = one_line(f"{type(e).__name__}: {e}")
    return ("internal", f"internal error (a packtool bug) {msg}; re-run with --debug (or "
            f"PACKTOOL_DEBUG=1) for the traceback and report it", EXIT_INTERNAL)


def _place(where) -> tuple[str | None, str] | None:
    """(flag, role) of the running command's argument that names `where` (cli.places); a file in
    the temporary folder an output is built in (`.out.packtool-tmp-...`, beside it) is that
    output's, and one in the default tokenized cache is --cache-dir's."""
    if where is None:
        return None
    args, cmd = _STATE.get("args") or {}, _STATE.get("running")
    found = places.place_of(where, args, cmd) or places.place_of(written.published(os.fspath(where)), args, cmd)
    from packtool.storage import is_uri
    given = args.get("cache_dir")
    if found is None and "cache_dir" in args and (given is None or is_uri(given)):
        from packtool.tokenize.cache_root import default_cache_dir
        # the local root: PACKTOOL_CACHE_DIR places it where set (a store cache's local copy lies
        # under it too); only the default under HOME is left for --cache-dir to move (S48A-8)
        named = given or os.environ.get("PACKTOOL_CACHE_DIR")
        try:
            found = places.place_of(where, {"cache_dir": default_cache_dir()}) and (
                "PACKTOOL_CACHE_DIR" if named else "--cache-dir", "cache")
        except PacktoolError:  # no default root (HOME unusable): nothing of it was written
            found = None
    return found


def print_error(message: str, kind: str = "input", code: int = EXIT_USAGE, *,
                json_out: bool = False, extra: dict | None = None) -> None:
    # control characters of a path escaped, and bounded, whoever built the message: click's usage
    # errors quote the word given whole and are no PacktoolError (RB-5: a 1 MB argument, a 1 MB line)
    message = bounded(one_line(message))
    err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, markup=False)
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    if json_out and not stdout_failed():  # every key the README lists, in its order, whatever failed
        d = {"kind": kind, "type": None, "message": message, "path": None, "row": None, "flag": None,
             "exit_code": code}
        d.update(extra or {})
        # an error built without flag= (a ValueError, a usage string): only a flag it is about, the
        # one it starts with; never one the fix names (`... --split for a dataset`)
        d["flag"] = d["flag"] or subject_flag(message)
        if isinstance(d["flag"], str):  # an unknown option is said as given: the word, bounded as the line
            d["flag"] = bounded(d["flag"])
        d["path"] = d["path"] or named_path(message)
        said = command_notes()  # what it said on stderr before it failed
        print(json.dumps({"error": d, **({"notes": said} if said else {})}), flush=True)


def report(e: BaseException, json_out: bool = False) -> int:
    """Print `e` as one line (and JSON); return the exit status."""
    kind, message, code = describe(e)
    if debug_on():
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    extra = {"type": type(e).__name__}
    if isinstance(e, PacktoolError):
        extra.update(e.to_dict()["error"])
        extra.pop("message", None)
        from packtool.storage import STORE_ERRORS
        place = _place(extra.get("path") or named_path(message))
        if place and isinstance(e, STORE_ERRORS):  # a store refusing: input when read, output when written
            extra["kind"] = kind = place[1]
        if e.usage:  # a flag's value the command cannot take: a usage error, as click's are
            message += _help_hint()
            extra["kind"] = kind = "usage"
    else:  # describe gave an OSError the kind of its place already
        where = written.failed_file(e) if isinstance(e, OSError) else None
        if isinstance(e, MemoryError) and getattr(e, "path", None) is not None:  # a row or a file's decode
            where, extra["row"] = e.path, getattr(e, "row", None)
        place = ("TMPDIR", "io") if written.no_temp_folder(e) else _place(where)
        if where is not None:
            extra["path"] = os.fspath(where)
    if place and extra.get("flag") is None:  # raised below the CLI, about one of its arguments
        extra["flag"] = place[0]
    if isinstance(e, StdoutFailed) and (done := _completed()):  # only the summary of what is done was lost
        message += (f" (the {done[0]} {shown(done[1])} is complete and in place: re-run with "
                    f"{arg('overwrite', True)} to make it again)")
    print_error(message, kind, code, json_out=json_out, extra=extra)
    return code


DEBUG_HELP = "Print the traceback of an error (also PACKTOOL_DEBUG=1)."


def _with_debug_flag(wrapper, fn):
    """Give the command a `--debug` of its own (`packtool pack --debug` works as `packtool
    --debug pack` does): the same switch, taken by every command through this one place."""
    import inspect
    from typing import Annotated
    sig = inspect.signature(fn, eval_str=True)
    if "debug" in sig.parameters:
        return wrapper
    flag = inspect.Parameter("debug", inspect.Parameter.KEYWORD_ONLY, default=False,
                             annotation=Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)])
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), flag])
    return wrapper


def guarded(fn):
    """Wrap a typer command: every exception it lets out becomes `report`'s line + status."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs.pop("debug", False):
            set_debug(True)
        # what ran with which arguments: an out-of-memory line names them (cli.memory)
        _STATE["running"], _STATE["args"] = fn.__name__.removesuffix("_command"), dict(kwargs)
        try:
            from packtool.env import check_environment
            check_environment()  # a bad PACKTOOL_* value: one line, before any work
            from packtool.cli.path_flags import check_path_flags
            check_path_flags(_STATE["running"], kwargs)  # '' refused, `~` expanded: every path flag
            _STATE["args"] = dict(kwargs)
            from packtool.cli.store_flags import check_store_flags
            check_store_flags(_STATE["running"], kwargs)  # every URI a flag gives, before any work
            rv = fn(*args, **kwargs)
            committed()  # commands that print their result as they go (train) end here
            return rv
        except typer.Exit:  # a printed result (verify's 0/1) or a printed error: decided
            committed()
            raise
        except (typer.Abort, TyperException):
            raise
        except ReaderLeft:  # a write to stdout met EPIPE (cli.stdout): `packtool ... | head`
            raise typer.Exit(reader_left()) from None
        except BrokenPipeError as e:  # `packtool ... | head`: the reader left; not an error of ours
            if not stdout_gone():
                raise typer.Exit(report(e, bool(kwargs.get("json_out")))) from None
            raise typer.Exit(reader_left()) from None
        except KeyboardInterrupt as e:  # the bars are transient: without a line Ctrl-C ends in silence
            raise typer.Exit(interrupted(bool(kwargs.get("json_out")), e)) from None
        except Exception as e:  # noqa: BLE001  the one place every failure ends
            raise typer.Exit(report(e, bool(kwargs.get("json_out")))) from None
        except BaseException as e:  # a Rust library's panic (the tokenizer's) is no Exception
            from packtool.cli.memory import native_panic
            if not native_panic(e):
                raise
            raise typer.Exit(report(e, bool(kwargs.get("json_out")))) from None
    return _with_debug_flag(wrapper, fn)


def interrupted(json_out: bool = False, e: BaseException | None = None) -> int:
    """Say once that Ctrl-C or SIGTERM (`e`, the KeyboardInterrupt it raised) stopped the run,
    and what it left: an output this process already swapped into place is named as the new
    one, never as "left as it was". Returns the status (130, or 143 for SIGTERM)."""
    from packtool.cli import stopped
    how, code = stopped(e)
    if not _STATE.get("interrupted"):
        _STATE["interrupted"] = True
        done, cmd = _completed(), _STATE.get("command")  # by this command line only
        if done and done[0] == "output":
            msg = (f"{how} after the new output {done[1]} was complete and in place "
                   f"(any previous output there is replaced); check it with `packtool verify {done[1]}`")
        elif done:  # plan -o, inspect --html, train --save: the file was put in place before the stop
            msg = f"{how} after the file {done[1]} was complete and in place (any previous file there is replaced)"
        elif cmd == "verify":  # it reads the output and writes nothing there
            copy = (", and the temporary copy of the tokenized --source it was making or comparing with "
                    "is removed") if _STATE.get("source_copy") else ""
            msg = f"{how} before verify finished: nothing was written{copy}; re-run it to check the output"
        elif cmd in ("plan", "inspect"):  # -o / --html are written to a temporary, then renamed
            msg = (f"{how} before {cmd} finished: nothing was written (a file it writes "
                   f"appears whole or not at all); re-run the command to start again")
        elif cmd == "train":
            msg = (f"{how} before train finished: checkpoints already saved in --save are "
                   "kept; resume with --load, or re-run the command to start again")
        else:  # pack, or a command line stopped before its subcommand was known
            msg = (f"{how}; packtool removed its temporary files and left any previous "
                   "output as it was: re-run the command to start again")
        print_error(msg, "interrupted", code, json_out=json_out, extra={"type": type(e).__name__ if e else None})
    return code


def _help_hint(ctx=None) -> str:
    """` (see `packtool pack --help`)`: where a usage error sends the user; the command running
    now when `ctx` (click's context of the command that failed) is not given."""
    if ctx is None:
        try:
            from typer._click.globals import get_current_context
        except ImportError:  # older typer runs on click itself
            from click import get_current_context
        ctx = get_current_context(silent=True)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""


def usage_error(e: click_exceptions.ClickException, json_out: bool = False) -> int:
    """click's usage errors (unknown flag, bad value, missing argument) as the one `error:`
    line (and JSON object) every other failure gets, naming the command's --help."""
    if list(getattr(e, "possibilities", None) or ()) == ["--help"]:  # `verify --tp`: noise; the hint names --help
        e.possibilities = []
    msg = one_line(e.format_message())
    ctx = getattr(e, "ctx", None)
    if ctx is not None and isinstance(e, click_exceptions.UsageError):
        msg += _help_hint(ctx)
    code = e.exit_code if isinstance(e.exit_code, int) and e.exit_code else EXIT_USAGE
    committed()
    print_error(msg, "usage", code, json_out=json_out, extra={"type": type(e).__name__, "flag": _flag_of(e)})
    return code


def _flag_of(e: click_exceptions.ClickException) -> str | None:
    """The flag a usage error is about: an unknown option's name, or the option whose value
    was bad (its long spelling)."""
    name = getattr(e, "option_name", None)
    ctx = getattr(e, "ctx", None)
    param = getattr(e, "param", None)
    if name and ctx is not None:  # `-C` missing its value: --json's flag is --max-tokens
        param = next((p for p in ctx.command.params if name in getattr(p, "opts", ())), None)
    if name and param is None:
        return name
    opts = [o for o in getattr(param, "opts", []) if o.startswith("-")]
    return max(opts, key=len) if opts else None


def fail(e: BaseException | str, json_out: bool = False, flag: str | None = None) -> None:
    """Stop the command here with `e` reported (a string is a usage error about `flag`, typed as
    click's own usage errors are: `type` and `flag` were null in --json's object)."""
    committed()
    if isinstance(e, str):
        print_error(one_line(e) + _help_hint(), "usage", EXIT_USAGE, json_out=json_out,
                    extra={"type": "UsageError", "flag": flag})
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(report(e, json_out))


__all__ = ["committed", "making_source_copy", "keep_committed", "release", "describe", "fail", "guarded", "click_exceptions", "interrupted", "reset", "usage_error", "print_error", "with_notes", "command_notes", "report", "set_debug", "debug_on", "stdout_console"]
