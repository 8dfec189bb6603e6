"""stdout as every command line writes it: its result (a table, `Done:`, a `--json` object,
--help, --version) goes through `sys.stdout`, which `Commands.main` wraps here for the run, so
a write that fails ends the same way wherever it came from (print, a rich console, typer's
help, train's step lines):

- the reader left (EPIPE: `packtool inspect out | head`): `ReaderLeft`, ended quietly with
  SIGPIPE's status (`reader_left`);
- anything else (`> /dev/full`, a full disk behind `> file`, EIO, stdout closed with `>&-`):
  `StdoutFailed`, one `error:` line on stderr, exit 2; no JSON object follows, since stdout is
  what failed.

Without the wrapper an OSError of stdout was told from one of a file by nothing (no file name),
so `--json`'s error object was written to the same full stdout (a traceback, exit 1)."""
from __future__ import annotations

import errno
import os
import sys

from rich.console import Console

from packtool.errors import PacktoolOutputError

_FAILED: list[BaseException] = []  # this command line's stdout failure, once found
EXIT_PIPE = 141  # 128 + SIGPIPE, what `cmd | head` reports for a writer whose reader left


class ReaderLeft(BrokenPipeError):
    """stdout's reader closed the pipe. No errno on purpose: typer turns an EPIPE OSError into
    exit 1 (verify's "problems found"), and this one must reach `reader_left` instead."""


class StdoutFailed(PacktoolOutputError):
    """stdout could not be written for another reason than a gone reader: the result is lost."""


class StdoutConsole(Console):
    """rich's Console ends a broken pipe with exit 1 (verify's "problems found"); hand it to
    `guarded` instead, which knows `| head` from a failure."""

    def on_broken_pipe(self) -> None:
        raise ReaderLeft("Broken pipe")


def stdout_console() -> Console:
    """The console every command prints its tables and lines to."""
    return StdoutConsole()


def stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed (poll reports an error on its end), so a
    BrokenPipeError from a worker's own pipe is never mistaken for `| head`."""
    import select
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):  # not a real file (tests), or no poll
        return False


def reader_left() -> int:
    """stdout's reader closed the pipe (`| head`): not an error of ours, SIGPIPE's status."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second failure at exit
    return EXIT_PIPE


def failed() -> bool:
    """Whether stdout failed in this command line (then nothing more is written there)."""
    return bool(_FAILED)


def _refusal(e: BaseException | None) -> BaseException:
    if isinstance(e, OSError) and (isinstance(e, BrokenPipeError) or e.errno == errno.EPIPE):
        err: BaseException = ReaderLeft("Broken pipe")
    else:
        why = (f"{errno.errorcode.get(e.errno, e.errno)}: {e.strerror}" if isinstance(e, OSError) and e.errno
               else "it is closed")
        err = StdoutFailed(f"stdout cannot be written ({why}), so the command's result was not printed; "
                           f"send stdout where it can be written (a file on a disk with room, a terminal, "
                           f"a pipe) and re-run")
    _FAILED.append(err)
    return err


class _Guarded:
    """sys.stdout with its write failures turned into `ReaderLeft` / `StdoutFailed`; every other
    attribute (fileno, isatty, encoding, buffer) is the stream's own."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        if self._inner is None:  # started with fd 1 closed (`>&-`): Python gave no stream
            raise _refusal(None)
        try:
            return self._inner.write(s)
        except OSError as e:
            raise _refusal(e) from None

    def flush(self) -> None:
        if self._inner is None:
            return
        try:
            self._inner.flush()
        except OSError as e:
            raise _refusal(e) from None

    def __getattr__(self, name: str):
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)


def guard() -> object:
    """Wrap sys.stdout for one command line; returns what to give back to `unguard`."""
    _FAILED.clear()
    before = sys.stdout
    if not isinstance(before, _Guarded):
        sys.stdout = _Guarded(before)
    return before


def unguard(before) -> None:
    sys.stdout = before


__all__ = ["EXIT_PIPE", "ReaderLeft", "StdoutConsole", "StdoutFailed", "failed", "guard", "reader_left", "stdout_console",
           "stdout_gone", "unguard"]
